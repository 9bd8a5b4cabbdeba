package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
)

// wire stands for a key or value as a Schema Registry serializer writes
// it: the magic byte, the schema id, then a body that is neither UTF-8 nor
// JSON, so that a sink that stores the JSON for it is caught.
func wire(id int, body string) []byte {
	b := []byte{0, byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id), 0xff}
	return append(b, body...)
}

// rec is a record the replica decoded: key and value are the JSON ("" for
// none), decoded with schema ks or vs (nil: that one was not decoded, so
// it is its own bytes).
func rec(key string, ks *sinks.Schema, value string, vs *sinks.Schema) sinks.Record {
	r := sinks.Record{Decoded: &sinks.Decoded{KeySchema: ks, ValueSchema: vs}}
	if key != "" {
		r.Key = []byte(key)
		if ks != nil {
			r.Decoded.KeyBytes = wire(ks.ID, key)
		}
	}
	if value != "" {
		r.Value = []byte(value)
		if vs != nil {
			r.Decoded.ValueBytes = wire(vs.ID, value)
		}
	}
	return r
}

// undecodable is a record the replica could not decode: its key and value
// are the bytes as they were in Kafka.
func undecodable(why string) sinks.Record {
	return sinks.Record{Key: []byte{0, 0, 0, 0, 9, 0xfe}, Value: []byte{0, 0, 0, 0, 9, 0xff, 'x'}, Decoded: &sinks.Decoded{Err: why}}
}

// recBlock puts recs at offsets from, from+1, ... of one block.
func recBlock(topic string, partition int, from int64, recs ...sinks.Record) *sinks.Block {
	b := &sinks.Block{Topic: topic, Partition: partition, Epoch: 1, From: from, Next: from + int64(len(recs))}
	for i, r := range recs {
		r.Offset = from + int64(i)
		r.Time = time.UnixMilli(1714564800000 + r.Offset).UTC()
		b.Records = append(b.Records, r)
	}
	return b
}

// put writes b within 30 seconds.
func put(t *testing.T, s sinks.Sink, b *sinks.Block) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Write(ctx, b); err != nil {
		t.Fatalf("Write %s: %v", b, err)
	}
}

// wireKey and wireValue are what the sink must keep of r: the bytes as
// they were in Kafka.
func wireKey(r *sinks.Record) []byte {
	if r.Decoded != nil && r.Decoded.KeyBytes != nil {
		return r.Decoded.KeyBytes
	}
	return r.Key
}

func wireValue(r *sinks.Record) []byte {
	if r.Decoded != nil && r.Decoded.ValueBytes != nil {
		return r.Decoded.ValueBytes
	}
	return r.Value
}

func field(name string, kind sinks.FieldKind) sinks.Field {
	return sinks.Field{Name: name, Type: sinks.FieldType{Kind: kind}}
}

var (
	orderKey = &sinks.Schema{ID: 8, Format: sinks.Avro, Subject: "shop.OrderKey", Fields: []sinks.Field{field("id", sinks.Long)}}
	orderV1  = &sinks.Schema{ID: 7, Format: sinks.Avro, Subject: "shop.Order", Fields: []sinks.Field{field("id", sinks.Long), field("v", sinks.String)}}
)

