package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// ErrClosed is returned by Write, WriteBlocks and Resume after Close.
var ErrClosed = errors.New("postgres sink is closed")

// Sink writes blocks to PostgreSQL. It is safe for concurrent use; writes
// to different partitions run in parallel, each Write or WriteBlocks on a
// connection of its own from the pool.
type Sink struct {
	cfg  config
	pool *pgxpool.Pool
	// ownsPool: the pool is the sink's own, not its router's (a table
	// template's tables share one).
	ownsPool bool
	sql      statements

	// life is held shared by writes and Resume and exclusively by Close, so
	// that Close waits for the writes in flight and none starts after it.
	life   sync.RWMutex
	closed bool

	key keyPlan // upsert mode's

	// Columns and upsert modes': the table as the last write that read
	// it saw it (see publish), and what the sink learnt of the schemas of
	// decoded records, under schemaMu.
	tab      atomic.Pointer[table]
	schemaMu sync.Mutex
	checked  map[int]time.Time  // value schema ids checked against the catalog, and when
	plans    map[int]*fieldPlan // by schema id, for one table
	logged   map[int]bool       // value schema ids whose ignored fields were logged
	recheck  time.Duration      // recheckAfter, but in tests

	deadLetters   atomic.Int64
	ddl           atomic.Int64
	ignored       atomic.Int64
	ignoredFields atomic.Int64
	retries       atomic.Int64
}

var _ sinks.Sink = (*Sink)(nil)
var _ sinks.Resumer = (*Sink)(nil)
var _ sinks.BatchWriter = (*Sink)(nil)
var _ sinks.DeadLetterer = (*Sink)(nil)
var _ sinks.IgnoredFieldCounter = (*Sink)(nil)

// Group is the group the offsets are stored under.
func (s *Sink) Group() string { return s.cfg.group }

// Mode is the table mode.
func (s *Sink) Mode() Mode { return s.cfg.mode }

// DeadLetters counts the records this sink moved to the dead-letter table,
// in writes that committed.
func (s *Sink) DeadLetters() int64 { return s.deadLetters.Load() }

// IgnoredTombstones counts the tombstones upsert mode left out, in writes
// that committed: all of them with deletes=false, and with key_from=value
// those that have no value to find their row by.
func (s *Sink) IgnoredTombstones() int64 { return s.ignored.Load() }

// TakesUndecodable reports true: every mode has the dead-letter table,
// where a record the replica could not decode goes with the reason
// (sinks.DeadLetterer).
func (s *Sink) TakesUndecodable() bool { return true }

// IgnoredFields counts the values of decoded records' fields that no
// column took, in writes that committed (sinks.IgnoredFieldCounter): per
// record, one for each field of its schema that the table has no column
// for (evolve=none) or that is named as a kafka_* column, when the record
// holds a value for it (not null). Raw mode keeps every field: zero.
func (s *Sink) IgnoredFields() int64 { return s.ignoredFields.Load() }

// DDL counts the statements that changed a table's shape: a table
// created (evolve=add-columns), columns added.
func (s *Sink) DDL() int64 { return s.ddl.Load() }

// Retries counts the attempts made again for want of a server: New's while
// it waited for one, and Write's and WriteBlocks' after losing their
// connection.
func (s *Sink) Retries() int64 { return s.retries.Load() }

// Write stores b and the partition's (next, epoch, generation) in one
// transaction; see the package documentation. An error wrapping
// sinks.ErrFenced means a newer owner wrote to the partition: nothing was
// stored, and writing again cannot succeed. A cancelled ctx fails the write
// with an error wrapping ctx's, unless the commit went through already.
// Write is WriteBlocks of one block.
func (s *Sink) Write(ctx context.Context, b *sinks.Block) error {
	return s.WriteBlocks(ctx, []*sinks.Block{b})[0]
}

