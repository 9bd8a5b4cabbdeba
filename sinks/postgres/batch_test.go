package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
	"github.com/offsetkeeper/offsetkeeper/sinks/sinktest"
)

// writeBlocks calls WriteBlocks and fails the test unless every block
// went in.
func writeBlocks(t *testing.T, s *postgres.Sink, blocks ...*sinks.Block) {
	t.Helper()
	errs := s.WriteBlocks(context.Background(), blocks)
	if len(errs) != len(blocks) {
		t.Fatalf("WriteBlocks of %d blocks returned %d errors", len(blocks), len(errs))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("WriteBlocks: block %d (%s): %v", i, blocks[i], err)
		}
	}
}

// offsets is the stored (next, epoch, generation) of a partition, "none"
// without a row.
func offsets(t *testing.T, conn *pgx.Conn, table, topic string, partition int) string {
	t.Helper()
	var row string
	err := conn.QueryRow(context.Background(),
		`SELECT concat_ws(' ', next, epoch, generation) FROM `+table+` WHERE "group" = 'g' AND topic = $1 AND partition = $2`,
		topic, partition).Scan(&row)
	if errors.Is(err, pgx.ErrNoRows) {
		return "none"
	}
	if err != nil {
		t.Fatalf("read the offsets row: %v", err)
	}
	return row
}

// modeTable is how a test reads the rows of one mode back.
type modeTable struct {
	mode   string
	create string // the columns table, made before the sink; %s is its name
	where  string // selects one partition's rows: $1 topic, $2 partition
	offset string // a row's offset
}

var modes = []modeTable{
	{mode: "raw", where: `topic = $1 AND partition = $2`, offset: `"offset"`},
	{
		mode:   "columns",
		create: `CREATE TABLE %s (n integer NOT NULL CHECK (n >= 0), kafka_topic text, kafka_partition integer, kafka_offset bigint)`,
		where:  `kafka_topic = $1 AND kafka_partition = $2`,
		offset: `kafka_offset`,
	},
}

// eachMode runs test once a mode, in one cluster, each time with a sink of
// that mode on tables of its own (rows_n, offsets_n, dead_n) and a direct
// connection.
func eachMode(t *testing.T, test func(t *testing.T, m modeTable, s *postgres.Sink, conn *pgx.Conn, n int64)) {
	t.Helper()
	pg := harness.StartPostgres(t)
	conn := db(t, pg)
	for _, m := range modes {
		t.Run(m.mode, func(t *testing.T) {
			s, n := newSink(t, pg, "mode="+m.mode, m.create)
			test(t, m, s, conn, n)
		})
	}
}

// rows counts a partition's rows, and its distinct offsets.
func (m modeTable) rows(t *testing.T, conn *pgx.Conn, n int64, topic string, partition int) (rows, distinct int64) {
	t.Helper()
	q := fmt.Sprintf(`SELECT count(*), count(DISTINCT %s) FROM rows_%d WHERE %s`, m.offset, n, m.where)
	if err := conn.QueryRow(context.Background(), q, topic, partition).Scan(&rows, &distinct); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return rows, distinct
}

type tp struct {
	topic     string
	partition int
}

