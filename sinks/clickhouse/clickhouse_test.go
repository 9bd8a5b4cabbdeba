package clickhouse_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
	"github.com/offsetkeeper/offsetkeeper/sinks/sinktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, harness.GoleakOptions()...)
}

// tables counts table sets, so that every sink of a test gets its own.
var tables atomic.Int64

// sinkURL is a URL for a new set of tables: rows_N and dead_N, group g,
// over dsn (the native or the HTTP one, with params added).
func sinkURL(chs *harness.ClickHouse, params string) (url string, n int64) {
	n = tables.Add(1)
	url = fmt.Sprintf("%s?group=g&table=rows_%d&dead_letter_table=dead_%d", chs.DSN(), n, n)
	if params != "" {
		url += "&" + params
	}
	return url, n
}

func open(t testing.TB, url string, opts ...clickhouse.Option) *clickhouse.Sink {
	t.Helper()
	s, err := tryOpen(url, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func tryOpen(url string, opts ...clickhouse.Option) (*clickhouse.Sink, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return clickhouse.New(ctx, url, opts...)
}

func readAll(t *testing.T, url, topic string, partition int) []sinks.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := clickhouse.ReadAll(ctx, url, topic, partition)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	return recs
}

func write(t *testing.T, s sinks.Sink, b *sinks.Block) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Write(ctx, b); err != nil {
		t.Fatalf("Write %s: %v", b, err)
	}
}

func block(topic string, partition int, from, next int64, values ...string) *sinks.Block {
	b := &sinks.Block{Topic: topic, Partition: partition, Epoch: 1, From: from, Next: next}
	for i, v := range values {
		rec := sinks.Record{Offset: from + int64(i), Key: fmt.Appendf(nil, "k%d", from+int64(i)), Time: time.UnixMilli(1714566600000 + int64(i)).UTC()}
		if v != "<nil>" {
			rec.Value = []byte(v)
		}
		b.Records = append(b.Records, rec)
	}
	return b
}

// The raw mode passes the conformance suite, over the native protocol and
// over HTTP: a replayed block (the same range) is stored once.
func TestConformance(t *testing.T) {
	chs := harness.StartClickHouse(t)
	for _, proto := range []string{"native", "http"} {
		t.Run(proto, func(t *testing.T) {
			sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
				params := "protocol=" + proto
				if proto == "http" {
					params += "&compression=none"
				}
				url, _ := sinkURL(chs, params)
				if proto == "http" {
					url = strings.Replace(url, chs.NativeAddr(), chs.HTTPAddr(), 1)
				}
				s := open(t, url)
				return s, sinktest.ReaderFunc(func(t *testing.T, topic string, partition int) []sinks.Record {
					return readAll(t, url, topic, partition)
				})
			}, sinktest.Options{ReplayExact: true})
		})
	}
}