// WriteBlocks stores blocks of different partitions in one transaction,
// each block together with its partition's (next, epoch, generation) and
// checked against that partition's offsets row exactly as Write checks a
// block; see sinks.BatchWriter and the package documentation. A block
// refused as fenced (an error wrapping sinks.ErrFenced) stores nothing and
// the others commit; a block that Check refuses is left out. An error of
// the transaction (a lost connection past retry_timeout, ctx done, a
// statement that failed) is every block's: nothing of the call is stored.
// The whole call holds one connection from the pool.
func (s *Sink) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	errs := make([]error, len(blocks))
	order := make([]int, 0, len(blocks)) // the blocks to write, by (topic, partition)
	for i, b := range blocks {
		if b == nil {
			errs[i] = errors.New("write: nil block")
			continue
		}
		if err := b.Check(); err != nil {
			errs[i] = fmt.Errorf("write %s: %w", b, err)
			continue
		}
		order = append(order, i)
	}
	// One order for every transaction, so that two of them that lock the
	// same offsets rows (a zombie's and the owner's) cannot deadlock.
	slices.SortFunc(order, func(i, j int) int {
		return cmp.Or(strings.Compare(blocks[i].Topic, blocks[j].Topic), cmp.Compare(blocks[i].Partition, blocks[j].Partition))
	})
	fail := func(err error) []error {
		for _, i := range order {
			errs[i] = fmt.Errorf("write %s: %w", blocks[i], err)
		}
		return errs
	}
	sorted := make([]*sinks.Block, len(order))
	rows := 0
	for k, i := range order {
		sorted[k] = blocks[i]
		rows += len(blocks[i].Records)
		if k > 0 && sorted[k].Topic == sorted[k-1].Topic && sorted[k].Partition == sorted[k-1].Partition {
			return fail(fmt.Errorf("two blocks of %s/%d in one call", sorted[k].Topic, sorted[k].Partition))
		}
	}
	if len(sorted) == 0 {
		return errs
	}

	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return fail(ErrClosed)
	}
	var giveUp time.Time
	retry := backoff.Backoff{Min: retryFirst, Max: retryMax}
	reloaded := false
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		ws, err := s.writeOnce(ctx, sorted)
		switch {
		case err == nil:
			for k, w := range ws {
				if w.fenced != nil {
					errs[order[k]] = fmt.Errorf("write %s: %w", w.b, w.fenced)
					continue
				}
				s.deadLetters.Add(int64(len(w.dead)))
				s.ignored.Add(int64(w.ignored))
				sorted[k].NoteSetAside(len(w.dead) + w.ignored)
				s.ignoredFields.Add(int64(w.ignoredFields))
			}
			return errs
		case ctx.Err() != nil:
			return fail(fmt.Errorf("%w: %w", ctx.Err(), err))
		case !reloaded && s.cfg.mode != Raw && columnGone(err):
			// A column was dropped under the sink's statement: read the
			// table again and try once more at once.
			reloaded = true
			if rerr := s.reload(ctx); rerr != nil {
				return fail(fmt.Errorf("%w (reading the columns again: %w)", err, rerr))
			}
			continue
		case !transient(err):
			return fail(err)
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(s.cfg.retryTimeout)
		}
		wait := retry.Next()
		if time.Now().Add(wait).After(giveUp) {
			return fail(fmt.Errorf("still failing after %d attempts in %s: %w", attempt, s.cfg.retryTimeout, err))
		}
		s.retries.Add(1)
		fields := []zap.Field{zap.Int("attempt", attempt), zap.Error(err)}
		if b := sorted[0]; len(sorted) == 1 {
			fields = append(fields, zap.String("topic", b.Topic), zap.Int("partition", b.Partition), zap.Int64("from", b.From), zap.Int64("next", b.Next))
		} else {
			fields = append(fields, zap.Int("blocks", len(sorted)), zap.Int("rows", rows))
		}
		s.cfg.log.Warn("write lost its connection; retrying", fields...)
		if err := backoff.Sleep(ctx, wait); err != nil {
			return fail(err)
		}
	}
}

// Resume returns the next offset stored for a partition and the generation
// it was written under; ok is false for a partition never written.
func (s *Sink) Resume(ctx context.Context, topic string, partition int) (next, generation int64, ok bool, err error) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return 0, 0, false, fmt.Errorf("resume %s/%d: %w", topic, partition, ErrClosed)
	}
	err = s.pool.QueryRow(ctx, s.sql.resume, s.cfg.group, topic, partition).Scan(&next, &generation)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, 0, false, nil
	case err != nil:
		return 0, 0, false, fmt.Errorf("resume %s/%d from %s: %w", topic, partition, s.cfg.offsets.Sanitize(), err)
	}
	return next, generation, true, nil
}

// Close waits for the writes in flight, then closes the connections; later
// writes fail with ErrClosed. A second Close returns nil.
func (s *Sink) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if !s.closed {
		s.closed = true
		if s.ownsPool {
			s.pool.Close()
		}
	}
	return nil
}