// TestWriteBlocks: the blocks of several partitions and topics in one call
// all land, with their offsets rows; written again (a replay after a
// crash) the call adds nothing; and a call may mix first deliveries, empty
// blocks and a re-delivery after an operator reset.
func TestWriteBlocks(t *testing.T) {
	eachMode(t, func(t *testing.T, m modeTable, s *postgres.Sink, conn *pgx.Conn, n int64) {
		off := fmt.Sprintf("offsets_%d", n)
		parts := []tp{{"orders", 3}, {"pay", 0}, {"orders", 0}, {"orders", 7}, {"pay", 1}, {"orders", 1}, {"orders", 2}, {"orders", 5}}
		var round []*sinks.Block
		for i, p := range parts {
			round = append(round, block(p.topic, p.partition, int64(10+i), 0, 40, sinktest.Seq(0, 40)...))
		}
		writeBlocks(t, s, round...)
		for i, p := range parts {
			if rows, distinct := m.rows(t, conn, n, p.topic, p.partition); rows != 40 || distinct != 40 {
				t.Errorf("%s/%d: %d rows (%d offsets), want 40", p.topic, p.partition, rows, distinct)
			}
			if got, want := offsets(t, conn, off, p.topic, p.partition), fmt.Sprintf("40 %d 0", 10+i); got != want {
				t.Errorf("%s/%d: offsets row %q, want %q", p.topic, p.partition, got, want)
			}
		}

		// A replay of the same call, from buffers of its own.
		var replay []*sinks.Block
		for _, b := range round {
			c := *b
			c.Records = append([]sinks.Record(nil), b.Records...)
			replay = append(replay, &c)
		}
		writeBlocks(t, s, replay...)
		for i, p := range parts {
			if rows, _ := m.rows(t, conn, n, p.topic, p.partition); rows != 40 {
				t.Errorf("after a replay: %s/%d has %d rows, want 40", p.topic, p.partition, rows)
			}
			if got, want := offsets(t, conn, off, p.topic, p.partition), fmt.Sprintf("40 %d 0", 10+i); got != want {
				t.Errorf("after a replay: %s/%d: offsets row %q, want %q", p.topic, p.partition, got, want)
			}
		}

		// The next round: orders/3 goes on, pay/0 brings only markers,
		// orders/0 goes on from a replay that overlaps what it holds,
		// orders/7 was reset to 30 by an operator (generation 1) and
		// comes again, and orders/4 is new.
		reset := block("orders", 7, 17, 30, 50, sinktest.Seq(30, 50)...)
		reset.Generation = 1
		writeBlocks(t, s,
			block("orders", 3, 10, 40, 50, sinktest.Seq(40, 50)...),
			block("pay", 0, 11, 40, 45),
			block("orders", 0, 12, 35, 60, sinktest.Seq(35, 60)...),
			reset,
			block("orders", 4, 1, 0, 5, sinktest.Seq(0, 5)...),
		)
		type stored struct {
			rows    int64
			offsets string
		}
		want := map[tp]stored{
			{"orders", 3}: {50, "50 10 0"},
			{"pay", 0}:    {40, "45 11 0"},
			{"orders", 0}: {60, "60 12 0"},
			{"orders", 7}: {50, "50 17 1"}, // the rows held are skipped by key
			{"orders", 4}: {5, "5 1 0"},
			{"pay", 1}:    {40, "40 14 0"},
		}
		if m.mode == "columns" {
			want[tp{"orders", 7}] = stored{60, "50 17 1"} // no key: 30..39 are there twice
		}
		for p, w := range want {
			if rows, _ := m.rows(t, conn, n, p.topic, p.partition); rows != w.rows {
				t.Errorf("round 2: %s/%d has %d rows, want %d", p.topic, p.partition, rows, w.rows)
			}
			if got := offsets(t, conn, off, p.topic, p.partition); got != w.offsets {
				t.Errorf("round 2: %s/%d: offsets row %q, want %q", p.topic, p.partition, got, w.offsets)
			}
		}
		if next, gen, ok := resume(t, s, "orders", 7); !ok || next != 50 || gen != 1 {
			t.Errorf("Resume orders/7 = %d, %d, %v; want 50, 1, true", next, gen, ok)
		}
		if got := s.DeadLetters(); got != 0 {
			t.Errorf("DeadLetters() = %d", got)
		}
	})
}

