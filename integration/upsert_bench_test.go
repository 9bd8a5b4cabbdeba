package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
)

// upsertBatch is how many records the plain upsert applies per statement.
const upsertBatch = 1000

// BenchmarkPostgresUpsertVsInsertOnConflict loads a compacted topic's
// stream into the Kafka that OKBENCH_KAFKA names (kfake, the default, in
// this process; apache1 or apache3: Apache Kafka of 1 or 3 nodes, see
// BenchmarkScaleGroupVsFranz512) once (keyedRecords: 200,000 updates over 20,000 keys,
// one in ten a tombstone, values of about 100 bytes, 8 partitions by the
// key's hash), then measures in the same run, each from an empty table of
// kvTable's shape:
//   - plain: one pgx connection applies the records in the order produced,
//     in batches of 1,000; within a batch the last record of each key wins
//     (one INSERT cannot affect a row twice), the live ones go in with one
//     INSERT ... SELECT FROM unnest(...) ON CONFLICT (id) DO UPDATE, the
//     tombstones' keys are deleted with one DELETE, both in one implicit
//     transaction (a pgx batch, one round trip);
//   - replica: a replica delivering them from Kafka through the postgres
//     sink in upsert mode: one transaction per round of blocks with the
//     offsets rows, an etcd commit per block. By default a block takes
//     what a partition's backlog holds, up to 65,536 records, and merges
//     it by key: most updates are superseded before they reach PostgreSQL.
//   - small-blocks: the same with blocks of about the plain side's batches
//     (max-block-rows 1 and fetches of 1 byte a partition: a block is one
//     produced record batch, about 1,000 records),
//     which is the sink's cost per row with the plain side's merging.
//
// Every table must end as lastValues says (checked outside the timing). It
// reports rows/s (records applied) of each, each replica's ratio to plain,
// the etcd write transactions of a replica run, its rows per block, and
// this process's CPU seconds in each, the replica's including etcd's and,
// on kfake, the broker's, which run in-process (PostgreSQL's are not
// counted); on Apache Kafka also the brokers' CPU seconds in each replica
// run (<variant>broker-cpu-s, the nodes' JVMs summed). -short: 20,000
// updates over 2,000 keys.
//
//	go test -run '^$' -bench PostgresUpsertVsInsertOnConflict -benchtime 1x ./integration/
//	OKBENCH_KAFKA=apache3 go test -run '^$' -bench PostgresUpsertVsInsertOnConflict -benchtime 1x ./integration/
func BenchmarkPostgresUpsertVsInsertOnConflict(b *testing.B) {
	const parts = 8
	updates, keys := 200_000, 20_000
	if testing.Short() {
		updates, keys = 20_000, 2_000
	}
	pg := harness.StartPostgres(b)
	etcd := harness.StartEtcd(b, 1)
	k := startBenchKafka(b, parts, "bench")
	recs := keyedRecords(rand.New(rand.NewPCG(12, 12)), "bench", updates, keys, 70)
	// Chunks of 8,000, each flushed whole: record batches of about 1,000
	// records a partition.
	const chunk = 8000
	cl := keyedProducer(b, k.Brokers(), kgo.ManualFlushing(), kgo.MaxBufferedRecords(chunk))
	for i := 0; i < len(recs); i += chunk {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var failed atomic.Pointer[error]
		for _, r := range recs[i:min(i+chunk, len(recs))] {
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			})
		}
		err := cl.Flush(ctx)
		cancel()
		if p := failed.Load(); p != nil {
			err = *p
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	want, _ := lastValues(b, recs)

	// The plain side's input, decoded before the clock starts, as the
	// replica's records are in Kafka before its clock starts.
	type op struct {
		id  int64
		v   string
		del bool
	}
	ops := make([]op, len(recs))
	for i, r := range recs {
		ops[i] = op{id: keyID(b, string(r.Key)), del: r.Value == nil}
		if r.Value != nil {
			var v struct{ V string }
			if err := json.Unmarshal(r.Value, &v); err != nil {
				b.Fatal(err)
			}
			ops[i].v = v.V
		}
	}
	ctx := context.Background()

	// The replica as configured by default, which merges what it finds
	// of a partition's backlog into blocks of up to 65,536 records; and
	// with blocks of about the plain side's batches: a block ends after
	// each fetch, and a fetch of 1 byte a partition returns one whole
	// record batch (a broker always returns the first), one produced batch
	// of about 1,000 records.
	variants := []*struct {
		name, metric string
		config       func(*replica.Config)
		runs         benchRuns
		broker       time.Duration
	}{
		{name: "up", metric: "replica-", config: func(*replica.Config) {}},
		{name: "up_small", metric: "small-blocks-", config: func(c *replica.Config) {
			c.MaxBlockRows = 1
			c.Kafka.FetchMaxPartitionBytes = 1
		}},
	}
	var plainRuns benchRuns
	round := 0
	for b.Loop() {
		round++
		table := fmt.Sprintf("plain_%d", round)
		pg.Exec(b, fmt.Sprintf(`CREATE TABLE %s %s`, table, kvTable))
		conn, err := pgx.Connect(ctx, pg.URL())
		if err != nil {
			b.Fatal(err)
		}
		upsert := fmt.Sprintf(`INSERT INTO %s (id, v) SELECT * FROM unnest($1::bigint[], $2::text[])
			ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v`, table)
		del := fmt.Sprintf(`DELETE FROM %s WHERE id = ANY($1)`, table)
		cpu0 := processCPU(b)
		start := time.Now()
		last := map[int64]int{}
		for i := 0; i < len(ops); i += upsertBatch {
			clear(last)
			batch := ops[i:min(i+upsertBatch, len(ops))]
			for j, o := range batch {
				last[o.id] = j
			}
			var ids, dels []int64
			var vs []string
			for j, o := range batch {
				switch {
				case last[o.id] != j:
				case o.del:
					dels = append(dels, o.id)
				default:
					ids, vs = append(ids, o.id), append(vs, o.v)
				}
			}
			var pb pgx.Batch
			if len(ids) > 0 {
				pb.Queue(upsert, ids, vs)
			}
			if len(dels) > 0 {
				pb.Queue(del, dels)
			}
			if err := conn.SendBatch(ctx, &pb).Close(); err != nil {
				b.Fatalf("plain upsert of records %d to %d: %v", i, i+len(batch), err)
			}
		}
		_ = conn.Close(ctx)

		plainRuns.add(time.Since(start), processCPU(b)-cpu0, 0, 0)
		_ = conn.Close(ctx)
		if d := want.diff(readKV(b, pg.URL(), table)); len(d) > 0 {
			b.Fatalf("table %s is not the last value of every key:\n%s", table, strings.Join(d, "\n"))
		}

		for _, v := range variants {
			// A new group starts from the earliest offset.
			name := fmt.Sprintf("%s_%d", v.name, round)
			pg.Exec(b, fmt.Sprintf(`CREATE TABLE %s %s`, name, kvTable))
			url := fmt.Sprintf("%s&group=%s&mode=upsert&table=%s&offsets_table=offsets_%s&dead_letter_table=dead_%s",
				pg.URL(), name, name, name, name)
			pgs, err := postgres.New(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			sink := &blockCounter{Sink: pgs}
			cli := etcd.Client(b)
			rev0 := harness.EtcdRevision(b, cli)
			cpu0, broker0 := processCPU(b), k.brokerCPU(b)
			// A Write that returned has committed its transaction: the
			// rows are in PostgreSQL.
			took := drainTimed(b, cli, k.Brokers(), name, sink, func(s replica.Stats) bool { return s.Records >= int64(updates) }, v.config)
			v.broker += k.brokerCPU(b) - broker0
			v.runs.add(took, processCPU(b)-cpu0, harness.EtcdRevision(b, cli)-rev0, sink.blocks.Load())
			_ = sink.Close()
			if d := want.diff(readKV(b, pg.URL(), name)); len(d) > 0 {
				b.Fatalf("table %s is not the last value of every key:\n%s", name, strings.Join(d, "\n"))
			}
		}
	}
	n := float64(round)
	plain := float64(updates) * n / plainRuns.took.Seconds()
	b.ReportMetric(plain, "plain-rows/s")
	b.ReportMetric(plainRuns.cpu.Seconds()/n, "plain-cpu-s")
	for _, v := range variants {
		rep := float64(updates) * n / v.runs.took.Seconds()
		b.ReportMetric(rep, v.metric+"rows/s")
		b.ReportMetric(rep/plain, v.metric+"ratio")
		b.ReportMetric(float64(v.runs.txns)/n, v.metric+"etcd-txns")
		b.ReportMetric(float64(updates)*n/float64(v.runs.blocks), v.metric+"rows/block")
		b.ReportMetric(v.runs.cpu.Seconds()/n, v.metric+"cpu-s")
		if k.real() {
			b.ReportMetric(v.broker.Seconds()/n, v.metric+"broker-cpu-s")
		}
	}
}

// blockCounter counts the blocks written to a postgres sink, which keeps
// its upgrades (BatchWriter, Resumer) by embedding.
type blockCounter struct {
	*postgres.Sink
	blocks atomic.Int64
}

func (c *blockCounter) Write(ctx context.Context, b *sinks.Block) error {
	c.blocks.Add(1)
	return c.Sink.Write(ctx, b)
}

func (c *blockCounter) WriteBlocks(ctx context.Context, bs []*sinks.Block) []error {
	c.blocks.Add(int64(len(bs)))
	return c.Sink.WriteBlocks(ctx, bs)
}

// benchRuns sums the runs of one side of a benchmark.
type benchRuns struct {
	took, cpu    time.Duration
	txns, blocks int64
}

func (r *benchRuns) add(took, cpu time.Duration, txns, blocks int64) {
	r.took += took
	r.cpu += cpu
	r.txns += txns
	r.blocks += blocks
}

// processCPU is the user plus system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	d, err := harness.ProcCPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	return d
}
