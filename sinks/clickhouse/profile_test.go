package clickhouse_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
)

// userURL is sinkURL's URL for a new set of tables, connecting as user.
func userURL(chs *harness.ClickHouse, user, params string) (url string, n int64) {
	url, n = sinkURL(chs, params)
	return strings.Replace(url, "clickhouse://", "clickhouse://"+user+"@", 1), n
}

// A user whose profile turns insert deduplication off (insert_deduplicate
// 0, deduplicate_insert 'disable', ClickHouse 26.2 and later): the sink's
// inserts turn it on, so a block written again after a crash (a new
// owner's replay of the intent: the same range, the same token) is dropped,
// and the table holds it once.
func TestProfileWithoutDeduplicationIsOverridden(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, _ := userURL(chs, harness.ClickHouseUserNoDedup, "")
	s := open(t, url)
	b := block("orders", 0, 0, 3, `{"n":0}`, `{"n":1}`, `{"n":2}`)
	write(t, s, b)
	write(t, s, b)
	checkOnce(t, url, b)
}

// A user whose profile has SELECTs read the query cache: the sink's check
// of a block dropped as a duplicate (its rows deleted while the server kept
// the token, as after a crash in the window) reads the table, not a cached
// answer from before its re-insert: one copy, not three.
func TestQueryCacheProfileDoesNotHideRows(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := userURL(chs, harness.ClickHouseUserCached, "")
	s := open(t, url)
	b := block("orders", 0, 0, 3, `{"n":0}`, `{"n":1}`, `{"n":2}`)
	write(t, s, b)
	forgetRows(t, chs, fmt.Sprintf("rows_%d", n), clickhouse.Token("g", b), b)
	// A new owner: its first block may be a replay, checked.
	if _, _, _, err := s.Resume(context.Background(), "orders", 0); err != nil {
		t.Fatal(err)
	}
	write(t, s, b)
	checkOnce(t, url, b)
	if got := s.Reinserts(); got != 1 {
		t.Errorf("%d re-inserts, want 1", got)
	}
}

// A table the sink's user reads through a row policy is refused at start:
// the sink would take the rows the policy hides for missing ones and insert
// them again.
func TestRowPolicyTableRefused(t *testing.T) {
	chs := harness.StartClickHouse(t)
	chs.Exec(t, `CREATE TABLE `+harness.ClickHouseHiddenTable+` (
		kafka_topic LowCardinality(String), kafka_partition Int32, kafka_offset Int64, kafka_generation Int64,
		kafka_key Nullable(String), kafka_timestamp DateTime64(3, 'UTC'), value Nullable(String),
		header_keys Array(String), header_values Array(Nullable(String))
	) ENGINE = MergeTree ORDER BY (kafka_topic, kafka_partition, kafka_offset)
	SETTINGS non_replicated_deduplication_window = 1000`)
	url := fmt.Sprintf("clickhouse://%s@%s/%s?group=g&table=%s&dead_letter_table=hidden_dead",
		harness.ClickHouseUserHidden, chs.NativeAddr(), chs.Database(), harness.ClickHouseHiddenTable)
	_, err := tryOpen(url)
	if !errors.Is(err, clickhouse.ErrTableShape) || !strings.Contains(err.Error(), "row policy") {
		t.Fatalf("New: %v, want an error wrapping ErrTableShape naming the row policy", err)
	}
}

// Two hosts for a table each server keeps apart (a plain MergeTree): a
// retry, a check or a resume could reach the other server. Refused at
// start, naming both hosts.
func TestSeveralHostsRefusedForATableOfOneServer(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, _ := sinkURL(chs, "")
	url = strings.Replace(url, chs.NativeAddr(), chs.NativeAddr()+",127.0.0.1:1", 1)
	_, err := tryOpen(url)
	if !errors.Is(err, clickhouse.ErrTableShape) || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "Replicated") {
		t.Fatalf("New: %v, want an error wrapping ErrTableShape naming the hosts and Replicated tables", err)
	}
}

