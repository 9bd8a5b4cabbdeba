package postgres

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// statements are the SQL texts of one sink, built once by New.
type statements struct {
	// lock takes the partition's offsets row for the transaction, creating
	// a placeholder (-1, -1, -1) that the commit replaces, and returns what
	// was stored. Holding the row serializes the writers of a partition, a
	// zombie included, for the whole transaction.
	lock       string
	setOffsets string
	resume     string
	deadLetter string
	rawInsert  string // staged rows [$1, $2) → table, skipping rows already held; $3: value NULL
	// Columns and upsert modes' statements change with the table's columns:
	// they are the table's (table.sql).
}

func buildStatements(c *config) statements {
	off := c.offsets.Sanitize()
	return statements{
		lock: `INSERT INTO ` + off + ` AS o ("group", topic, partition, next, epoch, generation)
VALUES ($1, $2, $3, -1, -1, -1)
ON CONFLICT ("group", topic, partition) DO UPDATE SET next = o.next
RETURNING next, epoch, generation`,
		setOffsets: `UPDATE ` + off + ` SET next = $4, epoch = $5, generation = $6, updated_at = now()
WHERE "group" = $1 AND topic = $2 AND partition = $3`,
		resume: `SELECT next, generation FROM ` + off + ` WHERE "group" = $1 AND topic = $2 AND partition = $3`,
		deadLetter: `INSERT INTO ` + c.deadLetters.Sanitize() + ` AS d (topic, partition, "offset", key, value, "timestamp", error)
SELECT $1, $2, u.o, u.k, u.v, u.t, u.e
FROM unnest($3::bigint[], $4::bytea[], $5::bytea[], $6::timestamptz[], $7::text[]) AS u(o, k, v, t, e)
ON CONFLICT (topic, partition, "offset") DO UPDATE
SET key = excluded.key, value = excluded.value, "timestamp" = excluded."timestamp", error = excluded.error, failed_at = now()`,
		rawInsert: `INSERT INTO ` + c.table.Sanitize() + ` (topic, partition, "offset", key, value, value_bytes, "timestamp", headers)
SELECT s.topic, s.partition, s."offset", s.key, CASE WHEN $3::boolean THEN NULL ELSE s.value::jsonb END, s.value_bytes, s."timestamp", s.headers
FROM ` + stageRaw + ` s
WHERE s.ord >= $1 AND s.ord < $2
ORDER BY s.ord
ON CONFLICT (topic, partition, "offset") DO NOTHING`,
	}
}

// stored is a partition's offsets row as the transaction found it.
type stored struct {
	next, epoch, generation int64
}

// exists is false for the placeholder of a partition never written.
func (st stored) exists() bool { return st.epoch >= 0 }

// deadLetter is a record the table refused, and why.
type deadLetter struct {
	rec    *sinks.Record
	reason string
}

// blockWrite is one block's share of an attempt.
type blockWrite struct {
	b      *sinks.Block
	st     stored         // the partition's offsets row, locked
	fenced error          // why the block is refused: a newer epoch wrote the partition
	recs   []sinks.Record // the block's records the sink does not hold yet
	next   int64          // the next offset to store
	dead   []deadLetter

	// Columns mode's: vals[i] is the value staged for recs[i] (rowValue's).
	vals [][]byte
	// ignoredFields counts the values of decoded fields that no column
	// takes (columns and upsert modes).
	ignoredFields int

	// Upsert mode's: changes[i] is what recs[i] does (recs then holds only
	// the records that change the table); ignored counts the tombstones
	// that do not delete, deletes the changes that are deletes.
	changes []change
	ignored int
	deletes int
}

// plan decides from the locked offsets row what the block still has to
// do, exactly as for a block written alone: refuse it if a newer epoch
// wrote the partition, else skip what lies below the stored next of the
// same generation.
func (w *blockWrite) plan(offsets string) {
	b := w.b
	if w.st.epoch > b.Epoch {
		w.fenced = fmt.Errorf("%w: epoch %d is below epoch %d stored in %s", sinks.ErrFenced, b.Epoch, w.st.epoch, offsets)
		return
	}
	w.recs, w.next = b.Records, b.Next
	if w.st.exists() && w.st.generation == b.Generation {
		// Within a generation the partition's offsets only move forward
		// through the sink: what lies below the stored next is in.
		i := sort.Search(len(b.Records), func(i int) bool { return b.Records[i].Offset >= w.st.next })
		w.recs = b.Records[i:]
		w.next = max(w.next, w.st.next)
	}
}

