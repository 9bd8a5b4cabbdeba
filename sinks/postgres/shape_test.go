package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
)

// TestTableOfAnotherShapeRefused (issue 23): a table a mode cannot use is
// refused by New at once, with an error wrapping ErrTableShape that names
// the table, what is wrong with it and the likely fix; and a refused New
// creates nothing (the offsets and dead-letter tables are not made). The
// creates' %[1]s is the rows' table, %[2]s the offsets table, %[3]s the
// dead-letter table.
func TestTableOfAnotherShapeRefused(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := db(t, pg)
	rawLayout := `CREATE TABLE %[1]s (topic text NOT NULL, partition integer NOT NULL, "offset" bigint NOT NULL, key bytea, value jsonb,
		value_bytes bytea, "timestamp" timestamptz NOT NULL, headers jsonb NOT NULL`
	for _, tc := range []struct {
		name, params string
		create       []string
		says         []string
	}{
		{
			name:   "raw mode, a table of another shape (issue 23)",
			create: []string{`CREATE TABLE %[1]s (id bigint, pad text, kafka_topic text, kafka_partition integer, kafka_offset bigint)`},
			says: []string{"a mode=raw table", `it lacks the columns topic text, partition integer, offset bigint, key bytea, value jsonb, value_bytes bytea, timestamp timestamp with time zone, headers jsonb`,
				"no primary key or unique index on (topic, partition, offset)", "use mode=columns", "give table= a new name"},
		},
		{
			name:   "raw mode, a column of another type",
			create: []string{rawLayout + `, PRIMARY KEY (topic, partition, "offset"))`, `ALTER TABLE %[1]s ALTER COLUMN partition TYPE text, ALTER COLUMN headers TYPE json`},
			says:   []string{"column partition is text, want integer or bigint", "column headers is json, want jsonb", "mode=columns"},
		},
		{
			name:   "raw mode, no key for ON CONFLICT",
			create: []string{rawLayout + `)`},
			says:   []string{"no primary key or unique index on (topic, partition, offset)"},
		},
		{
			name:   "raw mode, a NOT NULL column the sink does not fill",
			create: []string{rawLayout + `, tenant text NOT NULL, PRIMARY KEY (topic, partition, "offset"))`},
			says:   []string{"column tenant is NOT NULL without a default"},
		},
		{
			name:   "raw mode, a view",
			create: []string{`CREATE VIEW %[1]s AS SELECT 'x'::text AS topic`},
			says:   []string{"it is a view, not a table", "lacks the columns"},
		},
		{
			name:   "an offsets table of another shape",
			create: []string{`CREATE TABLE %[2]s ("group" text, topic text, partition integer, next integer, PRIMARY KEY ("group", topic, partition))`},
			says:   []string{"the offsets table", "lacks the columns epoch bigint, generation bigint, updated_at", "column next is integer, want bigint", "offsets_table="},
		},
		{
			name:   "a dead-letter table of another shape",
			params: "mode=columns",
			create: []string{`CREATE TABLE %[1]s (n integer)`, `CREATE TABLE %[3]s (topic text, partition integer, "offset" bigint, reason text)`},
			says:   []string{"the dead-letter table", "lacks the columns key bytea, value bytea", "dead_letter_table="},
		},
		{
			name: "the offsets and dead-letter tables of another shape: one line naming both",
			create: []string{`CREATE TABLE %[2]s ("group" text, topic text, partition integer, PRIMARY KEY ("group", topic, partition))`,
				`CREATE TABLE %[3]s (topic text, partition integer, "offset" bigint, PRIMARY KEY (topic, partition, "offset"))`},
			says: []string{"as the offsets table: it lacks the columns next bigint", "; and table does not fit the sink:",
				"as the dead-letter table: it lacks the columns key bytea"},
		},
		{
			name:   "columns mode, no table",
			params: "mode=columns",
			says:   []string{"does not exist", "columns mode fills an existing table"},
		},
		{
			name:   "columns mode, kafka_* columns of types the record cannot fill",
			params: "mode=columns",
			create: []string{`CREATE TABLE %[1]s (n integer, kafka_topic integer, kafka_offset date, kafka_key jsonb, kafka_timestamp boolean)`},
			says: []string{"a mode=columns table", "kafka_topic is integer, want a string type", "kafka_offset is date, want a numeric type",
				"kafka_key is jsonb, want bytea", "kafka_timestamp is boolean, want a date/time type", "filled from the record"},
		},
		{
			name:   "upsert mode, a kafka_* column of a type the record cannot fill",
			params: "mode=upsert",
			create: []string{`CREATE TABLE %[1]s (id bigint PRIMARY KEY, v text, kafka_partition inet, kafka_offset integer)`},
			says:   []string{"a mode=upsert table", "kafka_partition is inet, want a numeric type", "kafka_offset is integer, want a numeric type that holds 64-bit offsets"},
		},
		{
			name:   "upsert mode, no key",
			params: "mode=upsert",
			create: []string{`CREATE TABLE %[1]s (id bigint, v text)`},
			says:   []string{"has no primary key", "conflict="},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, n := sinkURL(pg, tc.params)
			rows, offsets, dead := fmt.Sprintf("rows_%d", n), fmt.Sprintf("offsets_%d", n), fmt.Sprintf("dead_%d", n)
			for _, c := range tc.create {
				pg.Exec(t, fmt.Sprintf(c, rows, offsets, dead))
			}
			before := queryInt(t, conn, `SELECT count(*) FROM pg_class WHERE relname = ANY($1)`, []string{rows, offsets, dead})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			s, err := postgres.New(ctx, url+"&retry_timeout=60s")
			if err == nil {
				_ = s.Close()
				t.Fatal("New: nil error, want the table refused")
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("New took %s to refuse the table: no wait mends it", took)
			}
			t.Logf("refused: %v", err)
			if !errors.Is(err, postgres.ErrTableShape) {
				t.Errorf("New: %v, want an error wrapping ErrTableShape", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("New's error is not one line:\n%v", err)
			}
			for _, want := range tc.says {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("New's error does not say %q:\n%v", want, err)
				}
			}
			named := false
			for _, tab := range []string{rows, offsets, dead} {
				named = named || strings.Contains(err.Error(), `"`+tab+`"`)
			}
			if !named {
				t.Errorf("New's error names none of the tables:\n%v", err)
			}
			if after := queryInt(t, conn, `SELECT count(*) FROM pg_class WHERE relname = ANY($1)`, []string{rows, offsets, dead}); after != before {
				t.Errorf("the refused New changed the tables: %d of %s, %s, %s before, %d after", before, rows, offsets, dead, after)
			}
		})
	}
}