// TestWriteBlocksFenced: in one call, a block whose partition holds a newer
// epoch is refused with sinks.ErrFenced and changes nothing, while the
// other blocks of the call commit, rows and offsets rows.
func TestWriteBlocksFenced(t *testing.T) {
	eachMode(t, func(t *testing.T, m modeTable, s *postgres.Sink, conn *pgx.Conn, n int64) {
		off := fmt.Sprintf("offsets_%d", n)
		write(t, s, block("orders", 1, 9, 0, 10, sinktest.Seq(0, 10)...)) // the new owner
		before := offsetsRow(t, conn, off, "orders", 1)

		blocks := []*sinks.Block{
			block("orders", 2, 7, 0, 10, sinktest.Seq(0, 10)...),
			block("orders", 1, 7, 10, 20, sinktest.Seq(10, 20)...), // the zombie's, after the owner's
			block("orders", 0, 7, 0, 10, sinktest.Seq(0, 10)...),
		}
		errs := s.WriteBlocks(context.Background(), blocks)
		if len(errs) != 3 {
			t.Fatalf("%d errors for 3 blocks", len(errs))
		}
		if !errors.Is(errs[1], sinks.ErrFenced) || !strings.Contains(errs[1].Error(), "orders/1") || !strings.Contains(errs[1].Error(), "epoch 7 is below epoch 9") {
			t.Errorf("the stale block: %v, want sinks.ErrFenced naming the block and the epochs", errs[1])
		}
		if errs[0] != nil || errs[2] != nil {
			t.Fatalf("the other blocks: %v, %v; want nil", errs[0], errs[2])
		}
		if after := offsetsRow(t, conn, off, "orders", 1); after != before {
			t.Errorf("the fenced partition's offsets row changed: %q, was %q", after, before)
		}
		if rows, _ := m.rows(t, conn, n, "orders", 1); rows != 10 {
			t.Errorf("the fenced partition has %d rows, want 10", rows)
		}
		for _, p := range []int{0, 2} {
			if rows, _ := m.rows(t, conn, n, "orders", p); rows != 10 {
				t.Errorf("orders/%d has %d rows, want 10", p, rows)
			}
			if got := offsets(t, conn, off, "orders", p); got != "10 7 0" {
				t.Errorf("orders/%d: offsets row %q, want \"10 7 0\"", p, got)
			}
		}

		// A call of fenced blocks only stores nothing.
		errs = s.WriteBlocks(context.Background(), []*sinks.Block{
			block("orders", 1, 8, 10, 20, sinktest.Seq(10, 20)...),
			block("orders", 2, 6, 10, 20, sinktest.Seq(10, 20)...),
		})
		for i, err := range errs {
			if !errors.Is(err, sinks.ErrFenced) {
				t.Errorf("block %d of a fenced call: %v, want sinks.ErrFenced", i, err)
			}
		}
		if rows, _ := m.rows(t, conn, n, "orders", 2); rows != 10 {
			t.Errorf("after a fenced call: orders/2 has %d rows, want 10", rows)
		}
		if got := offsets(t, conn, off, "orders", 2); got != "10 7 0" {
			t.Errorf("after a fenced call: orders/2: offsets row %q", got)
		}
	})
}

// TestWriteBlocksDeadLetters: records one block's partition cannot take go
// to the dead-letter table under that block; the other blocks of the call
// go in whole, and every offsets row moves past.
func TestWriteBlocksDeadLetters(t *testing.T) {
	eachMode(t, func(t *testing.T, m modeTable, s *postgres.Sink, conn *pgx.Conn, n int64) {
		if m.mode == "raw" {
			// Raw mode refuses rows only by a constraint added to the
			// table: the call's one COPY fails, and the rows go through
			// the staging table instead.
			if _, err := conn.Exec(context.Background(), fmt.Sprintf(`ALTER TABLE rows_%d ADD CHECK (NOT (partition = 1 AND "offset" IN (3, 7)))`, n)); err != nil {
				t.Fatal(err)
			}
		}
		poisoned := block("orders", 1, 1, 0, 20, sinktest.Seq(0, 20)...)
		if m.mode == "columns" {
			poisoned.Records[3].Value = []byte("not json")  // refused by the sink
			poisoned.Records[7].Value = []byte(`{"n": -1}`) // refused by the table
		}
		blocks := []*sinks.Block{
			block("orders", 0, 1, 0, 20, sinktest.Seq(0, 20)...),
			poisoned,
			block("orders", 2, 1, 0, 20, sinktest.Seq(0, 20)...),
		}
		writeBlocks(t, s, blocks...)
		for p, want := range []int64{20, 18, 20} {
			if rows, _ := m.rows(t, conn, n, "orders", p); rows != want {
				t.Errorf("orders/%d has %d rows, want %d", p, rows, want)
			}
			if got := offsets(t, conn, fmt.Sprintf("offsets_%d", n), "orders", p); got != "20 1 0" {
				t.Errorf("orders/%d: offsets row %q, want \"20 1 0\"", p, got)
			}
		}
		var dead string
		if err := conn.QueryRow(context.Background(), fmt.Sprintf(`SELECT string_agg(partition || ':' || "offset", ' ' ORDER BY partition, "offset") FROM dead_%d`, n)).Scan(&dead); err != nil {
			t.Fatal(err)
		}
		if dead != "1:3 1:7" {
			t.Errorf("dead letters %q, want \"1:3 1:7\"", dead)
		}
		if got := s.DeadLetters(); got != 2 {
			t.Errorf("DeadLetters() = %d, want 2", got)
		}
		// Each block says what of it was set aside: the replica counts
		// only the rest as written.
		for i, want := range []int{0, 2, 0} {
			if got := blocks[i].SetAside; got != want {
				t.Errorf("block %d: SetAside %d, want %d", i, got, want)
			}
		}
	})
}