// redelivery reports whether the block comes again after an operator's
// reset: it may bring offsets the table holds.
func (w *blockWrite) redelivery() bool { return w.st.exists() && w.st.generation != w.b.Generation }

// run is the records of several blocks as one sequence, the way one COPY
// or one insert takes them: those of ws[0], then those of ws[1], and so
// on. A record's position in the run is its ord in the staging table.
type run struct {
	ws     []*blockWrite // blocks with records only
	starts []int         // starts[k]: the position of ws[k].recs[0]; starts[len(ws)]: the run's length
}

func newRun(ws []*blockWrite) *run {
	r := &run{starts: []int{0}}
	for _, w := range ws {
		if len(w.recs) > 0 {
			r.ws = append(r.ws, w)
			r.starts = append(r.starts, r.starts[len(r.starts)-1]+len(w.recs))
		}
	}
	return r
}

func (r *run) len() int { return r.starts[len(r.ws)] }

// at returns the record at position i and its block.
func (r *run) at(i int) (*blockWrite, *sinks.Record) {
	w, j := r.index(i)
	return w, &w.recs[j]
}

// index returns the block of position i and the record's index in its
// recs.
func (r *run) index(i int) (*blockWrite, int) {
	k, found := slices.BinarySearch(r.starts, i)
	if !found {
		k--
	}
	return r.ws[k], i - r.starts[k]
}

// attempt is one try at a call: one transaction for all its blocks.
type attempt struct {
	s  *Sink
	tx pgx.Tx

	// Columns and upsert modes': the table filled (prepareTable's), the
	// plans of the schemas met, the value schemas checked against the
	// catalog and the columns added, all published when the call commits.
	tab     *table
	plans   map[int]*fieldPlan
	checked []*sinks.Schema
	added   []newColumn
}