// TestRawDecoded: raw mode keeps a decoded record's JSON in value and its
// bytes as they were in Kafka in key and value_bytes, on the COPY path and
// on the staging path of a re-delivery; ReadAll gives those bytes back.
func TestRawDecoded(t *testing.T) {
	pg, s, conn, n := start(t, "", "")
	url := fmt.Sprintf("%s&group=g&table=rows_%d&offsets_table=offsets_%d&dead_letter_table=dead_%d", pg.URL(), n, n, n)
	recs := []sinks.Record{
		rec(`{"id":1}`, orderKey, `{"id":1,"v":"a"}`, orderV1), // key and value decoded
		rec(`k-plain`, nil, `{"id":2,"v":"b"}`, orderV1),       // the value only: a json key
		rec(`{"id":3}`, orderKey, "", nil),                     // a tombstone with a decoded key
		rec("", nil, `{"id":4,"v":"d"}`, orderV1),              // no key
		{Key: []byte("k5"), Value: []byte(`{"plain":5}`)},      // not decoded at all
	}
	b := recBlock("orders", 0, 0, recs...)
	put(t, s, b)
	// A re-delivery after an operator reset goes through the staging table:
	// offsets 5 and 6 are new there.
	again := recBlock("orders", 0, 0, append(recs, rec(`{"id":6}`, orderKey, `{"id":6,"v":"f"}`, orderV1), rec(`{"id":7}`, orderKey, `{"id":7,"v":"g"}`, orderV1))...)
	again.Generation = 1
	put(t, s, again)

	ctx := context.Background()
	for _, r := range again.Records {
		var key, raw []byte
		var same *bool
		err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT key, value_bytes, value = $2::text::jsonb FROM rows_%d WHERE "offset" = $1`, n), r.Offset, nullable(r.Value)).
			Scan(&key, &raw, &same)
		if err != nil {
			t.Fatalf("offset %d: %v", r.Offset, err)
		}
		if !bytes.Equal(key, wireKey(&r)) || (key == nil) != (wireKey(&r) == nil) {
			t.Errorf("offset %d: key %q, want %q", r.Offset, key, wireKey(&r))
		}
		if !bytes.Equal(raw, wireValue(&r)) || (raw == nil) != (r.Value == nil) {
			t.Errorf("offset %d: value_bytes %q, want %q", r.Offset, raw, wireValue(&r))
		}
		if r.Value != nil && (same == nil || !*same) {
			t.Errorf("offset %d: value is not the decoded JSON %s", r.Offset, r.Value)
		}
	}
	if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d WHERE value IS NULL`, n)); got != 1 {
		t.Errorf("%d rows with value NULL, want 1 (the tombstone)", got)
	}
	read, err := postgres.ReadAll(ctx, url, "orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != len(again.Records) {
		t.Fatalf("ReadAll: %d records, want %d", len(read), len(again.Records))
	}
	for i := range read {
		w := &again.Records[i]
		if !bytes.Equal(read[i].Key, wireKey(w)) || !bytes.Equal(read[i].Value, wireValue(w)) || (read[i].Value == nil) != (w.Value == nil) {
			t.Errorf("ReadAll offset %d: key %q value %q, want the bytes as in Kafka %q %q", w.Offset, read[i].Key, read[i].Value, wireKey(w), wireValue(w))
		}
	}
	if s.DeadLetters() != 0 || s.IgnoredFields() != 0 {
		t.Errorf("DeadLetters() = %d, IgnoredFields() = %d; want 0, 0", s.DeadLetters(), s.IgnoredFields())
	}
}

