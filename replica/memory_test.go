package replica

import (
	"runtime/debug"
	"testing"

	"go.uber.org/zap"
)

// The Go runtime follows the memory budget unless GOMEMLIMIT or GOGC say
// otherwise: under the replica's own limit the collector is off, the limit
// alone starting a cycle; under GOMEMLIMIT it runs at GCPercent.
func TestTuneMemory(t *testing.T) {
	limit0 := debug.SetMemoryLimit(-1)
	gc0 := debug.SetGCPercent(100)
	t.Cleanup(func() {
		debug.SetMemoryLimit(limit0)
		debug.SetGCPercent(gc0)
	})
	const budget = 64 << 20

	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "")
	follow := TuneMemory(zap.NewNop(), budget)
	if got := debug.SetMemoryLimit(-1); got != budget+gcHeadroom {
		t.Errorf("memory limit %d, want the budget and the headroom, %d", got, budget+gcHeadroom)
	}
	follow(10_000)
	if got, want := debug.SetMemoryLimit(-1), int64(budget+gcHeadroom+10_000*perPartitionHeap); got != want {
		t.Errorf("memory limit %d holding 10,000 partitions, want %d", got, want)
	}
	follow(0)
	if got := debug.SetMemoryLimit(-1); got != budget+gcHeadroom {
		t.Errorf("memory limit %d holding none again, want %d", got, budget+gcHeadroom)
	}
	if got := debug.SetGCPercent(100); got != -1 {
		t.Errorf("GOGC %d under the replica's own limit, want off (-1)", got)
	}
	// GOGC given: the limit is the replica's, the collector the operator's.
	t.Setenv("GOGC", "200")
	debug.SetGCPercent(200)
	TuneMemory(zap.NewNop(), budget)
	if got := debug.SetGCPercent(100); got != 200 {
		t.Errorf("GOGC %d with GOGC=200 set, want it left alone", got)
	}
	if got := debug.SetMemoryLimit(-1); got != budget+gcHeadroom {
		t.Errorf("memory limit %d with GOGC set, want the replica's own, %d", got, budget+gcHeadroom)
	}

	// Under GOMEMLIMIT (a container's limit) the limit is left alone, and
	// the collector runs at GCPercent, not only near where the kernel
	// kills; GOGC, when given, is left alone too.
	for _, c := range []struct {
		limit            int64
		gomemlimit, gogc string
		want             int
	}{
		{512 << 20, "512MiB", "", GCPercent},
		{1 << 40, "1TiB", "100", 100},
	} {
		debug.SetMemoryLimit(c.limit)
		t.Setenv("GOMEMLIMIT", c.gomemlimit)
		t.Setenv("GOGC", c.gogc)
		TuneMemory(zap.NewNop(), budget)(10_000)
		if got := debug.SetMemoryLimit(-1); got != c.limit {
			t.Errorf("GOMEMLIMIT=%s: memory limit %d, want it left alone", c.gomemlimit, got)
		}
		if got := debug.SetGCPercent(100); got != c.want {
			t.Errorf("GOMEMLIMIT=%s GOGC=%q: GOGC %d, want %d", c.gomemlimit, c.gogc, got, c.want)
		}
	}
}