// writeOnce writes blocks, ordered by (topic, partition) with one block
// per partition, in one transaction, and returns what became of each:
// refused as fenced, or written with so many dead letters. An error is
// the whole transaction's: nothing was stored, or the commit may or may
// not have happened. It is safe to call again after any failure: it
// starts by reading the partitions' offsets rows under a lock, and the
// records below the stored next of the same generation are already in, so
// they are not written twice.
//
// The rows are locked in the blocks' order, which every transaction of the
// sink follows, so two of them (a zombie's and the owner's) wait for each
// other instead of deadlocking. A fenced block is known from its row
// before any block is written: it writes nothing, needs nothing rolled
// back, and the others go on. The records of all the other blocks go in
// together (one COPY, or one staging and one insert), each keeping its own
// dead letters and setting its own offsets row.
func (s *Sink) writeOnce(ctx context.Context, blocks []*sinks.Block) ([]*blockWrite, error) {
	off := s.cfg.offsets.Sanitize()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		// After Commit this is a no-op; after a failure it must not be cut
		// short by the caller's context, or the connection goes back to the
		// pool mid-transaction (pgx then closes it).
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()

	ws := make([]*blockWrite, len(blocks))
	batch := &pgx.Batch{}
	for i, b := range blocks {
		w := &blockWrite{b: b}
		ws[i] = w
		batch.Queue(s.sql.lock, s.cfg.group, b.Topic, b.Partition).QueryRow(func(row pgx.Row) error {
			return row.Scan(&w.st.next, &w.st.epoch, &w.st.generation)
		})
	}
	if s.cfg.mode == Raw {
		batch.Queue(`SAVEPOINT offsetkeeper_copy`)
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, fmt.Errorf("lock the offsets rows in %s: %w", off, err)
	}
	var live []*blockWrite
	for _, w := range ws {
		if w.plan(off); w.fenced == nil {
			live = append(live, w)
		}
	}
	if len(live) == 0 {
		return ws, nil // all fenced: nothing to store
	}

	a := &attempt{s: s, tx: tx}
	if s.cfg.mode != Raw {
		if err := a.prepareTable(ctx, live); err != nil {
			return nil, err
		}
	}
	switch s.cfg.mode {
	case Raw:
		err = a.raw(ctx, live)
	case Upsert:
		err = a.upsert(ctx, live)
	default:
		err = a.columns(ctx, live)
	}
	if err != nil {
		return nil, err
	}
	// The dead letters and the offsets rows, in one round trip.
	batch = &pgx.Batch{}
	var what []string
	for _, w := range live {
		if q, args := a.deadLetters(w); q != "" {
			batch.Queue(q, args...)
			what = append(what, "insert into "+s.cfg.deadLetters.Sanitize())
		}
		b := w.b
		batch.Queue(s.sql.setOffsets, s.cfg.group, b.Topic, b.Partition, w.next, b.Epoch, b.Generation)
		what = append(what, fmt.Sprintf("update the offsets row of %s/%d in %s", b.Topic, b.Partition, off))
	}
	if err := sendAll(ctx, tx, batch, what); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	s.publish(a)
	for _, w := range live {
		if s.cfg.mode == Upsert {
			b := w.b
			s.cfg.log.Debug("block upserted",
				zap.String("topic", b.Topic), zap.Int("partition", b.Partition), zap.Int64("from", b.From), zap.Int64("next", w.next),
				zap.Int("rows", len(w.recs)), zap.Int("deletes", w.deletes), zap.Int("ignored_tombstones", w.ignored), zap.Int("dead_letters", len(w.dead)))
		}
		if len(w.dead) > 0 {
			b := w.b
			s.cfg.log.Warn("records moved to the dead-letter table",
				zap.String("topic", b.Topic), zap.Int("partition", b.Partition), zap.Int64("from", b.From), zap.Int64("next", b.Next),
				zap.Int("rows", len(w.dead)), zap.Int64("offset", w.dead[0].rec.Offset), zap.String("error", w.dead[0].reason))
		}
	}
	return ws, nil
}

// sendAll runs the statements of batch in one round trip; what names each
// in the error of the first that fails.
func sendAll(ctx context.Context, tx pgx.Tx, batch *pgx.Batch, what []string) error {
	br := tx.SendBatch(ctx, batch)
	for _, w := range what {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return fmt.Errorf("%s: %w", w, err)
		}
	}
	return br.Close()
}

// raw writes the blocks' records into the raw table: one COPY of all of
// them straight into it first, and if the rows themselves made it fail
// (offsets the table holds already, a value jsonb refuses), through the
// staging table, which skips rows already held and finds the rows the
// table refuses. Blocks that come again after an operator's reset may
// bring offsets the table holds: they skip the COPY that would fail on
// them.
func (a *attempt) raw(ctx context.Context, live []*blockWrite) error {
	s := a.s
	var direct, staged []*blockWrite
	for _, w := range live {
		w.setAsideUndecodable()
		switch {
		case w.redelivery() && w.b.Truncated:
			// Kafka truncated the log: the rows held from the new
			// generation's first offset on are records Kafka lost, and
			// its records at those offsets are new ones.
			if err := a.moveTruncated(ctx, w); err != nil {
				return err
			}
			direct = append(direct, w)
		case w.redelivery():
			staged = append(staged, w)
		default:
			direct = append(direct, w)
		}
	}
	if r := newRun(direct); r.len() > 0 {
		src := &rawSource{runSource{r: r, row: make([]any, len(rawColumns))}}
		_, err := a.tx.CopyFrom(ctx, s.cfg.table, rawColumns, src)
		switch {
		case err == nil:
		case src.err != nil:
			return src.err
		case !recordFault(err):
			return fmt.Errorf("copy into %s: %w", s.cfg.table.Sanitize(), err)
		default:
			if _, err := a.tx.Exec(ctx, `ROLLBACK TO SAVEPOINT offsetkeeper_copy`); err != nil {
				return fmt.Errorf("roll back the copy into %s: %w", s.cfg.table.Sanitize(), err)
			}
			for _, w := range live {
				if w.redelivery() && w.b.Truncated {
					// The rollback undid the move too.
					if err := a.moveTruncated(ctx, w); err != nil {
						return err
					}
				}
			}
			staged = live
		}
	}
	r := newRun(staged)
	if r.len() == 0 {
		return nil
	}
	src := &stageRawSource{runSource{r: r, row: make([]any, len(stageRawColumns))}}
	if _, err := a.tx.CopyFrom(ctx, pgx.Identifier{stageRaw}, stageRawColumns, src); err != nil {
		if src.err != nil {
			return src.err
		}
		return fmt.Errorf("copy into %s: %w", stageRaw, err)
	}
	return a.place(ctx, r, 0, r.len(), func(lo, hi int, noJSON bool) (string, []any) {
		return s.sql.rawInsert, []any{lo, hi, noJSON}
	}, true)
}

