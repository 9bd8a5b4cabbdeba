package clickhouse

// A round's blocks in one insert: few parts, however many partitions.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

var (
	_ sinks.BatchWriter   = (*Sink)(nil)
	_ sinks.RoundInserter = (*Sink)(nil)
	_ sinks.RoundPacer    = (*Sink)(nil)
)

// InsertsRounds implements sinks.RoundInserter: true where the sink can
// check which of a block's offsets its tables hold (see target), which a
// replay of one block of a round relies on; elsewhere each block is an
// insert of its own, with a token of its range.
func (s *Sink) InsertsRounds() bool { return s.combines }

// RoundInterval implements sinks.RoundPacer: insert_interval, where the
// sink inserts rounds.
func (s *Sink) RoundInterval() time.Duration {
	if !s.combines {
		return 0
	}
	return s.cfg.insertInterval
}

// RoundToken is the insert_deduplication_token of the blocks of round
// written together for group.
func RoundToken(group, round string) string { return "offsetkeeper/" + group + "/round/" + round }

// inRound reports whether b goes in under its round's token.
func (s *Sink) inRound(b *sinks.Block) bool { return s.combines && b.Round != "" }

// token is the token of b's insert: its round's, or its range's.
func (s *Sink) token(b *sinks.Block) string {
	if s.inRound(b) {
		return RoundToken(s.cfg.group, b.Round)
	}
	return Token(s.cfg.group, b)
}

// WriteBlocks implements sinks.BatchWriter. The blocks that share a Round
// go in together: their dead letters in one insert, their rows in another,
// each with the round's token, so one part each in an unpartitioned table.
// The replica spaces the calls by insert_interval (RoundInterval), so that
// a quiet topic of hundreds of partitions makes about one insert per
// interval.
//
// A block written again (a retry, a new owner's replay) comes with the
// round it was first written in, alone or with others of that round. Its
// insert carries the round's token, so that it and the round's first
// insert, in whichever order they land, are one: the second is dropped.
// The sink then checks which of the block's offsets the table holds and
// inserts only the missing ones (ensureLanded): the round's first insert
// may have held other blocks, and this one's only part of it.
func (s *Sink) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	errs := make([]error, len(blocks))
	s.life.RLock()
	defer s.life.RUnlock()
	rounds := map[string][]int{}
	var order []string
	for i, b := range blocks {
		switch {
		case b == nil:
			errs[i] = fmt.Errorf("write: nil block")
		case b.Check() != nil:
			errs[i] = fmt.Errorf("write %s: %w", b, b.Check())
		case s.closed:
			errs[i] = fmt.Errorf("write %s: %w", b, ErrClosed)
		case len(b.Records) == 0:
		case !s.inRound(b):
			rounds[""] = append(rounds[""], i)
		default:
			if _, ok := rounds[b.Round]; !ok {
				order = append(order, b.Round)
			}
			rounds[b.Round] = append(rounds[b.Round], i)
		}
	}
	var wg sync.WaitGroup
	for _, i := range rounds[""] {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.writeOne(ctx, blocks[i]) }()
	}
	for _, round := range order {
		idx := rounds[round]
		wg.Add(1)
		go func() {
			defer wg.Done()
			bs := make([]*sinks.Block, len(idx))
			for j, i := range idx {
				bs[j] = blocks[i]
			}
			for j, err := range s.writeRound(ctx, bs) {
				errs[idx[j]] = err
			}
		}()
	}
	wg.Wait()
	return errs
}

// writeRound inserts the blocks of one round, each checked and prepared
// on its own; it returns an outcome per block.
func (s *Sink) writeRound(ctx context.Context, blocks []*sinks.Block) []error {
	errs := make([]error, len(blocks))
	if s.cfg.mode == Columns && s.cfg.evolve == AddColumns {
		for i, b := range blocks {
			errs[i] = s.evolve(ctx, b)
		}
	}
	s.colsMu.RLock()
	defer s.colsMu.RUnlock()
	var ps []*prepared
	var at []int
	suspect := false
	for i, b := range blocks {
		if errs[i] != nil {
			errs[i] = fmt.Errorf("write %s: %w", b, errs[i])
			s.suspectNext(b.Topic, b.Partition)
			continue
		}
		// Taken even when another block is the suspect: the round is
		// checked whole.
		suspect = s.takeSuspect(b.Topic, b.Partition) || b.Again || suspect
		p := s.prepare(b)
		ps, at = append(ps, p), append(at, i)
	}
	if len(ps) == 0 {
		return errs
	}
	err := s.insertRound(ctx, ps, suspect)
	for j, p := range ps {
		b := blocks[at[j]]
		if err != nil {
			errs[at[j]] = fmt.Errorf("write %s in a round of %d blocks: %w", b, len(ps), err)
			s.suspectNext(b.Topic, b.Partition)
			continue
		}
		s.deadLetters.Add(int64(len(p.dead)))
		b.NoteSetAside(len(p.dead))
	}
	return errs
}

