package replica_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// budgetSink checks that every record comes once and in order, per
// partition, and samples at every write the bytes the replica holds:
// fetched, set aside and decoded.
type budgetSink struct {
	r *replica.Replica

	mu     sync.Mutex
	max    int64
	next   map[int]int64 // per partition, the offset the next record must have
	err    error
	n      int64
	want   int64
	blocks int
	done   chan struct{}
}

func (s *budgetSink) sample() {
	_, held, _ := s.r.Fetching()
	s.mu.Lock()
	s.max = max(s.max, held)
	s.mu.Unlock()
}

func (s *budgetSink) Write(ctx context.Context, b *sinks.Block) error {
	if err := b.Check(); err != nil {
		return err
	}
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range b.Records {
		if want := s.next[b.Partition]; r.Offset != want && s.err == nil {
			s.err = fmt.Errorf("partition %d: offset %d delivered when %d was next", b.Partition, r.Offset, want)
		}
		s.next[b.Partition] = r.Offset + 1
	}
	s.blocks++
	s.n += int64(len(b.Records))
	if s.n == s.want {
		close(s.done)
	}
	return nil
}

func (s *budgetSink) Close() error { return nil }

// TestDecodedRecordsCountAgainstTheBudget: a backlog of Avro records whose
// JSON is ~30 times their Avro bytes, in two partitions, read with a 1 MiB
// budget. The bytes held (fetched, set aside for JSON and decoded), sampled
// as the replica runs, never pass the budget by more than one record's
// JSON, and every record comes once, in order.
func TestDecodedRecordsCountAgainstTheBudget(t *testing.T) {
	// An array of records with one int: {"a_rather_long_field_name":0} in
	// JSON, one byte in Avro.
	const schema = `{"type":"array","items":{"type":"record","name":"item","fields":[{"name":"a_rather_long_field_name","type":"int"}]}}`
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/schemas/ids/1" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		_, _ = fmt.Fprintf(w, `{"schema":%q}`, schema)
	}))
	defer reg.Close()

	cli, brokers, stop := startEtcdAndKafka("wide", 0)
	defer stop()
	const (
		perPartition = 2000
		items        = 500
		budget       = 1 << 20
		jsonLen      = items*len(`{"a_rather_long_field_name":0},`) + 1
	)
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("wide"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(16<<10),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	v := binary.AppendVarint([]byte{0, 0, 0, 0, 1}, items)
	for range items {
		v = append(v, 0)
	}
	v = append(v, 0)
	var recs []*kgo.Record
	for p := range 2 {
		for range perPartition {
			recs = append(recs, &kgo.Record{Partition: int32(p), Value: v})
		}
	}
	if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	sink := &budgetSink{want: 2 * perPartition, done: make(chan struct{}), next: map[int]int64{}}
	r, err := replica.New(replica.Config{
		Group:          "wide",
		Topics:         []string{"wide"},
		Kafka:          kafkaconf.Config{Brokers: brokers, FetchMaxWait: 100 * time.Millisecond, MaxBufferBytes: budget},
		Formats:        replica.Formats{Value: sinks.Avro, Registry: replica.SchemaRegistry{URL: reg.URL}},
		LeaseTTL:       2 * time.Second,
		RebalanceDelay: 10 * time.Millisecond,
	}, cli, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sink.r = r
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()
	// Between writes too: decoding happens before a write.
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-sink.done:
				return
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Microsecond):
				sink.sample()
			}
		}
	}()
	select {
	case <-sink.done:
	case <-time.After(90 * time.Second):
		sink.mu.Lock()
		t.Errorf("the sink got %d records of %d", sink.n, sink.want)
		sink.mu.Unlock()
	}
	cancel()
	<-sampled
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.err != nil {
		t.Error(sink.err)
	}
	st := r.Stats()
	t.Logf("%d records in %d blocks; at most %d bytes held (budget %d, a record's JSON %d); %d blocks ended early by the budget while decoding",
		st.Records, sink.blocks, sink.max, budget, jsonLen, st.DecodeBudgetStops)
	if st.Records != sink.want {
		t.Errorf("the replica wrote %d records, want %d once each", st.Records, sink.want)
	}
	// Before decoded JSON counted, this backlog held 32 MB.
	if sink.max > int64(budget+jsonLen) {
		t.Errorf("%d bytes held, fetched and decoded: more than the budget %d and one record's JSON (%d)", sink.max, budget, jsonLen)
	}
	// Blocks end early while the cursor learns the JSON's size, not all
	// along: the room for it is set aside as batches are fetched.
	if st.DecodeBudgetStops > 10 {
		t.Errorf("%d blocks ended early by the budget: the room for JSON is not set aside when fetching", st.DecodeBudgetStops)
	}
}
