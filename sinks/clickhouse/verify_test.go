package clickhouse_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
)

// droppedWarning is what the sink logs when it inserts a block again.
const droppedWarning = "dropped the block's insert as a duplicate"

// forgetRows deletes the block's rows from table (rows_N or dead_N) while
// the server keeps its deduplication record (a mutation does not touch the
// log), the state a SIGKILL between the record and the part leaves; and
// checks that a plain insert with the insert's token is then dropped.
func forgetRows(t *testing.T, chs *harness.ClickHouse, table, token string, b *sinks.Block) {
	t.Helper()
	chs.Exec(t, fmt.Sprintf("ALTER TABLE %s DELETE WHERE kafka_topic = '%s' AND kafka_partition = %d SETTINGS mutations_sync = 1",
		table, b.Topic, b.Partition))
	count := fmt.Sprintf("SELECT count() FROM %s WHERE kafka_topic = '%s' AND kafka_partition = %d", table, b.Topic, b.Partition)
	if got := chs.QueryInt(t, count); got != 0 {
		t.Fatalf("%d rows in %s after the delete, want 0", got, table)
	}
	chs.Exec(t, fmt.Sprintf("INSERT INTO %s (kafka_topic, kafka_partition, kafka_offset, kafka_generation) "+
		"SETTINGS insert_deduplicate = 1, insert_deduplication_token = '%s' VALUES ('%s', %d, %d, %d)",
		table, token, b.Topic, b.Partition, b.From, b.Generation))
	if got := chs.QueryInt(t, count); got != 0 {
		t.Fatalf("precondition: an insert with the token %s went into %s after the rows were deleted (%d rows): "+
			"the server does not keep the deduplication record, and this test shows nothing", token, table, got)
	}
}

// checkOnce checks that the table holds b's values, once each.
func checkOnce(t *testing.T, url string, b *sinks.Block) {
	t.Helper()
	recs := readAll(t, url, b.Topic, b.Partition)
	var got, want []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%d:%s", r.Offset, r.Value))
	}
	for _, r := range b.Records {
		want = append(want, fmt.Sprintf("%d:%s", r.Offset, r.Value))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the table holds %v, want %v", got, want)
	}
}

// An INSERT reaches the server and is stored, but its answer is lost (an
// Interceptor cuts the connection) and the sink retries it. Before the
// retry reaches the server, the rows are gone while the server keeps the
// token (as after a SIGKILL between a non-replicated MergeTree's
// deduplication record and its part): the retry is dropped as a
// duplicate, answered as a success. The sink finds none of the block's
// rows, inserts it again with a new token, warns and counts it: the block
// is in the table once.
func TestRetryDroppedWithoutItsRowsIsInsertedAgain(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "retry_timeout=1m")
	ic := harness.NewInterceptor(t, chs.NativeAddr())
	core, logs := observer.New(zapcore.WarnLevel)
	s := open(t, strings.Replace(url, chs.NativeAddr(), ic.Addr(), 1), clickhouse.WithLogger(zap.New(core)))
	before := block("orders", 0, 0, 2, "x", "y")
	write(t, s, before)
	if s.Reinserts() != 0 || logs.FilterMessageSnippet(droppedWarning).Len() != 0 {
		t.Fatal("a block inserted at the first attempt was inserted again")
	}
	forgetRows(t, chs, fmt.Sprintf("rows_%d", n), clickhouse.Token("g", before), before) // the partition's earlier rows: not this block's

	b := block("orders", 0, 2, 5, "a", "b", "c")
	ic.LoseAnswer("INSERT INTO", 2)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		done <- s.Write(ctx, b)
	}()
	harness.Await(t, 30*time.Second, "the answer to the INSERT to be lost", func() bool { return ic.Lost() == 1 })
	// New connections are refused until Allow: the retry waits.
	count := fmt.Sprintf("SELECT count() FROM rows_%d", n)
	harness.Await(t, 30*time.Second, "the block whose answer was lost to be in the table", func() bool { return chs.QueryInt(t, count) == 3 })
	forgetRows(t, chs, fmt.Sprintf("rows_%d", n), clickhouse.Token("g", b), b)
	ic.Allow()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Write: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Write did not return")
	}
	if s.Retries() == 0 {
		t.Fatal("the insert whose answer was lost was not retried")
	}
	checkOnce(t, url, b)
	if got := s.Reinserts(); got != 1 {
		t.Errorf("Reinserts = %d, want 1", got)
	}
	if got := logs.FilterMessageSnippet(droppedWarning).Len(); got != 1 {
		t.Errorf("%d warnings that the block was inserted again, want 1; logs: %v", got, logs.All())
	}
	// A further write of the block (a replay) adds nothing.
	write(t, s, b)
	checkOnce(t, url, b)
}