// insertRound inserts the dead letters of ps, then their rows, each in one
// insert with the round's token, and checks each block's rows when the
// token may have been known to the server (suspect: a block written
// again; or the insert was retried, or the server said it dropped it).
func (s *Sink) insertRound(ctx context.Context, ps []*prepared, suspect bool) error {
	first := ps[0].b
	token := s.token(first)
	what := []zap.Field{zap.String("round", first.Round), zap.Int("blocks", len(ps)), zap.String("first_topic", first.Topic),
		zap.Int("first_partition", first.Partition)}
	var dead, rows multiRows
	for _, p := range ps {
		if len(p.dead) > 0 {
			dead = append(dead, p.dead)
		}
		if p.rows.count() > 0 {
			rows = append(rows, p.rows)
		}
	}
	if dead.count() > 0 {
		if err := s.insertAll(ctx, what, s.deadTarget, deadColumns, dead, token+"/dead", suspect, ps,
			func(p *prepared) insertRows { return p.dead },
			func(p *prepared) ([]int64, func([]int64) insertRows) { return p.deadOffsets, p.deadSubset }); err != nil {
			return fmt.Errorf("dead letters to %s: %w", s.cfg.deadLetters, err)
		}
		for _, p := range ps {
			if len(p.dead) > 0 {
				s.saidDead(p)
			}
		}
	}
	if rows.count() > 0 {
		if err := s.insertAll(ctx, what, s.mainTarget, ps[0].cols, rows, token, suspect, ps,
			func(p *prepared) insertRows { return p.rows },
			func(p *prepared) ([]int64, func([]int64) insertRows) { return p.wanted, p.subset }); err != nil {
			return err
		}
		s.observe(rows.count())
	}
	return nil
}

// insertAll is one insert of a round's rows into t and, when its token
// may have been known, the check of each block's (ensureLanded). whole
// is a block's rows for t, offsets their offsets and how to make some.
//
// Blocks written again (suspect) are looked for first, all in one query,
// and those whose rows are all in the table already are left out of the
// insert: their rows got there by an insert with the round's token, or by
// one made after it was spent, so the round's first insert, wherever it
// is, can no longer land. A new owner's replay of a round that landed
// before the crash then costs a query, not a part.
func (s *Sink) insertAll(ctx context.Context, what []zap.Field, t target, cols []string, rows insertRows, token string, suspect bool,
	ps []*prepared, whole func(*prepared) insertRows, offsets func(*prepared) ([]int64, func([]int64) insertRows)) error {
	// t.check holds: the sink combines only where both targets check.
	if suspect {
		missing, err := s.missingInRetried(ctx, t, ps, offsets)
		if err != nil {
			return fmt.Errorf("look for the round's rows in %s: %w", t.table, err)
		}
		var left []*prepared
		var parts multiRows
		for i, p := range ps {
			if len(missing[i]) > 0 {
				left = append(left, p)
				parts = append(parts, whole(p))
			}
		}
		if len(left) == 0 {
			return nil
		}
		if len(left) < len(ps) {
			ps, rows = left, parts
		}
	}
	retried, dropped, err := s.insert(ctx, what, t.table, cols, rows, token, len(ps) > 1)
	if err != nil || !(retried || dropped || suspect) {
		return err
	}
	missing, err := s.missingInRetried(ctx, t, ps, offsets)
	if err != nil {
		return fmt.Errorf("check that %s holds the round's rows: %w", t.table, err)
	}
	for i, p := range ps {
		if len(missing[i]) == 0 {
			continue
		}
		_, subset := offsets(p)
		if err := s.ensureLanded(ctx, p.b, t, cols, token, missing[i], subset); err != nil {
			return fmt.Errorf("%s: %w", p.b, err)
		}
	}
	return nil
}

