package integration_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	chsink "github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
)

// chBenchTable is the benchmark's table, for the sink's columns mode: the
// fields of its JSON records and the records' own columns.
const chBenchTable = `(id UInt64, name String, amount Int64, kafka_topic String, kafka_partition Int32, kafka_offset Int64)
	ENGINE = MergeTree ORDER BY (kafka_partition, kafka_offset)
	SETTINGS non_replicated_deduplication_window = 1000`

// BenchmarkClickHouseReplicaVsBatch loads 500,000 small JSON records (8
// partitions, about 60 bytes each) into kfake once, then measures in the
// same run, each into an empty table of chBenchTable's shape:
//   - replica: a replica delivering them from Kafka through the ClickHouse
//     sink in columns mode (JSON decoded by field name, one INSERT per
//     block with its deduplication token, an intent and an etcd commit
//     per block);
//   - batch: clickhouse-go's own batch insert of the same rows, decoded
//     before the clock starts, in the blocks the replica wrote (the same
//     partitions, ranges and sizes), one PrepareBatch, Append per row and
//     Send per block, one after another from one connection.
//
// Both tables are checked to hold every row once, outside the timing. It
// reports rows/s of each, replica/batch (the goal is 0.8 or more), and
// the replica's rows per block.
//
//	go test -run '^$' -bench ClickHouseReplicaVsBatch -benchtime 3x ./integration/
func BenchmarkClickHouseReplicaVsBatch(b *testing.B) {
	const parts, perPart = 8, 62_500
	const total = parts * perPart
	ch := harness.StartClickHouse(b)
	etcd := harness.StartEtcd(b, 1)
	k := harness.StartKafka(b, harness.SeedTopics(parts, "bench"))
	type row struct {
		id     uint64
		name   string
		amount int64
	}
	rows := make([][]row, parts)
	for p := range parts {
		recs := make([]*kgo.Record, perPart)
		rows[p] = make([]row, perPart)
		for i := range recs {
			r := row{id: uint64(p*perPart + i), name: fmt.Sprintf("customer-%07d", i), amount: int64(i % 1000)}
			rows[p][i] = r
			recs[i] = &kgo.Record{Value: fmt.Appendf(nil, `{"id":%d,"name":%q,"amount":%d}`, r.id, r.name, r.amount)}
		}
		k.Produce(b, "bench", p, recs...)
	}
	ctx := context.Background()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{ch.NativeAddr()}, Auth: clickhouse.Auth{Database: ch.Database()}})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	check := func(table string) {
		b.Helper()
		got := ch.Query(b, fmt.Sprintf(`SELECT count(), uniqExact(kafka_partition, kafka_offset), uniqExact(id) FROM %s`, table))
		want := []any{uint64(total), uint64(total), uint64(total)}
		if fmt.Sprint(got[0]) != fmt.Sprint(want) {
			b.Fatalf("table %s: rows, distinct offsets, distinct ids %v; want %v", table, got[0], want)
		}
	}

	var batchTime, replicaTime time.Duration
	var blocks int64
	round := 0
	for b.Loop() {
		round++
		name := fmt.Sprintf("rep_%d", round)
		ch.Exec(b, fmt.Sprintf(`CREATE TABLE %s %s`, name, chBenchTable))
		inner, err := chsink.New(ctx, fmt.Sprintf("clickhouse://%s/%s?table=%s", ch.NativeAddr(), ch.Database(), name))
		if err != nil {
			b.Fatal(err)
		}
		sink := &rangeRecorder{inner: inner}
		// A new group starts from the earliest offset. A Write that
		// returned has its rows in ClickHouse.
		replicaTime += drainTimed(b, etcd.Client(b), k.Brokers(), name, sink, func(s replica.Stats) bool { return s.Records >= total })
		_ = sink.Close()
		check(name)
		ranges := sink.written()
		blocks += int64(len(ranges))

		table := fmt.Sprintf("batch_%d", round)
		ch.Exec(b, fmt.Sprintf(`CREATE TABLE %s %s`, table, chBenchTable))
		start := time.Now()
		for _, r := range ranges {
			batch, err := conn.PrepareBatch(ctx, fmt.Sprintf(`INSERT INTO %s (id, name, amount, kafka_topic, kafka_partition, kafka_offset)`, table))
			if err != nil {
				b.Fatal(err)
			}
			for off := r.From; off < r.Next; off++ {
				v := rows[r.Partition][off]
				if err := batch.Append(v.id, v.name, v.amount, "bench", int32(r.Partition), off); err != nil {
					b.Fatal(err)
				}
			}
			if err := batch.Send(); err != nil {
				b.Fatalf("batch of partition %d [%d, %d): %v", r.Partition, r.From, r.Next, err)
			}
		}
		batchTime += time.Since(start)
		check(table)
	}
	bt := float64(total*round) / batchTime.Seconds()
	rep := float64(total*round) / replicaTime.Seconds()
	b.ReportMetric(bt, "batch-rows/s")
	b.ReportMetric(rep, "replica-rows/s")
	b.ReportMetric(rep/bt, "ratio")
	b.ReportMetric(float64(total*round)/float64(blocks), "rows/block")
}

// rangeRecorder wraps a sink and records the range of every block it
// wrote. It keeps the inner sink's batching (WriteBlocks through
// sinks.WriteBlocks) and its side upgrades (Unwrap).
type rangeRecorder struct {
	inner sinks.Sink

	mu     sync.Mutex
	ranges []blockRange
}

func (r *rangeRecorder) record(b *sinks.Block) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ranges = append(r.ranges, blockRange{Partition: b.Partition, From: b.From, Next: b.Next, Rows: len(b.Records), Epoch: b.Epoch})
}

func (r *rangeRecorder) Write(ctx context.Context, b *sinks.Block) error {
	if err := r.inner.Write(ctx, b); err != nil {
		return err
	}
	r.record(b)
	return nil
}

func (r *rangeRecorder) WriteBlocks(ctx context.Context, bs []*sinks.Block) []error {
	errs := sinks.WriteBlocks(ctx, r.inner, bs)
	for i, b := range bs {
		if errs == nil || errs[i] == nil {
			r.record(b)
		}
	}
	return errs
}

func (r *rangeRecorder) Close() error       { return r.inner.Close() }
func (r *rangeRecorder) Unwrap() sinks.Sink { return r.inner }

// written is the ranges of the blocks written, in the order written.
func (r *rangeRecorder) written() []blockRange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]blockRange(nil), r.ranges...)
}
