package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// The Schema Registry formats end to end: records serialized as Confluent's
// clients do (pkg/sr's header, hamba/avro, protobuf's dynamicpb), a real
// registry (AxonOps), replicas decoding them into the file sink and into
// PostgreSQL's columns mode.

// formatCase is one format's records: how to make record i, the JSON the
// sinks must hold for it, and a PostgreSQL table its fields fill.
type formatCase struct {
	format sinks.Format
	// encode is record i's value in the wire format; want its JSON.
	encode func(t *testing.T, i int) []byte
	want   func(i int) string
	// table creates the columns-mode table, select reads a row of it as
	// text, in the order of row(i).
	table  string
	sel    string
	row    func(i int) []string
	schema int // the id of the value schema
}

// Values of record i, shared by every format's case so the expectations
// read alike.
func orderTime(i int) time.Time {
	return time.Date(2024, 5, 1, 12, 0, 0, 123_000_000, time.UTC).Add(time.Duration(i) * time.Second)
}
func orderPrice(i int) string { return fmt.Sprintf("%d.37", i) }
func orderUUID(i int) string  { return fmt.Sprintf("6f1c2a3b-0000-4000-8000-%012d", i) }
func orderNote(i int) any {
	if i%2 == 0 {
		return nil
	}
	return fmt.Sprintf("note %d", i)
}
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
func pgNull(v any) string {
	if v == nil {
		return "NULL"
	}
	return fmt.Sprint(v)
}

const avroOrder = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"id","type":"long"},
 {"name":"name","type":"string"},
 {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"created","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"at","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"uid","type":{"type":"string","logicalType":"uuid"}},
 {"name":"tags","type":{"type":"array","items":"string"}},
 {"name":"attrs","type":{"type":"map","values":"long"}},
 {"name":"address","type":{"type":"record","name":"Address","fields":[
   {"name":"street","type":"string"},{"name":"zip","type":["null","string"],"default":null}]}},
 {"name":"note","type":["null","string"],"default":null}
]}`

func avroCase(t *testing.T, reg *harness.SchemaRegistry, subject string) formatCase {
	id := reg.RegisterAvro(t, subject, avroOrder)
	return formatCase{
		format: sinks.Avro,
		schema: id,
		encode: func(t *testing.T, i int) []byte {
			price, _ := new(big.Rat).SetString(orderPrice(i))
			var zip any
			if i%3 == 0 {
				zip = fmt.Sprintf("%05d", i)
			}
			return harness.AvroEncode(t, id, avroOrder, map[string]any{
				"id": int64(i), "name": fmt.Sprintf("order %d", i), "price": price,
				"created": orderTime(i), "day": orderTime(i).Truncate(24 * time.Hour), "at": 12*time.Hour + 123*time.Millisecond,
				"uid": orderUUID(i), "tags": []string{"a", fmt.Sprint(i)}, "attrs": map[string]any{"n": int64(i)},
				"address": map[string]any{"street": "Main", "zip": zip}, "note": orderNote(i),
			})
		},
		want: func(i int) string {
			var zip any
			if i%3 == 0 {
				zip = fmt.Sprintf("%05d", i)
			}
			return fmt.Sprintf(`{"id":%d,"name":"order %d","price":%s,"created":%q,"day":"2024-05-01","at":"12:00:00.123","uid":%q,"tags":["a","%d"],"attrs":{"n":%d},"address":{"street":"Main","zip":%s},"note":%s}`,
				i, i, orderPrice(i), orderTime(i).Format("2006-01-02T15:04:05.000Z"), orderUUID(i), i, i, jsonText(zip), jsonText(orderNote(i)))
		},
		table: `CREATE TABLE orders (kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL, id bigint, name text, price numeric(10,2),
			created timestamptz, day date, at time, uid uuid, tags jsonb, attrs jsonb, address jsonb, note text, PRIMARY KEY (kafka_partition, kafka_offset))`,
		sel: `SELECT id::text, name, price::text, to_char(created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS'), day::text, at::text, uid::text,
			tags::text, attrs::text, address->>'street', coalesce(note, 'NULL') FROM orders WHERE id = $1`,
		row: func(i int) []string {
			return []string{fmt.Sprint(i), fmt.Sprintf("order %d", i), orderPrice(i), orderTime(i).Format("2006-01-02T15:04:05.000"),
				"2024-05-01", "12:00:00.123", orderUUID(i), fmt.Sprintf(`["a", "%d"]`, i), fmt.Sprintf(`{"n": %d}`, i), "Main", pgNull(orderNote(i))}
		},
	}
}

// The Protobuf order imports its address from a file of its own (a
// reference), and is the second message of its file, so its records carry
// the message index [1]; its nested Line message is [1, 0].
const (
	protoAddress = `syntax = "proto3";
package shop;
message Address { string street = 1; string zip = 2; }
`
	protoOrder = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "shop/address.proto";
message Header { string source = 1; }
message Order {
  message Line { string sku = 1; int32 count = 2; }
  enum Status { NEW = 0; PAID = 1; }
  int64 id = 1;
  string name = 2;
  google.protobuf.Timestamp created = 3;
  google.protobuf.Duration ttl = 4;
  google.protobuf.Int64Value qty = 5;
  repeated string tags = 6;
  map<string, int64> attrs = 7;
  Address address = 8;
  optional string note = 9;
  Status status = 10;
  repeated Line lines = 11;
}
`
)