// A new owner's first block after Resume may be the previous owner's
// replayed intent, whose token the server may know without its rows: it
// is checked, and inserted again if missing; the dead-letter table too (a
// block of dead letters alone has no rows in the table). The blocks after
// it are not checked.
func TestReplayAfterResumeDroppedWithoutItsRowsIsInsertedAgain(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "")
	rows := block("orders", 1, 10, 13, "a", "b", "c")
	dead := block("orders", 2, 20, 21, "d")
	dead.Records[0].Decoded = &sinks.Decoded{Err: "not avro"}
	a := open(t, url)
	write(t, a, rows)
	write(t, a, dead)
	forgetRows(t, chs, fmt.Sprintf("rows_%d", n), clickhouse.Token("g", rows), rows)
	forgetRows(t, chs, fmt.Sprintf("dead_%d", n), clickhouse.Token("g", dead)+"/dead", dead)

	core, logs := observer.New(zapcore.WarnLevel)
	s := open(t, url, clickhouse.WithLogger(zap.New(core)))
	for _, b := range []*sinks.Block{rows, dead} {
		if _, _, ok, err := s.Resume(context.Background(), b.Topic, b.Partition); ok || err != nil {
			t.Fatalf("Resume %s/%d = %v, %v; want not ok", b.Topic, b.Partition, ok, err)
		}
		replay := *b
		replay.Epoch = 2
		write(t, s, &replay)
	}
	checkOnce(t, url, rows)
	deadCount := fmt.Sprintf("SELECT count() FROM dead_%d WHERE kafka_partition = 2 AND kafka_offset = 20", n)
	if got := chs.QueryInt(t, deadCount); got != 1 {
		t.Fatalf("%d dead letters of the replayed block, want 1", got)
	}
	if got := s.Reinserts(); got != 2 {
		t.Errorf("Reinserts = %d, want 2", got)
	}
	if got := logs.FilterMessageSnippet(droppedWarning).Len(); got != 2 {
		t.Errorf("%d warnings that a block was inserted again, want 2; logs: %v", got, logs.All())
	}
	// The next blocks are neither checked nor inserted again.
	write(t, s, block("orders", 1, 13, 14, "e"))
	if got := s.Reinserts(); got != 2 {
		t.Errorf("Reinserts = %d after a block written at the first attempt, want 2", got)
	}
}

// A columns table that keeps the offset as a String (no kafka_generation,
// so the sink does not resume from it) is accepted; the check that a
// partition's first block after Resume landed compares offsets as
// integers, so it is not made there: the block after Resume is written,
// rather than failing on a query of the wrong type at every try.
func TestColumnsTableWithAStringOffsetIsWrittenAfterResume(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "mode=columns")
	chs.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (id UInt32, kafka_topic String, kafka_partition Int32, kafka_offset String)
		ENGINE = MergeTree ORDER BY (kafka_topic, kafka_partition, kafka_offset) SETTINGS non_replicated_deduplication_window = 1000`, n))
	s := open(t, url)
	if _, _, _, err := s.Resume(context.Background(), "events", 0); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	write(t, s, block("events", 0, 0, 2, `{"id": 1}`, `{"id": 2}`))
	if got := chs.QueryInt(t, fmt.Sprintf("SELECT count() FROM rows_%d", n)); got != 2 {
		t.Fatalf("%d rows, want 2", got)
	}
}
