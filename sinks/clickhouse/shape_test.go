package clickhouse_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
)

// dedup is the engine clause of the tests' own tables: deduplicating, so
// that only their shape is wrong.
const dedup = ` ENGINE = MergeTree ORDER BY tuple() SETTINGS non_replicated_deduplication_window = 1000`

// TestTableOfAnotherShapeRefused (issue 23): a table the mode cannot use
// is refused by New at once, with an error wrapping ErrTableShape that
// names the table, the columns missing or of the wrong type and the likely
// fix, and creates nothing; raw mode on the table used to report
// ready, then fail every Resume (code 47) forever. The creates' %[1]s is
// the rows' table, %[2]s the dead-letter table.
func TestTableOfAnotherShapeRefused(t *testing.T) {
	chs := harness.StartClickHouse(t)
	for _, tc := range []struct {
		name, params string
		create       []string
		says         []string
	}{
		{
			name:   "raw mode, the issue's table",
			create: []string{`CREATE TABLE %[1]s (id UInt64, pad String, kafka_topic String, kafka_partition Int32, kafka_offset Int64)` + dedup},
			says: []string{"as a mode=raw table", "it lacks the columns kafka_generation Int64, kafka_key Nullable(String), kafka_timestamp DateTime64(3, 'UTC')",
				"value Nullable(String), header_keys Array(String), header_values Array(Nullable(String))", "use mode=columns", "give table= a new name"},
		},
		{
			name: "raw mode, columns of other types",
			create: []string{`CREATE TABLE %[1]s (kafka_topic String, kafka_partition Int64, kafka_offset UInt64, kafka_generation Int64,
				kafka_key String, kafka_timestamp DateTime('UTC'), value Nullable(String), header_keys Array(String),
				header_values Array(Nullable(String)) MATERIALIZED [])` + dedup},
			says: []string{"column kafka_partition is Int64, want Int32", "column kafka_offset is UInt64, want Int64",
				"column kafka_key is String, want Nullable(String)", "column kafka_timestamp is DateTime('UTC'), want DateTime64(3, 'UTC')",
				"column header_values is MATERIALIZED"},
		},
		{
			name:   "a dead-letter table of another shape",
			create: []string{`CREATE TABLE %[2]s (kafka_topic String, kafka_partition Int32, kafka_offset Int64, reason String)` + dedup},
			says:   []string{"as the dead-letter table", "it lacks the columns kafka_generation Int64", "error String", "dead_letter_table="},
		},
		{
			name: "both tables of another shape: one line naming both",
			create: []string{`CREATE TABLE %[1]s (id UInt64)` + dedup,
				`CREATE TABLE %[2]s (kafka_topic String, kafka_partition Int32, kafka_offset Int64, reason String)` + dedup},
			says: []string{"as a mode=raw table: it lacks the columns kafka_topic LowCardinality(String)", "; and table does not fit the sink:",
				"as the dead-letter table: it lacks the columns kafka_generation Int64"},
		},
		{
			name:   "columns mode, no table",
			params: "mode=columns",
			says:   []string{"not found", "columns mode fills an existing table"},
		},
		{
			name:   "columns mode, kafka_* columns too small for the record's",
			params: "mode=columns",
			create: []string{`CREATE TABLE %[1]s (id UInt64, kafka_topic FixedString(8), kafka_partition Int8, kafka_offset Int32, kafka_timestamp UUID)` + dedup},
			says: []string{"as a mode=columns table", "column kafka_topic is FixedString(8), which cannot hold the record's topic",
				"column kafka_partition is Int8, which cannot hold the record's partition", "column kafka_offset is Int32, which cannot hold the record's offset",
				"column kafka_timestamp is UUID, which cannot hold the record's timestamp", "filled from the record"},
		},
		{
			name:   "columns mode, resume columns Resume cannot read",
			params: "mode=columns",
			create: []string{`CREATE TABLE %[1]s (id UInt64, kafka_topic String, kafka_partition Int32, kafka_offset String, kafka_generation Float64)` + dedup},
			says: []string{"column kafka_offset is String: the sink resumes from the table", "after the highest kafka_offset: want an integer type (Int64)",
				"column kafka_generation is Float64"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, n := sinkURL(chs, tc.params)
			rows, dead := fmt.Sprintf("rows_%d", n), fmt.Sprintf("dead_%d", n)
			for _, c := range tc.create {
				chs.Exec(t, fmt.Sprintf(c, rows, dead))
			}
			tables := func() int64 {
				return chs.QueryInt(t, `SELECT count() FROM system.tables WHERE database = currentDatabase() AND name IN (?, ?)`, rows, dead)
			}
			before := tables()
			start := time.Now()
			s, err := tryOpen(url + "&retry_timeout=60s")
			if err == nil {
				_ = s.Close()
				t.Fatal("New: nil error, want the table refused")
			}
			t.Logf("refused: %v", err)
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("New took %s to refuse the table: no wait mends it", took)
			}
			if !errors.Is(err, clickhouse.ErrTableShape) {
				t.Errorf("New: %v, want an error wrapping ErrTableShape", err)
			}
			if !strings.Contains(err.Error(), "`"+rows+"`") && !strings.Contains(err.Error(), "`"+dead+"`") {
				t.Errorf("New's error names neither table:\n%v", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("New's error is not one line:\n%v", err)
			}
			for _, want := range tc.says {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("New's error does not say %q:\n%v", want, err)
				}
			}
			if after := tables(); after != before {
				t.Errorf("the refused New changed the tables: %d of %s, %s before, %d after", before, rows, dead, after)
			}
		})
	}
}

