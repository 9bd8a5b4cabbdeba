package replica_test

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// writeTimes is a sink that keeps when each block, by partition and end
// offset, was written.
type writeTimes struct {
	mu      sync.Mutex
	written map[int]map[int64]time.Time
}

func (s *writeTimes) Write(_ context.Context, b *sinks.Block) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written[b.Partition][b.Next] = time.Now()
	return nil
}

func (s *writeTimes) Close() error { return nil }

func (s *writeTimes) at(p int, next int64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.written[p][next]
	return t, ok
}

// A backlog's blocks are committed at once: the block that ends it (the
// partition's blocks before it ended full), one that holds a backlog whole
// however small (its records were there before the partition was read to
// its log end), and one larger than a 64th of a full block. Waiting out
// --commit-linger there would hold the end of every catch-up back. The
// small blocks of a partition that trickles (its records came after it
// was read to its log end, and this block and the one before it ended
// quiet) still linger, for others to share their round.
func TestBacklogCommitsWithoutLinger(t *testing.T) {
	cli, brokers, stop := startEtcdAndKafka("linger", 0)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Manual flushing: each produce is one batch. With ProduceSync the
	// first record went out at once, alone, the rest in a second batch;
	// read to its log end in between, the partition ended a block there,
	// and the 700 records were two blocks, neither full.
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("linger"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ManualFlushing())
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	produce := func(p int32, n int) {
		t.Helper()
		var failed atomic.Pointer[error]
		for range n {
			producer.Produce(ctx, &kgo.Record{Partition: p, Value: bytes.Repeat([]byte("v"), 100)}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			})
		}
		if err := producer.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := failed.Load(); err != nil {
			t.Fatal(*err)
		}
	}
	// One after another, so that no block's writes ride along in a round
	// with another's: partition 1, one batch of 5 records, its first
	// block, quiet and small (a 64th of 640 rows is 10), but a backlog's;
	// partition 0, a batch of 700 records, a full block (of 640 rows or
	// more), then a batch of 5, a small block after a full one.
	produce(1, 5)

	// The longest linger a lease of 32 s allows (a sixteenth of it).
	const linger = 2 * time.Second
	sink := &writeTimes{written: map[int]map[int64]time.Time{0: {}, 1: {}}}
	r, err := replica.New(replica.Config{
		Group:          "linger",
		Topics:         []string{"linger"},
		Kafka:          kafkaconf.Config{Brokers: brokers, FetchMaxWait: 50 * time.Millisecond},
		MaxBlockRows:   640,
		CommitLinger:   linger,
		LeaseTTL:       32 * time.Second,
		RebalanceDelay: 10 * time.Millisecond,
	}, cli, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stopRun := runReplica(ctx, r)

	op, err := coordinator.New(cli, "linger")
	if err != nil {
		t.Fatal(err)
	}
	// committedAfter waits until etcd holds next for partition p and
	// returns how long after the block ending there was written.
	committedAfter := func(p int, next int64) time.Duration {
		t.Helper()
		tp := sinks.Partition{Topic: "linger", Partition: p}
		for {
			snap, err := op.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Offsets[tp].Next >= next {
				w, ok := sink.at(p, next)
				if !ok {
					t.Fatalf("%s: offset %d committed, but no block ending there was written", tp, next)
				}
				return time.Since(w)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: offset %d not committed: etcd holds %d", tp, next, snap.Offsets[tp].Next)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if d := committedAfter(1, 5); d >= linger/2 {
		t.Fatalf("a backlog's one block of 5 records, waiting before the partition started, was committed %s after its write, want well within the %s linger", d, linger)
	}
	produce(0, 700) // one batch: read as it is, not as it comes
	if d := committedAfter(0, 700); d >= linger/2 {
		t.Fatalf("a full block was committed %s after its write, want well within the %s linger", d, linger)
	}
	produce(0, 5)
	if d := committedAfter(0, 705); d >= linger/2 {
		t.Fatalf("the small block that ends a backlog was committed %s after its write, want well within the %s linger", d, linger)
	}
	// A trickle: one record each, after the backlogs' quiet ends.
	produce(0, 1)
	produce(1, 1)
	for p, next := range map[int]int64{0: 706, 1: 6} {
		if d := committedAfter(p, next); d < linger*3/4 {
			t.Fatalf("partition %d: a trickling partition's block was committed %s after its write, want after about the %s linger", p, d, linger)
		}
	}
	// A block larger than a trickle's, after the trickle.
	produce(1, 50)
	if d := committedAfter(1, 56); d >= linger/2 {
		t.Fatalf("a block of 50 records after a trickle, larger than a trickle's, was committed %s after its write, want well within the %s linger", d, linger)
	}
	if err := stopRun(); err != nil {
		t.Fatal(err)
	}
}

// runReplica runs r until the returned stop is called, which returns what
// Run returned.
func runReplica(ctx context.Context, r *replica.Replica) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()
	return func() error {
		cancel()
		return <-ran
	}
}
