package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// Issue 44, test 3: ClickHouse's Kafka engine reads the first half of a
// topic on the 3-node Apache Kafka into its table; its materialized view
// and its Kafka table are detached; `offsets import --from-group` takes the engine's committed
// offsets (refused while its consumer is still in the group); two replicas
// read on into a table of their own. Across both tables every id is there
// once: the engine's block written but not committed, if the detach caught
// one, is counted and reported (the rows of the engine's table at or past
// the imported offsets), and is the only thing read twice.
func TestImportFromTheKafkaEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("the Kafka engine, an import and two replicas")
	}
	const parts, half = 4, 10_000
	ch := harness.StartClickHouse(t)
	ch.SetKafkaClientConfig(t, chEngineSession...)
	e := newEnvOn(t, apacheBackend, "moving", parts)
	ch.Exec(t, chEngineTarget("engine_rows", 0))
	ch.Exec(t, chEngineTarget("ok_rows", 10000))
	createEngine(t, ch, &benchKafka{e.kafka}, e.topic, "ch-engine", "engine_rows",
		engineSettings{consumers: 1, blockSize: 1000, flushMS: 500})
	cl := trickleProducer(t, e.kafka)
	if n, err := paceJSON(context.Background(), cl, e.topic, parts, 5000, 0, half); err != nil || n != half {
		t.Fatalf("the first half: %d of %d records: %v", n, half, err)
	}
	await(t, 120*time.Second, "the engine to write and commit the first half", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done, err := groupCommitted(ctx, cl, "ch-engine", e.topic, parts)
		return err == nil && done == half && ch.QueryInt(t, `SELECT count() FROM engine_rows`) >= half
	})

	// While the engine's consumer is in its group, the import is refused.
	if code, out := e.cli("offsets", "import", "--from-group", "ch-engine"); code != 2 || !strings.Contains(out, "still consuming") {
		t.Errorf("import from the running engine: exit %d, want 2 naming its consumer:\n%s", code, out)
	}
	// The view first, which stops the flow; then the Kafka table, whose
	// consumers stay in the group while it is attached.
	ch.Exec(t, `DETACH TABLE mv_engine_rows`)
	ch.Exec(t, `DETACH TABLE kq_engine_rows`)
	await(t, 60*time.Second, "the engine's consumer to leave its group", func() bool {
		code, _ := e.cli("offsets", "import", "--from-group", "ch-engine")
		return code == 0
	})
	if code, out := e.cli("offsets", "import", "--from-group", "ch-engine", "--execute"); code != 0 {
		t.Fatalf("import --execute: exit %d:\n%s", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	imported, err := groupOffsets(ctx, cl, "ch-engine", e.topic, parts)
	cancel()
	if err != nil || len(imported) != parts {
		t.Fatalf("the engine's offsets: %v, %v", imported, err)
	}
	// Rows the engine wrote at or past what it committed: its block
	// written and not committed, which offsetkeeper reads again.
	var overlap int64
	for p, off := range imported {
		overlap += ch.QueryInt(t, `SELECT count() FROM engine_rows WHERE kafka_partition = ? AND kafka_offset >= ?`, p, off)
	}

	if n, err := paceJSON(context.Background(), cl, e.topic, parts, 5000, half, half); err != nil || n != half {
		t.Fatalf("the second half: %d of %d records: %v", n, half, err)
	}
	url := chReplicaSink(ch, "ok_rows", "http")
	e.processSink("a", url)
	e.processSink("b", url)
	await(t, 120*time.Second, "the replicas to commit everything", func() bool { return e.allCommitted(perPartition(parts, 2*half/parts)) })

	both := `(SELECT id FROM engine_rows UNION ALL SELECT id FROM ok_rows)`
	rows, distinct := ch.QueryInt(t, `SELECT count() FROM `+both), ch.QueryInt(t, `SELECT uniqExact(id) FROM `+both)
	if distinct != 2*half {
		t.Errorf("%d distinct ids across both tables, want %d (missing %d)", distinct, 2*half, 2*half-distinct)
	}
	if rows-distinct != overlap {
		t.Errorf("%d ids read twice, want exactly the engine's uncommitted rows, %d", rows-distinct, overlap)
	}
	if got := ch.QueryInt(t, `SELECT min(id) FROM ok_rows`); overlap == 0 && got != half {
		t.Errorf("offsetkeeper's first id is %d, want %d: where the engine stopped", got, half)
	}
	t.Logf("the engine wrote %d rows and committed %v; offsetkeeper wrote %d; the engine's uncommitted rows read again: %d",
		ch.QueryInt(t, `SELECT count() FROM engine_rows`), fmt.Sprint(imported), ch.QueryInt(t, `SELECT count() FROM ok_rows`), overlap)
}
