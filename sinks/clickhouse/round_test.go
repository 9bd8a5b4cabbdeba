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

// writeBlocks writes blocks in one call and fails on any block's error.
func writeBlocks(t *testing.T, s *clickhouse.Sink, blocks ...*sinks.Block) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := errors.Join(s.WriteBlocks(ctx, blocks)...); err != nil {
		t.Fatalf("WriteBlocks: %v", err)
	}
}

// roundBlocks are n partitions' blocks of one round: partition p holds
// offsets [10p, 10p+3).
func roundBlocks(round string, n int) []*sinks.Block {
	var out []*sinks.Block
	for p := range n {
		b := block("orders", p, int64(10*p), int64(10*p+3), fmt.Sprintf("p%d-a", p), fmt.Sprintf("p%d-b", p), fmt.Sprintf("p%d-c", p))
		b.Round = round
		out = append(out, b)
	}
	return out
}

// newParts counts the parts the server made for a table (system.part_log).
func newParts(t *testing.T, chs *harness.ClickHouse, table string) int64 {
	t.Helper()
	chs.Exec(t, "SYSTEM FLUSH LOGS")
	return chs.QueryInt(t, fmt.Sprintf("SELECT count() FROM system.part_log WHERE event_type = 'NewPart' AND database = currentDatabase() "+
		"AND table = '%s'", table))
}

// The blocks of 16 partitions that share a round are one insert, so one
// part; a block of the round written again alone (a new owner's replay)
// is dropped by the round's token, the sink finds its rows, and nothing
// is doubled.
func TestRoundIsOnePart(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "insert_interval=0")
	s := open(t, url)
	if !s.InsertsRounds() {
		t.Fatal("InsertsRounds = false for the raw table")
	}
	blocks := roundBlocks("r1", 16)
	writeBlocks(t, s, blocks...)
	table := fmt.Sprintf("rows_%d", n)
	if got := newParts(t, chs, table); got != 1 {
		t.Fatalf("%d parts for a round of 16 blocks, want 1", got)
	}
	// A new owner of partition 5: Resume, then the intent's replay.
	other := open(t, url)
	if _, _, _, err := other.Resume(context.Background(), "orders", 5); err != nil {
		t.Fatal(err)
	}
	replay := *blocks[5]
	replay.Epoch = 2
	writeBlocks(t, other, &replay)
	if got := chs.QueryInt(t, "SELECT count() FROM "+table); got != 48 {
		t.Fatalf("%d rows after a replay of one block of the round, want 48", got)
	}
	for _, b := range blocks {
		checkOnce(t, url, b)
	}
	if other.Reinserts() != 0 {
		t.Fatalf("the replay inserted %d times again: the round held its rows", other.Reinserts())
	}
	if got := newParts(t, chs, table); got != 1 {
		t.Fatalf("%d parts after the replay, want 1: a block whose rows are all in the table is not inserted again", got)
	}
}

// A zombie's round lands after new owners replayed two of its blocks: the
// first replay spends the round's token with its own rows, so the zombie's
// insert of the whole round is dropped; the other blocks' replays find the
// token spent and their rows missing, and insert them under tokens of
// their own. Every row is in the table once.
func TestZombieRoundAfterReplays(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "insert_interval=0")
	zombie, owner := open(t, url), open(t, url)
	blocks := roundBlocks("r2", 4)
	for _, p := range []int{1, 3} {
		if _, _, _, err := owner.Resume(context.Background(), "orders", p); err != nil {
			t.Fatal(err)
		}
	}
	writeBlocks(t, owner, blocks[1])
	// Dropped: the token is spent. Over the native protocol the server
	// says so, and the zombie checks and inserts what is missing, under
	// the tokens the new owners' checks use too.
	writeBlocks(t, zombie, blocks...)
	table := fmt.Sprintf("rows_%d", n)
	if got := chs.QueryInt(t, "SELECT count() FROM "+table); got != 12 {
		t.Fatalf("%d rows after the zombie's round, want 12 (the replay's, and the missing ones the zombie found)", got)
	}
	writeBlocks(t, owner, blocks[3])
	// Partitions 0 and 2: their new owner replays them together.
	for _, p := range []int{0, 2} {
		if _, _, _, err := owner.Resume(context.Background(), "orders", p); err != nil {
			t.Fatal(err)
		}
	}
	writeBlocks(t, owner, blocks[0], blocks[2])
	if got := chs.QueryInt(t, "SELECT count() FROM "+table); got != 12 {
		t.Fatalf("%d rows, want 12", got)
	}
	for _, b := range blocks {
		checkOnce(t, url, b)
	}
	if got := zombie.Reinserts() + owner.Reinserts(); got != 3 {
		t.Fatalf("%d blocks inserted under tokens of their own, want 3 (partitions 0, 2 and 3)", got)
	}
}

