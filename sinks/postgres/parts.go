package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// A block routed by a field (route_field=) is written in parts, a part
// per table, each part by its table's Sink: here all of a block's parts
// and its partition's one offsets row go in one transaction, as a block of
// one table does in writeOnce.

// partsWrite is one block of a routed call: its own plan (the partition's
// offsets row) and its parts' plans, each with the same row.
type partsWrite struct {
	w     *blockWrite   // the whole block: its offsets row and next
	parts []*blockWrite // its parts, each planned against the same row
	sinks []*Sink       // parts[i]'s table's sink
}

// writeParts stores each block's parts, its tables' rows, and its
// partition's offsets row in one transaction; see sinks.RouterConfig's
// WriteParts. The offsets rows are the router's tables' shared ones,
// written through owner's statements (every table's sink has the same
// offsets table and key). A transient error retries the call whole.
func writeParts(ctx context.Context, owner *Sink, blocks []*sinks.Block, parts [][]sinks.Part) []error {
	errs := make([]error, len(blocks))
	order := make([]int, len(blocks))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int {
		return cmp.Or(strings.Compare(blocks[i].Topic, blocks[j].Topic), cmp.Compare(blocks[i].Partition, blocks[j].Partition))
	})
	fail := func(err error) []error {
		for i, b := range blocks {
			errs[i] = fmt.Errorf("write %s: %w", b, err)
		}
		return errs
	}
	// Every table's sink stays open for the call, taken in one order.
	var held []*Sink
	for _, ps := range parts {
		for _, p := range ps {
			s, ok := p.Sink.(*Sink)
			if !ok {
				return fail(fmt.Errorf("a part's sink is a %T, not a postgres sink", p.Sink))
			}
			if !slices.Contains(held, s) {
				held = append(held, s)
			}
		}
	}
	slices.SortFunc(held, func(a, b *Sink) int { return strings.Compare(a.cfg.table.Sanitize(), b.cfg.table.Sanitize()) })
	for _, s := range held {
		s.life.RLock()
		defer s.life.RUnlock()
		if s.closed {
			return fail(ErrClosed)
		}
	}
	var giveUp time.Time
	retry := backoff.Backoff{Min: retryFirst, Max: retryMax}
	reloaded := false
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		pws, err := owner.writePartsOnce(ctx, blocks, parts, order)
		switch {
		case err == nil:
			for i, pw := range pws {
				if pw.w.fenced != nil {
					errs[i] = fmt.Errorf("write %s: %w", blocks[i], pw.w.fenced)
					continue
				}
				for k, w := range pw.parts {
					s := pw.sinks[k]
					s.deadLetters.Add(int64(len(w.dead)))
					s.ignored.Add(int64(w.ignored))
					s.ignoredFields.Add(int64(w.ignoredFields))
					w.b.NoteSetAside(len(w.dead) + w.ignored)
				}
			}
			return errs
		case ctx.Err() != nil:
			return fail(fmt.Errorf("%w: %w", ctx.Err(), err))
		case !reloaded && columnGone(err):
			reloaded = true
			for _, s := range held {
				if s.cfg.mode == Raw {
					continue
				}
				if rerr := s.reload(ctx); rerr != nil {
					return fail(fmt.Errorf("%w (reading the columns of %s again: %w)", err, s.cfg.table.Sanitize(), rerr))
				}
			}
			continue
		case !transient(err):
			return fail(err)
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(owner.cfg.retryTimeout)
		}
		wait := retry.Next()
		if time.Now().Add(wait).After(giveUp) {
			return fail(fmt.Errorf("still failing after %d attempts in %s: %w", attempt, owner.cfg.retryTimeout, err))
		}
		owner.retries.Add(1)
		owner.cfg.log.Warn("write lost its connection; retrying", zap.Int("attempt", attempt), zap.Int("blocks", len(blocks)), zap.Error(err))
		if err := backoff.Sleep(ctx, wait); err != nil {
			return fail(err)
		}
	}
}

