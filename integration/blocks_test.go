package integration_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

// The tests of this file check the block rules of DESIGN.md ("Blocks"): a
// block ends, only between polled batches, at max-block-rows rows, after
// flush-interval, after max-empty-polls empty polls, or after every batch in
// every-batch mode; empty blocks are not written. With Kafka.FetchMaxPartitionBytes = 1
// each poll returns one Kafka record batch, and each produceBatches call
// below makes one record batch, so the batches are known exactly.

// blockWait bounds each wait of these tests: they take a second or two.
const blockWait = 30 * time.Second

// Limits no test reaches, so that only the rule under test can end a block.
const (
	neverRows  = 1 << 30
	neverPolls = 1_000_000
	neverFlush = time.Hour
)

// oneBatch is Kafka.FetchMaxPartitionBytes for one record batch per poll.
const oneBatch = 1

// produceBatches writes one record batch per size to partition p, one
// Produce call (one flush) each, with values "<p>-<i>".
func (e *env) produceBatches(p int, sizes ...int) {
	e.t.Helper()
	for _, n := range sizes {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "%d-%d", p, i)}
		}
		e.kafka.Produce(e.t, e.topic, p, recs...)
	}
}

// newBlockSink returns a hookSink over a discard sink and the log of every
// Write the replica made to it, taken before the inner sink, so that even a
// write the inner sink would refuse is seen.
func newBlockSink() (*hookSink, *writeLog) {
	wl := &writeLog{}
	return &hookSink{inner: discard.New(), before: wl.record}, wl
}

// writeLog is every Write call a hookSink saw, in order.
type writeLog struct {
	mu    sync.Mutex
	calls []blockRange
}

func (w *writeLog) record(_ context.Context, b *sinks.Block) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, blockRange{b.Partition, b.From, b.Next, len(b.Records), b.Epoch})
	return nil
}

func (w *writeLog) all() []blockRange {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls)
}

// fetchCounter records the fetch requests the broker receives for each
// partition (the topic of an env is the only one fetched): one per poll. A
// request of a fetch session (KIP-227) polls the partitions it lists and
// those its session holds unlisted, at the offset the session keeps (-1
// here): the env's one replica keeps one session with the broker.
type fetchCounter struct {
	mu      sync.Mutex
	offsets map[int][]int64 // partition → fetch offset of each request
	session map[int]bool    // the partitions the session holds
}

func (e *env) countFetches() *fetchCounter {
	fc := &fetchCounter{offsets: map[int][]int64{}, session: map[int]bool{}}
	e.kafka.Cluster().ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req, ok := r.(*kmsg.FetchRequest)
		if !ok {
			return nil, nil, false
		}
		fc.mu.Lock()
		defer fc.mu.Unlock()
		inSession := req.SessionEpoch >= 0
		if req.SessionEpoch == 0 {
			clear(fc.session) // a new session: what it lists
		}
		listed := map[int]bool{}
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				fc.offsets[int(p.Partition)] = append(fc.offsets[int(p.Partition)], p.FetchOffset)
				listed[int(p.Partition)] = true
				if inSession {
					fc.session[int(p.Partition)] = true
				}
			}
		}
		for _, t := range req.ForgottenTopics {
			for _, p := range t.Partitions {
				delete(fc.session, int(p))
			}
		}
		if inSession {
			for p := range fc.session {
				if !listed[p] {
					fc.offsets[p] = append(fc.offsets[p], -1)
				}
			}
		}
		return nil, nil, false // observe only: the broker answers as usual
	})
	return fc
}

// of is the number of fetches of partition p so far.
func (fc *fetchCounter) of(p int) int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return len(fc.offsets[p])
}

// blockWant is a block as the tests expect it.
type blockWant struct {
	from, next int64
	rows       int
}

// checkBlocks asserts that the blocks written for partition p are exactly
// want, in order.
func checkBlocks(t *testing.T, h *hookSink, p int, ws ...blockWant) {
	t.Helper()
	got := h.blocks(p)
	match := len(got) == len(ws)
	for i := 0; match && i < len(ws); i++ {
		match = got[i].From == ws[i].from && got[i].Next == ws[i].next && got[i].Rows == ws[i].rows
	}
	if !match {
		t.Fatalf("partition %d: blocks written %s, want %s", p, fmtBlocks(got), fmtWants(ws))
	}
}