// nullable is b as a query argument: NULL for nil.
func nullable(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// TestUndecodableDeadLetters: in every mode a record the replica could not
// decode goes to the dead-letter table with the replica's reason and its
// bytes as they were, in the block's transaction, and is counted; its
// neighbours go in.
func TestUndecodableDeadLetters(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := db(t, pg)
	ctx := context.Background()
	for _, m := range []struct{ mode, create string }{
		{"raw", ""},
		{"columns", `CREATE TABLE %s (id bigint, v text, kafka_offset bigint)`},
		{"upsert", kvTable},
	} {
		t.Run(m.mode, func(t *testing.T) {
			s, n := newSink(t, pg, "mode="+m.mode, m.create)
			if dl, ok := sinks.As[sinks.DeadLetterer](s); !ok || !dl.TakesUndecodable() {
				t.Fatalf("mode=%s: not a DeadLetterer that takes undecodable records", m.mode)
			}
			b := recBlock("orders", 0, 0,
				rec(`{"id":1}`, orderKey, `{"id":1,"v":"a"}`, orderV1),
				undecodable("schema id 9 not found in the registry"),
				rec(`{"id":2}`, orderKey, `{"id":2,"v":"b"}`, orderV1),
				undecodable("avro: bytes do not match schema 7"),
			)
			// The dead letters commit with the rows and the offsets, or not
			// at all: a write whose offsets update fails stores none.
			for _, q := range []string{
				`CREATE OR REPLACE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$`,
				fmt.Sprintf(`CREATE TRIGGER refuse BEFORE UPDATE ON offsets_%d FOR EACH ROW EXECUTE FUNCTION refuse()`, n),
			} {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Write(ctx, b); err == nil {
				t.Fatal("Write with the offsets update refused: nil")
			}
			if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM dead_%d`, n)); got != 0 {
				t.Fatalf("%d dead letters stored by a write that failed", got)
			}
			if _, err := conn.Exec(ctx, fmt.Sprintf(`DROP TRIGGER refuse ON offsets_%d`, n)); err != nil {
				t.Fatal(err)
			}
			put(t, s, b)
			put(t, s, b) // a replay adds nothing
			got := map[int64]string{}
			rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT "offset", key, value, error FROM dead_%d ORDER BY "offset"`, n))
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var off int64
				var key, value []byte
				var why string
				if err := rows.Scan(&off, &key, &value, &why); err != nil {
					t.Fatal(err)
				}
				got[off] = why
				if w := &b.Records[off]; !bytes.Equal(key, w.Key) || !bytes.Equal(value, w.Value) {
					t.Errorf("dead letter %d: key %q value %q, want the bytes %q %q", off, key, value, w.Key, w.Value)
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			want := map[int64]string{1: "schema id 9 not found in the registry", 3: "avro: bytes do not match schema 7"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("dead letters %v, want %v", got, want)
			}
			if s.DeadLetters() != 2 {
				t.Errorf("DeadLetters() = %d, want 2", s.DeadLetters())
			}
			table := map[string]string{"raw": `"offset"`, "columns": "kafka_offset", "upsert": "kafka_offset"}[m.mode]
			if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d WHERE %s IN (0, 2)`, n, table)); got != 2 {
				t.Errorf("%d rows of the decoded records, want 2", got)
			}
			if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d`, n)); got != 2 {
				t.Errorf("%d rows, want 2", got)
			}
			if next, _, _ := resume(t, s, "orders", 0); next != 4 {
				t.Errorf("next %d, want 4", next)
			}
		})
	}
}

// logical is every kind of field with a column of the matching type: the
// field's decoded JSON, and the column's value as text (TimeZone UTC).
var logical = []struct {
	col, typ string
	kind     sinks.FieldType
	json     string
	want     string
}{
	{"ts", "timestamptz", sinks.FieldType{Kind: sinks.Timestamp}, `"2024-05-01T12:00:00.123Z"`, "2024-05-01 12:00:00.123+00"},
	{"lts", "timestamp", sinks.FieldType{Kind: sinks.LocalTimestamp}, `"2024-05-01T12:00:00.123"`, "2024-05-01 12:00:00.123"},
	{"d", "date", sinks.FieldType{Kind: sinks.Date}, `"2024-05-01"`, "2024-05-01"},
	{"tm", "time", sinks.FieldType{Kind: sinks.Time}, `"12:00:00.123"`, "12:00:00.123"},
	{"dec", "numeric(38,9)", sinks.FieldType{Kind: sinks.Decimal, Precision: 38, Scale: 9}, `12345678901234567890.123456789`, "12345678901234567890.123456789"},
	{"u", "uuid", sinks.FieldType{Kind: sinks.UUID}, `"0b5ad5f4-1f0e-4d8b-9e55-0d9b0c7f3a21"`, "0b5ad5f4-1f0e-4d8b-9e55-0d9b0c7f3a21"},
	{"dur", "interval", sinks.FieldType{Kind: sinks.Duration}, `"1.5s"`, "00:00:01.5"},
	{"neg", "interval", sinks.FieldType{Kind: sinks.Duration}, `"-3600.000001s"`, "-01:00:00.000001"},
	{"b", "bytea", sinks.FieldType{Kind: sinks.BytesKind}, `"AAEC/w=="`, `\x000102ff`},
	{"b64", "text", sinks.FieldType{Kind: sinks.BytesKind}, `"AAEC/w=="`, "AAEC/w=="}, // a text column keeps the base64
	{"doc", "jsonb", sinks.FieldType{Kind: sinks.JSONValue}, `{"x": 1, "y": {"z": [1, 2]}}`, `{"x": 1, "y": {"z": [1, 2]}}`},
	{"arr", "jsonb", sinks.FieldType{Kind: sinks.JSONValue}, `[1, "two", null]`, `[1, "two", null]`},
	{"m", "jsonb", sinks.FieldType{Kind: sinks.JSONValue}, `{"a": 1.50}`, `{"a": 1.50}`},
	{"big", "bigint", sinks.FieldType{Kind: sinks.Long}, `9223372036854775807`, "9223372036854775807"},
	{"i", "integer", sinks.FieldType{Kind: sinks.Int}, `-7`, "-7"},
	{"f", "real", sinks.FieldType{Kind: sinks.Float}, `1.5`, "1.5"},
	{"db", "double precision", sinks.FieldType{Kind: sinks.Double}, `0.1`, "0.1"},
	{"ok", "boolean", sinks.FieldType{Kind: sinks.Boolean}, `true`, "true"},
	{"s", "text", sinks.FieldType{Kind: sinks.String}, `"h\u00e9llo \"q\""`, `héllo "q"`},
	{"e", "text", sinks.FieldType{Kind: sinks.Enum}, `"RED"`, "RED"},
}

