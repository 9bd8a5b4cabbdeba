package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
	"github.com/offsetkeeper/offsetkeeper/sinks/sinktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, harness.GoleakOptions()...)
}

// tables counts table sets, so that every sink of a test gets its own.
var tables atomic.Int64

// sinkURL is a URL for a new set of tables in the cluster's database:
// rows_N, offsets_N and dead_N, group g.
func sinkURL(pg *harness.Postgres, params string) (url string, n int64) {
	n = tables.Add(1)
	url = fmt.Sprintf("%s&group=g&table=rows_%d&offsets_table=offsets_%d&dead_letter_table=dead_%d", pg.URL(), n, n, n)
	if params != "" {
		url += "&" + params
	}
	return url, n
}

func open(t testing.TB, url string, opts ...postgres.Option) *postgres.Sink {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.New(ctx, url, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newSink opens a sink on a new set of tables (sinkURL's), its columns
// table made first when create, a CREATE TABLE whose %s is the table's
// name, is given.
func newSink(t *testing.T, pg *harness.Postgres, params, create string) (*postgres.Sink, int64) {
	t.Helper()
	url, n := sinkURL(pg, params)
	if create != "" {
		pg.Exec(t, fmt.Sprintf(create, fmt.Sprintf("rows_%d", n)))
	}
	return open(t, url), n
}

// start starts a cluster, opens a sink in it (newSink's) and a direct
// connection for checking what the sink did.
func start(t *testing.T, params, create string) (*harness.Postgres, *postgres.Sink, *pgx.Conn, int64) {
	t.Helper()
	pg := harness.StartPostgres(t)
	s, n := newSink(t, pg, params, create)
	return pg, s, db(t, pg), n
}

func TestConformance(t *testing.T) {
	pg := harness.StartPostgres(t)
	sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
		url, _ := sinkURL(pg, "")
		s := open(t, url)
		return s, sinktest.ReaderFunc(func(t *testing.T, topic string, partition int) []sinks.Record {
			t.Helper()
			recs, err := postgres.ReadAll(context.Background(), url, topic, partition)
			if err != nil {
				t.Fatalf("ReadAll: %v", err)
			}
			return recs
		})
	}, sinktest.Options{ReplayExact: true, ReplayOverlap: true, Fences: true})
}

// db is a direct connection for checking what the sink did.
func db(t testing.TB, pg *harness.Postgres) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func queryInt(t *testing.T, conn *pgx.Conn, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// block makes a block of JSON records at the given offsets.
func block(topic string, partition int, epoch, from, next int64, offs ...int64) *sinks.Block {
	b := &sinks.Block{Topic: topic, Partition: partition, Epoch: epoch, From: from, Next: next}
	for _, o := range offs {
		b.Records = append(b.Records, sinks.Record{
			Offset: o,
			Key:    fmt.Appendf(nil, "k%d", o),
			Value:  fmt.Appendf(nil, `{"n":%d}`, o),
			Time:   time.UnixMilli(1714564800000 + o).UTC(),
		})
	}
	return b
}

func write(t *testing.T, s sinks.Sink, b *sinks.Block) {
	t.Helper()
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatalf("Write %s/%d [%d, %d): %v", b.Topic, b.Partition, b.From, b.Next, err)
	}
}

func resume(t *testing.T, s *postgres.Sink, topic string, partition int) (int64, int64, bool) {
	t.Helper()
	next, gen, ok, err := s.Resume(context.Background(), topic, partition)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	return next, gen, ok
}

// offsetsRow is the stored (next, epoch, generation, updated_at) of a
// partition, as text to compare whole.
func offsetsRow(t *testing.T, conn *pgx.Conn, table, topic string, partition int) string {
	t.Helper()
	var row string
	err := conn.QueryRow(context.Background(),
		`SELECT concat_ws(' ', next, epoch, generation, updated_at) FROM `+table+` WHERE "group" = 'g' AND topic = $1 AND partition = $2`,
		topic, partition).Scan(&row)
	if err != nil {
		t.Fatalf("read the offsets row: %v", err)
	}
	return row
}

func TestResume(t *testing.T) {
	pg := harness.StartPostgres(t)
	url, _ := sinkURL(pg, "")
	s := open(t, url)
	if _, _, ok := resume(t, s, "orders", 0); ok {
		t.Fatal("Resume of a partition never written: ok")
	}
	write(t, s, block("orders", 0, 1, 0, 10, sinktest.Seq(0, 10)...))
	if next, gen, ok := resume(t, s, "orders", 0); !ok || next != 10 || gen != 0 {
		t.Fatalf("Resume = %d, %d, %v; want 10, 0, true", next, gen, ok)
	}
	// An empty block moves the offset too (its range held only markers).
	write(t, s, block("orders", 0, 1, 10, 15))
	if next, _, _ := resume(t, s, "orders", 0); next != 15 {
		t.Fatalf("after an empty block: next %d, want 15", next)
	}
	// A block written again within the generation (a replay) adds nothing
	// and does not move next back.
	write(t, s, block("orders", 0, 2, 5, 10, sinktest.Seq(5, 10)...))
	if next, _, _ := resume(t, s, "orders", 0); next != 15 {
		t.Fatalf("after a replay: next %d, want 15", next)
	}
	// An operator reset: the next generation's next is where it goes.
	b := block("orders", 0, 2, 3, 6, sinktest.Seq(3, 6)...)
	b.Generation = 1
	write(t, s, b)
	if next, gen, _ := resume(t, s, "orders", 0); next != 6 || gen != 1 {
		t.Fatalf("after a reset: next %d generation %d, want 6, 1", next, gen)
	}
	if _, _, ok := resume(t, s, "orders", 1); ok {
		t.Fatal("Resume of another partition: ok")
	}
	recs, err := postgres.ReadAll(context.Background(), url, "orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 10 {
		t.Fatalf("%d rows, want 10", len(recs))
	}
}

// TestZombieRefused: once a higher epoch has written a partition, a write
// from a lower one is refused with sinks.ErrFenced and changes nothing,
// neither rows nor the offsets row; other partitions are not affected.
func TestZombieRefused(t *testing.T) {
	_, s, conn, n := start(t, "mode=raw", "")
	offsets := fmt.Sprintf("offsets_%d", n)
	rows := fmt.Sprintf("rows_%d", n)

	write(t, s, block("orders", 3, 7, 0, 100, sinktest.Seq(0, 100)...))
	write(t, s, block("orders", 3, 9, 100, 150, sinktest.Seq(100, 150)...)) // the new owner
	before := offsetsRow(t, conn, offsets, "orders", 3)

	for _, zombie := range []*sinks.Block{
		block("orders", 3, 7, 100, 200, sinktest.Seq(100, 200)...), // its next block, overlapping the owner's
		block("orders", 3, 8, 150, 160, sinktest.Seq(150, 160)...), // beyond the owner's
		block("orders", 3, 8, 150, 160),                            // empty
	} {
		err := s.Write(context.Background(), zombie)
		if !errors.Is(err, sinks.ErrFenced) {
			t.Fatalf("Write from epoch %d after epoch 9: %v, want an error wrapping sinks.ErrFenced", zombie.Epoch, err)
		}
		if !strings.Contains(err.Error(), "epoch") {
			t.Errorf("error %q does not say why", err)
		}
	}
	if after := offsetsRow(t, conn, offsets, "orders", 3); after != before {
		t.Errorf("offsets row changed by refused writes: %q, was %q", after, before)
	}
	if got := queryInt(t, conn, `SELECT count(*) FROM `+rows+` WHERE partition = 3`); got != 150 {
		t.Errorf("%d rows, want 150: a refused write stored rows", got)
	}
	if got := queryInt(t, conn, `SELECT count(*) FROM `+rows+` WHERE partition = 3 AND "offset" >= 150`); got != 0 {
		t.Errorf("%d rows at or beyond 150", got)
	}
	// Epochs are per partition; the owner goes on.
	write(t, s, block("orders", 4, 1, 0, 1, 0))
	write(t, s, block("orders", 3, 9, 150, 160, sinktest.Seq(150, 160)...))
	if next, _, _ := resume(t, s, "orders", 3); next != 160 {
		t.Errorf("owner's next %d, want 160", next)
	}
}

// TestZombieWaitsForOwner: a zombie whose transaction runs while the owner's
// holds the partition's row waits for it, then is refused.
func TestZombieWaitsForOwner(t *testing.T) {
	_, s, conn, n := start(t, "", "")
	write(t, s, block("orders", 0, 5, 0, 10, sinktest.Seq(0, 10)...))

	// Stand in for the owner's transaction in flight: hold the row as the
	// sink does, at epoch 6.
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE offsets_%d SET epoch = 6, next = 20 WHERE partition = 0`, n)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Write(ctx, block("orders", 0, 5, 10, 20, sinktest.Seq(10, 20)...)) }()
	select {
	case err := <-done:
		t.Fatalf("zombie write returned while the owner held the row: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, sinks.ErrFenced) {
			t.Fatalf("zombie write: %v, want sinks.ErrFenced", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("zombie write still waiting after the owner committed")
	}
	if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d`, n)); got != 10 {
		t.Errorf("%d rows, want 10", got)
	}
}

