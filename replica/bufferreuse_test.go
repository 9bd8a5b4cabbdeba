package replica_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// exactSink checks every record it is given against what was produced at
// its offset, byte for byte, while the block is written; and that each
// partition's records come in order, going back once only to where the
// test reset the partition.
type exactSink struct {
	want map[int][]*kgo.Record // per partition, the committed records in order

	mu      sync.Mutex
	pos     map[int]int // per partition, the index in want of the next record
	resetTo map[int]int // per partition, the index a reset sends it back to
	jumped  map[int]bool
	seen    map[int]int // records written, per partition
	err     error
}

func (s *exactSink) Write(ctx context.Context, b *sinks.Block) error {
	if err := b.Check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	want := s.want[b.Partition]
	for _, r := range b.Records {
		i := s.pos[b.Partition]
		if to, ok := s.resetTo[b.Partition]; ok && !s.jumped[b.Partition] && r.Offset == want[to].Offset && i != to {
			i, s.jumped[b.Partition] = to, true // the reset took effect
		}
		if i >= len(want) || r.Offset != want[i].Offset {
			s.fail(fmt.Errorf("partition %d: offset %d written where offset %d was next", b.Partition, r.Offset, offsetAt(want, i)))
			return nil
		}
		w := want[i]
		if !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) || len(r.Headers) != len(w.Headers) {
			s.fail(fmt.Errorf("partition %d offset %d: key %q value %.40q (%d headers), want key %q value %.40q (%d)",
				b.Partition, r.Offset, r.Key, r.Value, len(r.Headers), w.Key, w.Value, len(w.Headers)))
			return nil
		}
		for h := range r.Headers {
			if r.Headers[h].Key != w.Headers[h].Key || !bytes.Equal(r.Headers[h].Value, w.Headers[h].Value) {
				s.fail(fmt.Errorf("partition %d offset %d: header %d %q=%q, want %q=%q",
					b.Partition, r.Offset, h, r.Headers[h].Key, r.Headers[h].Value, w.Headers[h].Key, w.Headers[h].Value))
				return nil
			}
		}
		s.pos[b.Partition] = i + 1
		s.seen[b.Partition]++
	}
	return nil
}

func offsetAt(want []*kgo.Record, i int) int64 {
	if i < len(want) {
		return want[i].Offset
	}
	return -1
}

func (s *exactSink) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

func (s *exactSink) Close() error { return nil }

func (s *exactSink) state() (pos, seen map[int]int, jumped map[int]bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pos, seen, jumped = map[int]int{}, map[int]int{}, map[int]bool{}
	for k, v := range s.pos {
		pos[k] = v
	}
	for k, v := range s.seen {
		seen[k] = v
	}
	for k, v := range s.jumped {
		jumped[k] = v
	}
	return pos, seen, jumped, s.err
}

// TestBuffersReusedOnlyAfterTheirBlock: fetch buffers and records slices
// are given back and reused once their block is finished. Two partitions
// of records of many sizes, with headers, in uncompressed batches (whose
// records alias the fetched bytes) and compressed ones, and transactions of
// which every third is aborted, are read in small fetches and small blocks,
// so that buffers go round many times, and one partition is reset back
// while it is read. Every record written matches, byte for byte, what was
// produced at its offset, in order, each once but for the reset's replay.
// Poisoned, a buffer given back is overwritten instead of reused, so a
// record that still aliases it shows garbage at once; reused, it would
// show another fetch's bytes.
//
// Blocks of 37 rows mostly hold one answer and take its records slice;
// blocks of 400 hold several, and from the second answer on the replica
// decodes the records straight into the block's slice, kept for the next
// block (kafka.Cursor.DecodeOnRead).
func TestBuffersReusedOnlyAfterTheirBlock(t *testing.T) {
	for _, rows := range []int{37, 400} {
		for _, poison := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/rows=%d", map[bool]string{true: "poisoned", false: "reused"}[poison], rows), func(t *testing.T) {
				kafka.PoisonBuffers(poison)
				defer kafka.PoisonBuffers(false)
				testBufferReuse(t, rows)
			})
		}
	}
}