// A block written again (a replay by a new owner, another epoch), and the
// same block inserted by two replicas at once (a zombie and the new
// owner), is stored once: ClickHouse drops it by its token. A block of
// another generation (after an operator's reset) goes in again.
func TestReplayIsDroppedByItsToken(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "")
	a, b := open(t, url), open(t, url)
	blk := block("orders", 0, 0, 3, "a", "b", "c")
	write(t, a, blk)
	replay := *blk
	replay.Epoch = 2
	write(t, b, &replay)
	if got := len(readAll(t, url, "orders", 0)); got != 3 {
		t.Fatalf("%d rows after a replay, want 3", got)
	}
	// Concurrently, from two sinks: one insert wins.
	next := block("orders", 0, 3, 6, "d", "e", "f")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range []*clickhouse.Sink{a, b} {
		wg.Go(func() { errs[i] = s.Write(context.Background(), next) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := chs.QueryInt(t, fmt.Sprintf("SELECT count() FROM rows_%d", n)); got != 6 {
		t.Fatalf("%d rows after two concurrent inserts of a block, want 6", got)
	}
	// A reset backwards: the new generation is a new token.
	reset := block("orders", 0, 0, 3, "a", "b", "c")
	reset.Generation = 1
	write(t, a, reset)
	if got := chs.QueryInt(t, fmt.Sprintf("SELECT count() FROM rows_%d", n)); got != 9 {
		t.Fatalf("%d rows after a reset's re-delivery, want 9", got)
	}
	res, _, ok, err := a.Resume(context.Background(), "orders", 0)
	if err != nil || !ok || res != 3 {
		t.Fatalf("Resume after the reset = %d, %v, %v; want 3 (generation 1's)", res, ok, err)
	}
}

// A table that does not deduplicate is refused with a message that says
// what to set, unless at_least_once=true; a Replicated-less MergeTree with
// the window, and the raw table the sink creates, are accepted.
func TestTableWithoutDeduplicationIsRefused(t *testing.T) {
	chs := harness.StartClickHouse(t)
	for _, tc := range []struct {
		name, create string
		want         []string // in the error; none: accepted
	}{
		{"merge tree without a window", "CREATE TABLE %s (kafka_offset Int64, n Int64) ENGINE = MergeTree ORDER BY kafka_offset",
			[]string{"non_replicated_deduplication_window", "ALTER TABLE", "MODIFY SETTING", "at_least_once=true"}},
		{"merge tree with a window of 0", "CREATE TABLE %s (kafka_offset Int64, n Int64) ENGINE = MergeTree ORDER BY kafka_offset SETTINGS non_replicated_deduplication_window = 0",
			[]string{"non_replicated_deduplication_window = 10000"}},
		{"memory", "CREATE TABLE %s (kafka_offset Int64, n Int64) ENGINE = Memory", []string{"engine Memory", "at_least_once=true"}},
		{"merge tree with a window", "CREATE TABLE %s (kafka_offset Int64, n Int64) ENGINE = MergeTree ORDER BY kafka_offset SETTINGS non_replicated_deduplication_window = 100", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, n := sinkURL(chs, "mode=columns")
			chs.Exec(t, fmt.Sprintf(tc.create, fmt.Sprintf("rows_%d", n)))
			s, err := tryOpen(url)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				_ = s.Close()
				return
			}
			if err == nil {
				_ = s.Close()
				t.Fatal("New accepted a table that does not deduplicate")
			}
			if !errors.Is(err, clickhouse.ErrNoDeduplication) {
				t.Fatalf("New: %v; want ErrNoDeduplication", err)
			}
			if got := chs.QueryInt(t, `SELECT count() FROM system.tables WHERE database = currentDatabase() AND name = ?`, fmt.Sprintf("dead_%d", n)); got != 0 {
				t.Errorf("the refused New made the dead-letter table")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal %q does not say %q", err, w)
				}
			}
			// Knowingly at-least-once.
			s = open(t, url+"&at_least_once=true")
			if s.Deduplicates() {
				t.Fatal("Deduplicates() of a table without a window")
			}
		})
	}
}

