package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
	"github.com/offsetkeeper/offsetkeeper/sinks/sinktest"
)

// kvTable is the table of most upsert tests: the integration test's shape.
const kvTable = `CREATE TABLE %s (id bigint PRIMARY KEY, v text, kafka_offset bigint)`

// kv is a record of an upsert test: key and value as given (nil for none).
type kv struct {
	key, value string
	noKey      bool // a nil key
	tombstone  bool // a nil value
}

// kvBlock makes a block of records at offsets from, from+1, ...
func kvBlock(topic string, partition int, epoch, from int64, recs ...kv) *sinks.Block {
	b := &sinks.Block{Topic: topic, Partition: partition, Epoch: epoch, From: from, Next: from + int64(len(recs))}
	for i, r := range recs {
		rec := sinks.Record{Offset: from + int64(i), Time: time.UnixMilli(1714564800000 + int64(i)).UTC()}
		if !r.noKey {
			rec.Key = []byte(r.key)
		}
		if !r.tombstone {
			rec.Value = []byte(r.value)
		}
		b.Records = append(b.Records, rec)
	}
	return b
}

// upd and del are kv records with a JSON object key {"id": id}.
func upd(id int, v string) kv {
	return kv{key: fmt.Sprintf(`{"id":%d}`, id), value: fmt.Sprintf(`{"v":%q}`, v)}
}
func del(id int) kv { return kv{key: fmt.Sprintf(`{"id":%d}`, id), tombstone: true} }

// table reads a two-column table as "id=v" in id order.
func table(t *testing.T, conn *pgx.Conn, sql string) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id int64
		var v *string
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		s := "<null>"
		if v != nil {
			s = *v
		}
		out = append(out, fmt.Sprintf("%d=%s", id, s))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, " ")
}

func kvRows(t *testing.T, conn *pgx.Conn, n int64) string {
	t.Helper()
	return table(t, conn, fmt.Sprintf(`SELECT id, v FROM rows_%d ORDER BY id`, n))
}

