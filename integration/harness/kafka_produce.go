package harness

// Producing records, plainly and in transactions.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Producer writes records to chosen partitions. The records given to one
// Produce call form as few batches as possible: one, unless they exceed 1 MB
// uncompressed or kafkaFlushEvery records.
type Producer struct {
	k  *Kafka
	cl *kgo.Client
}

// NewProducer returns a producer compressing with codec.
func (k *Kafka) NewProducer(t testing.TB, codec kgo.CompressionCodec) *Producer {
	t.Helper()
	return &Producer{k: k, cl: k.newClient(t, producerOpts(codec)...)}
}

func producerOpts(codec kgo.CompressionCodec, extra ...kgo.Opt) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(codec),
		// Records are sent on Flush only: the records of one call form
		// as few batches as possible, which tests about batches rely on.
		kgo.ManualFlushing(),
		kgo.MaxBufferedRecords(kafkaFlushEvery + 1),
		kgo.ProducerLinger(0),
	}, extra...)
}

// Produce writes records to topic/partition (their Topic and Partition
// fields are overwritten) and waits until all are acknowledged. On return
// each record's Offset is set.
func (p *Producer) Produce(t testing.TB, topic string, partition int, records ...*kgo.Record) {
	t.Helper()
	if err := produce(p.cl, topic, partition, records); err != nil {
		t.Fatalf("kafka: produce %d records to %s/%d: %v", len(records), topic, partition, err)
	}
}

func produce(cl *kgo.Client, topic string, partition int, records []*kgo.Record) error {
	ctx, cancel := opCtx()
	defer cancel()
	var (
		mu    sync.Mutex
		first error
	)
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
	promise := func(r *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if first == nil {
				first = fmt.Errorf("record at %d: %w", r.Offset, err)
			}
			mu.Unlock()
		}
	}
	for i, r := range records {
		r.Topic, r.Partition = topic, int32(partition)
		cl.Produce(ctx, r, promise)
		if i == 0 {
			// Records of a partition the client does not know yet wait
			// for metadata and join the partition's buffer when it
			// comes: if that happened during Flush, the first batch
			// would be cut short. Wait for the partition instead.
			for {
				leader, _, _ := cl.PartitionLeader(topic, int32(partition))
				if leader >= 0 {
					break
				}
				if err := failed(); err != nil {
					return err
				}
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("partition %s/%d unknown to the producer: %w", topic, partition, err)
				}
				time.Sleep(time.Millisecond)
			}
		}
		if (i+1)%kafkaFlushEvery == 0 {
			if err := cl.Flush(ctx); err != nil {
				return err
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	return failed()
}

// Produce writes records to topic/partition with the cluster's default
// compression (see Producer.Produce).
func (k *Kafka) Produce(t testing.TB, topic string, partition int, records ...*kgo.Record) {
	t.Helper()
	k.mu.Lock()
	p := k.plain
	k.mu.Unlock()
	if p == nil {
		// Made once and kept: not closed at the end of t.
		cl, err := k.dial(producerOpts(k.codec)...)
		if err != nil {
			t.Fatalf("kafka: producer: %v", err)
		}
		p = &Producer{k: k, cl: cl}
		k.mu.Lock()
		k.plain = p
		k.mu.Unlock()
	}
	p.Produce(t, topic, partition, records...)
}

// ProduceValues writes one record per value, without key, to
// topic/partition and returns their offsets.
func (k *Kafka) ProduceValues(t testing.TB, topic string, partition int, values ...string) []int64 {
	t.Helper()
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Value: []byte(v)}
	}
	k.Produce(t, topic, partition, recs...)
	offsets := make([]int64, len(recs))
	for i, r := range recs {
		offsets[i] = r.Offset
	}
	return offsets
}

// TxnProducer is a transactional producer: Begin, Produce (any number of
// times, to any partitions), then End with commit or abort.
type TxnProducer struct {
	k  *Kafka
	cl *kgo.Client
}

// NewTxnProducer returns a transactional producer with the given
// transactional id, compressing with the cluster's default codec.
func (k *Kafka) NewTxnProducer(t testing.TB, id string) *TxnProducer {
	t.Helper()
	return &TxnProducer{k: k, cl: k.newClient(t, producerOpts(k.codec, kgo.TransactionalID(id))...)}
}

// Begin starts a transaction.
func (p *TxnProducer) Begin(t testing.TB) {
	t.Helper()
	if err := p.cl.BeginTransaction(); err != nil {
		t.Fatalf("kafka: begin transaction: %v", err)
	}
}

// Produce writes records to topic/partition within the open transaction and
// waits until they are acknowledged (not yet committed).
func (p *TxnProducer) Produce(t testing.TB, topic string, partition int, records ...*kgo.Record) {
	t.Helper()
	if err := produce(p.cl, topic, partition, records); err != nil {
		t.Fatalf("kafka: produce %d transactional records to %s/%d: %v", len(records), topic, partition, err)
	}
}

// End commits (commit true) or aborts the open transaction.
func (p *TxnProducer) End(t testing.TB, commit bool) {
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	if err := p.cl.Flush(ctx); err != nil {
		t.Fatalf("kafka: end transaction: flush: %v", err)
	}
	if err := p.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("kafka: end transaction (commit %v): %v", commit, err)
	}
}

// Transact writes records to topic/partition in a transaction of their own,
// committed or aborted, with a transactional producer of the cluster.
func (k *Kafka) Transact(t testing.TB, commit bool, topic string, partition int, records ...*kgo.Record) {
	t.Helper()
	k.mu.Lock()
	p := k.txn
	k.mu.Unlock()
	if p == nil {
		// Made once and kept: not closed at the end of t.
		cl, err := k.dial(producerOpts(k.codec, kgo.TransactionalID("harness-txn"))...)
		if err != nil {
			t.Fatalf("kafka: transactional producer: %v", err)
		}
		p = &TxnProducer{k: k, cl: cl}
		k.mu.Lock()
		k.txn = p
		k.mu.Unlock()
	}
	p.Begin(t)
	p.Produce(t, topic, partition, records...)
	p.End(t, commit)
}