// columnsTable is the table of the columns-mode tests: types that refuse
// bad values, constraints, a default, an identity, a generated column and
// the record's own columns.
const columnsTable = `CREATE TABLE %s (
	id integer NOT NULL,
	name text,
	amount numeric CHECK (amount >= 0),
	day date,
	tags text[],
	doc jsonb,
	created timestamptz NOT NULL DEFAULT '2000-01-01T00:00:00Z',
	seq bigint GENERATED BY DEFAULT AS IDENTITY,
	twice integer GENERATED ALWAYS AS (id * 2) STORED,
	kafka_topic text,
	kafka_partition integer,
	kafka_offset bigint,
	kafka_key bytea,
	kafka_timestamp timestamptz
)`

func TestColumnsPoisonRecordsGoToDeadLetters(t *testing.T) {
	_, s, conn, n := start(t, "mode=columns", columnsTable)

	good := map[int64]string{
		0: `{"id": 1, "name": "Ada", "amount": 12.5, "day": "2024-05-01", "tags": ["a", "b"], "doc": {"x": [1, 2]}}`,
		2: `{"id": 2, "extra": "ignored", "kafka_offset": 999}`,
		5: `{"id": 3, "name": null, "created": "2024-01-02T03:04:05Z"}`,
		9: `{"id": 4, "name": 42}`,
	}
	poison := map[int64]struct{ value, reason string }{
		1:  {"not json", "not JSON"},
		3:  {`{"id": "abc"}`, "invalid input syntax for type integer"},
		4:  {`{"id": 5, "amount": -1}`, "check constraint"},
		6:  {`[1, 2]`, "JSON array"},
		7:  {`{"name": "no id"}`, "null value in column"},
		8:  {`{"id": 6, "day": "yesterday-ish"}`, "date"},
		10: {`{"id": 7, "name": "\u0000"}`, "\\u0000"},
		11: {"\xff{}", "UTF-8"},
	}
	b := &sinks.Block{Topic: "orders", Partition: 2, Epoch: 1, From: 0, Next: 14}
	for o := int64(0); o < 13; o++ { // 13 is a transaction marker
		rec := sinks.Record{Offset: o, Key: fmt.Appendf(nil, "k%d", o), Time: time.UnixMilli(1714564800000 + o).UTC()}
		if v, ok := good[o]; ok {
			rec.Value = []byte(v)
		} else if p, ok := poison[o]; ok {
			rec.Value = []byte(p.value)
		} // 12: a tombstone
		b.Records = append(b.Records, rec)
	}
	write(t, s, b)

	table := fmt.Sprintf("rows_%d", n)
	rows, err := conn.Query(context.Background(), `SELECT kafka_offset, id, coalesce(name, '<null>'), coalesce(amount::text, ''), coalesce(day::text, ''),
		coalesce(array_to_string(tags, ','), ''), coalesce(doc::text, ''), created = '2000-01-01T00:00:00Z', seq IS NOT NULL, twice,
		kafka_topic, kafka_partition, convert_from(kafka_key, 'UTF8'), kafka_timestamp FROM `+table+` ORDER BY kafka_offset`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var off int64
		var id, twice, part int
		var name, amount, day, tags, doc, topic, key string
		var defaulted, seqSet bool
		var at time.Time
		if err := rows.Scan(&off, &id, &name, &amount, &day, &tags, &doc, &defaulted, &seqSet, &twice, &topic, &part, &key, &at); err != nil {
			t.Fatal(err)
		}
		if twice != 2*id || !seqSet || topic != "orders" || part != 2 || key != fmt.Sprintf("k%d", off) || !at.Equal(time.UnixMilli(1714564800000+off)) {
			t.Errorf("offset %d: twice %d, seq set %v, record columns %s/%d %q %s", off, twice, seqSet, topic, part, key, at)
		}
		got = append(got, fmt.Sprintf("%d:%d %s %s %s %s %s %v", off, id, name, amount, day, tags, doc, defaulted))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`0:1 Ada 12.5 2024-05-01 a,b {"x": [1, 2]} true`,
		`2:2 <null>     true`,
		`5:3 <null>     false`,
		`9:4 42     true`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	dl, err := conn.Query(context.Background(), fmt.Sprintf(`SELECT "offset", key, value, error, topic, partition FROM dead_%d ORDER BY "offset"`, n))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for dl.Next() {
		var off int64
		var key, value []byte
		var why, topic string
		var part int
		if err := dl.Scan(&off, &key, &value, &why, &topic, &part); err != nil {
			t.Fatal(err)
		}
		seen[off] = true
		want := "tombstone"
		if p, ok := poison[off]; ok {
			want = p.reason
			if string(value) != p.value {
				t.Errorf("dead letter %d: value %q, want %q", off, value, p.value)
			}
		} else if off != 12 {
			t.Errorf("offset %d dead-lettered: %s", off, why)
			continue
		} else if value != nil {
			t.Errorf("dead letter 12 (a tombstone): value %q, want NULL", value)
		}
		if !strings.Contains(why, want) {
			t.Errorf("dead letter %d: reason %q, want it to mention %q", off, why, want)
		}
		if string(key) != fmt.Sprintf("k%d", off) || topic != "orders" || part != 2 {
			t.Errorf("dead letter %d: key %q, %s/%d", off, key, topic, part)
		}
	}
	if err := dl.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(poison)+1 {
		t.Errorf("%d dead letters, want %d", len(seen), len(poison)+1)
	}
	if got := s.DeadLetters(); got != int64(len(poison)+1) {
		t.Errorf("DeadLetters() = %d, want %d", got, len(poison)+1)
	}
	if next, _, _ := resume(t, s, "orders", 2); next != 14 {
		t.Errorf("next %d, want 14: the offset moves past good and bad records", next)
	}

	// Written again (a replay), the block adds nothing anywhere.
	write(t, s, b)
	if got := queryInt(t, conn, `SELECT count(*) FROM `+table); got != int64(len(good)) {
		t.Errorf("after a replay: %d rows, want %d", got, len(good))
	}
	if got := s.DeadLetters(); got != int64(len(poison)+1) {
		t.Errorf("after a replay: DeadLetters() = %d", got)
	}
}

// TestColumnsManyRecordsFewPoison: a big block with a few bad records
// keeps all its good ones, and costs few statements (the halving).
func TestColumnsManyRecordsFewPoison(t *testing.T) {
	_, s, conn, n := start(t, "mode=columns", `CREATE TABLE %s (i integer NOT NULL, kafka_offset bigint)`)
	const size = 20000
	bad := map[int64]bool{17: true, 4242: true, 4243: true, 19999: true}
	b := &sinks.Block{Topic: "t", Partition: 0, Epoch: 1, From: 0, Next: size}
	for o := int64(0); o < size; o++ {
		v := fmt.Sprintf(`{"i": %d}`, o)
		if bad[o] {
			v = `{"i": "bad"}`
		}
		b.Records = append(b.Records, sinks.Record{Offset: o, Value: []byte(v), Time: time.UnixMilli(o)})
	}
	start := time.Now()
	write(t, s, b)
	took := time.Since(start)
	if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d WHERE i = kafka_offset`, n)); got != size-int64(len(bad)) {
		t.Errorf("%d good rows, want %d", got, size-len(bad))
	}
	if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM dead_%d`, n)); got != int64(len(bad)) {
		t.Errorf("%d dead letters, want %d", got, len(bad))
	}
	t.Logf("%d records with %d bad ones written in %s", size, len(bad), took.Round(time.Millisecond))
}