// deadLetters reads the dead-letter table as offset → error.
func deadLetters(t *testing.T, conn *pgx.Conn, n int64) map[int64]string {
	t.Helper()
	rows, err := conn.Query(context.Background(), fmt.Sprintf(`SELECT "offset", error FROM dead_%d`, n))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var o int64
		var why string
		if err := rows.Scan(&o, &why); err != nil {
			t.Fatal(err)
		}
		out[o] = why
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUpsertSameKeyInBlock: the same key several times in one block is
// merged, the last record winning, a tombstone last deleting; a block
// written again adds nothing; a WriteBlocks of partitions that share keys
// goes in too.
func TestUpsertSameKeyInBlock(t *testing.T) {
	_, s, conn, n := start(t, "mode=upsert", kvTable)
	write(t, s, kvBlock("kv", 0, 1, 0,
		upd(1, "a"), upd(2, "a"), upd(1, "b"), upd(3, "a"), del(2), upd(1, "c"), // 1 ends updated, 2 deleted
		upd(4, "a"), del(4), upd(4, "b"), // 4: a tombstone in the middle
		del(5),                           // a key the table does not hold
		upd(6, "a"), upd(6, "b"), del(6), // ends with a tombstone
	))
	if got, want := kvRows(t, conn, n), "1=c 3=a 4=b"; got != want {
		t.Errorf("rows %q, want %q", got, want)
	}
	if got := queryInt(t, conn, fmt.Sprintf(`SELECT kafka_offset FROM rows_%d WHERE id = 1`, n)); got != 5 {
		t.Errorf("id 1 from offset %d, want 5 (the last)", got)
	}
	// The next block updates and deletes rows of the table.
	next := kvBlock("kv", 0, 1, 13, upd(3, "b"), del(1), upd(2, "again"), del(3), upd(3, "c"))
	write(t, s, next)
	want := "2=again 3=c 4=b"
	if got := kvRows(t, conn, n); got != want {
		t.Errorf("after the second block: rows %q, want %q", got, want)
	}
	// A replay of the first block (a crash before the etcd commit) must not
	// bring 1 back nor undo the second block.
	write(t, s, kvBlock("kv", 0, 1, 0, upd(1, "a"), upd(2, "a"), upd(1, "b"), upd(3, "a"), del(2), upd(1, "c")))
	write(t, s, next)
	if got := kvRows(t, conn, n); got != want {
		t.Errorf("after replays: rows %q, want %q", got, want)
	}
	if next, _, _ := resume(t, s, "kv", 0); next != 18 {
		t.Errorf("next %d, want 18", next)
	}
	// Two partitions of one WriteBlocks touching the same keys: the call
	// is one transaction, and each key ends as one of them left it.
	writeBlocks(t, s,
		kvBlock("kv", 2, 1, 0, upd(7, "p2"), upd(8, "p2"), del(9)),
		kvBlock("kv", 1, 1, 0, upd(7, "p1"), del(8), upd(9, "p1")),
	)
	got := table(t, conn, fmt.Sprintf(`SELECT id, v FROM rows_%d WHERE id >= 7 ORDER BY id`, n))
	if !slices.Contains([]string{"7=p1 9=p1", "7=p2 8=p2"}, got) {
		t.Errorf("keys shared by two partitions: %q, want the state one of them left", got)
	}
	if s.DeadLetters() != 0 || s.IgnoredTombstones() != 0 {
		t.Errorf("DeadLetters() = %d, IgnoredTombstones() = %d; want 0, 0", s.DeadLetters(), s.IgnoredTombstones())
	}
}

// TestUpsertDeletesFalse: deletes=false ignores tombstones and counts
// them; the earlier update of the same key in the block goes in.
func TestUpsertDeletesFalse(t *testing.T) {
	_, s, conn, n := start(t, "mode=upsert&deletes=false", kvTable)
	write(t, s, kvBlock("kv", 0, 1, 0, upd(1, "a"), upd(2, "a")))
	write(t, s, kvBlock("kv", 0, 1, 2, del(1), upd(2, "b"), del(2), kv{key: "3", tombstone: true}))
	if got, want := kvRows(t, conn, n), "1=a 2=b"; got != want {
		t.Errorf("rows %q, want %q", got, want)
	}
	if got := s.IgnoredTombstones(); got != 3 {
		t.Errorf("IgnoredTombstones() = %d, want 3", got)
	}
	if got := s.DeadLetters(); got != 0 {
		t.Errorf("DeadLetters() = %d, want 0", got)
	}
}

// customers is the Debezium tests' table: the source's, as replicated.
const customers = `CREATE TABLE %s (id integer PRIMARY KEY, name text NOT NULL, email text)`

// dbz is a Debezium change event of the customers table: op, before and
// after as JSON ("null" for none); wrapped adds the JsonConverter's
// schema/payload envelope to the value and the key.
func dbz(id int, op, before, after string, wrapped bool) kv {
	key := fmt.Sprintf(`{"id":%d}`, id)
	value := fmt.Sprintf(`{"before":%s,"after":%s,"source":{"connector":"postgresql","db":"shop","table":"customers","lsn":%d},"op":%q,"ts_ms":1714564800000,"transaction":null}`,
		before, after, 1000+id, op)
	if wrapped {
		key = `{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,"name":"shop.public.customers.Key"},"payload":` + key + `}`
		value = `{"schema":{"type":"struct","fields":[{"type":"struct","field":"before"},{"type":"struct","field":"after"}],"optional":false,"name":"shop.public.customers.Envelope"},"payload":` + value + `}`
	}
	return kv{key: key, value: value}
}

// row is a customers row as Debezium shows it.
func row(id int, name string) string {
	return fmt.Sprintf(`{"id":%d,"name":%q,"email":"%s@example.com"}`, id, name, strings.ToLower(name))
}

// tombstone is Debezium's tombstone after a delete: the key, no value.
func tombstone(id int, wrapped bool) kv {
	k := dbz(id, "d", "null", "null", wrapped)
	return kv{key: k.key, tombstone: true}
}

// TestUpsertDebezium: a Debezium stream (snapshot reads, inserts, updates,
// deletes and the tombstones after them, with and without the schema
// wrapper, split over blocks) leaves the table as the source ends, with
// the Kafka key or the event's before and after giving the key.
func TestUpsertDebezium(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := db(t, pg)
	blocks := [][]kv{
		{ // the snapshot, plain
			dbz(1, "r", "null", row(1, "Ada"), false),
			dbz(2, "r", "null", row(2, "Bob"), false),
			dbz(3, "r", "null", row(3, "Cy"), false),
		},
		{ // wrapped, as the JsonConverter with schemas.enable=true writes
			dbz(4, "c", "null", row(4, "Dee"), true),
			dbz(1, "u", row(1, "Ada"), row(1, "Ada Lovelace"), true),
			dbz(2, "d", row(2, "Bob"), "null", true),
			tombstone(2, true),
			dbz(5, "c", "null", row(5, "Eve"), false),
			dbz(5, "u", row(5, "Eve"), row(5, "Eve Again"), true),
			dbz(6, "c", "null", row(6, "Fay"), false),
			dbz(6, "d", `{"id":6}`, "null", false), // REPLICA IDENTITY DEFAULT: before holds the key only
		},
		{
			tombstone(6, false), // in the next block
			dbz(3, "u", row(3, "Cy"), row(3, "Cyrus"), false),
			dbz(7, "t", "null", "null", false), // a truncate: not applied
			dbz(4, "d", row(4, "Dee"), "null", false),
			tombstone(4, false),
			dbz(4, "c", "null", row(4, "Dee Returns"), true), // the key comes back
		},
	}
	want := "1=Ada Lovelace 3=Cyrus 4=Dee Returns 5=Eve Again"
	for _, tc := range []struct {
		params  string
		ignored int64 // the tombstones that cannot delete
	}{
		{"mode=upsert&envelope=debezium", 0},
		{"mode=upsert&envelope=debezium&key_from=value", 3},
	} {
		t.Run(tc.params, func(t *testing.T) {
			s, n := newSink(t, pg, tc.params, customers)
			var from int64
			for _, recs := range blocks {
				b := kvBlock("shop.public.customers", 0, 1, from, recs...)
				write(t, s, b)
				from = b.Next
			}
			if got := table(t, conn, fmt.Sprintf(`SELECT id, name FROM rows_%d ORDER BY id`, n)); got != want {
				t.Errorf("rows %q, want %q", got, want)
			}
			if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d WHERE email = lower(name) || '@example.com'`, n)); got != 4 {
				t.Errorf("%d rows with their email, want 4", got)
			}
			dead := deadLetters(t, conn, n)
			if len(dead) != 1 || !strings.Contains(dead[int64(len(blocks[0])+len(blocks[1])+2)], `op "t"`) {
				t.Errorf("dead letters %v, want the truncate only", dead)
			}
			if got := s.IgnoredTombstones(); got != tc.ignored {
				t.Errorf("IgnoredTombstones() = %d, want %d", got, tc.ignored)
			}
		})
	}
}

// TestUpsertDeadLetters: records that cannot be applied (no key, a key
// without its column, a value of the wrong type, a NOT NULL violation, no
// JSON object) go to the dead-letter table with the reason; their
// neighbours go in, a bad record's earlier update of its key included; a
// replay adds nothing.
func TestUpsertDeadLetters(t *testing.T) {
	_, s, conn, n := start(t, "mode=upsert", `CREATE TABLE %s (id bigint PRIMARY KEY, v text NOT NULL, n integer CHECK (n >= 0), kafka_offset bigint)`)
	b := kvBlock("kv", 0, 1, 0,
		upd(1, "a"),                                        // 0
		kv{noKey: true, value: `{"v":"x"}`},                // 1
		kv{key: `{"id":"abc"}`, value: `{"v":"x"}`},        // 2
		kv{key: `{"id":3}`, value: `{"v":"x","n":"many"}`}, // 3
		kv{key: `{"id":4}`, value: `{"n":1}`},              // 4
		upd(5, "a5"),                                       // 5
		kv{key: `{"other":6}`, value: `{"v":"x"}`},         // 6
		kv{key: `[1]`, value: `{"v":"x"}`},                 // 7
		kv{key: `{"id":8}`, value: `not json`},             // 8
		upd(1, "b"),                                        // 9
		kv{key: `10`, value: `{"v":"scalar"}`},             // 10
		kv{key: `{"id":5}`, value: `{"v":null}`},           // 11: the last of key 5 is refused
		kv{key: `{"id":null}`, value: `{"v":"x"}`},         // 12
		kv{key: `{"id":13}`, value: `{"v":"x","n":-1}`},    // 13
		kv{key: `{"id":14}`, value: `[1, 2]`},              // 14
		kv{key: ``, value: `{"v":"x"}`},                    // 15
		kv{key: `"16"`, value: `{"v":"quoted"}`},           // 16
		kv{key: `{"id":17}`, value: `{"v":"a\u0000b"}`},    // 17
	)
	write(t, s, b)
	wantRows := "1=b 5=a5 10=scalar 16=quoted"
	if got := kvRows(t, conn, n); got != wantRows {
		t.Errorf("rows %q, want %q", got, wantRows)
	}
	wantDead := map[int64]string{
		1:  "no key",
		2:  "invalid input syntax for type bigint",
		3:  "invalid input syntax for type integer",
		4:  `null value in column "v"`,
		6:  `no field "id"`,
		7:  "JSON array",
		8:  "not JSON",
		11: `null value in column "v"`,
		12: `"id" (key column) is null`,
		13: "check constraint",
		14: "JSON array",
		15: "empty",
		17: `\u0000`,
	}
	check := func(when string) {
		t.Helper()
		dead := deadLetters(t, conn, n)
		for o, says := range wantDead {
			if !strings.Contains(dead[o], says) {
				t.Errorf("%s: dead letter %d: %q, want it to say %q", when, o, dead[o], says)
			}
		}
		for o, why := range dead {
			if _, ok := wantDead[o]; !ok {
				t.Errorf("%s: offset %d dead-lettered: %s", when, o, why)
			}
		}
		if got := s.DeadLetters(); got != int64(len(wantDead)) {
			t.Errorf("%s: DeadLetters() = %d, want %d", when, got, len(wantDead))
		}
		if next, _, _ := resume(t, s, "kv", 0); next != b.Next {
			t.Errorf("%s: next %d, want %d", when, next, b.Next)
		}
	}
	check("first write")
	write(t, s, b) // a replay
	if got := kvRows(t, conn, n); got != wantRows {
		t.Errorf("after a replay: rows %q, want %q", got, wantRows)
	}
	check("after a replay")
}

// TestUpsertKeyFromValue: key_from=value takes the key columns from the
// value, with the record key ignored; tombstones cannot delete, so they
// are ignored and counted (deletes=true is refused), and a value without
// the key columns is a dead letter. conflict= names a unique constraint
// to find rows by; a serial column keeps its value on update.
func TestUpsertKeyFromValue(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := db(t, pg)
	t.Run("NoTombstones", func(t *testing.T) {
		s, n := newSink(t, pg, "mode=upsert&key_from=value", kvTable)
		write(t, s, kvBlock("kv", 0, 1, 0,
			kv{key: "ignored", value: `{"id":1,"v":"a"}`},
			kv{noKey: true, value: `{"id":2,"v":"a"}`},
			kv{noKey: true, value: `{"id":1,"v":"b"}`},
			kv{noKey: true, value: `{"v":"no id"}`},
		))
		write(t, s, kvBlock("kv", 0, 1, 4, kv{noKey: true, value: `{"id":"2","v":"c"}`}))
		if got, want := kvRows(t, conn, n), "1=b 2=c"; got != want {
			t.Errorf("rows %q, want %q", got, want)
		}
		if dead := deadLetters(t, conn, n); len(dead) != 1 || !strings.Contains(dead[3], `value has no field "id"`) {
			t.Errorf("dead letters %v, want offset 3's, for its missing id", dead)
		}
	})
	t.Run("Tombstones", func(t *testing.T) {
		s, n := newSink(t, pg, "mode=upsert&key_from=value", kvTable)
		write(t, s, kvBlock("kv", 0, 1, 0,
			kv{key: `{"id":1}`, value: `{"id":1,"v":"a"}`},
			kv{key: `{"id":1}`, tombstone: true},
			kv{key: `{"id":2}`, value: `{"id":2,"v":"a"}`},
		))
		write(t, s, kvBlock("kv", 0, 1, 3, kv{key: `{"id":2}`, tombstone: true}, kv{key: `2`, tombstone: true}))
		if got, want := kvRows(t, conn, n), "1=a 2=a"; got != want {
			t.Errorf("rows %q, want %q: tombstones cannot delete with key_from=value", got, want)
		}
		if got := s.IgnoredTombstones(); got != 3 {
			t.Errorf("IgnoredTombstones() = %d, want 3", got)
		}
		if got := s.DeadLetters(); got != 0 {
			t.Errorf("DeadLetters() = %d, want 0: an ignored tombstone is no dead letter", got)
		}
		url, _ := sinkURL(pg, "mode=upsert&key_from=value&deletes=true")
		if _, err := postgres.New(context.Background(), url); !errors.Is(err, postgres.ErrURL) || !strings.Contains(err.Error(), "deletes=true") {
			t.Errorf("New with key_from=value&deletes=true: %v, want ErrURL naming deletes=true", err)
		}
	})
	t.Run("Conflict", func(t *testing.T) {
		s, n := newSink(t, pg, "mode=upsert&key_from=value&conflict=by_code&deletes=false",
			`CREATE TABLE %s (seq bigserial PRIMARY KEY, region text, code integer, v text, CONSTRAINT by_code UNIQUE (region, code))`)
		write(t, s, kvBlock("kv", 0, 1, 0,
			kv{value: `{"region":"eu","code":1,"v":"a"}`},
			kv{value: `{"region":"us","code":1,"v":"a"}`},
			kv{value: `{"region":"eu","code":2,"v":"a"}`},
			kv{value: `{"region":"eu","code":1,"v":"b","seq":999}`}, // seq is no key column: taken from the value
		))
		first := table(t, conn, fmt.Sprintf(`SELECT seq, region || code || v FROM rows_%d ORDER BY seq`, n))
		write(t, s, kvBlock("kv", 0, 1, 4, kv{value: `{"region":"us","code":1,"v":"c"}`}, kv{value: `{"region":"eu","code":2}`}))
		got := table(t, conn, fmt.Sprintf(`SELECT seq, region || code || coalesce(v, '-') FROM rows_%d ORDER BY seq`, n))
		// The merged rows go in key order, so the new ones take their serials
		// in that order; an update keeps its row's.
		if want := "1=eu2- 2=us1c 999=eu1b"; got != want {
			t.Errorf("rows %q (after the first block %q), want %q", got, first, want)
		}
	})
}

// TestUpsertScalarKeys: a key that is not a JSON object is the value of
// the single key column, as text its type reads; a table with a key of
// two columns needs a JSON object.
func TestUpsertScalarKeys(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := db(t, pg)
	s, n := newSink(t, pg, "mode=upsert", `CREATE TABLE %s (k text PRIMARY KEY, v text)`)
	write(t, s, kvBlock("kv", 0, 1, 0,
		kv{key: `123`, value: `{"v":"number"}`},
		kv{key: `"quoted"`, value: `{"v":"string"}`},
		kv{key: `plain text`, value: `{"v":"text"}`},
		kv{key: `1e3`, value: `{"v":"kept as written"}`},
		kv{key: `{"k":"obj"}`, value: `{"v":"object"}`},
		kv{key: `plain text`, tombstone: true},
	))
	got := table(t, conn, fmt.Sprintf(`SELECT row_number() OVER (ORDER BY k), k || ':' || v FROM rows_%d ORDER BY k`, n))
	if want := "1=123:number 2=1e3:kept as written 3=obj:object 4=quoted:string"; got != want {
		t.Errorf("rows %q, want %q", got, want)
	}

	s2, n2 := newSink(t, pg, "mode=upsert", `CREATE TABLE %s (a integer, b integer, v text, PRIMARY KEY (a, b))`)
	write(t, s2, kvBlock("kv", 0, 1, 0,
		kv{key: `{"a":1,"b":2}`, value: `{"v":"x"}`},
		kv{key: `1`, value: `{"v":"y"}`},
		kv{key: `{"a":1}`, value: `{"v":"z"}`},
	))
	dead := deadLetters(t, conn, n2)
	if !strings.Contains(dead[1], "2 columns (a, b)") || !strings.Contains(dead[2], `no field "b"`) || len(dead) != 2 {
		t.Errorf("dead letters %v", dead)
	}
}

// TestUpsertFencedAndReset: a zombie's block changes nothing; after an
// operator reset backwards the older values are applied again, as asked.
func TestUpsertFencedAndReset(t *testing.T) {
	_, s, conn, n := start(t, "mode=upsert", kvTable)
	write(t, s, kvBlock("kv", 0, 2, 0, upd(1, "a"), upd(2, "a")))
	write(t, s, kvBlock("kv", 0, 2, 2, upd(1, "b"), del(2)))
	err := s.Write(context.Background(), kvBlock("kv", 0, 1, 4, upd(1, "zombie"), upd(3, "zombie")))
	if !errors.Is(err, sinks.ErrFenced) {
		t.Fatalf("Write from epoch 1 after epoch 2: %v, want sinks.ErrFenced", err)
	}
	if got, want := kvRows(t, conn, n), "1=b"; got != want {
		t.Errorf("after a zombie: rows %q, want %q", got, want)
	}
	reset := kvBlock("kv", 0, 2, 0, upd(1, "a"), upd(2, "a"))
	reset.Generation = 1
	write(t, s, reset)
	if got, want := kvRows(t, conn, n), "1=a 2=a"; got != want {
		t.Errorf("after a reset to 0: rows %q, want %q", got, want)
	}
	if next, gen, _ := resume(t, s, "kv", 0); next != 2 || gen != 1 {
		t.Errorf("next %d generation %d, want 2, 1", next, gen)
	}
}

// TestUpsertNeedsKey: New refuses a table upsert mode cannot key, and
// says why.
func TestUpsertNeedsKey(t *testing.T) {
	pg := harness.StartPostgres(t)
	for _, tc := range []struct {
		params, create, says string
	}{
		{"mode=upsert", "", "does not exist"},
		{"mode=upsert", `CREATE TABLE %s (id bigint, v text)`, "has no primary key"},
		{"mode=upsert&conflict=nope", `CREATE TABLE %s (id bigint PRIMARY KEY, v text UNIQUE)`, `no primary key or unique constraint named "nope"`},
		{"mode=upsert&conflict=late", `CREATE TABLE %s (id bigint, CONSTRAINT late UNIQUE (id) DEFERRABLE)`, "deferrable"},
		{"mode=upsert", `CREATE TABLE %s (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text)`, "generated"},
		{"mode=upsert", `CREATE TABLE %s (kafka_offset bigint PRIMARY KEY, v text)`, "record's position"},
	} {
		url, n := sinkURL(pg, tc.params)
		if tc.create != "" {
			pg.Exec(t, fmt.Sprintf(tc.create, fmt.Sprintf("rows_%d", n)))
		}
		s, err := postgres.New(context.Background(), url)
		if err == nil {
			_ = s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s, %q: New: %v, want an error saying %q", tc.params, tc.create, err, tc.says)
		}
	}
	// The key of a unique constraint named by conflict= will do.
	url, n := sinkURL(pg, "mode=upsert&conflict=one_id")
	pg.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (id bigint, v text, CONSTRAINT one_id UNIQUE (id))`, n))
	write(t, open(t, url), kvBlock("kv", 0, 1, 0, upd(1, "a"), upd(1, "b")))
}

// TestUpsertConformance runs sinktest for upsert mode without a Reader: a
// table that keeps one row per key cannot give back the records written
// (the suite's values are any bytes, its keys repeat across partitions and
// its tombstones delete), so the subtests that read back are skipped; the
// others (fencing, replays, contexts, Close, concurrency, the upgrades)
// run, on a table the suite's plain records fit.
func TestUpsertConformance(t *testing.T) {
	pg := harness.StartPostgres(t)
	sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
		s, _ := newSink(t, pg, "mode=upsert", `CREATE TABLE %s (k text PRIMARY KEY, n bigint)`)
		return s, nil
	}, sinktest.Options{ReplayExact: true, ReplayOverlap: true, Fences: true})
}
