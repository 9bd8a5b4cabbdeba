package harness

import (
	"os"
	"testing"
	"time"
)

func TestProcCPUAndMemoryOfThisProcess(t *testing.T) {
	pid := os.Getpid()
	before, err := ProcCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the kernel's 10 ms ticks show it.
	deadline := time.Now().Add(10 * time.Second)
	for x := 0; ; x++ {
		after, err := ProcCPU(pid)
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cpu time stayed at %s after 10s of work (%d)", before, x)
		}
	}
	rss, peak, err := ProcMemory(pid)
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 || peak < rss {
		t.Fatalf("rss %d, peak %d: want 0 < rss <= peak", rss, peak)
	}
	if _, err := ProcCPU(-1); err == nil {
		t.Fatal("ProcCPU(-1) returned no error")
	}
}