// TestTablesOfOtherFittingShapesAccepted: what the checks accept works:
// a raw table of equivalent types (varchar, bigint, timestamptz(3)) with
// an extra nullable column and a unique index in place of the primary key,
// and columns whose kafka_* columns are of other types the record fills
// (text, numeric, timestamp).
func TestTablesOfOtherFittingShapesAccepted(t *testing.T) {
	pg := harness.StartPostgres(t)
	url, n := sinkURL(pg, "")
	pg.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (note text, topic varchar(249) NOT NULL, partition bigint NOT NULL, "offset" bigint NOT NULL,
		key bytea, value jsonb, value_bytes bytea, "timestamp" timestamptz(3) NOT NULL, headers jsonb NOT NULL DEFAULT '[]')`, n))
	pg.Exec(t, fmt.Sprintf(`CREATE UNIQUE INDEX ON rows_%d ("offset", partition, topic)`, n))
	s := open(t, url)
	write(t, s, block("orders", 0, 1, 0, 3, 0, 1, 2))
	recs, err := postgres.ReadAll(context.Background(), url, "orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[2].Offset != 2 || string(recs[2].Value) != `{"n":2}` {
		t.Errorf("ReadAll: %v, want offsets 0-2", recs)
	}

	conn := db(t, pg)
	cs, n := newSink(t, pg, "mode=columns", `CREATE TABLE %s (n integer, kafka_topic varchar, kafka_partition numeric, kafka_offset text,
		kafka_key text, kafka_timestamp timestamp)`)
	write(t, cs, block("orders", 1, 1, 5, 7, 5, 6))
	if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d WHERE kafka_partition = 1 AND kafka_offset IN ('5', '6') AND kafka_topic = 'orders'`, n)); got != 2 {
		t.Errorf("%d rows with their kafka_* columns, want 2", got)
	}
}