func TestColumnsNeedsTable(t *testing.T) {
	pg := harness.StartPostgres(t)
	url, _ := sinkURL(pg, "mode=columns")
	_, err := postgres.New(context.Background(), url)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("New in columns mode without the table: %v, want an error saying it does not exist", err)
	}
}

// TestRawValues: how raw mode stores values jsonb takes, and those it does
// not take as they are.
func TestRawValues(t *testing.T) {
	_, s, conn, n := start(t, "", "")
	values := []struct {
		value []byte
		jsonb string // value::text, or "NULL"
	}{
		{[]byte(`{"b": 1, "a": [true, null]}`), `{"a": [true, null], "b": 1}`},
		{[]byte(`"\ud83d\ude00"`), `"😀"`},
		{[]byte(`"\ud83d"`), "NULL"},       // a lone surrogate
		{[]byte(`"a\u0000b"`), "NULL"},     // NUL
		{[]byte(`"\\u0000"`), `"\\u0000"`}, // an escaped backslash, then text
		{[]byte(`1e1000000`), "NULL"},      // beyond numeric: the server says no
		{[]byte(`null`), "null"},
		{[]byte(``), "NULL"},
		{nil, "NULL"},
		{[]byte("plain text"), "NULL"},
	}
	b := &sinks.Block{Topic: "v", Partition: 0, Epoch: 1, From: 0, Next: int64(len(values))}
	for i, v := range values {
		b.Records = append(b.Records, sinks.Record{Offset: int64(i), Value: v.value, Time: time.UnixMilli(0)})
	}
	write(t, s, b)
	for i, v := range values {
		var text *string
		var raw []byte
		if err := conn.QueryRow(context.Background(), fmt.Sprintf(`SELECT value::text, value_bytes FROM rows_%d WHERE "offset" = $1`, n), i).Scan(&text, &raw); err != nil {
			t.Fatalf("offset %d: %v", i, err)
		}
		got := "NULL"
		if text != nil {
			got = *text
		}
		if got != v.jsonb {
			t.Errorf("offset %d (%q): value %s, want %s", i, v.value, got, v.jsonb)
		}
		if (raw == nil) != (v.value == nil) || string(raw) != string(v.value) {
			t.Errorf("offset %d: value_bytes %q, want %q", i, raw, v.value)
		}
	}
	if s.DeadLetters() != 0 {
		t.Errorf("raw mode dead-lettered %d records", s.DeadLetters())
	}
}