// writePartsOnce is one try of writeParts: one transaction, the offsets
// rows locked in order's order (every transaction's, so that a zombie's
// and the owner's wait for each other), each block planned against its
// row, each table's parts written by its sink's mode, then the dead
// letters and the offsets rows. A fenced block writes none of its parts.
func (o *Sink) writePartsOnce(ctx context.Context, blocks []*sinks.Block, parts [][]sinks.Part, order []int) ([]*partsWrite, error) {
	off := o.cfg.offsets.Sanitize()
	conn, err := o.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()

	pws := make([]*partsWrite, len(blocks))
	batch := &pgx.Batch{}
	for _, i := range order {
		w := &blockWrite{b: blocks[i]}
		pws[i] = &partsWrite{w: w}
		batch.Queue(o.sql.lock, o.cfg.group, w.b.Topic, w.b.Partition).QueryRow(func(row pgx.Row) error {
			return row.Scan(&w.st.next, &w.st.epoch, &w.st.generation)
		})
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, fmt.Errorf("lock the offsets rows in %s: %w", off, err)
	}
	byTable := map[*Sink][]*blockWrite{}
	var tables []*Sink
	for _, i := range order {
		pw := pws[i]
		if pw.w.plan(off); pw.w.fenced != nil {
			continue
		}
		for _, p := range parts[i] {
			s := p.Sink.(*Sink)
			w := &blockWrite{b: p.Block, st: pw.w.st}
			w.plan(off)
			pw.parts, pw.sinks = append(pw.parts, w), append(pw.sinks, s)
			if _, ok := byTable[s]; !ok {
				tables = append(tables, s)
			}
			byTable[s] = append(byTable[s], w)
		}
	}
	var attempts []*attempt
	for k, s := range tables {
		a, err := s.writeTable(ctx, tx, byTable[s], k > 0)
		if err != nil {
			return nil, err
		}
		attempts = append(attempts, a)
	}
	batch = &pgx.Batch{}
	var what []string
	for _, i := range order {
		pw := pws[i]
		if pw.w.fenced != nil {
			continue
		}
		for k, w := range pw.parts {
			if q, args := attemptOf(attempts, pw.sinks[k]).deadLetters(w); q != "" {
				batch.Queue(q, args...)
				what = append(what, "insert into "+pw.sinks[k].cfg.deadLetters.Sanitize())
			}
		}
		b := pw.w.b
		batch.Queue(o.sql.setOffsets, o.cfg.group, b.Topic, b.Partition, pw.w.next, b.Epoch, b.Generation)
		what = append(what, fmt.Sprintf("update the offsets row of %s/%d in %s", b.Topic, b.Partition, off))
	}
	if err := sendAll(ctx, tx, batch, what); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	for _, a := range attempts {
		a.s.publish(a)
	}
	return pws, nil
}

// writeTable writes the parts of one table in tx by the sink's mode, as
// writeOnce writes blocks, after other tables' when after: its attempt,
// for the dead letters and publish.
func (s *Sink) writeTable(ctx context.Context, tx pgx.Tx, ws []*blockWrite, after bool) (*attempt, error) {
	a := &attempt{s: s, tx: tx}
	if after {
		// The staging table keeps its rows until the commit: a table
		// before this one may have left its own there, numbered from 0 as
		// this one's are.
		stage := map[Mode]string{Raw: stageRaw, Columns: stageCols, Upsert: stageUpsert}[s.cfg.mode]
		if _, err := tx.Exec(ctx, `DELETE FROM `+stage); err != nil {
			return nil, fmt.Errorf("empty %s: %w", stage, err)
		}
	}
	var err error
	switch s.cfg.mode {
	case Raw:
		// raw rolls a failed COPY back to here: this table's rows only.
		if _, err := tx.Exec(ctx, `SAVEPOINT offsetkeeper_copy`); err != nil {
			return nil, fmt.Errorf("savepoint before %s: %w", s.cfg.table.Sanitize(), err)
		}
		err = a.raw(ctx, ws)
	case Upsert:
		if err = a.prepareTable(ctx, ws); err == nil {
			err = a.upsert(ctx, ws)
		}
	default:
		if err = a.prepareTable(ctx, ws); err == nil {
			err = a.columns(ctx, ws)
		}
	}
	return a, err
}

// attemptOf is the attempt of s among as.
func attemptOf(as []*attempt, s *Sink) *attempt {
	for _, a := range as {
		if a.s == s {
			return a
		}
	}
	panic(errors.New("postgres: a part's table was not written"))
}
