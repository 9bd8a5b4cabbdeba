package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// blockWriter is how a partition hands its block to the sink.
type blockWriter interface {
	Write(ctx context.Context, b *sinks.Block) error
}

// sinkRounds gathers the blocks that partitions write at about the same
// time into one WriteBlocks call of a sink that can take several (group
// commit, as the etcd rounds): while one call is in flight the next one
// gathers, so an idle replica adds no latency and a busy one batches. Each
// partition still gets its own block's outcome.
//
// One goroutine, run, sends the calls; it is started and ended by the
// replica's Run.
type sinkRounds struct {
	sink  sinks.BatchWriter
	calls *atomic.Int64 // sink calls made, for metrics
	// pace, for a sinks.RoundPacer: a call of a trickle's blocks of
	// fewer than sinks.PacedRows rows begins no sooner than pace after the
	// last began (lastTake); see take.
	pace     time.Duration
	lastTake time.Time

	mu    sync.Mutex
	queue []*sinkWrite
	wake  chan struct{} // cap 1
}

// sinkWrite is one partition's block waiting for, or in, a call.
type sinkWrite struct {
	ctx   context.Context
	block *sinks.Block
	// intent, for a sinks.RoundInserter, records the block's intent with
	// its round before the call (roundWrite).
	intent func(ctx context.Context, round string) error
	// trickle: the block is a trickle's (its records came after the
	// partition had caught up, and it ended short of full), which a paced
	// sink's calls wait for; a backlog's block goes at once.
	trickle bool
	sent    bool       // guarded by sinkRounds.mu
	done    chan error // cap 1: the block's outcome
}

// roundWrite writes a block through rounds, its intent recorded by intent
// with the round the block goes in (sinks.RoundInserter).
type roundWrite struct {
	rounds  *sinkRounds
	intent  func(ctx context.Context, round string) error
	trickle bool // sinkWrite.trickle
}

func (r roundWrite) Write(ctx context.Context, b *sinks.Block) error {
	return r.rounds.write(ctx, b, r.intent, r.trickle)
}

// newRound names a round: 128 random bits, so that no two rounds of any
// replica, ever, share a name (a sink's deduplication token is made of it).
func newRound() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// countedSink is a sink without rounds: one Write per block, counted.
type countedSink struct {
	sink  sinks.Sink
	calls *atomic.Int64
}

func (c countedSink) Write(ctx context.Context, b *sinks.Block) error {
	c.calls.Add(1)
	return c.sink.Write(ctx, b)
}

func newSinkRounds(s sinks.BatchWriter, calls *atomic.Int64) *sinkRounds {
	return &sinkRounds{sink: s, calls: calls, wake: make(chan struct{}, 1)}
}

// Write queues b for the next call and waits for its outcome. A waiter whose
// ctx ends before its block is sent takes it back; once sent, it waits for
// the call, which ends early only when every waiter in it has given up.
func (s *sinkRounds) Write(ctx context.Context, b *sinks.Block) error {
	return s.write(ctx, b, nil, false)
}

