package sinktest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// openUpgrade opens a sink and finds its upgrade U as the replica does,
// with sinks.As (through wrappers); it skips the test, naming the upgrade,
// for a sink without one.
func openUpgrade[U any](t *testing.T, open func(t *testing.T) (sinks.Sink, Reader), name string) (sinks.Sink, U) {
	t.Helper()
	s, _ := open(t)
	u, ok := sinks.As[U](s)
	if !ok {
		t.Skipf("the sink does not implement sinks.%s", name)
	}
	return s, u
}

// runUpgrades runs the subtests of the side upgrades a sink declares,
// found with sinks.As as the replica finds them (through wrappers); each
// skips a sink without its upgrade.
func runUpgrades(t *testing.T, open func(t *testing.T) (sinks.Sink, Reader), _ Options) {
	ctx := context.Background()

	t.Run("Resumer", func(t *testing.T) {
		s, res := openUpgrade[sinks.Resumer](t, open, "Resumer")
		resume := func(topic string, partition int, wantNext, wantGen int64, wantOK bool) {
			t.Helper()
			next, gen, ok, err := res.Resume(ctx, topic, partition)
			if err != nil {
				t.Fatalf("Resume %s/%d: %v", topic, partition, err)
			}
			if ok != wantOK || ok && (next != wantNext || gen != wantGen) {
				t.Errorf("Resume %s/%d = %d, %d, %v; want %d, %d, %v", topic, partition, next, gen, ok, wantNext, wantGen, wantOK)
			}
		}
		resume("orders", 12, 0, 0, false)
		write(t, s, block("orders", 12, 0, 3, 0, 1, 2))
		resume("orders", 12, 3, 0, true)
		// An operator reset: the next generation, from an earlier offset.
		b := block("orders", 12, 1, 4, 1, 2, 3)
		b.Generation = 1
		write(t, s, b)
		resume("orders", 12, 4, 1, true)
		resume("orders", 13, 0, 0, false)
		resume("payments", 12, 0, 0, false)
	})

	t.Run("Pinger", func(t *testing.T) {
		s, p := openUpgrade[sinks.Pinger](t, open, "Pinger")
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := p.Ping(pctx); err != nil {
			t.Fatalf("Ping of an open sink: %v", err)
		}
		// Ping goes beside writes.
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Go(func() { errs[0] = s.Write(pctx, block("orders", 14, 0, 2, 0, 1)) })
		wg.Go(func() { errs[1] = p.Ping(pctx) })
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("Write beside Ping: %v", err)
		}
	})

	t.Run("DeadLetterCounter", func(t *testing.T) {
		s, dl := openUpgrade[sinks.DeadLetterCounter](t, open, "DeadLetterCounter")
		if n := dl.DeadLetters(); n != 0 {
			t.Fatalf("DeadLetters of a new sink = %d, want 0", n)
		}
		// The suite's plain records are no sink's dead letters.
		write(t, s, block("orders", 15, 0, 3, 0, 1, 2))
		if n := dl.DeadLetters(); n != 0 {
			t.Errorf("DeadLetters after plain records = %d, want 0", n)
		}
	})
}