func fmtBlocks(bs []blockRange) string {
	s := ""
	for _, b := range bs {
		s += fmt.Sprintf("[%d,%d)x%d ", b.From, b.Next, b.Rows)
	}
	return "{" + s + "}"
}

func fmtWants(ws []blockWant) string {
	s := ""
	for _, w := range ws {
		s += fmt.Sprintf("[%d,%d)x%d ", w.from, w.next, w.rows)
	}
	return "{" + s + "}"
}

func TestMaxBlockRowsEndsBlockBetweenBatches(t *testing.T) {
	e := newEnv(t, "rows", 1)
	for range 10 {
		e.produceBatches(0, 100)
	}
	h, _ := newBlockSink()
	cfg := e.config("r1")
	cfg.Kafka.FetchMaxPartitionBytes = oneBatch
	cfg.MaxBlockRows = 250
	cfg.FlushInterval = neverFlush
	cfg.MaxEmptyPolls = 3
	e.start(cfg, h)
	await(t, blockWait, "offset 1000 committed", func() bool { return e.committed()[0] == 1000 })
	// 250 rows fall inside the third batch: the block takes it whole and
	// ends after it. The tail ends on the empty polls.
	checkBlocks(t, h, 0,
		blockWant{0, 300, 300}, blockWant{300, 600, 300}, blockWant{600, 900, 300}, blockWant{900, 1000, 100})
}

