package integration_test

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
)

// TestRoutedTablesCreatedAndEvolved: an Avro topic read by two groups of
// two replicas each, one into PostgreSQL and one into ClickHouse, both in
// columns mode with table={topic} and evolve=add-columns, and no table
// made beforehand. Each store's table is made when the topic's partitions
// are claimed, of the kafka_* columns, and v1's fields are added at its
// first records; when the schema gains a field
// with a default (v2) the column is added at v2's first records, by both
// replicas of a group at once (each reads half the partitions, and v2
// reaches them together), and both succeed: no write fails. The rows of
// v1 hold NULL there, v2's the value, each once.
func TestRoutedTablesCreatedAndEvolved(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	pg := harness.StartPostgres(t)
	ch := harness.StartClickHouse(t)
	const v1 = `{"type":"record","name":"User","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"}]}`
	const v2 = `{"type":"record","name":"User","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"},
		{"name":"email","type":["null","string"],"default":null}]}`
	const half = 200
	e := newEnv(t, "Users.EU", 4)
	// A write that fails is this test's finding: no session may be lost
	// to a loaded machine's slow keepalives meanwhile.
	e.leaseTTL = loadLeaseTTL
	id1 := reg.RegisterAvro(t, e.topic+"-value", v1)
	id2 := reg.RegisterAvro(t, e.topic+"-value", v2)

	dbURL := pg.NewDatabase(t)
	pgURL := withQuery(dbURL, "mode=columns&table={topic}&evolve=add-columns")
	prefix := fmt.Sprintf("ev%d_", time.Now().UnixNano()%1_000_000)
	chURL := fmt.Sprintf("clickhouse://%s/%s?mode=columns&table=%s{topic}&evolve=add-columns", ch.NativeAddr(), ch.Database(), prefix)
	pgTable, chTable := sinks.TableName(e.topic), prefix+sinks.TableName(e.topic)

	if n := ch.QueryInt(t, `SELECT count() FROM system.tables WHERE database = ? AND name = ?`, ch.Database(), chTable); n != 0 {
		t.Fatalf("ClickHouse has %s before the replicas started", chTable)
	}
	open := func(d *sinks.Descriptor, url, group string) sinks.Sink {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := d.Open(ctx, url, sinks.Options{Group: group})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.(*sinks.Router); !ok {
			t.Fatalf("%s with table={topic}: a %T, want a *sinks.Router", d.Scheme, s)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	gpg, gch := e.withGroup("evolve-pg"), e.withGroup("evolve-ch")
	var replicas []*running
	for _, g := range []struct {
		e   *env
		d   *sinks.Descriptor
		url string
	}{{gpg, postgres.Descriptor, pgURL}, {gch, clickhouse.Descriptor, chURL}} {
		for i := range 2 {
			replicas = append(replicas, g.e.start(g.e.formatConfig(fmt.Sprintf("r%d", i), sinks.Avro, reg), open(g.d, g.url, g.e.group)))
		}
	}
	await(t, 20*time.Second, "each replica to hold two partitions", func() bool {
		return len(gpg.owners()) == 2 && len(gch.owners()) == 2
	})
	conn := pgConn(t, dbURL)
	pgCols := func() []string {
		rows, err := conn.Query(context.Background(), `SELECT column_name FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position`, pgTable)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var cols []string
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				t.Fatal(err)
			}
			cols = append(cols, c)
		}
		return cols
	}
	chCols := func() []string {
		var cols []string
		for _, r := range ch.Query(t, `SELECT name FROM system.columns WHERE database = ? AND table = ? ORDER BY position`, ch.Database(), chTable) {
			cols = append(cols, r[0].(string))
		}
		return cols
	}
	// Made when the topic's partitions were claimed, before any record:
	// the record's columns come with its schema.
	meta := []string{"kafka_topic", "kafka_partition", "kafka_offset", "kafka_key", "kafka_timestamp"}
	await(t, 20*time.Second, "PostgreSQL's table "+pgTable+" of the kafka_* columns", func() bool { return slices.Equal(pgCols(), meta) })

	want := e.produceValues(half, func(i int) []byte {
		return harness.AvroEncode(t, id1, v1, map[string]any{"id": int64(i), "name": fmt.Sprint("u", i)})
	})
	await(t, 60*time.Second, "v1 committed by both groups", func() bool { return gpg.allCommitted(want) && gch.allCommitted(want) })
	base := []string{"kafka_topic", "kafka_partition", "kafka_offset", "kafka_key", "kafka_timestamp", "id", "name"}
	if got := pgCols(); !slices.Equal(got, base) {
		t.Errorf("PostgreSQL's table after v1: %v, want %v", got, base)
	}
	chBase := []string{"kafka_topic", "kafka_partition", "kafka_offset", "kafka_generation", "kafka_key", "kafka_timestamp", "id", "name"}
	if got := chCols(); !slices.Equal(got, chBase) {
		t.Errorf("ClickHouse's table after v1: %v, want %v", got, chBase)
	}

	more := e.produceValues(half, func(i int) []byte {
		i += half
		return harness.AvroEncode(t, id2, v2, map[string]any{"id": int64(i), "name": fmt.Sprint("u", i), "email": fmt.Sprintf("u%d@example.com", i)})
	})
	want = addCounts(want, more)
	await(t, 60*time.Second, "v2 committed by both groups", func() bool { return gpg.allCommitted(want) && gch.allCommitted(want) })
	if got := pgCols(); !slices.Equal(got, append(base, "email")) {
		t.Errorf("PostgreSQL's table after v2: %v, want %v", got, append(base, "email"))
	}
	if got := chCols(); !slices.Equal(got, append(chBase, "email")) {
		t.Errorf("ClickHouse's table after v2: %v, want %v", got, append(chBase, "email"))
	}

	// Every id once; v1's without an email, v2's with theirs.
	var n, ids, nulls, right int64
	if err := conn.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE email IS NULL AND id < $1),
		count(*) FILTER (WHERE email = 'u' || id || '@example.com' AND id >= $1) FROM `+pgx.Identifier{pgTable}.Sanitize(), half).Scan(&n, &ids, &nulls, &right); err != nil {
		t.Fatal(err)
	}
	if n != 2*half || ids != 2*half || nulls != half || right != half {
		t.Errorf("PostgreSQL: %d rows, %d ids, %d of v1 with NULL email, %d of v2 with theirs; want %d, %d, %d, %d", n, ids, nulls, right, 2*half, 2*half, half, half)
	}
	r := ch.Query(t, fmt.Sprintf(`SELECT count(), uniqExact(id), countIf(email IS NULL AND id < %d), countIf(email = concat('u', toString(id), '@example.com') AND id >= %d)
		FROM %s.%s`, half, half, ch.Database(), chTable))[0]
	if chInt(t, r[0]) != 2*half || chInt(t, r[1]) != 2*half || chInt(t, r[2]) != half || chInt(t, r[3]) != half {
		t.Errorf("ClickHouse: %v rows, ids, v1 with NULL email, v2 with theirs; want %d, %d, %d, %d", r, 2*half, 2*half, half, half)
	}
	ddl := map[int]int64{}
	for i, rn := range replicas {
		st := rn.r.Stats()
		ddl[i/2] += st.SinkDDL
		if st.SinkErrors != 0 {
			t.Errorf("replica %d: %d sink writes failed; adding one column at once must not fail either", i, st.SinkErrors)
		}
		if st.Records == 0 {
			t.Errorf("replica %d delivered nothing: the column was not added by two replicas at once", i)
		}
	}
	for g, n := range ddl {
		if n < 3 {
			t.Errorf("group %d counted %d DDL statements (offsetkeeper_sink_ddl_total), want at least 3: the table, v1's columns, v2's", g, n)
		}
	}
}

// TestFileRouteByField: the file sink routed by a field
// (file:///DIR?route_field=tenant) writes each record under its tenant's
// directory, DIR/a/TOPIC/..., and those without one under DIR/default,
// while one of two replicas is killed as a crash would (its blocks in
// flight replayed by the other): each directory holds exactly its
// tenant's offsets, each once.
func TestFileRouteByField(t *testing.T) {
	e := newEnv(t, "tenants", 4)
	dir := t.TempDir()
	open := func() sinks.Sink {
		s, err := file.Descriptor.Open(context.Background(), "file://"+dir+"?route_field=tenant", sinks.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	tenantOf := func(i int) string { return []string{"a", "b", ""}[i%3] }
	value := func(i int) []byte {
		if tenantOf(i) == "" {
			return fmt.Appendf(nil, `{"i":%d}`, i)
		}
		return fmt.Appendf(nil, `{"i":%d,"tenant":%q}`, i, tenantOf(i))
	}
	r1 := e.start(e.config("r1"), open())
	e.start(e.config("r2"), open())
	want := e.produceValues(3000, value)
	await(t, 30*time.Second, "the first commits", func() bool { return len(e.committed()) > 0 })
	r1.kill() // mid-stream: its blocks in flight are replayed by the others
	more := e.produceValues(3000, func(i int) []byte { return value(i + 3000) })
	e.start(e.config("r3"), open())
	want = addCounts(want, more)
	await(t, 60*time.Second, "every record committed", func() bool { return e.allCommitted(want) })

	// Record i went to partition i%4 at offset i/4 (then 3000/4 more).
	for p := range e.parts {
		exp := map[string][]int64{}
		for i := 0; i < 6000; i++ {
			if i%e.parts != p {
				continue
			}
			route := cmp.Or(tenantOf(i), "default")
			exp[route] = append(exp[route], int64(i/e.parts))
		}
		for route, offs := range exp {
			recs, err := file.ReadAll(filepath.Join(dir, route), e.topic, p)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]int64, len(recs))
			for k, r := range recs {
				got[k] = r.Offset
			}
			if !slices.Equal(got, offs) {
				t.Errorf("%s, partition %d: %d offsets, want its %d records' once each", route, p, len(got), len(offs))
			}
		}
	}
}

// TestInferredColumnsFromJSON: JSON records without a schema, into
// PostgreSQL and ClickHouse columns tables made for them
// (evolve=add-columns&infer_columns=true): the columns come from the
// values (id a number, name a string, then price a fractional number);
// a record whose id is a string, which the id column cannot hold, goes to
// the table's own dead-letter table (dead_letter_table={topic}_dead)
// rather than being coerced; every other record is a row once.
func TestInferredColumnsFromJSON(t *testing.T) {
	pg := harness.StartPostgres(t)
	ch := harness.StartClickHouse(t)
	e := newEnv(t, "items", 2)
	dbURL := pg.NewDatabase(t)
	prefix := fmt.Sprintf("inf%d_", time.Now().UnixNano()%1_000_000)
	urls := map[*sinks.Descriptor]string{
		postgres.Descriptor:   withQuery(dbURL, "mode=columns&table={topic}&evolve=add-columns&infer_columns=true&dead_letter_table={topic}_dead"),
		clickhouse.Descriptor: fmt.Sprintf("clickhouse://%s/%s?mode=columns&table=%s{topic}&evolve=add-columns&infer_columns=true&dead_letter_table=%s{topic}_dead", ch.NativeAddr(), ch.Database(), prefix, prefix),
	}
	for d, url := range urls {
		g := e.withGroup("infer-" + d.Scheme)
		s, err := d.Open(context.Background(), url, sinks.Options{Group: g.group})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		g.start(g.config("r0"), s)
	}
	want := e.produceValues(100, func(i int) []byte {
		switch {
		case i == 77:
			return []byte(`{"id":"seventy-seven","name":"x"}`)
		case i < 50:
			return fmt.Appendf(nil, `{"id":%d,"name":"n%d"}`, i, i)
		}
		return fmt.Appendf(nil, `{"id":%d,"name":"n%d","price":%d.5}`, i, i, i)
	})
	for d := range urls {
		g := e.withGroup("infer-" + d.Scheme)
		await(t, 60*time.Second, d.Scheme+" to commit every record", func() bool { return g.allCommitted(want) })
	}
	conn := pgConn(t, dbURL)
	var cols string
	if err := conn.QueryRow(context.Background(), `SELECT string_agg(column_name || ' ' || data_type, ', ' ORDER BY ordinal_position)
		FROM information_schema.columns WHERE table_name = 'items'`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if wantCols := "kafka_topic text, kafka_partition integer, kafka_offset bigint, kafka_key bytea, kafka_timestamp timestamp with time zone, id bigint, name text, price double precision"; cols != wantCols {
		t.Errorf("PostgreSQL's items: %s\nwant %s", cols, wantCols)
	}
	var rows, priced, dead int64
	if err := conn.QueryRow(context.Background(), `SELECT count(*), count(price) FROM items`).Scan(&rows, &priced); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM items_dead WHERE topic = 'items'`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if rows != 99 || priced != 49 || dead != 1 {
		t.Errorf("PostgreSQL: %d rows, %d with a price, %d dead letters; want 99, 49 and 1 (the string id)", rows, priced, dead)
	}
	var chCols []string
	for _, r := range ch.Query(t, `SELECT name || ' ' || type FROM system.columns WHERE database = ? AND table = ? ORDER BY position`, ch.Database(), prefix+"items") {
		chCols = append(chCols, r[0].(string))
	}
	if got, wantCols := strings.Join(chCols, ", "), "kafka_topic LowCardinality(String), kafka_partition Int32, kafka_offset Int64, kafka_generation Int64, kafka_key Nullable(String), kafka_timestamp DateTime64(3, 'UTC'), id Nullable(Int64), name Nullable(String), price Nullable(Float64)"; got != wantCols {
		t.Errorf("ClickHouse's table: %s\nwant %s", got, wantCols)
	}
	r := ch.Query(t, fmt.Sprintf(`SELECT count(), count(price), uniqExact(kafka_partition, kafka_offset) FROM %s.%s`, ch.Database(), prefix+"items"))[0]
	if chInt(t, r[0]) != 99 || chInt(t, r[1]) != 49 || chInt(t, r[2]) != 99 {
		t.Errorf("ClickHouse: %v rows, with a price, distinct offsets; want 99, 49, 99", r)
	}
	if n := ch.QueryInt(t, fmt.Sprintf(`SELECT count() FROM %s.%s WHERE kafka_offset >= 0`, ch.Database(), prefix+"items_dead")); n != 1 {
		t.Errorf("ClickHouse's %sitems_dead: %d rows, want the string id's", prefix, n)
	}
}
