package replica_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// rangeSink deduplicates a block by its range, as ClickHouse does by the
// token made of it: a block whose range it has stored is dropped. Its
// first write stores the block and then fails, as a write whose answer
// was lost; before failing it has more records produced, so that a block
// read afresh from the same offset would be larger.
type rangeSink struct {
	mu      sync.Mutex
	ranges  map[[2]int64]bool
	written map[int64]int // offset: times stored
	writes  [][2]int64
	failed  bool
	more    func() // produces more records, during the failing write
	n       int64
	want    int64
	done    chan struct{}
}

func (s *rangeSink) Write(_ context.Context, b *sinks.Block) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := [2]int64{b.From, b.Next}
	s.writes = append(s.writes, r)
	if !s.ranges[r] {
		s.ranges[r] = true
		for _, rec := range b.Records {
			s.written[rec.Offset]++
			s.n++
		}
	}
	if !s.failed {
		s.failed = true
		s.more()
		return errors.New("the answer to the insert was lost")
	}
	if s.n >= s.want && s.done != nil {
		close(s.done)
		s.done = nil
	}
	return nil
}

func (s *rangeSink) Close() error { return nil }

// TestFailedWriteRetriedWithItsRange: a block whose write failed is
// written again with the same range, although more records came
// meanwhile, so that a sink that deduplicates by range drops it if the
// failed write landed. Read afresh, the block after the failure held the
// first block's records and the new ones: a new range, and the first
// block's records written twice.
func TestFailedWriteRetriedWithItsRange(t *testing.T) {
	cli, cluster := etcdAndKfake(t, "again", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("again"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(from, to int) {
		rs := make([]*kgo.Record, 0, to-from)
		for i := from; i < to; i++ {
			rs = append(rs, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)})
		}
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Error(err)
		}
	}
	produce(0, 100)
	sink := &rangeSink{ranges: map[[2]int64]bool{}, written: map[int64]int{}, want: 200, done: make(chan struct{}),
		more: func() { produce(100, 200) }}
	done := sink.done
	r, err := replica.New(replica.Config{
		Group:          "again",
		Topics:         []string{"again"},
		Kafka:          kafkaconf.Config{Brokers: cluster.ListenAddrs(), FetchMaxWait: 50 * time.Millisecond},
		LeaseTTL:       2 * time.Second,
		RebalanceDelay: 10 * time.Millisecond,
	}, cli, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stopRun := runReplica(ctx, r)
	select {
	case <-done:
	case <-ctx.Done():
		sink.mu.Lock()
		defer sink.mu.Unlock()
		t.Fatalf("the sink stored %d of 200 records: writes %v", sink.n, sink.writes)
	}
	if err := stopRun(); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.writes) < 2 || sink.writes[1] != sink.writes[0] {
		t.Errorf("writes %v: want the failed block's range [%d, %d) written again next", sink.writes, sink.writes[0][0], sink.writes[0][1])
	}
	for o := range int64(200) {
		if n := sink.written[o]; n != 1 {
			t.Errorf("offset %d stored %d times, want once", o, n)
		}
	}
}
