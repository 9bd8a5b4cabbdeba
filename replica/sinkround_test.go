package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// gateSink is a BatchWriter whose calls wait for the test to open the gate;
// it fences partition 3.
type gateSink struct {
	gate  chan struct{}
	mu    sync.Mutex
	calls [][]int // partitions of each call
}

func (g *gateSink) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	ps := make([]int, len(blocks))
	errs := make([]error, len(blocks))
	for i, b := range blocks {
		ps[i] = b.Partition
		if b.Partition == 3 {
			errs[i] = fmt.Errorf("write %s: %w", b, sinks.ErrFenced)
		}
	}
	g.mu.Lock()
	g.calls = append(g.calls, ps)
	g.mu.Unlock()
	select {
	case <-g.gate:
	case <-ctx.Done():
		for i := range errs {
			errs[i] = ctx.Err()
		}
	}
	return errs
}

func (g *gateSink) callCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.calls)
}

// Blocks written while a call is in flight gather into the next call; each
// partition gets its own outcome, and a waiter that gives up before its
// block is sent takes it back.
func TestSinkRoundsGatherBlocks(t *testing.T) {
	g := &gateSink{gate: make(chan struct{})}
	s, calls := startSinkRounds(t, g)

	write := func(ctx context.Context, p int) <-chan error {
		out := make(chan error, 1)
		go func() { out <- s.Write(ctx, &sinks.Block{Topic: "t", Partition: p, From: 0, Next: 1}) }()
		return out
	}
	first := write(context.Background(), 0)
	harness.Await(t, 10*time.Second, "the first call in flight", func() bool { return g.callCount() == 1 })
	var rest []<-chan error
	for p := 1; p <= 4; p++ {
		rest = append(rest, write(context.Background(), p))
	}
	leaving, leave := context.WithCancel(context.Background())
	gone := write(leaving, 9)
	harness.Await(t, 10*time.Second, "five blocks queued", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.queue) == 5 })
	leave()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiter that left got %v, want context.Canceled", err)
	}
	close(g.gate)
	if err := <-first; err != nil {
		t.Fatalf("partition 0: %v", err)
	}
	for i, ch := range rest {
		err := <-ch
		if p := i + 1; p == 3 && !errors.Is(err, sinks.ErrFenced) {
			t.Fatalf("partition 3: %v, want ErrFenced", err)
		} else if p != 3 && err != nil {
			t.Fatalf("partition %d: %v", p, err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.calls) != 2 || len(g.calls[1]) != 4 {
		t.Fatalf("calls %v, want [[0] [1 2 3 4]]: the blocks queued behind the first call in one", g.calls)
	}
	if calls.Load() != 2 {
		t.Fatalf("%d calls counted, want 2", calls.Load())
	}
}

// A block large enough for a transaction of its own is written beside the
// call in flight, not behind it.
func TestSinkRoundsWriteLargeBlocksInParallel(t *testing.T) {
	g := &gateSink{gate: make(chan struct{})}
	s, _ := startSinkRounds(t, g)
	defer close(g.gate)

	go func() { _ = s.Write(context.Background(), &sinks.Block{Topic: "t", Partition: 0, From: 0, Next: 1}) }()
	harness.Await(t, 10*time.Second, "the first call in flight", func() bool { return g.callCount() == 1 })
	big := &sinks.Block{Topic: "t", Partition: 1, From: 0, Next: bigSinkRound, Records: make([]sinks.Record, bigSinkRound)}
	go func() { _ = s.Write(context.Background(), big) }()
	harness.Await(t, 10*time.Second, "the large block's call beside the first", func() bool { return g.callCount() == 2 })
}

// startSinkRounds runs the rounds of g until the test ends; calls counts
// the sink calls.
func startSinkRounds(t *testing.T, g *gateSink) (*sinkRounds, *atomic.Int64) {
	calls := new(atomic.Int64)
	s := newSinkRounds(g, calls)
	stop, ended := make(chan struct{}), make(chan struct{})
	go func() { defer close(ended); s.run(stop) }()
	t.Cleanup(func() { close(stop); <-ended })
	return s, calls
}