// TestLogicalTypes: in columns and upsert modes every kind of decoded field
// lands in the column of the matching type, Bytes decoded from base64 in a
// bytea column; a Bytes field that is not base64 is a dead letter.
func TestLogicalTypes(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := db(t, pg)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `SET TimeZone = 'UTC'`); err != nil {
		t.Fatal(err)
	}
	cols := []string{"id bigint PRIMARY KEY", "kafka_offset bigint", "kafka_key bytea"}
	schema := &sinks.Schema{ID: 21, Format: sinks.Avro, Subject: "shop.Everything", Fields: []sinks.Field{field("id", sinks.Long)}}
	var full, nulls, names []string
	for _, l := range logical {
		cols = append(cols, l.col+" "+l.typ)
		schema.Fields = append(schema.Fields, sinks.Field{Name: l.col, Type: l.kind})
		full = append(full, fmt.Sprintf("%q:%s", l.col, l.json))
		nulls = append(nulls, fmt.Sprintf("%q:null", l.col))
		names = append(names, l.col+"::text")
	}
	create := "CREATE TABLE %s (" + strings.Join(cols, ", ") + ")"
	value := func(id int, fields []string) string {
		return fmt.Sprintf(`{"id":%d,%s}`, id, strings.Join(fields, ","))
	}
	key := func(id int) string { return fmt.Sprintf(`{"id":%d}`, id) }
	notBase64 := strings.Replace(value(3, full), `"b":"AAEC/w=="`, `"b":"not base64!"`, 1)
	number := strings.Replace(value(4, full), `"b":"AAEC/w=="`, `"b":12`, 1)
	for _, mode := range []string{"columns", "upsert"} {
		t.Run(mode, func(t *testing.T) {
			s, n := newSink(t, pg, "mode="+mode, create)
			b := recBlock("types", 0, 0,
				rec(key(1), orderKey, value(1, full), schema),
				rec(key(2), orderKey, value(2, nulls), schema),
				rec(key(3), orderKey, notBase64, schema),
				rec(key(4), orderKey, number, schema),
			)
			put(t, s, b)
			scan := func(id int) []*string {
				t.Helper()
				vals := make([]*string, len(logical))
				dst := make([]any, len(vals))
				for i := range vals {
					dst[i] = &vals[i]
				}
				q := fmt.Sprintf(`SELECT %s FROM rows_%d WHERE id = $1`, strings.Join(names, ", "), n)
				if err := conn.QueryRow(ctx, q, id).Scan(dst...); err != nil {
					t.Fatalf("row %d: %v", id, err)
				}
				return vals
			}
			got := scan(1)
			for i, l := range logical {
				if got[i] == nil || *got[i] != l.want {
					t.Errorf("%s %s from %s: %v, want %s", l.col, l.typ, l.json, str(got[i]), l.want)
				}
			}
			for i, v := range scan(2) {
				if v != nil {
					t.Errorf("%s from null: %s, want NULL", logical[i].col, *v)
				}
			}
			var kafkaKey []byte
			if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT kafka_key FROM rows_%d WHERE id = 1`, n)).Scan(&kafkaKey); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(kafkaKey, b.Records[0].Decoded.KeyBytes) {
				t.Errorf("kafka_key %q, want the key's bytes as in Kafka %q", kafkaKey, b.Records[0].Decoded.KeyBytes)
			}
			dead := deadLetters(t, conn, n)
			if len(dead) != 2 || !strings.Contains(dead[2], `field "b" (bytes) is not base64`) || !strings.Contains(dead[3], `field "b" (bytes) is a number, want a base64 string`) {
				t.Errorf("dead letters %v, want offsets 2 (not base64) and 3 (a number)", dead)
			}
			var dv []byte
			if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT value FROM dead_%d WHERE "offset" = 2`, n)).Scan(&dv); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dv, b.Records[2].Decoded.ValueBytes) {
				t.Errorf("dead letter value %q, want the bytes as in Kafka", dv)
			}
			if s.IgnoredFields() != 0 {
				t.Errorf("IgnoredFields() = %d, want 0: every field has its column", s.IgnoredFields())
			}
		})
	}
}