func TestFlushIntervalEndsBlock(t *testing.T) {
	e := newEnv(t, "flush", 1)
	e.produceBatches(0, 100)
	h, _ := newBlockSink()
	cfg := e.config("r1")
	cfg.Kafka.FetchMaxPartitionBytes = oneBatch
	cfg.MaxBlockRows = neverRows
	cfg.MaxEmptyPolls = neverPolls
	cfg.FlushInterval = 300 * time.Millisecond // the only rule that can end a block
	rn := e.start(cfg, h)
	await(t, blockWait, "offset 100 committed", func() bool { return e.committed()[0] == 100 })
	checkBlocks(t, h, 0, blockWant{0, 100, 100})

	// Records arriving while the partition polls empty: the flush
	// interval, counted from their first row, ends their block too.
	e.produceBatches(0, 30, 20)
	await(t, blockWait, "offset 150 committed", func() bool { return e.committed()[0] == 150 })
	got := h.blocks(0)
	if len(got) < 2 || got[len(got)-1].Next != 150 {
		t.Fatalf("blocks written %s, want [100,150) covered after [0,100)", fmtBlocks(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i].From != got[i-1].Next {
			t.Fatalf("blocks written %s: a gap or overlap", fmtBlocks(got))
		}
	}
	if n := rn.r.Stats().Records; n != 150 {
		t.Fatalf("%d records written, want 150", n)
	}
}

// A partition that caught up counts that as one empty poll; every MaxWait
// without a record is another. With MaxEmptyPolls 3, the block of records
// that were all there at the start is written after two MaxWaits of quiet,
// not before.
func TestMaxEmptyPollsEndsBlock(t *testing.T) {
	const emptyPolls = 3
	e := newEnv(t, "quiet", 1)
	e.produceBatches(0, 50, 50, 50)
	var writtenAt atomic.Pointer[time.Time]
	h := &hookSink{inner: discard.New(), before: func(_ context.Context, b *sinks.Block) error {
		now := time.Now()
		writtenAt.CompareAndSwap(nil, &now)
		return nil
	}}
	cfg := e.config("r1")
	cfg.Kafka.FetchMaxPartitionBytes = oneBatch
	cfg.MaxBlockRows = neverRows
	cfg.FlushInterval = neverFlush
	cfg.MaxEmptyPolls = emptyPolls
	start := time.Now()
	e.start(cfg, h)
	await(t, blockWait, "offset 150 committed", func() bool { return e.committed()[0] == 150 })
	// All three batches in one block, ended by the partition going quiet.
	checkBlocks(t, h, 0, blockWant{0, 150, 150})
	if quiet, want := writtenAt.Load().Sub(start), (emptyPolls-1)*cfg.Kafka.FetchMaxWait; quiet < want {
		t.Fatalf("the block was written %s after the start, want at least %s (%d empty polls of %s, the first one the catch-up)",
			quiet, want, emptyPolls, cfg.Kafka.FetchMaxWait)
	}
}

func TestIdlePartitionWritesNoEmptyBlock(t *testing.T) {
	e := newEnv(t, "idle", 2)
	e.produceBatches(0, 100)
	fetches := e.countFetches()
	h, calls := newBlockSink()
	cfg := e.config("r1") // MaxEmptyPolls 1: every empty poll could end a block
	cfg.Kafka.FetchMaxPartitionBytes = oneBatch
	rn := e.start(cfg, h)
	await(t, blockWait, "offset 100 committed on partition 0", func() bool { return e.committed()[0] == 100 })
	// Partition 1 polls and gets nothing, again and again.
	await(t, blockWait, "20 polls of the idle partition 1", func() bool { return fetches.of(1) >= 20 })
	await(t, blockWait, "20 polls of partition 0 after its block", func() bool { return fetches.of(0) >= 21 })

	for _, c := range calls.all() {
		if c.Rows == 0 || c.From == c.Next {
			t.Errorf("empty block written: partition %d [%d, %d) with %d records", c.Partition, c.From, c.Next, c.Rows)
		}
	}
	checkBlocks(t, h, 0, blockWant{0, 100, 100})
	checkBlocks(t, h, 1)
	if got := e.committed()[1]; got != 0 {
		t.Errorf("idle partition 1 committed %d, want nothing", got)
	}
	if n := rn.r.Stats().Blocks; n != 1 {
		t.Errorf("%d blocks committed, want 1: empty blocks must not be committed either", n)
	}
}

func TestAbortedOnlyBlockCommittedWithoutWrite(t *testing.T) {
	e := newEnv(t, "aborted", 1)
	recs := make([]*kgo.Record, 40)
	for i := range recs {
		recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "aborted-%d", i)}
	}
	e.kafka.Transact(t, false, e.topic, 0, recs...)
	end := e.logEnds()[0]
	if end <= int64(len(recs)) {
		t.Fatalf("log end %d: want the aborted records and the abort marker", end)
	}
	h, calls := newBlockSink()
	// The default Kafka.FetchMaxPartitionBytes: kfake leaves the aborted transactions out
	// of a fetch response cut short by the request's MaxBytes, which a
	// real broker does not (so oneBatch would deliver aborted records).
	rn := e.start(e.config("r1"), h)
	// Blocks counts a block once its commit is through.
	await(t, blockWait, fmt.Sprintf("offset %d (the log end) committed by a block", end), func() bool {
		return e.committed()[0] == end && rn.r.Stats().Blocks == 1
	})
	if c := calls.all(); len(c) != 0 {
		t.Fatalf("sink written %s, want no write: the block held only aborted records and a marker", fmtBlocks(c))
	}
	if n := rn.r.Stats().Records; n != 0 {
		t.Fatalf("%d records written, want none", n)
	}

	// The next block starts where the commit left off.
	e.produceBatches(0, 10)
	await(t, blockWait, fmt.Sprintf("offset %d committed", end+10), func() bool { return e.committed()[0] == end+10 })
	checkBlocks(t, h, 0, blockWant{end, end + 10, 10})
}

func TestEveryBatchBlocksAreOneBatch(t *testing.T) {
	e := newEnv(t, "everybatch", 1)
	sizes := []int{10, 20, 30, 40, 50}
	e.produceBatches(0, sizes...)
	h, _ := newBlockSink()
	cfg := e.config("r1")
	cfg.CommitMode = replica.EveryBatch
	cfg.Kafka.FetchMaxPartitionBytes = oneBatch
	cfg.MaxBlockRows = neverRows
	cfg.FlushInterval = neverFlush
	cfg.MaxEmptyPolls = neverPolls // only the every-batch rule ends a block
	e.start(cfg, h)
	// every-batch commits before it writes: wait for the sink.
	await(t, blockWait, "150 records written", func() bool {
		bs := h.blocks(0)
		return len(bs) > 0 && bs[len(bs)-1].Next >= 150
	})
	var ws []blockWant
	var from int64
	for _, n := range sizes {
		ws = append(ws, blockWant{from, from + int64(n), n})
		from += int64(n)
	}
	checkBlocks(t, h, 0, ws...)
	if got := e.committed()[0]; got != 150 {
		t.Fatalf("committed %d, want 150", got)
	}
}