func protoCase(t *testing.T, reg *harness.SchemaRegistry, subject string) formatCase {
	addr := reg.RegisterProtobuf(t, subject+"-address", protoAddress)
	_ = addr
	id := reg.RegisterProtobuf(t, subject, protoOrder, harness.SchemaRef{Name: "shop/address.proto", Subject: subject + "-address", Version: 1})
	fd := harness.CompileProto(t, protoOrder, map[string]string{"shop/address.proto": protoAddress})
	if got := harness.ProtoMessageIndex(t, fd, "shop.Order"); !reflect.DeepEqual(got, []int{1}) {
		t.Fatalf("shop.Order's message index is %v, want [1]", got)
	}
	note := func(i int) string {
		if n := orderNote(i); n != nil {
			return fmt.Sprintf(`,"note":%q`, n)
		}
		return ""
	}
	status := func(i int) string { return []string{"NEW", "PAID"}[i%2] }
	return formatCase{
		format: sinks.Protobuf,
		schema: id,
		encode: func(t *testing.T, i int) []byte {
			return harness.ProtoEncode(t, id, fd, "shop.Order", fmt.Sprintf(
				`{"id":%d,"name":"order %d","created":%q,"ttl":"1.500s","qty":%d,"tags":["a","%d"],"attrs":{"n":%d},"address":{"street":"Main"}%s,"status":%q,"lines":[{"sku":"s%d","count":2}]}`,
				i, i, orderTime(i).Format(time.RFC3339Nano), i*2, i, i, note(i), status(i), i))
		},
		want: func(i int) string {
			return fmt.Sprintf(`{"id":%d,"name":"order %d","created":%q,"ttl":"1.500s","qty":%d,"tags":["a","%d"],"attrs":{"n":%d},"address":{"street":"Main","zip":""}%s,"status":%q,"lines":[{"sku":"s%d","count":2}]}`,
				i, i, orderTime(i).Format("2006-01-02T15:04:05.000Z"), i*2, i, i, note(i), status(i), i)
		},
		table: `CREATE TABLE orders (kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL, id bigint, name text, created timestamptz,
			ttl interval, qty bigint, tags jsonb, attrs jsonb, address jsonb, note text, status text, lines jsonb, PRIMARY KEY (kafka_partition, kafka_offset))`,
		sel: `SELECT id::text, name, to_char(created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS'), extract(epoch FROM ttl)::text, qty::text,
			tags::text, attrs::text, address->>'street', coalesce(note, 'NULL'), status, lines->0->>'sku' FROM orders WHERE id = $1`,
		row: func(i int) []string {
			return []string{fmt.Sprint(i), fmt.Sprintf("order %d", i), orderTime(i).Format("2006-01-02T15:04:05.000"), "1.500000", fmt.Sprint(i * 2),
				fmt.Sprintf(`["a", "%d"]`, i), fmt.Sprintf(`{"n": %d}`, i), "Main", pgNull(orderNote(i)), status(i), fmt.Sprintf("s%d", i)}
		},
	}
}

