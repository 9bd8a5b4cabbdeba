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

// roundSink records each call's start, partitions and rounds, answering
// at once.
type roundSink struct {
	mu     sync.Mutex
	starts []time.Time
	calls  [][]int
	rounds []map[string]bool
}

func (r *roundSink) WriteBlocks(_ context.Context, blocks []*sinks.Block) []error {
	ps, rounds := make([]int, len(blocks)), map[string]bool{}
	for i, b := range blocks {
		ps[i] = b.Partition
		rounds[b.Round] = true
	}
	r.mu.Lock()
	r.starts, r.calls, r.rounds = append(r.starts, time.Now()), append(r.calls, ps), append(r.rounds, rounds)
	r.mu.Unlock()
	return make([]error, len(blocks))
}

// A paced sink's calls (sinks.RoundPacer) begin at least the pace apart
// and each takes every block queued by then: 8 partitions writing a block
// every 10 ms for 1 s make about 5 calls at a pace of 200 ms, not 100.
// Each call's new blocks share one round, recorded by each block's intent
// before the call; a block written again keeps its round.
func TestSinkRoundsPaced(t *testing.T) {
	const pace = 200 * time.Millisecond
	rs := &roundSink{}
	s := newSinkRounds(rs, new(atomic.Int64))
	s.pace = pace
	stop, ended := make(chan struct{}), make(chan struct{})
	go func() { defer close(ended); s.run(stop) }()
	defer func() { close(stop); <-ended }()

	var intents sync.Map // partition → rounds recorded
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Second)
	for p := range 8 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				b := &sinks.Block{Topic: "t", Partition: p, Records: make([]sinks.Record, 1)}
				err := s.write(context.Background(), b, func(_ context.Context, round string) error {
					v, _ := intents.LoadOrStore(p, &[]string{})
					*v.(*[]string) = append(*v.(*[]string), round)
					return nil
				}, true)
				if err != nil {
					t.Errorf("write: %v", err)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if n := len(rs.starts); n < 3 || n > 7 {
		t.Errorf("%d calls in 1 s at a pace of %s, want about 5", n, pace)
	}
	for i := 1; i < len(rs.starts); i++ {
		if gap := rs.starts[i].Sub(rs.starts[i-1]); gap < pace-5*time.Millisecond {
			t.Errorf("calls %d and %d began %s apart, want at least %s", i-1, i, gap, pace)
		}
	}
	for i, rounds := range rs.rounds {
		if len(rounds) != 1 || rounds[""] {
			t.Errorf("call %d holds rounds %v, want one named round", i, rounds)
		}
	}
	// Each partition's intents named the round its block went in with.
	intents.Range(func(k, v any) bool {
		if got := len(*v.(*[]string)); got == 0 {
			t.Errorf("partition %v recorded no intents", k)
		}
		return true
	})

	// A block written again keeps its round, beside new blocks.
	again := &sinks.Block{Topic: "t", Partition: 9, Round: "old", Records: make([]sinks.Record, 1)}
	rs.mu.Unlock()
	if err := s.write(context.Background(), again, func(context.Context, string) error { return nil }, true); err != nil {
		t.Fatal(err)
	}
	rs.mu.Lock()
	if again.Round != "old" || !again.Again || !rs.rounds[len(rs.rounds)-1]["old"] {
		t.Errorf("a block written again went in round %q (Again %v), want its own, old, marked Again", again.Round, again.Again)
	}
}

// A block whose intent fails is answered with that error and left out of
// the call, and leaves the new round (its retry is a round of its own, not
// a block written again under a token the others spent); the others of
// the call go in under the round their intents recorded.
func TestSinkRoundsIntentFailureLeavesTheRound(t *testing.T) {
	rs := &roundSink{}
	s := newSinkRounds(rs, new(atomic.Int64))
	// Paced, a call just begun: the three blocks wait for one call.
	s.pace, s.lastTake = 300*time.Millisecond, time.Now()
	stop, ended := make(chan struct{}), make(chan struct{})
	go func() { defer close(ended); s.run(stop) }()
	defer func() { close(stop); <-ended }()

	refused := errors.New("etcd did not answer")
	blocks := make([]*sinks.Block, 3)
	errs := make([]error, 3)
	recorded := make([]string, 3)
	var wg sync.WaitGroup
	for p := range 3 {
		blocks[p] = &sinks.Block{Topic: "t", Partition: p, Records: make([]sinks.Record, 1)}
		wg.Go(func() {
			errs[p] = s.write(context.Background(), blocks[p], func(_ context.Context, round string) error {
				recorded[p] = round
				if p == 1 {
					return refused
				}
				return nil
			}, true)
		})
	}
	wg.Wait()
	if !errors.Is(errs[1], refused) || errs[0] != nil || errs[2] != nil {
		t.Fatalf("outcomes %v, want the intent's error for partition 1 alone", errs)
	}
	if blocks[1].Round != "" || blocks[0].Round == "" || blocks[0].Round != blocks[2].Round || recorded[0] != blocks[0].Round {
		t.Errorf("rounds %q %q %q (recorded %q): want partition 1's cleared, the others' one round, the one recorded",
			blocks[0].Round, blocks[1].Round, blocks[2].Round, recorded)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, call := range rs.calls {
		for _, p := range call {
			if p == 1 {
				t.Errorf("the block whose intent failed was written: calls %v", rs.calls)
			}
		}
	}
}