// TestWriteBlocksRefusedBlocks: a block that Check refuses fails alone; two
// blocks of one partition fail the whole call, which stores nothing; a
// call of no blocks does nothing.
func TestWriteBlocksRefusedBlocks(t *testing.T) {
	_, s, conn, n := start(t, "", "")
	off := fmt.Sprintf("offsets_%d", n)
	backwards := block("orders", 1, 1, 0, 10, 5, 4)
	errs := s.WriteBlocks(context.Background(), []*sinks.Block{nil, backwards, block("orders", 2, 1, 0, 3, 0, 1, 2)})
	if len(errs) != 3 || errs[0] == nil || errs[1] == nil || !strings.Contains(errs[1].Error(), "orders/1 [0, 10)") || errs[2] != nil {
		t.Fatalf("WriteBlocks(nil, a bad block, a good one) = %v; want an error for each of the first two only", errs)
	}
	if got := offsets(t, conn, off, "orders", 1); got != "none" {
		t.Errorf("the refused block's offsets row: %q", got)
	}
	if got := offsets(t, conn, off, "orders", 2); got != "3 1 0" {
		t.Errorf("the good block's offsets row: %q", got)
	}

	errs = s.WriteBlocks(context.Background(), []*sinks.Block{
		block("orders", 3, 1, 0, 2, 0, 1),
		block("orders", 4, 1, 0, 2, 0, 1),
		block("orders", 3, 1, 2, 4, 2, 3),
	})
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "two blocks of orders/3") {
			t.Errorf("block %d of a call with orders/3 twice: %v", i, err)
		}
	}
	for _, p := range []int{3, 4} {
		if got := offsets(t, conn, off, "orders", p); got != "none" {
			t.Errorf("orders/%d: offsets row %q after a refused call", p, got)
		}
	}
	if errs := s.WriteBlocks(context.Background(), nil); len(errs) != 0 {
		t.Errorf("WriteBlocks(nil) = %v", errs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i, err := range s.WriteBlocks(context.Background(), []*sinks.Block{block("orders", 5, 1, 0, 1, 0), block("orders", 6, 1, 0, 1, 0)}) {
		if !errors.Is(err, postgres.ErrClosed) {
			t.Errorf("block %d after Close: %v, want ErrClosed", i, err)
		}
	}
}

// awaitWaiting waits until a backend of the sink (application_name app)
// other than skip waits for the advisory lock, and returns its pid.
func awaitWaiting(t *testing.T, conn *pgx.Conn, app string, skip int32) int32 {
	t.Helper()
	var pid int32
	harness.Await(t, 20*time.Second, "the sink's transaction waiting for the advisory lock", func() bool {
		err := conn.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory' AND pid <> $2`, app, skip).Scan(&pid)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		return err == nil
	})
	return pid
}

// holdLock makes the sink's transactions wait in a trigger, a CREATE
// TRIGGER of function hold(), for an advisory lock the test takes here and
// lets go of with releaseLock.
func holdLock(t *testing.T, conn *pgx.Conn, trigger string) {
	t.Helper()
	for _, q := range []string{
		`CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NEW; END $$`,
		trigger,
		`SELECT pg_advisory_lock(4242)`,
	} {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// releaseLock lets go of holdLock's lock.
func releaseLock(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_unlock(4242)`); err != nil {
		t.Fatal(err)
	}
}

// awaitCall waits for the errors of a WriteBlocks call, and fails the test
// on any of them, or with late when 30s go by first.
func awaitCall(t *testing.T, done <-chan []error, late string) {
	t.Helper()
	select {
	case errs := <-done:
		for i, err := range errs {
			if err != nil {
				t.Errorf("block %d: %v", i, err)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal(late)
	}
}

// TestWriteBlocksRetriedMidCopy: a call whose connection dies in the middle
// of its COPY, with the rows of some blocks sent and others not, is retried
// whole, and every block lands once.
func TestWriteBlocksRetriedMidCopy(t *testing.T) {
	_, s, conn, n := start(t, "retry_timeout=60s&application_name=midcopy", "")
	ctx := context.Background()
	// The first row of orders/5 waits for an advisory lock the test holds:
	// the COPY stops there, after the rows of orders/0..4.
	holdLock(t, conn, fmt.Sprintf(`CREATE TRIGGER hold BEFORE INSERT ON rows_%d FOR EACH ROW WHEN (NEW.partition = 5) EXECUTE FUNCTION hold()`, n))
	var blocks []*sinks.Block
	for p := range 8 {
		blocks = append(blocks, block("orders", p, 1, 0, 100, sinktest.Seq(0, 100)...))
	}
	done := make(chan []error, 1)
	go func() { done <- s.WriteBlocks(ctx, blocks) }()

	first := awaitWaiting(t, conn, "midcopy", 0)
	if got := queryInt(t, conn, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query ILIKE 'copy %'`, first); got != 1 {
		t.Fatalf("the sink waits, but not in its COPY")
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, first).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend: %v, %v", ok, err)
	}
	awaitWaiting(t, conn, "midcopy", first) // the retry, in its own COPY
	releaseLock(t, conn)
	awaitCall(t, done, "WriteBlocks still running 30s after the lock was released")
	if s.Retries() == 0 {
		t.Error("Retries() = 0 after a lost connection")
	}
	for p := range 8 {
		if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d WHERE partition = $1`, n), p); got != 100 {
			t.Errorf("orders/%d: %d rows, want 100", p, got)
		}
		if got := offsets(t, conn, fmt.Sprintf("offsets_%d", n), "orders", p); got != "100 1 0" {
			t.Errorf("orders/%d: offsets row %q", p, got)
		}
	}
}

// TestWriteBlocksLostCommit: a call whose commit went through but whose
// answer was lost with the connection is retried, and the retry finds
// from the offsets rows that the blocks are in: a columns table, which has
// no key to catch a second insert, holds every row once.
func TestWriteBlocksLostCommit(t *testing.T) {
	pg := harness.StartPostgres(t)
	proxy := harness.NewProxy(t, pg.Addr())
	url, n := sinkURL(pg, "retry_timeout=60s&application_name=lostcommit&mode=columns")
	url = strings.Replace(url, pg.Addr(), proxy.Addr(), 1)
	pg.Exec(t, fmt.Sprintf(`CREATE TABLE rows_%d (n integer, kafka_topic text, kafka_partition integer, kafka_offset bigint)`, n))
	s := open(t, url)
	conn := db(t, pg)
	ctx := context.Background()
	write(t, s, block("orders", 0, 1, 0, 1, 0)) // orders/0 has its offsets row; the call makes the others'
	// The commit waits, in a deferred trigger on the offsets table, for an
	// advisory lock the test holds.
	holdLock(t, conn, fmt.Sprintf(`CREATE CONSTRAINT TRIGGER hold AFTER UPDATE ON offsets_%d DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hold()`, n))
	var blocks []*sinks.Block
	for p := range 4 {
		blocks = append(blocks, block("orders", p, 1, 1, 50, sinktest.Seq(1, 50)...))
	}
	done := make(chan []error, 1)
	go func() { done <- s.WriteBlocks(ctx, blocks) }()

	pid := awaitWaiting(t, conn, "lostcommit", 0)
	if got := queryInt(t, conn, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query = 'commit'`, pid); got != 1 {
		t.Fatal("the sink waits, but not in its commit")
	}
	// Let the commit through, but not its answer; then cut the connection.
	proxy.DropResponses()
	releaseLock(t, conn)
	harness.Await(t, 20*time.Second, "the commit", func() bool {
		return queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM offsets_%d WHERE next = 50`, n)) == 4
	})
	proxy.Cut()
	proxy.Pass()
	awaitCall(t, done, "WriteBlocks still running 30s after the commit")
	if s.Retries() == 0 {
		t.Error("Retries() = 0: the lost answer was not retried")
	}
	for p := range 4 {
		want := int64(49)
		if p == 0 {
			want = 50
		}
		if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d WHERE kafka_partition = $1`, n), p); got != want {
			t.Errorf("orders/%d: %d rows, want %d", p, got, want)
		}
	}
}