func str(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

// columnsOf is a table's columns and their types, in order.
func columnsOf(t *testing.T, conn *pgx.Conn, table string) string {
	t.Helper()
	var s string
	err := conn.QueryRow(context.Background(), `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, table).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// orderV2 is orderV1 with new fields: kafka_note is never a column.
var orderV2 = &sinks.Schema{ID: 9, Format: sinks.Avro, Subject: "shop.Order", Fields: []sinks.Field{
	field("id", sinks.Long), field("v", sinks.String),
	field("email", sinks.String),
	{Name: "score", Type: sinks.FieldType{Kind: sinks.Decimal, Precision: 10, Scale: 2}},
	field("seen", sinks.Timestamp),
	field("blob", sinks.BytesKind),
	field("tags", sinks.JSONValue),
	field("kafka_note", sinks.String),
}}

const evolveTable = `CREATE TABLE %s (id bigint PRIMARY KEY, v text, kafka_offset bigint)`

// evolveBlocks are the two blocks of the evolution tests: v1 records, then
// v1 and v2 records in one block (ids 4 and 5 are v2; 5 has nulls).
func evolveBlocks(partition int) (*sinks.Block, *sinks.Block) {
	id := func(i int) string { return fmt.Sprintf(`{"id":%d}`, 10*partition+i) }
	v1 := func(i int) sinks.Record {
		return rec(id(i), orderKey, fmt.Sprintf(`{"id":%d,"v":"v1"}`, 10*partition+i), orderV1)
	}
	first := recBlock("orders", partition, 0, v1(1), v1(2))
	second := recBlock("orders", partition, 2, v1(3),
		rec(id(4), orderKey, fmt.Sprintf(`{"id":%d,"v":"v2","email":"a@example.com","score":12.30,"seen":"2024-05-01T12:00:00.5Z","blob":"3q2+7w==","tags":{"t":[1]},"kafka_note":"n"}`, 10*partition+4), orderV2),
		rec(id(5), orderKey, fmt.Sprintf(`{"id":%d,"v":"v2","email":null,"score":1,"seen":"2024-05-02T00:00:00Z","blob":null,"tags":[],"kafka_note":"m"}`, 10*partition+5), orderV2),
	)
	return first, second
}

// evolvedRows reads the evolution tests' rows with the v2 columns, in id
// order.
func evolvedRows(t *testing.T, conn *pgx.Conn, n int64, where string) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), fmt.Sprintf(`SELECT concat_ws(' ', id, v, coalesce(email, '-'), coalesce(score::text, '-'),
	coalesce(to_char(seen AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS'), '-'), coalesce(encode(blob, 'hex'), '-'), coalesce(tags::text, '-'))
FROM rows_%d WHERE %s ORDER BY id`, n, where))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, "\n")
}

// TestEvolve: a block that brings a schema with new fields adds their
// columns, of the fields' types, in its own transaction and fills them,
// with evolve=add-columns; the rows of v1 keep NULL there. Without it the
// fields are ignored and counted, and the table stays as it was.
func TestEvolve(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := db(t, pg)
	const added = "id bigint, v text, kafka_offset bigint, email text, score numeric(10,2), seen timestamp with time zone, blob bytea, tags jsonb"
	for _, mode := range []string{"columns", "upsert"} {
		t.Run(mode+"/add-columns", func(t *testing.T) {
			s, n := newSink(t, pg, "mode="+mode+"&evolve=add-columns", evolveTable)
			first, second := evolveBlocks(0)
			put(t, s, first)
			put(t, s, second)
			if got := columnsOf(t, conn, fmt.Sprintf("rows_%d", n)); got != added {
				t.Errorf("columns:\n%s\nwant:\n%s", got, added)
			}
			want := strings.Join([]string{
				"1 v1 - - - - -",
				"2 v1 - - - - -",
				"3 v1 - - - - -",
				`4 v2 a@example.com 12.30 2024-05-01T12:00:00.500 deadbeef {"t": [1]}`,
				"5 v2 - 1.00 2024-05-02T00:00:00.000 - []",
			}, "\n")
			if got := evolvedRows(t, conn, n, "true"); got != want {
				t.Errorf("rows:\n%s\nwant:\n%s", got, want)
			}
			if got := s.IgnoredFields(); got != 2 {
				t.Errorf("IgnoredFields() = %d, want 2 (kafka_note of ids 4 and 5)", got)
			}
			// The next block of v2 fills the columns with the sink's plan.
			_, more := evolveBlocks(1)
			more.Partition = 0
			more.From, more.Next = 5, 8
			for i := range more.Records {
				more.Records[i].Offset = int64(5 + i)
			}
			put(t, s, more)
			if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d WHERE email = 'a@example.com'`, n)); got != 2 {
				t.Errorf("%d rows with an email, want 2", got)
			}
		})
		t.Run(mode+"/none", func(t *testing.T) {
			s, n := newSink(t, pg, "mode="+mode, evolveTable)
			before := columnsOf(t, conn, fmt.Sprintf("rows_%d", n))
			first, second := evolveBlocks(0)
			put(t, s, first)
			put(t, s, second)
			if got := columnsOf(t, conn, fmt.Sprintf("rows_%d", n)); got != before {
				t.Errorf("columns %s, want them as they were: %s", got, before)
			}
			if got := table(t, conn, fmt.Sprintf(`SELECT id, v FROM rows_%d ORDER BY id`, n)); got != "1=v1 2=v1 3=v1 4=v2 5=v2" {
				t.Errorf("rows %s", got)
			}
			// id 4: email, score, seen, blob, tags, kafka_note; id 5 the same
			// but its null email and blob.
			if got := s.IgnoredFields(); got != 10 {
				t.Errorf("IgnoredFields() = %d, want 10", got)
			}
			if s.DeadLetters() != 0 {
				t.Errorf("DeadLetters() = %d", s.DeadLetters())
			}
		})
	}
}