const jsonOrder = `{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "title": "Order", "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "name": {"type": "string"},
    "price": {"type": "number"},
    "created": {"type": "string", "format": "date-time"},
    "day": {"type": "string", "format": "date"},
    "uid": {"type": "string", "format": "uuid"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
    "address": {"type": "object", "properties": {"street": {"type": "string"}}, "required": ["street"]},
    "note": {"type": ["null", "string"]}
  },
  "required": ["id", "name"]
}`

func jsonSchemaCase(t *testing.T, reg *harness.SchemaRegistry, subject string) formatCase {
	id := reg.RegisterJSON(t, subject, jsonOrder)
	value := func(i int) string {
		return fmt.Sprintf(`{"id":%d,"name":"order %d","price":%s,"created":%q,"day":"2024-05-01","uid":%q,"tags":["a","%d"],"attrs":{"n":%d},"address":{"street":"Main"},"note":%s}`,
			i, i, orderPrice(i), orderTime(i).Format("2006-01-02T15:04:05.000Z"), orderUUID(i), i, i, jsonText(orderNote(i)))
	}
	return formatCase{
		format: sinks.JSONSchema,
		schema: id,
		encode: func(t *testing.T, i int) []byte { return harness.JSONEncode(t, id, json.RawMessage(value(i))) },
		want:   value,
		table: `CREATE TABLE orders (kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL, id bigint, name text, price numeric(10,2),
			created timestamptz, day date, uid uuid, tags jsonb, attrs jsonb, address jsonb, note text, PRIMARY KEY (kafka_partition, kafka_offset))`,
		sel: `SELECT id::text, name, price::text, to_char(created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS'), day::text, uid::text,
			tags::text, attrs::text, address->>'street', coalesce(note, 'NULL') FROM orders WHERE id = $1`,
		row: func(i int) []string {
			return []string{fmt.Sprint(i), fmt.Sprintf("order %d", i), orderPrice(i), orderTime(i).Format("2006-01-02T15:04:05.000"),
				"2024-05-01", orderUUID(i), fmt.Sprintf(`["a", "%d"]`, i), fmt.Sprintf(`{"n": %d}`, i), "Main", pgNull(orderNote(i))}
		},
	}
}

