package replica_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// corruptBatch encodes a v2 record batch of n records at offsets 0 to n-1,
// whose record bad claims a value longer than the record: well framed, its
// CRC valid, its content not.
func corruptBatch(n, bad int) []byte {
	var recs []byte
	for i := range n {
		var body []byte
		body = append(body, 0)                     // attributes
		body = binary.AppendVarint(body, 0)        // timestamp delta
		body = binary.AppendVarint(body, int64(i)) // offset delta
		body = binary.AppendVarint(body, -1)       // no key
		value := fmt.Appendf(nil, "v%d", i)
		vlen := int64(len(value))
		if i == bad {
			vlen = 60
		}
		body = binary.AppendVarint(body, vlen)
		body = append(body, value...)
		body = binary.AppendVarint(body, 0) // no headers
		recs = binary.AppendVarint(recs, int64(len(body)))
		recs = append(recs, body...)
	}
	b := make([]byte, 61, 61+len(recs))
	binary.BigEndian.PutUint32(b[8:], uint32(61-12+len(recs))) // batch length
	b[16] = 2                                                  // magic
	binary.BigEndian.PutUint32(b[23:], uint32(n-1))            // last offset delta
	binary.BigEndian.PutUint64(b[43:], ^uint64(0))             // producer id -1
	binary.BigEndian.PutUint16(b[51:], ^uint16(0))             // producer epoch -1
	binary.BigEndian.PutUint32(b[53:], ^uint32(0))             // base sequence -1
	binary.BigEndian.PutUint32(b[57:], uint32(n))              // record count
	b = append(b, recs...)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// offsetSink keeps the values written at each offset of partition 0.
type offsetSink struct {
	mu     sync.Mutex
	values map[int64][]string
}

func (s *offsetSink) Write(_ context.Context, b *sinks.Block) error {
	if err := b.Check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range b.Records {
		s.values[r.Offset] = append(s.values[r.Offset], string(r.Value))
	}
	return nil
}

func (s *offsetSink) Close() error { return nil }

func (s *offsetSink) complete(n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for o := range n {
		if len(s.values[o]) == 0 {
			return false
		}
	}
	return true
}

// A record the broker sends corrupt is found where the replica decodes it,
// into its block: the poll fails and says why, the batch is given back and
// read again from where the block stood, and every record reaches the sink
// once, with its value. Without the seek back, the replica went on after
// the corrupt answer and offsets 0 to 4 never came.
func TestCorruptRecordReadAgain(t *testing.T) {
	cli, _, stop := startEtcdAndKafka("unused", 0)
	defer stop()
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "bad"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	values := make([]string, 10)
	for i := range values {
		values[i] = fmt.Sprintf("v%d", i)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("bad"),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for _, v := range values {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	var served atomic.Bool
	cluster.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		fr := req.(*kmsg.FetchRequest)
		if served.Load() || len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 || fr.Topics[0].Partitions[0].FetchOffset != 0 {
			return nil, nil, false
		}
		served.Store(true)
		resp := fr.ResponseKind().(*kmsg.FetchResponse)
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = fr.Topics[0].Topic, fr.Topics[0].TopicID
		sp := kmsg.NewFetchResponseTopicPartition()
		sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = 10, 10, 0
		sp.RecordBatches = corruptBatch(5, 2)
		st.Partitions = append(st.Partitions, sp)
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})

	core, logs := observer.New(zapcore.WarnLevel)
	sink := &offsetSink{values: map[int64][]string{}}
	r, err := replica.New(replica.Config{
		Group:          "bad",
		Topics:         []string{"bad"},
		Kafka:          replica.Kafka{Brokers: cluster.ListenAddrs(), FetchMaxWait: 50 * time.Millisecond},
		LeaseTTL:       2 * time.Second,
		RebalanceDelay: 10 * time.Millisecond,
	}, cli, sink, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stopRun := runReplica(ctx, r)
	for !sink.complete(10) {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for offsets 0 to 9: the sink holds %v", sink.values)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := stopRun(); err != nil {
		t.Fatal(err)
	}
	if !served.Load() {
		t.Fatal("the corrupt answer was never asked for: the test shows nothing")
	}
	for o, v := range values {
		if got := sink.values[int64(o)]; len(got) != 1 || got[0] != v {
			t.Errorf("offset %d written %q, want %q once", o, got, v)
		}
	}
	said := false
	for _, e := range logs.All() {
		if strings.Contains(fmt.Sprint(e.ContextMap()["error"]), "corrupt record 2: invalid value") {
			said = true
		}
	}
	if !said {
		t.Errorf("no warning named the corrupt record: %v", logs.All())
	}
}