// In columns mode a record the table cannot take (a value a column's type
// refuses, a tombstone, not JSON, an array) goes to the dead-letter table
// with the reason, and the block goes on without it; a replay of the block
// adds nothing to either table; Resume reads the kafka_* columns.
func TestColumnsDeadLetters(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "mode=columns")
	chs.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (
		id UInt32, name String, at DateTime('UTC'), tags Array(String), score Nullable(Float64),
		kafka_topic String, kafka_partition Int32, kafka_offset Int64, kafka_generation Int64, kafka_key Nullable(String),
		kafka_timestamp DateTime64(3, 'UTC'), total UInt64 MATERIALIZED id * 2
	) ENGINE = MergeTree ORDER BY (kafka_topic, kafka_partition, kafka_offset) SETTINGS non_replicated_deduplication_window = 1000`, n))
	s := open(t, url)
	b := block("events", 1, 10, 20,
		`{"id": 1, "name": "ada", "at": "2024-05-01 12:30:00", "tags": ["x"], "score": 1.5}`,
		`{"id": "nope", "name": "bob"}`, // 11: UInt32 refuses
		`<nil>`,                         // 12: a tombstone
		`{"id": 3, "name": "cy"}`,       // missing fields: zero values, NULL score
		`not json`,                      // 14
		`[1, 2]`,                        // 15
		`{"id": -4}`,                    // 16: UInt32 refuses
		`{"id": 5, "at": "yesterday"}`,  // 17: DateTime refuses
		`{"id": 6, "tags": "x"}`,        // 18: not an array
		`{"id": 7, "name": {"a": 1}}`,   // 19: an object as String: its JSON text
	)
	write(t, s, b)
	replay := *b
	replay.Epoch = 2
	write(t, s, &replay)

	ids := chs.Query(t, fmt.Sprintf("SELECT id, name, kafka_offset, total FROM rows_%d ORDER BY kafka_offset", n))
	if got := fmt.Sprint(ids); got != `[[1 ada 10 2] [3 cy 13 6] [7 {"a":1} 19 14]]` {
		t.Fatalf("rows = %s", got)
	}
	dead := chs.Query(t, fmt.Sprintf("SELECT kafka_offset, error FROM dead_%d ORDER BY kafka_offset", n))
	var offs []string
	for _, d := range dead {
		offs = append(offs, fmt.Sprint(d[0]))
		if d[1].(string) == "" {
			t.Errorf("dead letter %v without a reason", d[0])
		}
	}
	if got := strings.Join(offs, " "); got != "11 12 14 15 16 17 18" {
		t.Fatalf("dead letters at %s, want 11 12 14 15 16 17 18 (once each, after a replay)\n%v", got, dead)
	}
	for _, d := range dead {
		if d[0].(int64) == 11 && !strings.Contains(d[1].(string), "column id (UInt32)") {
			t.Errorf("the reason %q does not name the column and its type", d[1])
		}
	}
	// Counted once per write that set them aside (the replay's are dropped
	// by ClickHouse, but the sink cannot tell).
	if got := s.DeadLetters(); got < 7 {
		t.Fatalf("DeadLetters = %d, want at least 7", got)
	}
	next, gen, ok, err := s.Resume(context.Background(), "events", 1)
	if err != nil || !ok || next != 20 || gen != 0 {
		t.Fatalf("Resume = %d, %d, %v, %v; want 20, 0, true", next, gen, ok, err)
	}
	// A table without kafka_generation: no Resume.
	url2, n2 := sinkURL(chs, "mode=columns")
	chs.Exec(t, fmt.Sprintf("CREATE TABLE rows_%d (id UInt32, kafka_topic String, kafka_partition Int32, kafka_offset Int64) "+
		"ENGINE = MergeTree ORDER BY kafka_offset SETTINGS non_replicated_deduplication_window = 1000", n2))
	s2 := open(t, url2)
	write(t, s2, block("events", 1, 0, 1, `{"id": 1}`))
	if _, _, ok, err := s2.Resume(context.Background(), "events", 1); ok || err != nil {
		t.Fatalf("Resume of a table without kafka_generation = %v, %v; want not ok", ok, err)
	}
}

// A columns table that does not exist is refused at New.
func TestColumnsTableMissing(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, _ := sinkURL(chs, "mode=columns")
	if _, err := tryOpen(url); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("New with no table: %v", err)
	}
}

// An insert made while the server is down is retried, with its token, until
// it is back; and the tokens outlive a crash of the server: blocks inserted
// before it are dropped when inserted again after it.
func TestInsertRetriedAcrossACrash(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "retry_timeout=1m")
	s := open(t, url)
	first := block("orders", 0, 0, 3, "a", "b", "c")
	write(t, s, first)
	chs.Kill()
	second := block("orders", 0, 3, 5, "d", "e")
	done := make(chan error, 1)
	go func() { done <- s.Write(context.Background(), second) }()
	chs.Start()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Write across the crash: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("Write did not return after the server came back")
	}
	if s.Retries() == 0 {
		t.Error("no retry counted for an insert made while the server was down")
	}
	// A new owner replays both after the crash: nothing is added.
	s2 := open(t, url)
	write(t, s2, first)
	write(t, s2, second)
	if got := chs.QueryInt(t, fmt.Sprintf("SELECT count() FROM rows_%d", n)); got != 5 {
		t.Fatalf("%d rows after replays across a crash of the server, want 5", got)
	}
}

// A table with a partition key does not resume from its rows: a block of
// rows in several of its partitions is several parts, and a crash between
// them would leave a gap below the highest offset. The same table without
// the key resumes.
func TestPartitionedTableDoesNotResume(t *testing.T) {
	chs := harness.StartClickHouse(t)
	for _, tc := range []struct {
		partitionBy string
		resumes     bool
	}{
		{"", true},
		{"PARTITION BY kafka_offset % 2", false},
	} {
		url, n := sinkURL(chs, "mode=columns")
		chs.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (
			id UInt32, kafka_topic String, kafka_partition Int32, kafka_offset Int64, kafka_generation Int64
		) ENGINE = MergeTree %s ORDER BY (kafka_topic, kafka_partition, kafka_offset)
		SETTINGS non_replicated_deduplication_window = 1000`, n, tc.partitionBy))
		s := open(t, url)
		write(t, s, block("events", 0, 0, 4, `{"id": 1}`, `{"id": 2}`, `{"id": 3}`, `{"id": 4}`))
		if got := chs.QueryInt(t, fmt.Sprintf("SELECT count() FROM rows_%d", n)); got != 4 {
			t.Fatalf("%q: %d rows, want 4", tc.partitionBy, got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		next, _, ok, err := s.Resume(ctx, "events", 0)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if ok != tc.resumes || (ok && next != 4) {
			t.Errorf("%q: Resume = %d, %v; want resumes %v (at 4)", tc.partitionBy, next, ok, tc.resumes)
		}
	}
}