// produceValues writes n records, record i to partition i%parts with
// value encode(i) and key "k<i>", and returns what each partition holds.
func (e *env) produceValues(n int, encode func(i int) []byte) map[int]int64 {
	e.t.Helper()
	cl := e.producer()
	defer cl.Close()
	want := map[int]int64{}
	for i := 0; i < n; i++ {
		p := i % e.parts
		want[p]++
		cl.Produce(context.Background(), &kgo.Record{Topic: e.topic, Partition: int32(p), Key: fmt.Appendf(nil, "k%d", i), Value: encode(i)}, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Flush(ctx); err != nil {
		e.t.Fatal(err)
	}
	return want
}

// withGroup is e for another group of replicas over the same topic.
func (e *env) withGroup(group string) *env {
	e.t.Helper()
	c, err := coordinator.New(e.admin, group)
	if err != nil {
		e.t.Fatal(err)
	}
	g := *e
	g.group, g.coord = group, c
	return &g
}

// formatConfig is a replica config that decodes values by f.
func (e *env) formatConfig(id string, f sinks.Format, reg *harness.SchemaRegistry) replica.Config {
	cfg := e.config(id)
	cfg.Formats = replica.Formats{Value: f, Registry: replica.SchemaRegistry{URL: reg.URL, Timeout: time.Second}}
	return cfg
}

// fileSink opens a file sink in dir, closed when the test ends.
func fileSink(t *testing.T, dir string) *file.Sink {
	t.Helper()
	s, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// fileValues reads every line the file sink wrote to dir, by the id the
// test gave each record (its key, k<i>).
func fileValues(t *testing.T, dir string) map[string]file.Line {
	t.Helper()
	out := map[string]file.Line{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".jsonl") {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		lines, err := file.ReadLines(f)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, l := range lines {
			k := string(l.Record.Key)
			if _, dup := out[k]; dup {
				t.Errorf("record %s is in the file sink twice", k)
			}
			out[k] = l
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameJSON reports whether a and b are the same JSON value, numbers
// compared by their text (a decimal must stay exact).
func sameJSON(a, b []byte) bool {
	decode := func(x []byte) (any, bool) {
		d := json.NewDecoder(bytes.NewReader(x))
		d.UseNumber()
		var v any
		return v, d.Decode(&v) == nil
	}
	va, oka := decode(a)
	vb, okb := decode(b)
	return oka && okb && reflect.DeepEqual(va, vb)
}

// TestFormatsEndToEnd: for Avro, Protobuf and JSON Schema, records with
// nested records, arrays, maps, nulls and the logical types reach the file
// sink as the JSON they stand for (with their schema id) and fill a
// PostgreSQL table of the matching column types, every record once.
// Protobuf's records are of the second message of a file that imports
// another (a reference), the Avro ones come from a replica process run by
// the CLI's flags.
func TestFormatsEndToEnd(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	pg := harness.StartPostgres(t)
	for _, tc := range []struct {
		name string
		make func(*testing.T, *harness.SchemaRegistry, string) formatCase
	}{{"avro", avroCase}, {"protobuf", protoCase}, {"json-schema", jsonSchemaCase}} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 60
			e := newEnv(t, "orders", 2)
			c := tc.make(t, reg, "orders-"+tc.name+"-value")
			want := e.produceValues(n, func(i int) []byte { return c.encode(t, i) })

			dir := t.TempDir()
			fe, pe := e.withGroup("g-file"), e.withGroup("g-pg")
			if c.format == sinks.Avro {
				fe.process("file", dir, "--value-format", "avro", "--schema-registry", reg.URL)
			} else {
				fe.start(fe.formatConfig("file", c.format, reg), fileSink(t, dir))
			}
			url := pg.NewDatabase(t)
			conn := pgConn(t, url)
			if _, err := conn.Exec(context.Background(), c.table); err != nil {
				t.Fatal(err)
			}
			pe.start(pe.formatConfig("pg", c.format, reg), pe.pgSink(withQuery(url, "mode=columns&table=orders")))
			await(t, 60*time.Second, "the file sink's group committed", func() bool { return fe.allCommitted(want) })
			await(t, 60*time.Second, "the postgres sink's group committed", func() bool { return pe.allCommitted(want) })

			lines := fileValues(t, dir)
			if len(lines) != n {
				t.Fatalf("the file sink holds %d records, want %d", len(lines), n)
			}
			for i := 0; i < n; i++ {
				l := lines[fmt.Sprintf("k%d", i)]
				if !sameJSON(l.Record.Value, []byte(c.want(i))) {
					t.Errorf("record %d in the file sink:\n got %s\nwant %s", i, l.Record.Value, c.want(i))
				}
				if d := l.Record.Decoded; d == nil || d.ValueSchema == nil || d.ValueSchema.ID != c.schema {
					t.Errorf("record %d in the file sink: value_schema_id %+v, want %d", i, d, c.schema)
				}
			}
			e.checkExactlyOnce(conn, "orders", "kafka_partition", "kafka_offset", want)
			for i := 0; i < n; i++ {
				got := pgRowText(t, conn, c.sel, i)
				if !reflect.DeepEqual(got, c.row(i)) {
					t.Errorf("record %d in PostgreSQL:\n got %q\nwant %q", i, got, c.row(i))
				}
			}
		})
	}
}

// withQuery adds the parameters q to a URL that may have some already.
func withQuery(url, q string) string {
	if strings.Contains(url, "?") {
		return url + "&" + q
	}
	return url + "?" + q
}

// pgRowText reads the row sel selects for id, each column as text.
func pgRowText(t *testing.T, conn *pgx.Conn, sel string, id int) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), sel, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() {
		t.Fatalf("no row of id %d: %v", id, rows.Err())
	}
	vals, err := rows.Values()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = fmt.Sprint(v)
	}
	return out
}