// missingInRetried is missingIn, retried as an insert is (with backoff,
// for up to retry_timeout, while the failure is the connection's or the
// server's): the check is part of the write.
func (s *Sink) missingInRetried(ctx context.Context, t target, ps []*prepared, offsets func(*prepared) ([]int64, func([]int64) insertRows)) (missing [][]int64, err error) {
	_, err = s.retried(ctx, func() (err error) {
		missing, err = s.missingIn(ctx, t, ps, offsets)
		return err
	}, func(attempt int, err error) {
		s.cfg.log.Warn("reading which of a round's rows are in the table failed; retrying", zap.String("table", t.table.String()),
			zap.Int("blocks", len(ps)), zap.Int("attempt", attempt), zap.Error(err))
	})
	return missing, err
}

// missingIn returns, for each of ps, the offsets of its rows (offsets)
// that t does not hold, in one query.
func (s *Sink) missingIn(ctx context.Context, t target, ps []*prepared, offsets func(*prepared) ([]int64, func([]int64) insertRows)) ([][]int64, error) {
	out := make([][]int64, len(ps))
	where, args := rangesOf(t, ps, offsets)
	if where == "" {
		return out, nil
	}
	// First how many of each block's offsets the table holds, a row a
	// block: a block all in or all out (the common cases) needs no more.
	counts := map[partitionKey]int64{}
	err := s.scan(ctx, `SELECT kafka_topic, toInt32(kafka_partition), toInt64(uniqExact(kafka_offset)) FROM `+t.table.String()+
		` WHERE `+where+` GROUP BY kafka_topic, kafka_partition`, args, func(k partitionKey, n int64) { counts[k] = n })
	if err != nil {
		return nil, err
	}
	var partial []*prepared
	var at []int
	for i, p := range ps {
		wanted, _ := offsets(p)
		switch n := counts[partitionKey{p.b.Topic, p.b.Partition}]; {
		case n == 0:
			out[i] = wanted
		case n < int64(len(wanted)):
			partial, at = append(partial, p), append(at, i)
		}
	}
	if len(partial) == 0 {
		return out, nil
	}
	where, args = rangesOf(t, partial, offsets)
	held := map[partitionKey]map[int64]bool{}
	err = s.scan(ctx, `SELECT DISTINCT kafka_topic, toInt32(kafka_partition), toInt64(kafka_offset) FROM `+t.table.String()+
		` WHERE `+where, args, func(k partitionKey, off int64) {
		if held[k] == nil {
			held[k] = map[int64]bool{}
		}
		held[k][off] = true
	})
	if err != nil {
		return nil, err
	}
	for j, p := range partial {
		wanted, _ := offsets(p)
		h := held[partitionKey{p.b.Topic, p.b.Partition}]
		for _, off := range wanted {
			if !h[off] {
				out[at[j]] = append(out[at[j]], off)
			}
		}
	}
	return out, nil
}

// rangesOf is the WHERE of ps's blocks' rows in t: each's partition,
// offset range and, where the table has it, generation; "" for none.
func rangesOf(t target, ps []*prepared, offsets func(*prepared) ([]int64, func([]int64) insertRows)) (string, []any) {
	var where []string
	var args []any
	for _, p := range ps {
		wanted, _ := offsets(p)
		if len(wanted) == 0 {
			continue
		}
		cond := `(kafka_topic = ? AND kafka_partition = ? AND kafka_offset >= ? AND kafka_offset <= ?`
		args = append(args, p.b.Topic, p.b.Partition, wanted[0], wanted[len(wanted)-1])
		if t.generation {
			cond += ` AND kafka_generation = ?`
			args = append(args, p.b.Generation)
		}
		where = append(where, cond+`)`)
	}
	return strings.Join(where, ` OR `), args
}

// scan runs q (rows of a topic, a partition and an integer) without the
// query cache and hands each row to row.
func (s *Sink) scan(ctx context.Context, q string, args []any, row func(k partitionKey, v int64)) error {
	rows, err := s.conn.Query(ctx, q+` SETTINGS use_query_cache = 0`, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var topic string
		var partition int32
		var v int64
		if err := rows.Scan(&topic, &partition, &v); err != nil {
			return err
		}
		row(partitionKey{topic, int(partition)}, v)
	}
	return rows.Err()
}

// multiRows are the rows of several blocks in one insert, each appended to
// the batch's columns in turn.
type multiRows []insertRows

func (m multiRows) count() int {
	n := 0
	for _, r := range m {
		n += r.count()
	}
	return n
}

func (m multiRows) fill(batch driver.Batch) error {
	for _, r := range m {
		if err := r.fill(batch); err != nil {
			return err
		}
	}
	return nil
}
