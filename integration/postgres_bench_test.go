package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
)

// BenchmarkPostgresReplicaVsCopy loads the same records into the Kafka
// that OKBENCH_KAFKA names (kfake, the default, in this process; apache1
// or apache3: Apache Kafka of 1 or 3 nodes, see
// BenchmarkScaleGroupVsFranz512) once, then measures in the same run a plain pgx COPY of those rows into an
// empty table of the raw sink's layout (one COPY per partition, in
// parallel, nothing else) and a replica delivering them from Kafka through
// the postgres sink in raw mode: a guard, an intent, one transaction with
// the offsets row and an etcd commit per block. It reports rows/s for both
// and replica/copy; on Apache Kafka also the brokers' CPU seconds per
// replica run (replica-broker-cpu-s, the nodes' JVMs summed; COPY reads
// no Kafka).
//
//	go test -run '^$' -bench PostgresReplicaVsCopy -benchtime 3x ./integration/
//	OKBENCH_KAFKA=apache3 go test -run '^$' -bench PostgresReplicaVsCopy -benchtime 3x ./integration/
func BenchmarkPostgresReplicaVsCopy(b *testing.B) {
	const parts, perPart = 8, 50_000
	const total = parts * perPart
	pg := harness.StartPostgres(b)
	etcd := harness.StartEtcd(b, 1)
	k := startBenchKafka(b, parts, "bench")
	at := time.Now().UTC().Truncate(time.Millisecond)
	rows := make([][][]any, parts)
	for p := range parts {
		recs := make([]*kgo.Record, perPart)
		rows[p] = make([][]any, perPart)
		for i := range recs {
			key := fmt.Appendf(nil, "key-%07d", i)
			value := fmt.Appendf(nil, `{"id":%d,"partition":%d,"name":"customer-%07d","pad":"%s"}`, i, p, i, strings.Repeat("v", 40)) // 100 bytes
			recs[i] = &kgo.Record{Key: key, Value: value, Timestamp: at}
			rows[p][i] = []any{"bench", int32(p), int64(i), key, value, value, at, []byte("[]")}
		}
		k.Produce(b, "bench", p, recs...)
	}
	columns := []string{"topic", "partition", "offset", "key", "value", "value_bytes", "timestamp", "headers"}
	ctx := context.Background()

	var copyTime, replicaTime, replicaBroker time.Duration
	round := 0
	for b.Loop() {
		round++
		table := fmt.Sprintf("copy_%d", round)
		// A raw sink on the copy's table makes it, of its own layout.
		maker, err := postgres.New(ctx, fmt.Sprintf("%s&group=copy&table=%s&offsets_table=copy_offsets&dead_letter_table=copy_dead", pg.URL(), table))
		if err != nil {
			b.Fatal(err)
		}
		_ = maker.Close()
		conns := make([]*pgx.Conn, parts)
		for p := range conns {
			c, err := pgx.Connect(ctx, pg.URL())
			if err != nil {
				b.Fatal(err)
			}
			conns[p] = c
		}
		start := time.Now()
		var wg sync.WaitGroup
		for p := range parts {
			wg.Go(func() {
				n, err := conns[p].CopyFrom(ctx, pgx.Identifier{table}, columns, pgx.CopyFromRows(rows[p]))
				if err != nil || n != perPart {
					b.Errorf("copy partition %d: %d rows, %v", p, n, err)
				}
			})
		}
		wg.Wait()
		copyTime += time.Since(start)
		for _, c := range conns {
			_ = c.Close(ctx)
		}

		group := fmt.Sprintf("bench-%d", round) // a new group starts from the earliest offset
		url := fmt.Sprintf("%s&group=%s&table=rows_%d&offsets_table=offsets_%d&dead_letter_table=dead_%d", pg.URL(), group, round, round, round)
		sink, err := postgres.New(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		// A Write that returned has committed its transaction: the rows are
		// in PostgreSQL.
		broker0 := k.brokerCPU(b)
		replicaTime += drainTimed(b, etcd.Client(b), k.Brokers(), group, sink, func(s replica.Stats) bool { return s.Records >= total })
		replicaBroker += k.brokerCPU(b) - broker0
		_ = sink.Close()
		recs, err := postgres.ReadAll(ctx, url, "bench", parts-1)
		if err != nil || len(recs) != perPart {
			b.Fatalf("partition %d: %d rows in the sink (%v), want %d", parts-1, len(recs), err, perPart)
		}
	}
	cp := float64(total*round) / copyTime.Seconds()
	rep := float64(total*round) / replicaTime.Seconds()
	b.ReportMetric(cp, "copy-rows/s")
	b.ReportMetric(rep, "replica-rows/s")
	b.ReportMetric(rep/cp, "ratio")
	if k.real() {
		b.ReportMetric(replicaBroker.Seconds()/float64(round), "replica-broker-cpu-s")
	}
}