// TestFormatsEvolution: a topic's schema evolves mid-stream, v1 then v2
// adding a field with a default; each record decodes with the schema it
// was written with. With evolve=add-columns the table gains a column for
// the new field, filled by v2's records and NULL for v1's; without it the
// field is ignored and counted, and the table keeps its columns.
func TestFormatsEvolution(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	pg := harness.StartPostgres(t)
	const v1 = `{"type":"record","name":"User","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"}]}`
	const v2 = `{"type":"record","name":"User","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"},
		{"name":"email","type":["null","string"],"default":null},{"name":"since","type":{"type":"int","logicalType":"date"},"default":0}]}`
	for _, evolve := range []bool{true, false} {
		t.Run(fmt.Sprintf("evolve=%v", evolve), func(t *testing.T) {
			const half = 40
			e := newEnv(t, "users", 2)
			subject := fmt.Sprintf("users-%v-value", evolve)
			id1 := reg.RegisterAvro(t, subject, v1)
			id2 := reg.RegisterAvro(t, subject, v2)
			if id1 == id2 {
				t.Fatalf("v1 and v2 have one id, %d", id1)
			}
			url := pg.NewDatabase(t)
			conn := pgConn(t, url)
			if _, err := conn.Exec(context.Background(), `CREATE TABLE users (kafka_partition integer, kafka_offset bigint, id bigint PRIMARY KEY, name text)`); err != nil {
				t.Fatal(err)
			}
			sinkURL := withQuery(url, "mode=columns&table=users")
			if evolve {
				sinkURL += "&evolve=add-columns"
			}
			rn := e.start(e.formatConfig("pg", sinks.Avro, reg), e.pgSink(sinkURL))
			want := e.produceValues(half, func(i int) []byte {
				return harness.AvroEncode(t, id1, v1, map[string]any{"id": int64(i), "name": fmt.Sprint("u", i)})
			})
			await(t, 60*time.Second, "v1 committed", func() bool { return e.allCommitted(want) })
			more := e.produceValues(half, func(i int) []byte {
				i += half
				return harness.AvroEncode(t, id2, v2, map[string]any{"id": int64(i), "name": fmt.Sprint("u", i),
					"email": fmt.Sprintf("u%d@example.com", i), "since": time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)})
			})
			want = addCounts(want, more)
			await(t, 60*time.Second, "v2 committed", func() bool { return e.allCommitted(want) })

			var cols []string
			rows, err := conn.Query(context.Background(), `SELECT column_name || ' ' || data_type FROM information_schema.columns WHERE table_name = 'users' ORDER BY ordinal_position`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var c string
				if err := rows.Scan(&c); err != nil {
					t.Fatal(err)
				}
				cols = append(cols, c)
			}
			rows.Close()
			base := []string{"kafka_partition integer", "kafka_offset bigint", "id bigint", "name text"}
			var count, emails, sinces int
			if evolve {
				if want := append(base, "email text", "since date"); !reflect.DeepEqual(cols, want) {
					t.Fatalf("columns after v2 with evolve=add-columns: %q, want %q", cols, want)
				}
				if err := conn.QueryRow(context.Background(), `SELECT count(*), count(email) FILTER (WHERE email = 'u' || id || '@example.com'),
					count(since) FILTER (WHERE since = '2024-05-01') FROM users`).Scan(&count, &emails, &sinces); err != nil {
					t.Fatal(err)
				}
				if count != 2*half || emails != half || sinces != half {
					t.Fatalf("%d rows, %d with their email, %d with their date: want %d, and %d of v2 with both (v1's NULL)", count, emails, sinces, 2*half, half)
				}
				var v1Null int
				if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM users WHERE id < $1 AND email IS NULL AND since IS NULL`, half).Scan(&v1Null); err != nil {
					t.Fatal(err)
				}
				if v1Null != half {
					t.Fatalf("%d rows of v1 with NULL email and date, want %d", v1Null, half)
				}
			} else {
				if !reflect.DeepEqual(cols, base) {
					t.Fatalf("columns after v2 without evolve: %q, want them unchanged, %q", cols, base)
				}
				if got := rn.r.Stats().IgnoredFields; got != 2*half {
					t.Fatalf("ignored fields: %d, want %d (email and since of %d v2 records)", got, 2*half, half)
				}
			}
			e.checkExactlyOnce(conn, "users", "kafka_partition", "kafka_offset", want)
		})
	}
}

// TestRegistryPausedNothingLost: the registry stops answering (SIGSTOP)
// while records of a schema the replica has not fetched yet flow; the
// blocks roll back and are read again until it answers, and then every
// record lands, once, and none as a dead letter.
func TestRegistryPausedNothingLost(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	pg := harness.StartPostgres(t)
	e := newEnv(t, "paused", 2)
	const v1 = `{"type":"record","name":"Tick","fields":[{"name":"n","type":"long"}]}`
	const v2 = `{"type":"record","name":"Tick","fields":[{"name":"n","type":"long"},{"name":"tag","type":"string","default":""}]}`
	id1 := reg.RegisterAvro(t, "paused-value", v1)
	id2 := reg.RegisterAvro(t, "paused-value", v2)
	url := pg.NewDatabase(t)
	conn := pgConn(t, url)
	rn := e.start(e.formatConfig("pg", sinks.Avro, reg), e.pgSink(withQuery(url, "mode=raw&table=ticks")))
	want := e.produceValues(20, func(i int) []byte { return harness.AvroEncode(t, id1, v1, map[string]any{"n": int64(i)}) })
	await(t, 60*time.Second, "v1 committed", func() bool { return e.allCommitted(want) })

	reg.Pause()
	more := e.produceValues(200, func(i int) []byte {
		return harness.AvroEncode(t, id2, v2, map[string]any{"n": int64(20 + i), "tag": "v2"})
	})
	want = addCounts(want, more)
	await(t, 30*time.Second, "blocks rolled back while the registry is paused", func() bool { return rn.r.Stats().RegistryWaits >= 2 })
	if got := e.committed(); reflect.DeepEqual(got, want) {
		t.Fatalf("everything committed while the registry was paused: %v", got)
	}
	reg.Resume()
	await(t, 60*time.Second, "everything committed after the registry came back", func() bool { return e.allCommitted(want) })

	e.checkExactlyOnce(conn, "ticks", "partition", `"offset"`, want)
	var dead, v2rows int
	if err := conn.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM offsetkeeper_dead_letters), (SELECT count(*) FROM ticks WHERE value->>'tag' = 'v2')`).Scan(&dead, &v2rows); err != nil {
		t.Fatal(err)
	}
	if dead != 0 || v2rows != 200 {
		t.Fatalf("%d dead letters and %d v2 rows decoded: want 0 and 200", dead, v2rows)
	}
	if s := rn.r.Stats(); s.DecodeErrors != 0 {
		t.Fatalf("%d decode errors: a registry away is no record's fault", s.DecodeErrors)
	}
}

// badRecords are the three kinds of record a decoder must refuse, with a
// word its reason must hold: JSON without the wire format's header (a
// wrong magic byte), a schema id the registry does not know, and a record
// cut short.
func badRecords(t *testing.T, id int, schema string) []struct {
	value  []byte
	reason string
} {
	good := harness.AvroEncode(t, id, schema, map[string]any{"n": int64(7), "s": "a string long enough to cut"})
	unknown := bytes.Clone(good)
	unknown[1], unknown[2], unknown[3], unknown[4] = 0, 0, 0x27, 0x0f // id 9999
	return []struct {
		value  []byte
		reason string
	}{
		{[]byte(`{"n":7}`), "magic"},
		{unknown, "9999"},
		{good[:len(good)-5], "exceeds"},
	}
}

// TestDecodeErrors: records that cannot be decoded go to PostgreSQL's
// dead-letter table with the reason, and everything else lands; with the
// file sink, which has no dead letters, the partition stops at the first
// of them; with skip they are left out and counted.
func TestDecodeErrors(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	const schema = `{"type":"record","name":"Rec","fields":[{"name":"n","type":"long"},{"name":"s","type":"string"}]}`
	id := reg.RegisterAvro(t, "bad-value", schema)
	bad := badRecords(t, id, schema)
	// Record i is bad when i is 5, 10 or 15; the topic has one partition.
	const n = 30
	encode := func(i int) []byte {
		if i%5 == 0 && i > 0 && i <= 15 {
			return bad[i/5-1].value
		}
		return harness.AvroEncode(t, id, schema, map[string]any{"n": int64(i), "s": "ok"})
	}

	t.Run("dead letters", func(t *testing.T) {
		pg := harness.StartPostgres(t)
		e := newEnv(t, "bad", 1)
		url := pg.NewDatabase(t)
		conn := pgConn(t, url)
		if _, err := conn.Exec(context.Background(), `CREATE TABLE recs (kafka_offset bigint PRIMARY KEY, n bigint, s text)`); err != nil {
			t.Fatal(err)
		}
		rn := e.start(e.formatConfig("pg", sinks.Avro, reg), e.pgSink(withQuery(url, "mode=columns&table=recs")))
		want := e.produceValues(n, encode)
		await(t, 60*time.Second, "committed past the bad records", func() bool { return e.allCommitted(want) })
		var rows int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM recs WHERE n = kafka_offset`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != n-3 {
			t.Fatalf("%d good rows, want %d", rows, n-3)
		}
		dl, err := conn.Query(context.Background(), `SELECT "offset", value, error FROM offsetkeeper_dead_letters ORDER BY "offset"`)
		if err != nil {
			t.Fatal(err)
		}
		defer dl.Close()
		i := 0
		for ; dl.Next(); i++ {
			var off int64
			var value []byte
			var reason string
			if err := dl.Scan(&off, &value, &reason); err != nil {
				t.Fatal(err)
			}
			if i >= len(bad) || off != int64(5*(i+1)) || !bytes.Equal(value, bad[i].value) || !strings.Contains(reason, bad[i].reason) {
				t.Fatalf("dead letter %d: offset %d, value %q, reason %q; want offset %d, the bytes as produced, a reason with %q", i, off, value, reason, 5*(i+1), bad[min(i, 2)].reason)
			}
		}
		if i != len(bad) {
			t.Fatalf("%d dead letters, want %d", i, len(bad))
		}
		if s := rn.r.Stats(); s.DecodeErrors != 3 || s.DeadLetters != 3 {
			t.Fatalf("decode errors %d, dead letters %d: want 3 and 3", s.DecodeErrors, s.DeadLetters)
		}
	})

	t.Run("stop", func(t *testing.T) {
		e := newEnv(t, "bad", 1)
		dir := t.TempDir()
		rn := e.start(e.formatConfig("file", sinks.Avro, reg), fileSink(t, dir))
		e.produceValues(n, encode)
		await(t, 30*time.Second, "the partition stopped at the first bad record, retrying", func() bool { return rn.r.Stats().DecodeErrors >= 2 })
		if got := e.committed()[0]; got > 5 {
			t.Fatalf("committed to %d, past the bad record at offset 5", got)
		}
		await(t, 30*time.Second, "the records before it committed", func() bool { return e.committed()[0] == 5 })
		if lines := fileValues(t, dir); len(lines) != 5 {
			t.Fatalf("the file sink holds %d records, want the 5 before the bad one", len(lines))
		}
	})

	t.Run("skip", func(t *testing.T) {
		e := newEnv(t, "bad", 1)
		dir := t.TempDir()
		cfg := e.formatConfig("file", sinks.Avro, reg)
		cfg.Formats.OnDecodeError = replica.Skip
		rn := e.start(cfg, fileSink(t, dir))
		want := e.produceValues(n, encode)
		await(t, 60*time.Second, "committed past the skipped records", func() bool { return e.allCommitted(want) })
		lines := fileValues(t, dir)
		if len(lines) != n-3 {
			t.Fatalf("the file sink holds %d records, want %d", len(lines), n-3)
		}
		for _, i := range []int{5, 10, 15} {
			if _, ok := lines[fmt.Sprintf("k%d", i)]; ok {
				t.Fatalf("bad record %d is in the file sink", i)
			}
		}
		if s := rn.r.Stats(); s.DecodeSkipped != 3 || s.DecodeErrors != 3 {
			t.Fatalf("skipped %d, decode errors %d: want 3 and 3", s.DecodeSkipped, s.DecodeErrors)
		}
	})
}

// TestRegistryTLSAndBasicAuthFromTheCLI: `offsetkeeper run` reaches a
// registry that serves only HTTPS and requires basic auth, trusting its CA
// by --schema-registry-cacert and logging in as --schema-registry-user
// with the password from $OFFSETKEEPER_SCHEMA_REGISTRY_PASSWORD; every
// record is decoded.
func TestRegistryTLSAndBasicAuthFromTheCLI(t *testing.T) {
	reg := harness.StartSchemaRegistry(t, harness.SchemaRegistryTLS(), harness.SchemaRegistryBasicAuth("pipeline", "s3cret-pw"))
	if !strings.HasPrefix(reg.URL, "https://") || reg.CAFile == "" {
		t.Fatalf("registry at %s with CA %q: want https and a CA file", reg.URL, reg.CAFile)
	}
	const schema = `{"type":"record","name":"Ping","fields":[{"name":"n","type":"long"}]}`
	id := reg.RegisterAvro(t, "pings-value", schema)
	e := newEnv(t, "pings", 2)
	want := e.produceValues(40, func(i int) []byte { return harness.AvroEncode(t, id, schema, map[string]any{"n": int64(i)}) })
	t.Setenv("OFFSETKEEPER_SCHEMA_REGISTRY_PASSWORD", "s3cret-pw")
	dir := t.TempDir()
	p := e.process("r1", dir, "--value-format", "avro", "--schema-registry", reg.URL,
		"--schema-registry-cacert", reg.CAFile, "--schema-registry-user", "pipeline")
	await(t, 60*time.Second, "every record committed", func() bool { return e.allCommitted(want) })
	lines := fileValues(t, dir)
	for i := 0; i < 40; i++ {
		if got := string(lines[fmt.Sprintf("k%d", i)].Record.Value); got != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("record %d is %s in the file sink, want {\"n\":%d}", i, got, i)
		}
	}
	if strings.Contains(p.Output(), "s3cret-pw") {
		t.Fatal("the replica's output shows the registry password")
	}
}
