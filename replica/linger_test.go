package replica_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// writeTimes is a sink that keeps when each block, by its end offset, was
// written.
type writeTimes struct {
	mu      sync.Mutex
	written map[int64]time.Time
}

func (s *writeTimes) Write(_ context.Context, b *sinks.Block) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written[b.Next] = time.Now()
	return nil
}

func (s *writeTimes) Close() error { return nil }

func (s *writeTimes) at(next int64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.written[next]
	return t, ok
}

// The block that ends a backlog is committed at once: its commit does not
// wait out --commit-linger, which would hold the end of every catch-up
// back. Blocks of a partition that trickles (this block and the one
// before it ended quiet) still linger, for others to share their round.
func TestBacklogEndCommitsWithoutLinger(t *testing.T) {
	cli, brokers, stop := startEtcdAndKafka("linger", 0)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("linger"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	produce := func(n int) {
		t.Helper()
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Partition: 0, Value: bytes.Repeat([]byte("v"), 100)}
		}
		if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	const backlog = 1000
	for range backlog / 100 {
		produce(100) // a batch each
	}

	// The longest linger a lease of 32 s allows (a sixteenth of it).
	const linger = 2 * time.Second
	sink := &writeTimes{written: map[int64]time.Time{}}
	r, err := replica.New(replica.Config{
		Group:  "linger",
		Topics: []string{"linger"},
		// A batch of 100 records (11 KB) a fetch, three a block: three
		// full blocks, then the backlog's last, quiet one.
		Kafka:          replica.Kafka{Brokers: brokers, FetchMaxWait: 50 * time.Millisecond, FetchMaxPartitionBytes: 8 << 10},
		MaxBlockRows:   300,
		CommitLinger:   linger,
		LeaseTTL:       32 * time.Second,
		RebalanceDelay: 10 * time.Millisecond,
	}, cli, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(runCtx) }()

	op, err := coordinator.New(cli, "linger")
	if err != nil {
		t.Fatal(err)
	}
	p0 := coordinator.Partition{Topic: "linger", Partition: 0}
	// committedAfter waits until etcd holds next for partition 0 and
	// returns how long after the block ending there was written.
	committedAfter := func(next int64) time.Duration {
		t.Helper()
		for {
			snap, err := op.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Offsets[p0].Next >= next {
				w, ok := sink.at(next)
				if !ok {
					t.Fatalf("offset %d committed, but no block ending there was written", next)
				}
				return time.Since(w)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("offset %d not committed: etcd holds %d", next, snap.Offsets[p0].Next)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if d := committedAfter(backlog); d >= linger/2 {
		t.Fatalf("the backlog's last block was committed %s after its write, want well within the %s linger", d, linger)
	}
	// A trickle: one record, after the backlog's quiet end.
	produce(1)
	if d := committedAfter(backlog + 1); d < linger*3/4 {
		t.Fatalf("a trickling partition's block was committed %s after its write, want after about the %s linger", d, linger)
	}
	stopRun()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}
