package harness

import (
	"strings"
	"testing"
	"time"
)

// TestRunJavaTimed runs a Kafka tool with RunJavaTimed, on kfake's
// cluster (the JVM needs no broker): its output, its wall and CPU time
// and the point its Mark line was read, which cannot come after its exit.
func TestRunJavaTimed(t *testing.T) {
	k := StartKafka(t)
	var marked bool
	run := k.RunJavaTimed(t, JavaRunOptions{Flags: KafkaScriptJVMFlags, Mark: KafkaVersion, OnMark: func() { marked = true }},
		"org.apache.kafka.tools.ConsumerPerformance", "--version")
	if strings.TrimSpace(run.Stdout) != KafkaVersion {
		t.Fatalf("stdout %q, want %q", run.Stdout, KafkaVersion)
	}
	if !run.Marked || !marked {
		t.Fatalf("Marked %v, OnMark called %v; want both", run.Marked, marked)
	}
	if run.CPU <= 0 || run.Wall <= 0 || run.MarkWall > run.Wall || run.MarkCPU > run.CPU || run.Wall > time.Minute {
		t.Fatalf("wall %v, cpu %v, at the mark %v and %v", run.Wall, run.CPU, run.MarkWall, run.MarkCPU)
	}
	t.Logf("JVM: wall %v, CPU %v; at the mark %v, CPU %v", run.Wall, run.CPU, run.MarkWall, run.MarkCPU)
}
