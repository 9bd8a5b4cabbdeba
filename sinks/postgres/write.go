package postgres

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
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
	rawInsert  string // stage → table, skipping rows already held
	colsInsert string // stage → table through jsonb_populate_record
}

func buildStatements(c *config, colsInsert string) statements {
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
SELECT $1::text, $2::integer, s."offset", s.key, CASE WHEN $5::boolean THEN NULL ELSE s.value::jsonb END, s.value_bytes, s."timestamp", s.headers
FROM ` + stageRaw + ` s
WHERE s.ord >= $3 AND s.ord < $4
ORDER BY s.ord
ON CONFLICT (topic, partition, "offset") DO NOTHING`,
		colsInsert: colsInsert,
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

// attempt is one try at a Write: one transaction.
type attempt struct {
	s    *Sink
	tx   pgx.Tx
	b    *sinks.Block
	recs []sinks.Record // the block's records the sink does not hold yet
	dead []deadLetter
}

// writeOnce writes b in one transaction and returns how many of its
// records went to the dead-letter table. It is safe to call again after
// any failure, including one whose commit may or may not have happened: it
// starts by reading the partition's offsets row under a lock, and the
// records below the stored next of the same generation are already in, so
// they are not written twice.
func (s *Sink) writeOnce(ctx context.Context, b *sinks.Block) (int, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		// After Commit this is a no-op; after a failure it must not be cut
		// short by the caller's context, or the connection goes back to the
		// pool mid-transaction (pgx then closes it).
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()

	batch := &pgx.Batch{}
	var st stored
	batch.Queue(s.sql.lock, s.cfg.group, b.Topic, b.Partition).QueryRow(func(row pgx.Row) error {
		return row.Scan(&st.next, &st.epoch, &st.generation)
	})
	if s.cfg.mode == Raw {
		batch.Queue(`SAVEPOINT offsetkeeper_copy`)
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return 0, fmt.Errorf("lock the offsets row in %s: %w", s.cfg.offsets.Sanitize(), err)
	}
	if st.epoch > b.Epoch {
		return 0, fmt.Errorf("%w: epoch %d is below epoch %d stored in %s", sinks.ErrFenced, b.Epoch, st.epoch, s.cfg.offsets.Sanitize())
	}

	a := &attempt{s: s, tx: tx, b: b, recs: b.Records}
	next := b.Next
	if st.exists() && st.generation == b.Generation {
		// Within a generation the partition's offsets only move forward
		// through the sink: what lies below the stored next is in.
		i := sort.Search(len(b.Records), func(i int) bool { return b.Records[i].Offset >= st.next })
		a.recs = b.Records[i:]
		next = max(next, st.next)
	}
	if len(a.recs) > 0 {
		switch s.cfg.mode {
		case Raw:
			// After an operator's reset the block may bring offsets the
			// table holds: skip the COPY that would fail on them.
			redelivery := st.exists() && st.generation != b.Generation
			err = a.raw(ctx, redelivery)
		default:
			err = a.columns(ctx)
		}
		if err != nil {
			return 0, err
		}
	}
	if err := a.deadLetters(ctx); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, s.sql.setOffsets, s.cfg.group, b.Topic, b.Partition, next, b.Epoch, b.Generation); err != nil {
		return 0, fmt.Errorf("update the offsets row in %s: %w", s.cfg.offsets.Sanitize(), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	if len(a.dead) > 0 {
		s.cfg.log.Warn("records moved to the dead-letter table",
			zap.String("topic", b.Topic), zap.Int("partition", b.Partition), zap.Int64("from", b.From), zap.Int64("next", b.Next),
			zap.Int("rows", len(a.dead)), zap.Int64("offset", a.dead[0].rec.Offset), zap.String("error", a.dead[0].reason))
	}
	return len(a.dead), nil
}

// raw writes the records into the raw table: a COPY straight into it
// first, and if the rows themselves made it fail (offsets the table holds
// already, a value jsonb refuses), through the staging table, which skips
// rows already held and finds the rows the table refuses.
func (a *attempt) raw(ctx context.Context, redelivery bool) error {
	s := a.s
	if !redelivery {
		src := &rawSource{b: a.b, recs: a.recs, row: make([]any, len(rawColumns))}
		_, err := a.tx.CopyFrom(ctx, s.cfg.table, rawColumns, src)
		if err == nil {
			return nil
		}
		if src.err != nil {
			return src.err
		}
		if !recordFault(err) {
			return fmt.Errorf("copy into %s: %w", s.cfg.table.Sanitize(), err)
		}
		if _, err := a.tx.Exec(ctx, `ROLLBACK TO SAVEPOINT offsetkeeper_copy`); err != nil {
			return fmt.Errorf("roll back the copy into %s: %w", s.cfg.table.Sanitize(), err)
		}
	}
	src := &stageRawSource{recs: a.recs, row: make([]any, len(stageRawColumns))}
	if _, err := a.tx.CopyFrom(ctx, pgx.Identifier{stageRaw}, stageRawColumns, src); err != nil {
		if src.err != nil {
			return src.err
		}
		return fmt.Errorf("copy into %s: %w", stageRaw, err)
	}
	return a.place(ctx, 0, len(a.recs), func(lo, hi int, noJSON bool) (string, []any) {
		return s.sql.rawInsert, []any{a.b.Topic, a.b.Partition, lo, hi, noJSON}
	}, true)
}

// columns writes the records into the columns table through the staging
// table; a record whose value is no JSON object goes to the dead-letter
// table without asking the server.
func (a *attempt) columns(ctx context.Context) error {
	s := a.s
	staged := make([]int, 0, len(a.recs)) // indices into a.recs
	for i := range a.recs {
		if why := objectReason(a.recs[i].Value); why != "" {
			a.dead = append(a.dead, deadLetter{&a.recs[i], why})
			continue
		}
		staged = append(staged, i)
	}
	if len(staged) == 0 {
		return nil
	}
	src := &stageColsSource{recs: a.recs, staged: staged, row: make([]any, len(stageColsColumns))}
	if _, err := a.tx.CopyFrom(ctx, pgx.Identifier{stageCols}, stageColsColumns, src); err != nil {
		return fmt.Errorf("copy into %s: %w", stageCols, err)
	}
	// place sees staged positions; dead letters must name the record.
	recs := a.recs
	a.recs = make([]sinks.Record, len(staged))
	for j, i := range staged {
		a.recs[j] = recs[i]
	}
	return a.place(ctx, 0, len(staged), func(lo, hi int, _ bool) (string, []any) {
		return s.sql.colsInsert, []any{a.b.Topic, a.b.Partition, lo, hi}
	}, false)
}

// place inserts the staged rows [lo, hi). When the rows' own data makes
// the insert fail, it halves the range until the failing row is alone,
// which costs a few statements per bad record instead of one per row; that
// row goes to the dead-letter table (in raw mode after one more try
// without its jsonb copy, which only numbers beyond numeric's range need),
// and its neighbours go in.
func (a *attempt) place(ctx context.Context, lo, hi int, stmt func(lo, hi int, noJSON bool) (string, []any), retryNoJSON bool) error {
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
		if err := a.place(ctx, lo, mid, stmt, retryNoJSON); err != nil {
			return err
		}
		return a.place(ctx, mid, hi, stmt, retryNoJSON)
	}
	if retryNoJSON {
		q, args := stmt(lo, hi, true)
		err2 := a.try(ctx, q, args...)
		if err2 == nil || !recordFault(err2) {
			return err2
		}
	}
	a.dead = append(a.dead, deadLetter{&a.recs[lo], reason(err)})
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

// deadLetters stores the refused records of the attempt, in its
// transaction: they are counted as delivered when the offset moves past.
func (a *attempt) deadLetters(ctx context.Context) error {
	if len(a.dead) == 0 {
		return nil
	}
	n := len(a.dead)
	offs, keys, vals, times, errs := make([]int64, n), make([][]byte, n), make([][]byte, n), make([]time.Time, n), make([]string, n)
	for i, d := range a.dead {
		offs[i], keys[i], vals[i], times[i], errs[i] = d.rec.Offset, d.rec.Key, d.rec.Value, d.rec.Time, d.reason
	}
	if _, err := a.tx.Exec(ctx, a.s.sql.deadLetter, a.b.Topic, a.b.Partition, offs, keys, vals, times, errs); err != nil {
		return fmt.Errorf("insert into %s: %w", a.s.cfg.deadLetters.Sanitize(), err)
	}
	return nil
}

// rawSource feeds the raw table's COPY, one reused row at a time (pgx
// encodes each row before it asks for the next).
type rawSource struct {
	b    *sinks.Block
	recs []sinks.Record
	i    int
	row  []any
	err  error
}

func (r *rawSource) Next() bool {
	r.i++
	return r.i <= len(r.recs) && r.err == nil
}

func (r *rawSource) Values() ([]any, error) {
	rec := &r.recs[r.i-1]
	h, err := encodeHeaders(rec.Headers)
	if err != nil {
		r.err = fmt.Errorf("offset %d: %w", rec.Offset, err)
		return nil, r.err
	}
	r.row[0], r.row[1], r.row[2], r.row[3] = r.b.Topic, int32(r.b.Partition), rec.Offset, rec.Key
	r.row[4], r.row[5], r.row[6], r.row[7] = jsonbValue(rec.Value), rec.Value, rec.Time, h
	return r.row, nil
}

func (r *rawSource) Err() error { return r.err }

// stageRawSource feeds the raw staging table; value is the text jsonb is
// made from, when the value is JSON.
type stageRawSource struct {
	recs []sinks.Record
	i    int
	row  []any
	err  error
}

func (r *stageRawSource) Next() bool {
	r.i++
	return r.i <= len(r.recs) && r.err == nil
}

func (r *stageRawSource) Values() ([]any, error) {
	rec := &r.recs[r.i-1]
	h, err := encodeHeaders(rec.Headers)
	if err != nil {
		r.err = fmt.Errorf("offset %d: %w", rec.Offset, err)
		return nil, r.err
	}
	var text any
	if v := jsonbValue(rec.Value); v != nil {
		text = v
	}
	r.row[0], r.row[1], r.row[2], r.row[3] = int32(r.i-1), rec.Offset, rec.Key, text
	r.row[4], r.row[5], r.row[6] = rec.Value, rec.Time, h
	return r.row, nil
}

func (r *stageRawSource) Err() error { return r.err }

// stageColsSource feeds the columns staging table with the records that
// passed objectReason, numbered 0, 1, ... in the order given.
type stageColsSource struct {
	recs   []sinks.Record
	staged []int
	i      int
	row    []any
}

func (r *stageColsSource) Next() bool {
	r.i++
	return r.i <= len(r.staged)
}

func (r *stageColsSource) Values() ([]any, error) {
	rec := &r.recs[r.staged[r.i-1]]
	r.row[0], r.row[1], r.row[2], r.row[3], r.row[4] = int32(r.i-1), rec.Offset, rec.Key, rec.Time, rec.Value
	return r.row, nil
}

func (r *stageColsSource) Err() error { return nil }
