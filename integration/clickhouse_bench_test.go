package integration_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	chsink "github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

// chBenchTable is the benchmark's table, for the sink's columns mode: the
// fields of its JSON records and the records' own columns.
const chBenchTable = `(id UInt64, name String, amount Int64, kafka_topic String, kafka_partition Int32, kafka_offset Int64)
	ENGINE = MergeTree ORDER BY (kafka_partition, kafka_offset)
	SETTINGS non_replicated_deduplication_window = 1000`

// BenchmarkClickHouseReplicaVsBatch loads 500,000 small JSON records (8
// partitions, values of about 60 bytes, keys of 11) into the Kafka that
// OKBENCH_KAFKA names (kfake, the default, in this process; apache1 or
// apache3: Apache Kafka of 1 or 3 nodes, see
// BenchmarkScaleGroupVsFranz512) once, then measures in the same run,
// each into an empty table:
//   - replica: a replica delivering them from Kafka through the ClickHouse
//     sink (one INSERT per block with its deduplication token, an intent
//     and an etcd commit per block), in columns mode (JSON decoded into a
//     table of chBenchTable's shape by field name), and in raw mode (the
//     sink's own table, records whole);
//   - batch: clickhouse-go's own batch insert of the same rows, built
//     before the clock starts, in the blocks the replica wrote (the same
//     partitions, ranges and sizes), one PrepareBatch, Append per row and
//     Send per block, one after another from one connection, into a table
//     of the same shape and settings.
//
// Each mode runs with the replica's default blocks, and with blocks of at
// most 8,192 rows (MaxBlockRows; the batch side then has the same).
//
// Every table is checked to hold every row once, outside the timing. It
// reports rows/s of each side of each mode, replica/batch per mode (the
// goal is 0.8 or more), the replica's rows per block, the CPU seconds per
// run of this process (the replica with etcd and, on kfake, the broker,
// which run in-process, or the batch side's client) and of the ClickHouse
// engine, on Apache Kafka the brokers' CPU seconds per replica run
// (<mode>-replica-broker-cpu-s, the nodes' JVMs summed; the batch side
// reads no Kafka), and, for scale, the rows/s of the same replica
// delivering to discard: (reading Kafka, building blocks, committing to
// etcd: what the replica costs without a sink).
//
//	go test -run '^$' -bench ClickHouseReplicaVsBatch -benchtime 3x ./integration/
//	OKBENCH_KAFKA=apache3 go test -run '^$' -bench ClickHouseReplicaVsBatch -benchtime 3x ./integration/
func BenchmarkClickHouseReplicaVsBatch(b *testing.B) {
	const parts, perPart = 8, 62_500
	const total = parts * perPart
	ch := harness.StartClickHouse(b)
	etcd := harness.StartEtcd(b, 1)
	k := startBenchKafka(b, parts, "bench")
	at := time.Now().UTC().Truncate(time.Millisecond)
	// Each record's row in either mode, as the sink would build it: made
	// for the batch side just before its run, so that the replica's runs
	// (in this process, its garbage collector marking what is live) do
	// not carry the batch side's million rows.
	fields := func(p, i int) (uint64, string, int64, string, string) {
		id, name, amount := uint64(p*perPart+i), fmt.Sprintf("customer-%07d", i), int64(i%1000)
		return id, name, amount, fmt.Sprintf("key-%07d", i), fmt.Sprintf(`{"id":%d,"name":%q,"amount":%d}`, id, name, amount)
	}
	colRow := func(p, i int) []any {
		id, name, amount, _, _ := fields(p, i)
		return []any{id, name, amount, "bench", int32(p), int64(i)}
	}
	rawRow := func(p, i int) []any {
		_, _, _, key, value := fields(p, i)
		return []any{"bench", int32(p), int64(i), int64(0), &key, at, &value, []string{}, []*string{}}
	}
	for p := range parts {
		recs := make([]*kgo.Record, perPart)
		for i := range recs {
			_, _, _, key, value := fields(p, i)
			recs[i] = &kgo.Record{Key: []byte(key), Value: []byte(value), Timestamp: at}
		}
		k.Produce(b, "bench", p, recs...)
	}
	ctx := context.Background()
	// The batch side's connection compresses as the sink's does by default
	// (lz4), so that the two send the same bytes.
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{ch.NativeAddr()}, Auth: clickhouse.Auth{Database: ch.Database()},
		Compression: &clickhouse.Compression{Method: clickhouse.CompressionLZ4}})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	check := func(table string) {
		b.Helper()
		got := ch.Query(b, fmt.Sprintf(`SELECT count(), uniqExact(kafka_partition, kafka_offset) FROM %s`, table))
		if want := []any{uint64(total), uint64(total)}; fmt.Sprint(got[0]) != fmt.Sprint(want) {
			b.Fatalf("table %s: rows and distinct offsets %v; want %v", table, got[0], want)
		}
	}

	type variant struct {
		name, mode string
		row        func(p, i int) []any
		columns    string
		// create makes the replica's table, or leaves it to the sink.
		create             func(table string)
		config             func(*replica.Config)
		batchTime, repTime time.Duration
		// CPU of this process (the replica, kfake and etcd, or the batch
		// side's client) and of the ClickHouse engine, per side.
		batchCPU, batchCH, repCPU, repCH time.Duration
		repBroker                        time.Duration // the brokers' CPU
		blocks                           int64
	}
	createColumns := func(table string) { ch.Exec(b, fmt.Sprintf(`CREATE TABLE %s %s`, table, chBenchTable)) }
	const colColumns = "id, name, amount, kafka_topic, kafka_partition, kafka_offset"
	const rawColumns = "kafka_topic, kafka_partition, kafka_offset, kafka_generation, kafka_key, kafka_timestamp, value, header_keys, header_values"
	// By default a block takes a partition's whole backlog here (62,500
	// rows), so nothing is written before every partition is read; with
	// blocks of 8,192 rows the writes overlap the reads.
	defaults := func(*replica.Config) {}
	small := func(c *replica.Config) { c.MaxBlockRows = 8192 }
	modes := []*variant{
		{name: "columns", mode: "columns", row: colRow, columns: colColumns, create: createColumns, config: defaults},
		{name: "raw", mode: "raw", row: rawRow, columns: rawColumns, create: func(string) {}, config: defaults},
		{name: "columns-8k", mode: "columns", row: colRow, columns: colColumns, create: createColumns, config: small},
		{name: "raw-8k", mode: "raw", row: rawRow, columns: rawColumns, create: func(string) {}, config: small},
	}
	var discardTime, discardBroker time.Duration
	round := 0
	for b.Loop() {
		round++
		// The floor: the same replica delivering to discard:, which is
		// reading kfake, building blocks and committing to etcd.
		broker0 := k.brokerCPU(b)
		discardTime += drainTimed(b, etcd.Client(b), k.Brokers(), fmt.Sprintf("discard_%d", round), discard.New(),
			func(s replica.Stats) bool { return s.Records >= total })
		discardBroker += k.brokerCPU(b) - broker0
		for _, m := range modes {
			name := fmt.Sprintf("rep_%s_%d", strings.ReplaceAll(m.name, "-", "_"), round)
			m.create(name)
			inner, err := chsink.New(ctx, fmt.Sprintf("clickhouse://%s/%s?table=%s&mode=%s&dead_letter_table=dead_%s",
				ch.NativeAddr(), ch.Database(), name, m.mode, name), chsink.WithGroup(name))
			if err != nil {
				b.Fatal(err)
			}
			sink := &rangeRecorder{inner: inner}
			runtime.GC() // what the last batch side left is not the replica's to collect
			cpu0, ch0, broker0 := processCPU(b), chCPU(b, ch), k.brokerCPU(b)
			// A new group starts from the earliest offset. A Write that
			// returned has its rows in ClickHouse.
			m.repTime += drainTimed(b, etcd.Client(b), k.Brokers(), name, sink, func(s replica.Stats) bool { return s.Records >= total }, m.config)
			m.repCPU += processCPU(b) - cpu0
			m.repBroker += k.brokerCPU(b) - broker0
			m.repCH += chCPU(b, ch) - ch0
			_ = sink.Close()
			check(name)
			ranges := sink.written()
			m.blocks += int64(len(ranges))

			table := "batch" + strings.TrimPrefix(name, "rep")
			ch.Exec(b, fmt.Sprintf(`CREATE TABLE %s AS %s`, table, name))
			rows := make([][][]any, len(ranges))
			for j, r := range ranges {
				for i := r.From; i < r.Next; i++ {
					rows[j] = append(rows[j], m.row(r.Partition, int(i)))
				}
			}
			runtime.GC()
			cpu0, ch0 = processCPU(b), chCPU(b, ch)
			start := time.Now()
			for j, r := range ranges {
				batch, err := conn.PrepareBatch(ctx, fmt.Sprintf(`INSERT INTO %s (%s)`, table, m.columns))
				if err != nil {
					b.Fatal(err)
				}
				for _, row := range rows[j] {
					if err := batch.Append(row...); err != nil {
						b.Fatal(err)
					}
				}
				if err := batch.Send(); err != nil {
					b.Fatalf("batch of partition %d [%d, %d): %v", r.Partition, r.From, r.Next, err)
				}
			}
			m.batchTime += time.Since(start)
			m.batchCPU += processCPU(b) - cpu0
			m.batchCH += chCPU(b, ch) - ch0
			check(table)
		}
	}
	b.ReportMetric(float64(total*round)/discardTime.Seconds(), "discard-replica-rows/s")
	if k.real() {
		b.ReportMetric(discardBroker.Seconds()/float64(round), "discard-replica-broker-cpu-s")
	}
	for _, m := range modes {
		bt := float64(total*round) / m.batchTime.Seconds()
		rep := float64(total*round) / m.repTime.Seconds()
		b.ReportMetric(bt, m.name+"-batch-rows/s")
		b.ReportMetric(rep, m.name+"-replica-rows/s")
		b.ReportMetric(rep/bt, m.name+"-ratio")
		b.ReportMetric(float64(total*round)/float64(m.blocks), m.name+"-rows/block")
		n := float64(round)
		b.ReportMetric(m.repCPU.Seconds()/n, m.name+"-replica-cpu-s")
		b.ReportMetric(m.repCH.Seconds()/n, m.name+"-replica-ch-cpu-s")
		if k.real() {
			b.ReportMetric(m.repBroker.Seconds()/n, m.name+"-replica-broker-cpu-s")
		}
		b.ReportMetric(m.batchCPU.Seconds()/n, m.name+"-batch-cpu-s")
		b.ReportMetric(m.batchCH.Seconds()/n, m.name+"-batch-ch-cpu-s")
	}
}

// chCPU is the CPU time the ClickHouse engine has used.
func chCPU(b *testing.B, ch *harness.ClickHouse) time.Duration {
	d, err := harness.ProcCPU(ch.PID())
	if err != nil {
		b.Fatal(err)
	}
	return d
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
