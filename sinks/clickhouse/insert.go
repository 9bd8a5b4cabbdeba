package clickhouse

// One INSERT of a block's rows: its settings, its retries with the same
// token, and which failures are worth another attempt.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
)

// insertRows are an INSERT's rows.
type insertRows interface {
	count() int
	// fill appends the rows to a batch.
	fill(batch driver.Batch) error
}

// insert sends one INSERT of rows with the token, retrying with backoff
// for up to retry_timeout while the failure is not the rows' own. retried
// reports a success on a later attempt: an earlier one failed, maybe after
// its request reached the server, so the success may be the server
// dropping the retry as a duplicate. dropped reports that the server said
// it dropped the insert as a duplicate (DuplicatedInsertedBlocks, over the
// native protocol; never over HTTP).
// what names the rows in the log (a block's fields, a round's). many says
// they are several blocks' (a round's): see insertOnce.
func (s *Sink) insert(ctx context.Context, what []zap.Field, t ident, cols []string, rows insertRows, token string, many bool) (retried, dropped bool, err error) {
	attempts, err := s.retried(ctx, func() (err error) {
		dropped, err = s.insertOnce(ctx, t, cols, rows, token, many)
		return err
	}, func(attempt int, err error) {
		s.cfg.log.Warn("insert failed; retrying with the same token", append(what[:len(what):len(what)],
			zap.Int("attempt", attempt), zap.Error(err))...)
	})
	switch {
	case err == nil:
		return attempts > 1, dropped, nil
	case strings.Contains(err.Error(), tooManyPartitions) && !transient(err):
		return false, false, fmt.Errorf("the block's rows span more of %s's partitions than one insert may take "+
			"(max_partitions_per_insert_block): raise it for the sink's user (0: no limit), or make blocks span fewer "+
			"(--max-block-rows, --flush-interval); the block is not retried here: %w", t, err)
	}
	return false, false, err
}

// retried runs op until it succeeds, with backoff for up to retry_timeout
// while its failure is the connection's or the server's (transient),
// telling retrying of each attempt about to be made again; it returns the
// attempts made. A failure of another kind, or ctx's end, is returned at
// once: an insert and the check that follows it fail alike.
func (s *Sink) retried(ctx context.Context, op func() error, retrying func(attempt int, err error)) (int, error) {
	var giveUp time.Time
	retry := backoff.Backoff{Min: retryFirst, Max: retryMax}
	for attempt := 1; ; attempt++ {
		err := op()
		switch {
		case err == nil:
			return attempt, nil
		case ctx.Err() != nil:
			return attempt, fmt.Errorf("%w: %w", ctx.Err(), err)
		case !transient(err):
			return attempt, err
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(s.cfg.retryTimeout)
		}
		wait := retry.Next()
		if time.Now().Add(wait).After(giveUp) {
			return attempt, fmt.Errorf("still failing after %d attempts in %s: %w", attempt, s.cfg.retryTimeout, err)
		}
		s.retries.Add(1)
		retrying(attempt, err)
		if err := backoff.Sleep(ctx, wait); err != nil {
			return attempt, err
		}
	}
}

// defaultMaxInsertBlockSize is ClickHouse's default max_insert_block_size.
const defaultMaxInsertBlockSize = 1 << 20

func (s *Sink) insertOnce(ctx context.Context, t ident, cols []string, rows insertRows, token string, many bool) (dropped bool, err error) {
	settings := ch.Settings{
		"insert_deduplicate":         1,
		"insert_deduplication_token": token,
		"async_insert":               0,
		// One block, so one part: the server splits a larger insert.
		"max_insert_block_size": max(rows.count(), defaultMaxInsertBlockSize),
	}
	if many && s.dedup.partitioned {
		// A round's rows span the table partitions of all its blocks,
		// which inserted one by one would have made as many parts at
		// least: the round is refused no more than they would be.
		settings["max_partitions_per_insert_block"] = 0
	}
	if s.dedupSetting {
		// ClickHouse 26.2 and later: it overrides insert_deduplicate, and
		// a profile may set it to disable.
		settings["deduplicate_insert"] = "enable"
	}
	var duplicates atomic.Int64
	ctx = ch.Context(ctx, ch.WithSettings(settings), ch.WithProfileEvents(func(events []ch.ProfileEvent) {
		for _, e := range events {
			if e.Name == "DuplicatedInsertedBlocks" {
				duplicates.Add(e.Value)
			}
		}
	}))
	batch, err := s.conn.PrepareBatch(ctx, insertSQL(t, cols))
	if err != nil {
		return false, err
	}
	if err := rows.fill(batch); err != nil {
		_ = batch.Abort()
		return false, err
	}
	err = batch.Send()
	return err == nil && duplicates.Load() > 0, err
}

// transientCodes are ClickHouse's exceptions that a later attempt may not
// meet: timeouts, lost connections, overload (252, too many parts: merges
// catch up), a read-only replica, Keeper.
var transientCodes = map[int32]bool{
	3: true, 159: true, 164: true, 202: true, 203: true, 209: true, 210: true, 241: true, 242: true,
	252: true, 319: true, 425: true, 999: true, 1000: true,
}

// tooManyPartitions is the message of code 252 when one insert holds rows
// of more table partitions than max_partitions_per_insert_block: the same
// block meets it every time.
const tooManyPartitions = "Too many partitions for single INSERT block"

// transient reports whether err is worth another attempt: a failure of the
// connection, or an exception in transientCodes; not one about the rows.
func transient(err error) bool {
	var ex *proto.Exception
	if errors.As(err, &ex) {
		if ex.Code == 252 && strings.Contains(ex.Message, tooManyPartitions) {
			return false
		}
		return transientCodes[ex.Code]
	}
	var ce *column.ColumnConverterError
	return !errors.As(err, &ce) && !errors.Is(err, ch.ErrBatchInvalid)
}

// observe counts an insert of n rows for the tiny-block warning.
func (s *Sink) observe(n int) {
	s.tinyMu.Lock()
	defer s.tinyMu.Unlock()
	s.tinyCount++
	s.tinyRowsSum += int64(n)
	if since := time.Since(s.tinyStart); since >= tinyWindow {
		if s.tinyCount > tinyInserts*int64(since/tinyWindow) && s.tinyRowsSum < tinyRows*s.tinyCount {
			s.cfg.log.Warn("many small inserts: ClickHouse wants few large ones (too many parts); raise --flush-interval or --max-empty-polls",
				zap.Int64("inserts", s.tinyCount), zap.Int64("rows_per_insert", s.tinyRowsSum/s.tinyCount), zap.Duration("over", since))
		}
		s.tinyStart, s.tinyCount, s.tinyRowsSum = time.Now(), 0, 0
	}
}
