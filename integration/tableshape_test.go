package integration_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// Issue 23: `run` on a PostgreSQL or ClickHouse table that its sink's mode
// cannot use. It used to report the sink ready and then fail every
// partition's resume (ClickHouse raw mode on a table of another shape:
// "code: 47, Unknown expression or function", forever) or write, with
// nothing ever committed. Now it exits 2 at once, naming the table, what is
// wrong and the likely fix, having changed nothing: no key in etcd, no
// table made, the destination not claimed.

// TestTableOfAnotherShapeExits2: each mode of each database sink, given a
// table of the wrong shape, and a topic with records waiting.
func TestTableOfAnotherShapeExits2(t *testing.T) {
	pg := harness.StartPostgres(t)
	chs := harness.StartClickHouse(t)
	e := newEnv(t, "orders", 2)
	e.produce(20)

	// The table, in each database.
	chs.Exec(t, `CREATE TABLE events (id UInt64, pad String, kafka_topic String, kafka_partition Int32, kafka_offset Int64)
		ENGINE = MergeTree ORDER BY (kafka_topic, kafka_partition, kafka_offset) SETTINGS non_replicated_deduplication_window = 10000`)
	pg.Exec(t, `CREATE TABLE events (id bigint, pad text, kafka_topic text, kafka_partition integer, kafka_offset bigint)`)
	// Columns tables whose kafka_* columns the record cannot fill.
	chs.Exec(t, `CREATE TABLE counts (n UInt64, kafka_topic String, kafka_partition Int32, kafka_offset String, kafka_generation Int64)
		ENGINE = MergeTree ORDER BY tuple() SETTINGS non_replicated_deduplication_window = 10000`)
	pg.Exec(t, `CREATE TABLE counts (n bigint PRIMARY KEY, kafka_offset date)`)
	chURL := fmt.Sprintf("clickhouse://%s/%s", chs.NativeAddr(), chs.Database())

	for i, tc := range []struct {
		name, sink string
		says       []string
	}{
		{"clickhouse raw, the issue's table", chURL + "?table=events",
			[]string{"`events` as a mode=raw table", "it lacks the columns kafka_generation Int64", "header_values", "use mode=columns", "give table= a new name"}},
		{"clickhouse columns, an offset column Resume cannot read", chURL + "?table=counts&mode=columns",
			[]string{"`counts` as a mode=columns table", "column kafka_offset is String", "want an integer type (Int64)"}},
		{"postgres raw, the issue's table", pg.URL() + "&table=events",
			[]string{`"events" as a mode=raw table`, "it lacks the columns topic text", "value_bytes bytea", "use mode=columns", "give table= a new name"}},
		{"postgres columns, an offset column of a type the offset cannot go in", pg.URL() + "&table=counts&mode=columns",
			[]string{`"counts" as a mode=columns table`, "column kafka_offset is date"}},
		{"postgres upsert, no key", pg.URL() + "&table=events&mode=upsert",
			[]string{`"events" has no primary key`, "conflict="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group := fmt.Sprintf("shape-%d", i)
			began := time.Now()
			r := e.processSink(fmt.Sprintf("r%d", i), tc.sink, "--group", group)
			code := r.Wait(30 * time.Second)
			took := time.Since(began)
			if code != 2 {
				t.Fatalf("exit %d after %s, want 2:\n%s", code, took, r.Output())
			}
			t.Logf("refused after %s:\n%s", took.Round(time.Millisecond), r.Output())
			if took > 10*time.Second {
				t.Errorf("the refusal took %s: a table of the wrong shape is refused at once", took.Round(time.Millisecond))
			}
			out := r.Output()
			for _, want := range append([]string{"table does not fit the sink"}, tc.says...) {
				if !strings.Contains(out, want) {
					t.Errorf("the output does not say %q:\n%s", want, out)
				}
			}
			for _, never := range []string{"sink ready", "finding the resume point failed", "replica starting"} {
				if strings.Contains(out, never) {
					t.Errorf("the output says %q: the table was taken before it was refused:\n%s", never, out)
				}
			}
			if n := e.etcdKeysOf(group); n != 0 {
				t.Errorf("the refused replica left %d keys in etcd", n)
			}
		})
	}

	// Nothing was made: no offsets, dead-letter or groups table in
	// PostgreSQL; no dead-letter or groups table in ClickHouse.
	var made string
	if err := pgConn(t, pg.URL()).QueryRow(context.Background(), `SELECT coalesce(string_agg(relname::text, ', '), '') FROM pg_class
		WHERE relname IN ('offsetkeeper_offsets', 'offsetkeeper_dead_letters', 'offsetkeeper_sink_groups')`).Scan(&made); err != nil {
		t.Fatal(err)
	}
	if made != "" {
		t.Errorf("PostgreSQL: the refused replicas made %s", made)
	}
	if n := chs.QueryInt(t, `SELECT count() FROM system.tables WHERE database = currentDatabase()
		AND name IN ('offsetkeeper_dead_letters', 'offsetkeeper_sink_groups')`); n != 0 {
		t.Errorf("ClickHouse: the refused replicas made %d tables", n)
	}

	// The fix the refusal names: the table in columns mode takes
	// every record (id and pad from the value's fields, absent here: their
	// zeros), resuming from etcd, since it has no kafka_generation.
	want := perPartition(e.parts, 20)
	r := e.processSink("fixed", chURL+"?table=events&mode=columns")
	await(t, 30*time.Second, "the issue's table, in columns mode, to take every record", func() bool { return e.allCommitted(want) })
	if n := chs.QueryInt(t, `SELECT count() FROM events`); n != 40 {
		t.Errorf("events holds %d rows, want 40", n)
	}
	r.Signal(syscall.SIGTERM)
	if code := r.Wait(20 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0:\n%s", code, r.Output())
	}
}