// A block whose rows span more days than a table partitioned by day takes
// in one insert (max_partitions_per_insert_block, 100): the same block
// fails the same way every time, so the sink does not retry it for
// retry_timeout but fails the write at once, saying what to change.
func TestBlockOfTooManyTablePartitionsFailsAtOnce(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "retry_timeout=60s")
	chs.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (
		kafka_topic LowCardinality(String), kafka_partition Int32, kafka_offset Int64, kafka_generation Int64,
		kafka_key Nullable(String), kafka_timestamp DateTime64(3, 'UTC'), value Nullable(String),
		header_keys Array(String), header_values Array(Nullable(String))
	) ENGINE = MergeTree PARTITION BY toYYYYMMDD(kafka_timestamp) ORDER BY (kafka_topic, kafka_partition, kafka_offset)
	SETTINGS non_replicated_deduplication_window = 1000`, n))
	s := open(t, url)
	b := &sinks.Block{Topic: "orders", Partition: 0, Epoch: 1, From: 0, Next: 101}
	day := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 101 {
		b.Records = append(b.Records, sinks.Record{Offset: int64(i), Value: []byte(`{}`), Time: day.AddDate(0, 0, i)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	began := time.Now()
	err := s.Write(ctx, b)
	if err == nil || !strings.Contains(err.Error(), "max_partitions_per_insert_block") {
		t.Fatalf("Write: %v, want an error naming max_partitions_per_insert_block", err)
	}
	if took := time.Since(began); took > 5*time.Second || s.Retries() != 0 {
		t.Errorf("the write failed after %v and %d retries, want at once", took, s.Retries())
	}
}

// A SummingMergeTree sums the numeric columns outside its sorting key,
// kafka_offset among them with the documented (kafka_topic,
// kafka_partition) key: after a merge the highest offset is a sum. Such a
// table is not resumed from (etcd and the intent's replay are), where the
// sum + 1 would have skipped records.
func TestSummingTableDoesNotResume(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "mode=columns")
	table := fmt.Sprintf("rows_%d", n)
	chs.Exec(t, `CREATE TABLE `+table+` (kafka_topic String, kafka_partition Int32, kafka_offset Int64, kafka_generation Int64, n Int64)
		ENGINE = SummingMergeTree ORDER BY (kafka_topic, kafka_partition) SETTINGS non_replicated_deduplication_window = 1000`)
	s := open(t, url)
	var vals []string
	for i := range 10 {
		vals = append(vals, fmt.Sprintf(`{"n":%d}`, i+1))
	}
	write(t, s, block("orders", 0, 0, 10, vals[:5]...))
	write(t, s, block("orders", 0, 5, 10, vals[5:]...))
	chs.Exec(t, `OPTIMIZE TABLE `+table+` FINAL`)
	if got := chs.QueryInt(t, `SELECT max(kafka_offset) FROM `+table); got != 45 {
		t.Fatalf("precondition: max(kafka_offset) %d after the merge, want 45 (the sum of 0 to 9)", got)
	}
	s2 := open(t, url)
	if next, _, ok, err := s2.Resume(context.Background(), "orders", 0); err != nil || ok {
		t.Errorf("Resume = %d, %v, %v; want not ok: the table's kafka_offset is rewritten by its merges", next, ok, err)
	}
}

// A table the sink cannot check (a ReplacingMergeTree keyed by the record's
// id: merges fold rows of several offsets) is written all the same; a
// block its server drops as a duplicate when a new owner replays it is
// counted and said, over the native protocol, where it could not be
// checked.
func TestUncheckedTableCountsDroppedReplays(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "mode=columns")
	chs.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (id Int64, kafka_topic String, kafka_partition Int32, kafka_offset Int64, kafka_generation Int64)
		ENGINE = ReplacingMergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000`, n))
	s := open(t, url)
	b := block("orders", 0, 0, 3, `{"id":1}`, `{"id":2}`, `{"id":3}`)
	write(t, s, b)
	if got := s.UncheckedDuplicates(); got != 0 {
		t.Fatalf("%d unchecked duplicates after a first write, want 0", got)
	}
	// A new owner replays the block: the server drops it.
	if _, _, _, err := s.Resume(context.Background(), "orders", 0); err != nil {
		t.Fatal(err)
	}
	write(t, s, b)
	if got := s.UncheckedDuplicates(); got != 1 {
		t.Errorf("%d unchecked duplicates after a replay, want 1", got)
	}
	if got := chs.QueryInt(t, fmt.Sprintf(`SELECT count() FROM rows_%d`, n)); got != 3 {
		t.Errorf("%d rows, want 3 (the replay dropped)", got)
	}
}

// A table that does not sync its parts to disk before an insert is
// acknowledged (ClickHouse's defaults) is said at start, naming the
// settings that close it; one that does is not.
func TestUnsyncedTableWarned(t *testing.T) {
	chs := harness.StartClickHouse(t)
	warnings := func(url string) int {
		core, logs := observer.New(zap.WarnLevel)
		open(t, url, clickhouse.WithLogger(zap.New(core)))
		return logs.FilterMessageSnippet("fsync_after_insert = 1, fsync_part_directory = 1").Len()
	}
	url, _ := sinkURL(chs, "")
	if n := warnings(url); n != 1 {
		t.Errorf("a raw table of ClickHouse's defaults: %d warnings naming the fsync settings, want 1", n)
	}
	url, n := sinkURL(chs, "")
	chs.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (
		kafka_topic LowCardinality(String), kafka_partition Int32, kafka_offset Int64, kafka_generation Int64,
		kafka_key Nullable(String), kafka_timestamp DateTime64(3, 'UTC'), value Nullable(String),
		header_keys Array(String), header_values Array(Nullable(String))
	) ENGINE = MergeTree ORDER BY (kafka_topic, kafka_partition, kafka_offset)
	SETTINGS non_replicated_deduplication_window = 1000, fsync_after_insert = 1, fsync_part_directory = 1`, n))
	if n := warnings(url); n != 0 {
		t.Errorf("a table that syncs its parts: %d warnings, want 0", n)
	}
}