func (s *sinkRounds) write(ctx context.Context, b *sinks.Block, intent func(context.Context, string) error, trickle bool) error {
	w := &sinkWrite{ctx: ctx, block: b, intent: intent, trickle: trickle, done: make(chan error, 1)}
	s.mu.Lock()
	s.queue = append(s.queue, w)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
	}
	s.mu.Lock()
	if !w.sent {
		for i, q := range s.queue {
			if q == w {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
		return ctx.Err()
	}
	s.mu.Unlock()
	return <-w.done
}

// Calls in flight: one gathers the blocks that end together; beside it,
// more start only for rounds large enough to be worth a transaction of their
// own, so that a backlog is written in parallel (a store such as PostgreSQL
// works one transaction per connection) while a trickle is batched.
const (
	maxSinkCalls  = 4
	maxPacedCalls = 8
	bigSinkRound  = 8192 // rows
)

// run sends the queued blocks until stop is closed; it then waits for the
// calls in flight and refuses what is queued with context.Canceled.
func (s *sinkRounds) run(stop <-chan struct{}) {
	calls := maxSinkCalls
	if s.pace > 0 {
		// A paced sink's backlog is a call per large block or two, each
		// its own insert, side by side as the partitions' inserts were.
		calls = maxPacedCalls
	}
	done := make(chan struct{}, calls)
	inFlight := 0
	paced := time.NewTimer(time.Hour)
	paced.Stop()
	defer paced.Stop()
	for {
		for inFlight < calls {
			batch, wait := s.take(inFlight == 0, time.Now())
			if wait > 0 {
				paced.Reset(wait)
			}
			if batch == nil {
				break
			}
			inFlight++
			go func() {
				s.send(batch)
				done <- struct{}{}
			}()
		}
		select {
		case <-stop:
			for ; inFlight > 0; inFlight-- {
				<-done
			}
			s.mu.Lock()
			left := s.queue
			s.queue = nil
			s.mu.Unlock()
			for _, w := range left {
				w.done <- context.Canceled
			}
			return
		case <-s.wake:
		case <-paced.C:
		case <-done:
			inFlight--
		}
	}
}

// notDue reports whether a paced sink's next call is more than a margin
// away (blockRules.hold): a tenth of the pace, 20 to 100 ms, for the block
// to end and be queued in time.
func (s *sinkRounds) notDue(now time.Time) bool {
	margin := min(max(s.pace/10, 20*time.Millisecond), 100*time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Before(s.lastTake.Add(s.pace - margin))
}

// take removes the blocks of the next call from the front of the queue:
// blocks until they hold bigSinkRound rows, or all that are queued. Beside a
// call in flight it takes them only when they reach bigSinkRound rows; nil
// when there is nothing to take. A paced sink's call takes blocks until
// they hold sinks.PacedRows rows, or all that are queued; one of trickle
// blocks alone (sinkWrite.trickle) of fewer rows only when idle and pace
// after the last call began: otherwise wait says how long until it may (0:
// no need to wake). A backlog's blocks are not paced.
func (s *sinkRounds) take(idle bool, now time.Time) (batch []*sinkWrite, wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, rows, trickle := 0, 0, true
	limit := bigSinkRound
	if s.pace > 0 {
		// A paced sink's round is one insert: a backlog's rounds stay
		// about sinks.PacedRows rows each, several in flight, so that its
		// blocks are converted and inserted side by side.
		limit = sinks.PacedRows
	}
	for n < len(s.queue) && rows < limit {
		rows += len(s.queue[n].block.Records)
		trickle = trickle && s.queue[n].trickle
		n++
	}
	switch {
	case n == 0:
		return nil, 0
	case s.pace > 0 && trickle && rows < sinks.PacedRows:
		if !idle {
			return nil, 0
		}
		if since := now.Sub(s.lastTake); since < s.pace {
			return nil, s.pace - since
		}
	case s.pace > 0 && trickle:
	case !idle && rows < bigSinkRound:
		return nil, 0
	}
	s.lastTake = now
	batch = append([]*sinkWrite(nil), s.queue[:n]...)
	s.queue = append(s.queue[:0], s.queue[n:]...)
	for _, w := range batch {
		w.sent = true
	}
	return batch, 0
}

// send makes one call of batch and hands each block its outcome.
func (s *sinkRounds) send(batch []*sinkWrite) {
	// The call ends early only when all its waiters have given up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waiting atomic.Int64
	waiting.Store(int64(len(batch)))
	for _, w := range batch {
		stopAfter := context.AfterFunc(w.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stopAfter()
	}
	batch = recordIntents(batch)
	if len(batch) == 0 {
		return
	}
	blocks := make([]*sinks.Block, len(batch))
	for i, w := range batch {
		blocks[i] = w.block
	}
	s.calls.Add(1)
	errs := s.sink.WriteBlocks(ctx, blocks)
	for i, w := range batch {
		err := fmt.Errorf("write %s: the sink returned %d outcomes for %d blocks", w.block, len(errs), len(batch))
		if len(errs) == len(batch) {
			err = errs[i]
		}
		w.done <- err
	}
}

// recordIntents gives the blocks of a call that carry no round yet one
// new round and records each block's intent with its round, all at once
// (the session gathers them in a few etcd transactions). A block whose
// intent fails is answered with that error and left out; the others are
// returned. Blocks without an intent to record pass as they are.
func recordIntents(batch []*sinkWrite) []*sinkWrite {
	round := ""
	errs := make([]error, len(batch))
	fresh := make([]bool, len(batch))
	var wg sync.WaitGroup
	for i, w := range batch {
		if w.intent == nil {
			continue
		}
		if fresh[i] = w.block.Round == ""; fresh[i] {
			if round == "" {
				round = newRound()
			}
			w.block.Round = round
		} else {
			// Carried from an earlier write of the range: its round's
			// token may be spent without this block's records (another
			// block of the round went in alone), and the sink checks.
			w.block.Again = true
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.intent(w.ctx, w.block.Round)
		}()
	}
	wg.Wait()
	kept := batch[:0:0]
	for i, w := range batch {
		if errs[i] != nil {
			if fresh[i] {
				// Not written under the new round, nor to be: its retry
				// goes in a round of its own time, not as a block written
				// again (which, the round's token spent by the others,
				// would cost a second insert). Had the intent reached etcd
				// after all, a new owner replays it as written again.
				w.block.Round = ""
			}
			w.done <- errs[i]
			continue
		}
		kept = append(kept, w)
	}
	return kept
}