// TestTablesOfOtherFittingShapesAccepted: what the checks accept works:
// a raw table with LowCardinality strings, microseconds and an extra
// column reads back what was written; a columns table whose kafka_* columns
// are wider or Nullable writes and resumes; and one without all of the
// resume columns writes (resuming from etcd) whatever the types of the
// others that can hold the record's values.
func TestTablesOfOtherFittingShapesAccepted(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "")
	chs.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (note String DEFAULT 'x', kafka_topic String, kafka_partition Int32, kafka_offset Int64,
		kafka_generation Int64, kafka_key Nullable(String), kafka_timestamp DateTime64(6), value Nullable(String),
		header_keys Array(LowCardinality(String)), header_values Array(Nullable(String)))
		ENGINE = MergeTree ORDER BY (kafka_topic, kafka_partition, kafka_offset) SETTINGS non_replicated_deduplication_window = 1000`, n))
	s := open(t, url)
	b := block("orders", 0, 0, 2, `{"a":1}`, "<nil>")
	b.Records[0].Headers = []sinks.Header{{Key: "h", Value: []byte("v")}}
	write(t, s, b)
	got := readAll(t, url, "orders", 0)
	if len(got) != 2 || string(got[0].Value) != `{"a":1}` || got[1].Value != nil || len(got[0].Headers) != 1 || !got[0].Time.Equal(b.Records[0].Time) {
		t.Errorf("ReadAll: %+v, want the block's records", got)
	}
	if next, _, ok, err := s.Resume(context.Background(), "orders", 0); err != nil || !ok || next != 2 {
		t.Errorf("Resume = %d, %v, %v; want 2", next, ok, err)
	}

	url, n = sinkURL(chs, "mode=columns")
	chs.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (a Int64, kafka_topic LowCardinality(String), kafka_partition UInt32, kafka_offset Nullable(UInt64),
		kafka_generation Int128, kafka_timestamp DateTime('UTC'), kafka_key String)
		ENGINE = MergeTree ORDER BY tuple() SETTINGS non_replicated_deduplication_window = 1000`, n))
	s = open(t, url)
	write(t, s, block("orders", 3, 5, 7, `{"a":1}`, `{"a":2}`))
	if next, gen, ok, err := s.Resume(context.Background(), "orders", 3); err != nil || !ok || next != 7 || gen != 0 {
		t.Errorf("Resume = %d, %d, %v, %v; want 7, 0, true", next, gen, ok, err)
	}

	url, n = sinkURL(chs, "mode=columns")
	chs.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (a Int64, kafka_topic String, kafka_offset String) `+dedup, n))
	s = open(t, url)
	write(t, s, block("orders", 3, 5, 6, `{"a":1}`))
	if got := chs.QueryInt(t, fmt.Sprintf(`SELECT count() FROM rows_%d WHERE kafka_offset = '5'`, n)); got != 1 {
		t.Errorf("%d rows at offset '5', want 1", got)
	}
	if _, _, ok, err := s.Resume(context.Background(), "orders", 3); ok || err != nil {
		t.Errorf("Resume of a table without kafka_generation = %v, %v; want not ok", ok, err)
	}
}