// TestEvolveSeenFromElsewhere: a sink sees the columns another sink (a
// replica with evolve=add-columns) added when a schema new to it comes,
// and a column added by hand for a field it ignores once recheckAfter has
// gone by, not before: the catalog is read per schema, not per block.
func TestEvolveSeenFromElsewhere(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := db(t, pg)
	url, n := sinkURL(pg, "mode=columns")
	pg.Exec(t, fmt.Sprintf(evolveTable, fmt.Sprintf("rows_%d", n)))
	plain := open(t, url)
	evolving := open(t, url+"&evolve=add-columns")

	first, _ := evolveBlocks(0)
	put(t, plain, first)
	_, second := evolveBlocks(1)
	second.From, second.Next = 0, 3
	for i := range second.Records {
		second.Records[i].Offset = int64(i)
	}
	put(t, evolving, second) // adds the columns
	_, mine := evolveBlocks(0)
	put(t, plain, mine) // v2 is new to plain: it reads the columns again
	want := strings.Join([]string{
		"4 v2 a@example.com 12.30 2024-05-01T12:00:00.500 deadbeef {\"t\": [1]}",
		"5 v2 - 1.00 2024-05-02T00:00:00.000 - []",
	}, "\n")
	if got := evolvedRows(t, conn, n, "id IN (4, 5)"); got != want {
		t.Errorf("rows of the sink that did not add the columns:\n%s\nwant:\n%s", got, want)
	}
	if got := plain.IgnoredFields(); got != 2 {
		t.Errorf("IgnoredFields() = %d, want 2 (kafka_note)", got)
	}

	// A column added by hand for a field the sink ignores.
	v3 := &sinks.Schema{ID: 10, Format: sinks.JSONSchema, Subject: "order", Fields: []sinks.Field{field("id", sinks.Long), field("extra", sinks.Int)}}
	next := int64(5)
	v3Block := func(id int) *sinks.Block {
		b := recBlock("orders", 0, next, rec(fmt.Sprintf(`{"id":%d}`, id), orderKey, fmt.Sprintf(`{"id":%d,"extra":%d}`, id, id), v3))
		next++
		return b
	}
	put(t, plain, v3Block(100))
	pg.Exec(t, fmt.Sprintf(`ALTER TABLE rows_%d ADD COLUMN extra integer`, n))
	put(t, plain, v3Block(101))
	postgres.SetRecheck(plain, 0)
	put(t, plain, v3Block(102))
	if got := table(t, conn, fmt.Sprintf(`SELECT id, extra::text FROM rows_%d WHERE id >= 100 ORDER BY id`, n)); got != "100=<null> 101=<null> 102=102" {
		t.Errorf("rows %s, want extra filled from the first block after the recheck, and not before", got)
	}
	if got := plain.IgnoredFields(); got != 4 {
		t.Errorf("IgnoredFields() = %d, want 4 (kafka_note twice, extra twice)", got)
	}
}