// TestWriteBlocksLockOrder: two calls that write the same partitions, given
// in opposite orders (a zombie's round and the owner's), take the offsets
// rows in one order: the second waits for the first instead of the two
// deadlocking, which PostgreSQL would break only after deadlock_timeout,
// with an aborted transaction and a retry.
func TestWriteBlocksLockOrder(t *testing.T) {
	pg := harness.StartPostgres(t)
	url, n := sinkURL(pg, "application_name=zombie")
	zombie := open(t, url)
	owner := open(t, strings.Replace(url, "application_name=zombie", "application_name=owner", 1))
	conn := db(t, pg)
	ctx := context.Background()
	writeBlocks(t, zombie, block("orders", 0, 1, 0, 10, sinktest.Seq(0, 10)...), block("orders", 1, 1, 0, 10, sinktest.Seq(0, 10)...))

	// The zombie's transaction stops once it holds orders/0's row, until
	// the test lets it go on.
	holdLock(t, conn, fmt.Sprintf(`CREATE TRIGGER hold BEFORE UPDATE ON offsets_%d FOR EACH ROW WHEN (NEW.partition = 0 AND current_setting('application_name') = 'zombie') EXECUTE FUNCTION hold()`, n))
	waiting := func(app string) func() bool {
		return func() bool {
			return queryInt(t, conn, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app) == 1
		}
	}
	first := make(chan []error, 1)
	go func() {
		first <- zombie.WriteBlocks(ctx, []*sinks.Block{block("orders", 0, 1, 10, 20, sinktest.Seq(10, 20)...), block("orders", 1, 1, 10, 20, sinktest.Seq(10, 20)...)})
	}()
	harness.Await(t, 20*time.Second, "the zombie holding orders/0", waiting("zombie"))
	second := make(chan []error, 1)
	go func() {
		second <- owner.WriteBlocks(ctx, []*sinks.Block{block("orders", 1, 2, 10, 20, sinktest.Seq(10, 20)...), block("orders", 0, 2, 10, 20, sinktest.Seq(10, 20)...)})
	}()
	// Taking orders/1 first, the owner would now hold what the zombie
	// needs next.
	harness.Await(t, 20*time.Second, "the owner waiting", waiting("owner"))
	releaseLock(t, conn)
	for _, c := range []chan []error{first, second} {
		awaitCall(t, c, "a call still running 30s after the zombie went on")
	}
	if r := zombie.Retries() + owner.Retries(); r != 0 {
		t.Errorf("%d retries: the calls deadlocked", r)
	}
	if got := queryInt(t, conn, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`); got != 0 {
		t.Errorf("%d deadlocks", got)
	}
	for _, p := range []int{0, 1} {
		if got := queryInt(t, conn, fmt.Sprintf(`SELECT count(*) FROM rows_%d WHERE partition = $1`, n), p); got != 20 {
			t.Errorf("orders/%d: %d rows, want 20", p, got)
		}
		if got := offsets(t, conn, fmt.Sprintf("offsets_%d", n), "orders", p); got != "20 2 0" {
			t.Errorf("orders/%d: offsets row %q, want \"20 2 0\"", p, got)
		}
	}
}