// moveTruncated moves the raw rows of w's partition from w's first offset
// on, written before Kafka truncated the partition's log, to the truncated
// table with the generation they were written in: the new generation's
// records take their offsets, and the old ones stay there to be seen.
func (a *attempt) moveTruncated(ctx context.Context, w *blockWrite) error {
	s, b := a.s, w.b
	if _, err := a.tx.Exec(ctx, createTruncatedTable(s.cfg.table)); err != nil {
		return fmt.Errorf("create %s: %w", truncatedTable(s.cfg.table).Sanitize(), err)
	}
	tag, err := a.tx.Exec(ctx, `WITH moved AS (DELETE FROM `+s.cfg.table.Sanitize()+` WHERE topic = $1 AND partition = $2 AND "offset" >= $3 RETURNING *)
INSERT INTO `+truncatedTable(s.cfg.table).Sanitize()+` SELECT moved.*, $4::bigint FROM moved`, b.Topic, b.Partition, b.From, w.st.generation)
	if err != nil {
		return fmt.Errorf("move the rows of %s/%d from %d, truncated by Kafka, to %s: %w", b.Topic, b.Partition, b.From,
			truncatedTable(s.cfg.table).Sanitize(), err)
	}
	if n := tag.RowsAffected(); n > 0 {
		s.cfg.log.Warn("rows of records Kafka no longer holds (its log was truncated) moved aside",
			zap.String("topic", b.Topic), zap.Int("partition", b.Partition), zap.Int64("from", b.From), zap.Int64("rows", n),
			zap.Int64("generation", w.st.generation), zap.String("table", truncatedTable(s.cfg.table).Sanitize()))
	}
	return nil
}

// setAsideUndecodable moves the records the replica could not decode to
// w's dead letters; w.recs becomes a new slice once one goes, the block's
// is not changed.
func (w *blockWrite) setAsideUndecodable() {
	var keep []sinks.Record // w.recs without the dead, once there is one
	for i := range w.recs {
		why := undecodable(&w.recs[i])
		if why == "" {
			if keep != nil {
				keep = append(keep, w.recs[i])
			}
			continue
		}
		if keep == nil {
			keep = append(make([]sinks.Record, 0, len(w.recs)), w.recs[:i]...)
		}
		w.dead = append(w.dead, deadLetter{&w.recs[i], why})
	}
	if keep != nil {
		w.recs = keep
	}
}