// TestEvolveConcurrent: two replicas whose blocks of different partitions
// bring the same new fields at the same time, both having read the
// catalog before either added a column, both commit: the columns are added
// once, and both blocks fill them.
func TestEvolveConcurrent(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := db(t, pg)
	ctx := context.Background()
	url, n := sinkURL(pg, "mode=upsert&evolve=add-columns")
	pg.Exec(t, fmt.Sprintf(evolveTable, fmt.Sprintf("rows_%d", n)))
	a := open(t, url+"&application_name=evolve_a")
	b := open(t, url+"&application_name=evolve_b")
	firstA, secondA := evolveBlocks(0)
	firstB, secondB := evolveBlocks(1)
	put(t, a, firstA)
	put(t, b, firstB)

	// Both wait at the table, after reading the catalog, until the test
	// lets go of it.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, fmt.Sprintf(`LOCK TABLE rows_%d IN ACCESS EXCLUSIVE MODE`, n)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- a.Write(ctx, secondA) }()
	go func() { done <- b.Write(ctx, secondB) }()
	other := db(t, pg)
	harness.Await(t, 20*time.Second, "both writers waiting for a lock", func() bool {
		return queryInt(t, other, `SELECT count(*) FROM pg_stat_activity WHERE application_name IN ('evolve_a', 'evolve_b') AND wait_event_type = 'Lock'`) == 2
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Write: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a write still running 30s after the table was let go")
		}
	}
	const added = "id bigint, v text, kafka_offset bigint, email text, score numeric(10,2), seen timestamp with time zone, blob bytea, tags jsonb"
	if got := columnsOf(t, conn, fmt.Sprintf("rows_%d", n)); got != added {
		t.Errorf("columns:\n%s\nwant:\n%s", got, added)
	}
	if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d WHERE email = 'a@example.com' AND blob = '\xdeadbeef'`, n)); got != 2 {
		t.Errorf("%d rows with the new fields, want 2: one of each partition", got)
	}
	if got := queryInt(t, conn, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`); got != 0 {
		t.Errorf("%d deadlocks", got)
	}
}

// TestColumnDropped: a write whose statement names a column dropped since
// the sink read the table reads the columns again and goes in.
func TestColumnDropped(t *testing.T) {
	for _, mode := range []string{"columns", "upsert"} {
		t.Run(mode, func(t *testing.T) {
			_, s, conn, n := start(t, "mode="+mode, `CREATE TABLE %s (id bigint PRIMARY KEY, v text, gone text, kafka_offset bigint)`)
			put(t, s, recBlock("orders", 0, 0, rec(`{"id":1}`, orderKey, `{"id":1,"v":"a","gone":"x"}`, orderV1)))
			if _, err := conn.Exec(context.Background(), fmt.Sprintf(`ALTER TABLE rows_%d DROP COLUMN gone`, n)); err != nil {
				t.Fatal(err)
			}
			put(t, s, recBlock("orders", 0, 1, rec(`{"id":2}`, orderKey, `{"id":2,"v":"b","gone":"y"}`, orderV1)))
			if got := kvRows(t, conn, n); got != "1=a 2=b" {
				t.Errorf("rows %q, want 1=a 2=b", got)
			}
		})
	}
}