// Blocks that carry no round, or rounds of another call, go in as before:
// one insert each, with their range's token; two rounds in one call are
// two inserts.
func TestBlocksWithoutARoundAreInsertsOfTheirOwn(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "insert_interval=0")
	s := open(t, url)
	a, b := roundBlocks("ra", 3), roundBlocks("", 3)
	for _, blk := range b {
		blk.Topic = "payments"
	}
	writeBlocks(t, s, append(a, b...)...)
	if got := newParts(t, chs, fmt.Sprintf("rows_%d", n)); got != 4 {
		t.Fatalf("%d parts, want 4: one for round ra, one per block without a round", got)
	}
	for _, blk := range append(a, b...) {
		checkOnce(t, url, blk)
	}
}

// insert_interval is the pace the sink asks of the replica
// (sinks.RoundPacer), for a table it inserts rounds into; a table it
// cannot check for a block's rows (a ReplacingMergeTree keyed by another
// column) takes each block alone, unpaced.
func TestRoundInterval(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, _ := sinkURL(chs, "insert_interval=400ms")
	if got := open(t, url).RoundInterval(); got != 400*time.Millisecond {
		t.Errorf("RoundInterval = %s, want 400ms", got)
	}
	url, _ = sinkURL(chs, "")
	if got := open(t, url).RoundInterval(); got != clickhouse.DefaultInsertInterval {
		t.Errorf("RoundInterval = %s, want the default %s", got, clickhouse.DefaultInsertInterval)
	}
	url, n := sinkURL(chs, "mode=columns")
	chs.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (id UInt64, kafka_topic String, kafka_partition Int32, kafka_offset Int64)
		ENGINE = ReplacingMergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 100`, n))
	s := open(t, url)
	if s.InsertsRounds() || s.RoundInterval() != 0 {
		t.Errorf("a table that cannot be checked: InsertsRounds %v, RoundInterval %s; want false, 0", s.InsertsRounds(), s.RoundInterval())
	}
}

// A block of a round that went in without it (its intent failed, so the
// replica left it out of the call, and another block of the round went in
// alone) comes again with the round, marked Again: its insert is dropped
// by the spent token, and the sink, told to check, finds its rows missing
// and inserts them under a token of their own. Without the mark nothing
// would say the drop was not its own rows.
func TestBlockAgainInASpentRoundIsChecked(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "insert_interval=0&protocol=http")
	url = strings.Replace(url, chs.NativeAddr(), chs.HTTPAddr(), 1)
	s := open(t, url)
	blocks := roundBlocks("r3", 2)
	writeBlocks(t, s, blocks[0])
	again := *blocks[1]
	again.Again = true
	writeBlocks(t, s, &again)
	if got := chs.QueryInt(t, fmt.Sprintf("SELECT count() FROM rows_%d", n)); got != 6 {
		t.Fatalf("%d rows, want 6: the block written again was dropped with the round's spent token", got)
	}
	checkOnce(t, url, blocks[1])
}
