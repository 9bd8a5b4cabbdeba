package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

// writeBlocksErrs is WriteBlocks' errors joined.
func writeBlocksErrs(s *postgres.Sink, blocks ...*sinks.Block) error {
	return errors.Join(s.WriteBlocks(context.Background(), blocks)...)
}

var (
	_ = maps.Keys[map[int]int]
	_ = harness.StartPostgres
	_ = sinktest.Seq
)