// TestUndecodableDeadLetters: records the replica could not decode go to
// the dead-letter table with their reason and bytes, in raw and columns
// mode, and a value of the bytes format cannot be a row in columns mode
// however JSON it looks; the rest of the block is written.
func TestUndecodableDeadLetters(t *testing.T) {
	chs := harness.StartClickHouse(t)
	for _, mode := range []string{"raw", "columns"} {
		t.Run(mode, func(t *testing.T) {
			url, n := sinkURL(chs, "mode="+mode)
			if mode == "columns" {
				chs.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (id UInt32, kafka_topic String, kafka_partition Int32, kafka_offset Int64)
					ENGINE = MergeTree ORDER BY kafka_offset SETTINGS non_replicated_deduplication_window = 1000`, n))
			}
			s := open(t, url)
			if !s.TakesUndecodable() {
				t.Fatal("TakesUndecodable is false")
			}
			b := block("events", 0, 0, 4, `{"id": 1}`, "\x01bad", `{"id": 3}`, `{"id": 4}`)
			b.Records[1].Decoded = &sinks.Decoded{Err: "value: avro: wrong magic byte 0x01 at byte 0"}
			want := []string{"1 value: avro: wrong magic byte 0x01 at byte 0"}
			if mode == "columns" {
				b.Records[3].Decoded = &sinks.Decoded{ValueSchema: &sinks.Schema{Format: sinks.Bytes}}
				want = append(want, "3 "+sqlsink.OpaqueValue)
			}
			write(t, s, b)
			var got []string
			for _, d := range chs.Query(t, fmt.Sprintf("SELECT kafka_offset, value, error FROM dead_%d ORDER BY kafka_offset", n)) {
				got = append(got, fmt.Sprint(d[0], " ", d[2]))
				if v, _ := d[1].(*string); d[0].(int64) == 1 && (v == nil || *v != "\x01bad") {
					t.Errorf("dead letter 1 holds %v, want the bytes as they were", d[1])
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("dead letters %q, want %q", got, want)
			}
			offs := "[[0] [2] [3]]"
			if mode == "columns" {
				offs = "[[0] [2]]"
			}
			if rows := fmt.Sprint(chs.Query(t, fmt.Sprintf("SELECT kafka_offset FROM rows_%d ORDER BY kafka_offset", n))); rows != offs {
				t.Fatalf("rows at %s, want %s", rows, offs)
			}
		})
	}
}

// TestNewWaitsForTheServer: a sink opened while ClickHouse is down (a
// replica started while its store restarts) waits for it, within
// retry_timeout, instead of failing.
func TestNewWaitsForTheServer(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, _ := sinkURL(chs, "")
	chs.Kill()
	opened := make(chan error, 1)
	go func() {
		s, err := tryOpen(url)
		if err == nil {
			err = s.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		t.Fatalf("New returned while the server was down: %v", err)
	case <-time.After(time.Second):
	}
	chs.Start()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatalf("New after the server came back: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("New did not return within 30s of the server coming back")
	}
}