// TestWriteRetriesAcrossRestart: a Write that finds PostgreSQL gone waits
// for it and succeeds, and nothing is written twice.
func TestWriteRetriesAcrossRestart(t *testing.T) {
	pg, s, conn, n := start(t, "retry_timeout=60s", "")
	write(t, s, block("orders", 0, 1, 0, 100, sinktest.Seq(0, 100)...))

	pg.Stop()
	done := make(chan error, 1)
	go func() {
		done <- s.Write(context.Background(), block("orders", 0, 1, 100, 200, sinktest.Seq(100, 200)...))
	}()
	select {
	case err := <-done:
		t.Fatalf("Write with the server down returned: %v", err)
	case <-time.After(time.Second):
	}
	pg.Start()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Write across the restart: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Write still retrying 30s after the server came back")
	}
	if s.Retries() == 0 {
		t.Error("Retries() = 0 after a write that waited for the server")
	}
	conn = db(t, pg) // the first connection died with the server
	if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(DISTINCT "offset") FROM rows_%d`, n)); got != 200 {
		t.Errorf("%d rows, want 200", got)
	}
	if next, _, _ := resume(t, s, "orders", 0); next != 200 {
		t.Errorf("next %d, want 200", next)
	}

	// A cancelled context ends the retries.
	pg.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := s.Write(ctx, block("orders", 0, 1, 200, 201, 200))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Write with the server down until the deadline: %v, want context.DeadlineExceeded", err)
	}
	pg.Start()
}

// TestNoRetry: retry_timeout=0 fails at once.
func TestNoRetry(t *testing.T) {
	pg := harness.StartPostgres(t)
	url, _ := sinkURL(pg, "retry_timeout=0s")
	s := open(t, url)
	pg.Stop()
	start := time.Now()
	if err := s.Write(context.Background(), block("orders", 0, 1, 0, 1, 0)); err == nil {
		t.Fatal("Write with the server down: nil")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Write without retries took %s", d)
	}
	if s.Retries() != 0 {
		t.Errorf("Retries() = %d with retry_timeout=0", s.Retries())
	}
	pg.Start()
}

func TestGroupOption(t *testing.T) {
	pg := harness.StartPostgres(t)
	base := pg.URL() + "&table=r&offsets_table=o&dead_letter_table=d"
	if _, err := postgres.New(context.Background(), base); !errors.Is(err, postgres.ErrURL) {
		t.Errorf("New without a group: %v, want ErrURL", err)
	}
	if _, err := postgres.New(context.Background(), base+"&group=a", postgres.WithGroup("b")); !errors.Is(err, postgres.ErrURL) {
		t.Errorf("New with group=a and WithGroup(b): %v, want ErrURL", err)
	}
	s := open(t, base, postgres.WithGroup("orders"))
	if s.Group() != "orders" {
		t.Errorf("Group() = %q", s.Group())
	}
	// Groups keep separate offsets in one table.
	other := open(t, base+"&group=other")
	write(t, s, block("t", 0, 1, 0, 5, sinktest.Seq(0, 5)...))
	if _, _, ok := resume(t, other, "t", 0); ok {
		t.Error("another group sees this group's offsets")
	}
}

// TestRawDeadLetters: in raw mode only a constraint or trigger added to the
// table refuses rows; those go to the dead-letter table and the rest of the
// block goes in, on the first write and on a re-delivery alike.
func TestRawDeadLetters(t *testing.T) {
	_, s, conn, n := start(t, "", "")
	if _, err := conn.Exec(context.Background(), fmt.Sprintf(`ALTER TABLE rows_%d ADD CHECK (key <> 'k13' AND key <> 'k27')`, n)); err != nil {
		t.Fatal(err)
	}
	write(t, s, block("orders", 0, 1, 0, 40, sinktest.Seq(0, 40)...))
	if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d`, n)); got != 38 {
		t.Errorf("%d rows, want 38", got)
	}
	var why string
	if err := conn.QueryRow(context.Background(), fmt.Sprintf(`SELECT string_agg("offset" || ': ' || error, '; ' ORDER BY "offset") FROM dead_%d`, n)).Scan(&why); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(why, "13: ") || !strings.Contains(why, "; 27: ") || strings.Count(why, "check constraint") != 2 {
		t.Errorf("dead letters: %s", why)
	}
	// An operator reset re-delivers 10..40: held rows are skipped, the
	// refused ones are refused again, once each.
	b := block("orders", 0, 1, 10, 40, sinktest.Seq(10, 40)...)
	b.Generation = 1
	write(t, s, b)
	if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d`, n)); got != 38 {
		t.Errorf("after a re-delivery: %d rows, want 38", got)
	}
	if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM dead_%d`, n)); got != 2 {
		t.Errorf("after a re-delivery: %d dead letters, want 2", got)
	}
	if s.DeadLetters() != 4 {
		t.Errorf("DeadLetters() = %d, want 4 (two per delivery)", s.DeadLetters())
	}
	if next, gen, _ := resume(t, s, "orders", 0); next != 40 || gen != 1 {
		t.Errorf("next %d generation %d, want 40, 1", next, gen)
	}
}
