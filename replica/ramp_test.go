package replica_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// rampSink keeps the rows of each block of partition 0, and checks that
// every record comes once, in order.
type rampSink struct {
	mu     sync.Mutex
	blocks []int
	next   int64
	err    error
}

func (s *rampSink) Write(ctx context.Context, b *sinks.Block) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range b.Records {
		if r.Offset != s.next && s.err == nil {
			s.err = fmt.Errorf("offset %d delivered when %d was next", r.Offset, s.next)
		}
		s.next = r.Offset + 1
	}
	s.blocks = append(s.blocks, len(b.Records))
	return nil
}

func (s *rampSink) Close() error { return nil }

func (s *rampSink) state() ([]int, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.blocks...), s.next, s.err
}

// TestBacklogBlocksRampUp: a partition's backlog goes in blocks that start
// at an eighth of max-block-rows and double, so the sink starts writing
// before the backlog is read (rather than one block of the whole backlog,
// read whole, then written). The ramp's rules: TestRampRules.
func TestBacklogBlocksRampUp(t *testing.T) {
	cli, brokers, stop := startEtcdAndKafka("ramp", 0)
	defer stop()
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("ramp"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(16<<10), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	produced := 0
	produce := func(n int) {
		t.Helper()
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Value: []byte(fmt.Sprintf(`{"n":%d,"pad":"%0200d"}`, produced+i, 0))}
		}
		if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		produced += n
	}
	const start = replica.DefaultMaxBlockRows / 8
	produce(5 * start)

	sink := &rampSink{}
	r, err := replica.New(replica.Config{
		Group:          "ramp",
		Topics:         []string{"ramp"},
		Kafka:          replica.Kafka{Brokers: brokers, FetchMaxWait: 100 * time.Millisecond, FetchMaxPartitionBytes: 256 << 10},
		LeaseTTL:       2 * time.Second,
		RebalanceDelay: 10 * time.Millisecond,
	}, cli, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()
	await := func(what string) []int {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			blocks, next, err := sink.state()
			if err != nil {
				t.Fatal(err)
			}
			if next == int64(produced) {
				return blocks
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the sink has offsets up to %d of %d, in blocks of %v", what, next, produced, blocks)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Blocks end between polled batches, a fetch's worth of a partition
	// or more (kfake's answers pass the partition's limit), so a block
	// holds at least its limit of rows, maybe much more.
	blocks := await("the backlog")
	t.Logf("a backlog of %d records: blocks of %v", 5*start, blocks)
	if len(blocks) < 2 || blocks[0] >= 5*start/2 || blocks[1] < 2*start {
		t.Errorf("a backlog of %d records in blocks of %v; want a first block of %d rows or a batch more (not the whole backlog), then one of twice as many", 5*start, blocks, start)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}