func testBufferReuse(t *testing.T, blockRows int) {
	cli, cluster := etcdAndKfake(t, "reuse", 2)
	// kfake leaves out the aborted transactions of the last partition of
	// a response that reaches the request's MaxBytes (it stops before
	// listing them), which Kafka does not: with MaxBytes doubled no
	// response reaches it, and what this test reads is what Kafka would
	// send.
	cluster.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req.(*kmsg.FetchRequest).MaxBytes *= 2
		return nil, nil, false
	})
	brokers := cluster.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	plain, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("reuse"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	txn, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("reuse"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("reuse-txn"),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()

	want := map[int][]*kgo.Record{}
	seq := 0
	record := func(p int) *kgo.Record {
		seq++
		return &kgo.Record{
			Partition: int32(p),
			Key:       fmt.Appendf(nil, "k%d-%d", p, seq),
			Value:     fmt.Appendf(nil, "p%d-%06d-%s", p, seq, strings.Repeat(string(rune('a'+seq%26)), seq%700)),
			Headers:   []kgo.RecordHeader{{Key: "seq", Value: fmt.Appendf(nil, "%d", seq)}},
		}
	}
	for round := range 30 {
		for p := range 2 {
			recs := make([]*kgo.Record, 20)
			for i := range recs {
				recs[i] = record(p)
			}
			if err := plain.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			want[p] = append(want[p], recs...)
		}
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var inTxn []*kgo.Record
		for p := range 2 {
			for range 15 {
				inTxn = append(inTxn, record(p))
			}
		}
		if err := txn.ProduceSync(ctx, inTxn...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		commit := round%3 != 2
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
		if commit {
			for _, r := range inTxn {
				want[int(r.Partition)] = append(want[int(r.Partition)], r)
			}
		}
	}

	sink := &exactSink{want: want, pos: map[int]int{}, resetTo: map[int]int{}, jumped: map[int]bool{}, seen: map[int]int{}}
	r, err := replica.New(replica.Config{
		Group:  "reuse",
		Topics: []string{"reuse"},
		// Small fetches and blocks: buffers are given back, and taken
		// again, many times over.
		Kafka:          kafkaconf.Config{Brokers: brokers, FetchMaxWait: 50 * time.Millisecond, FetchMaxPartitionBytes: 8 << 10},
		MaxBlockRows:   blockRows,
		LeaseTTL:       2 * time.Second,
		RebalanceDelay: 10 * time.Millisecond,
	}, cli, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stopRun := runReplica(ctx, r)

	await := func(what string, cond func(pos, seen map[int]int, jumped map[int]bool) bool) {
		t.Helper()
		for {
			pos, seen, jumped, err := sink.state()
			if err != nil {
				t.Fatal(err)
			}
			if cond(pos, seen, jumped) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("waiting for %s: written %v, positions %v of %d and %d", what, seen, pos, len(want[0]), len(want[1]))
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	// A live reset of partition 0 back to a quarter of its records, once
	// it is half way.
	await("partition 0 half read", func(pos, _ map[int]int, _ map[int]bool) bool { return pos[0] >= len(want[0])/2 })
	to := len(want[0]) / 4
	sink.mu.Lock()
	sink.resetTo[0] = to
	sink.mu.Unlock()
	op, err := coordinator.New(cli, "reuse")
	if err != nil {
		t.Fatal(err)
	}
	p0 := sinks.Partition{Topic: "reuse", Partition: 0}
	snap, err := op.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.ResetOffsets(ctx, p0, want[0][to].Offset, snap.Offsets[p0]); err != nil {
		t.Fatal(err)
	}
	await("every record, and partition 0 again from the reset", func(pos, _ map[int]int, jumped map[int]bool) bool {
		return jumped[0] && pos[0] == len(want[0]) && pos[1] == len(want[1])
	})
	if err := stopRun(); err != nil {
		t.Fatal(err)
	}
	_, seen, _, err := sink.state()
	if err != nil {
		t.Fatal(err)
	}
	if seen[1] != len(want[1]) || seen[0] < len(want[0]) {
		t.Fatalf("written %v records, want %d of partition 1 once and at least %d of partition 0", seen, len(want[1]), len(want[0]))
	}
	t.Logf("written %v (partition 0 again from offset %d); %d blocks", seen, want[0][to].Offset, r.Stats().Blocks)
}