// columns writes the blocks' records into the columns table through the
// staging table; a record the replica could not decode, or whose value is
// no JSON object, goes to the dead-letter table without asking the server.
func (a *attempt) columns(ctx context.Context, live []*blockWrite) error {
	for _, w := range live {
		keep := make([]sinks.Record, 0, len(w.recs))
		w.vals = make([][]byte, 0, len(w.recs))
		for i := range w.recs {
			rec := &w.recs[i]
			why := undecodable(rec)
			if why == "" && rec.ValueOpaque() {
				why = sqlsink.OpaqueValue
			}
			if why == "" {
				why = sqlsink.RowReason(rec.Value)
			}
			var v []byte
			var ignored int
			if why == "" {
				v, ignored, why = a.rowValue(rec)
			}
			if why != "" {
				w.dead = append(w.dead, deadLetter{rec, why})
				continue
			}
			keep, w.vals = append(keep, *rec), append(w.vals, v)
			w.ignoredFields += ignored
		}
		w.recs = keep
	}
	r := newRun(live)
	if r.len() == 0 {
		return nil
	}
	src := &stageColsSource{runSource{r: r, row: make([]any, len(stageColsColumns))}}
	if _, err := a.tx.CopyFrom(ctx, pgx.Identifier{stageCols}, stageColsColumns, src); err != nil {
		return fmt.Errorf("copy into %s: %w", stageCols, err)
	}
	return a.place(ctx, r, 0, r.len(), func(lo, hi int, _ bool) (string, []any) {
		return a.tab.sql, []any{lo, hi}
	}, false)
}

// place inserts the staged rows [lo, hi) of run r. When the rows' own data
// makes the insert fail, it halves the range until the failing row is
// alone, which costs a few statements per bad record instead of one per
// row; that row goes to its block's dead letters (in raw mode after one
// more try without its jsonb copy, which only numbers beyond numeric's
// range need), and its neighbours go in, those of other blocks too.
func (a *attempt) place(ctx context.Context, r *run, lo, hi int, stmt func(lo, hi int, noJSON bool) (string, []any), retryNoJSON bool) error {
	if lo >= hi {
		return nil
	}
	q, args := stmt(lo, hi, false)
	err := a.try(ctx, q, args...)
	if err == nil || !recordFault(err) {
		return err
	}
	if hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if err := a.place(ctx, r, lo, mid, stmt, retryNoJSON); err != nil {
			return err
		}
		return a.place(ctx, r, mid, hi, stmt, retryNoJSON)
	}
	if retryNoJSON {
		q, args := stmt(lo, hi, true)
		err2 := a.try(ctx, q, args...)
		if err2 == nil || !recordFault(err2) {
			return err2
		}
	}
	w, rec := r.at(lo)
	w.dead = append(w.dead, deadLetter{rec, reason(err)})
	return nil
}

// try runs one insert under a savepoint, so that a refused row leaves the
// transaction usable.
func (a *attempt) try(ctx context.Context, q string, args ...any) error {
	batch := &pgx.Batch{}
	batch.Queue(`SAVEPOINT offsetkeeper_rows`)
	batch.Queue(q, args...)
	batch.Queue(`RELEASE SAVEPOINT offsetkeeper_rows`)
	err := a.tx.SendBatch(ctx, batch).Close()
	if err == nil {
		return nil
	}
	if !recordFault(err) {
		return fmt.Errorf("insert into %s: %w", a.s.cfg.table.Sanitize(), err)
	}
	if _, rerr := a.tx.Exec(ctx, `ROLLBACK TO SAVEPOINT offsetkeeper_rows`); rerr != nil {
		return fmt.Errorf("roll back a refused insert into %s: %w", a.s.cfg.table.Sanitize(), rerr)
	}
	if _, rerr := a.tx.Exec(ctx, `RELEASE SAVEPOINT offsetkeeper_rows`); rerr != nil {
		return fmt.Errorf("release a savepoint: %w", rerr)
	}
	return err
}

// deadLetters is the statement that stores the block's refused records,
// in the attempt's transaction: they are counted as delivered when the
// offset moves past. q is "" when there are none.
func (a *attempt) deadLetters(w *blockWrite) (q string, args []any) {
	n := len(w.dead)
	if n == 0 {
		return "", nil
	}
	offs, keys, vals, times, errs := make([]int64, n), make([][]byte, n), make([][]byte, n), make([]time.Time, n), make([]string, n)
	for i, d := range w.dead {
		offs[i], keys[i], vals[i], times[i], errs[i] = d.rec.Offset, kafkaKey(d.rec), kafkaValue(d.rec), d.rec.Time, d.reason
	}
	return a.s.sql.deadLetter, []any{w.b.Topic, w.b.Partition, offs, keys, vals, times, errs}
}
