package replica_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// corruptBatch encodes a v2 record batch of n records at offsets base to
// base+n-1, whose record bad claims a value longer than the record: well
// framed, its CRC valid, its content not.
func corruptBatch(base int64, n, bad int) []byte {
	var recs []byte
	for i := range n {
		var body []byte
		body = append(body, 0)                     // attributes
		body = binary.AppendVarint(body, 0)        // timestamp delta
		body = binary.AppendVarint(body, int64(i)) // offset delta
		body = binary.AppendVarint(body, -1)       // no key
		value := fmt.Appendf(nil, "v%d", base+int64(i))
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
	binary.BigEndian.PutUint64(b, uint64(base))
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

// etcdAndKfake starts an etcd server and a kfake cluster holding topic of
// parts partitions, both stopped with the test.
func etcdAndKfake(t *testing.T, topic string, parts int) (*clientv3.Client, *kfake.Cluster) {
	t.Helper()
	cli, _, stop := startEtcdAndKafka("unused", 0)
	t.Cleanup(stop)
	cluster, err := kfake.NewCluster(kfake.SeedTopics(int32(parts), topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	return cli, cluster
}

// A record the broker sends corrupt fails its partition's poll, whether it
// is decoded where the answer comes in (the first block) or by the poll
// itself (once a block took several answers: kafka.Cursor.DecodeOnRead).
// Either way the poll says why, the batch is given back and read again from
// where the block stood, and every record reaches the sink once, with its
// value. Without the poll's seek back, the records of the second corrupt
// answer's range never came.
func TestCorruptRecordReadAgain(t *testing.T) {
	cli, cluster := etcdAndKfake(t, "bad", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("bad"),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(from, to int) {
		for i := from; i < to; i++ { // a batch each
			if err := prod.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(0, 10)

	// Once armed at lo, the first fetch at an offset from lo to lo+5 gets a
	// batch of 5 from there whose third record is corrupt.
	var armed atomic.Int64 // lo+1; 0: not armed
	armed.Store(1)
	cluster.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		fr := req.(*kmsg.FetchRequest)
		lo := armed.Load() - 1
		if lo < 0 || len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
			return nil, nil, false
		}
		at := fr.Topics[0].Partitions[0].FetchOffset
		if at < lo || at > lo+5 || !armed.CompareAndSwap(lo+1, 0) {
			return nil, nil, false
		}
		resp := fr.ResponseKind().(*kmsg.FetchResponse)
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = fr.Topics[0].Topic, fr.Topics[0].TopicID
		sp := kmsg.NewFetchResponseTopicPartition()
		sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = lo+10, lo+10, 0
		sp.RecordBatches = corruptBatch(at, 5, 2)
		st.Partitions = append(st.Partitions, sp)
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})

	core, logs := observer.New(zapcore.WarnLevel)
	sink := &offsetSink{values: map[int64][]string{}}
	r, err := replica.New(replica.Config{
		Group:  "bad",
		Topics: []string{"bad"},
		// An answer of one batch: the block after the first corrupt
		// answer takes ten, and the partition decodes on read from then.
		// Full fetches, each listing the partition at its offset, for
		// the armed answer to recognise.
		Kafka: kafkaconf.Config{Brokers: cluster.ListenAddrs(), FetchMaxWait: 50 * time.Millisecond, FetchMaxPartitionBytes: 1,
			NoFetchSessions: true},
		LeaseTTL:       2 * time.Second,
		RebalanceDelay: 10 * time.Millisecond,
	}, cli, sink, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stopRun := runReplica(ctx, r)
	awaitSink := func(n int64) {
		t.Helper()
		for !sink.complete(n) || r.Stats().Records < n {
			select {
			case <-ctx.Done():
				t.Fatalf("waiting for offsets 0 to %d: the sink holds %v", n-1, sink.values)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	awaitSink(10)
	if armed.Load() != 0 {
		t.Fatal("the corrupt answer at 0 was never asked for: the test shows nothing")
	}
	armed.Store(11)
	produce(10, 20)
	awaitSink(20)
	if err := stopRun(); err != nil {
		t.Fatal(err)
	}
	if armed.Load() != 0 {
		t.Fatal("the corrupt answer from 10 was never asked for: the test shows nothing")
	}
	for o := range int64(20) {
		if got, want := sink.values[o], fmt.Sprintf("v%d", o); len(got) != 1 || got[0] != want {
			t.Errorf("offset %d written %q, want %q once", o, got, want)
		}
	}
	// Where each was found: by the cursor's decoder, then by the poll.
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`^fetch bad/0 at 0: record batch at 0: corrupt record 2: invalid value`),
		regexp.MustCompile(`^decode bad/0 \[1[0-5], 1[5-9]\): record batch at 1[0-5]: corrupt record 2: invalid value`),
	} {
		said := false
		for _, e := range logs.All() {
			said = said || want.MatchString(fmt.Sprint(e.ContextMap()["error"]))
		}
		if !said {
			t.Errorf("no warning matched %s: %v", want, logs.All())
		}
	}
}
