package integration_test

import (
	"testing"
	"time"
)

func TestSIGKILLedReplicaLosesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, kb kafkaBackend) {
		e := newEnvOn(t, kb, "orders", 4)
		dir := t.TempDir()
		e.produce(2000)
		a := e.process("a", dir)
		await(t, 30*time.Second, "a to commit", func() bool {
			for _, n := range e.committed() {
				if n > 0 {
					return true
				}
			}
			return false
		})
		e.produce(2000) // a is busy with these when it dies
		a.Kill()
		e.produce(1000)
		b := e.process("b", dir)
		want := perPartition(4, 5000)
		await(t, 60*time.Second, "b to commit everything", func() bool { return e.allCommitted(want) })
		b.Signal(sigterm)
		if code := b.Wait(15 * time.Second); code != 0 {
			t.Fatalf("b exited %d after SIGTERM, want 0", code)
		}
		e.checkFileSink(dir, want)
	})
}
