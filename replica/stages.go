package replica

// The stages of a partition's loop (consume): where it starts, the
// previous owner's intent replayed, which range comes next, and what a
// failed read or a cut block leads to.

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
)

// start finds where the partition resumes, positions the cursor there
// (asking the leader about truncation when the committed offset says its
// epoch), and, when the sink holds more than etcd, commits the sink's
// offset first. It retries finding the resume point until fctx ends.
func (pt *partition) start(fctx, wctx context.Context, retry *backoff.Backoff) (int64, error) {
	start, err := pt.resume(fctx)
	for err != nil {
		pt.log.Warn("finding the resume point failed; retrying", zap.Error(err))
		if retry.Wait(fctx) != nil {
			return 0, errStopped
		}
		start, err = pt.resume(fctx)
	}
	retry.Reset()
	if id := pt.claim.Offsets().TopicID; id != "" {
		// The topic's id when the offset was committed: if it has
		// another now, the topic was re-created and the cursor says so.
		if tid, err := kafka.ParseTopicID(id); err == nil {
			pt.f.ExpectTopicID(tid)
		}
	}
	pt.truncated = pt.claim.Offsets().Truncated
	if o := pt.claim.Offsets(); !pt.etcdBehind && o.LeaderEpoch != nil && start == o.Next {
		// The cursor asks the leader whether its log still holds the
		// record before start before it reads on: a truncation below it
		// comes back as a poll's error.
		pt.epoch = *o.LeaderEpoch
		pt.f.SeekEpoch(start, pt.epoch)
	} else {
		pt.epoch = -1
		pt.f.SeekTo(start)
	}
	pt.log.Info("partition started", zap.Int64("next", start), zap.Int64("generation", pt.gen))
	pt.next.Store(start)
	if pt.etcdBehind {
		// The sink holds more than etcd: commit its offset now, without a
		// write, so lag and the intent are right before any new record.
		from := pt.claim.Offsets().Next
		if err := pt.handle(wctx, pt.deliver(wctx, &block{from: min(from, start), next: start, epoch: -1})); err != nil {
			return 0, err
		}
	}
	return start, nil
}

// replayIntent writes the previous owner's block again, exactly its range
// in (replaysIntent), so that a sink keyed by range overwrites instead of
// duplicating; it retries until the block is delivered, the partition
// moved (a reset, retention, a truncation) or it stops.
func (pt *partition) replayIntent(fctx, wctx context.Context, in coordinator.Intent, retry *backoff.Backoff) error {
	// The previous owner was writing [From, Next) when it stopped:
	// write exactly that range again, so a sink keyed by range
	// overwrites instead of duplicating.
	// Until it is delivered: a poll that failed part way has moved the
	// cursor into the range, and no guard rolls that back.
	for {
		b, err := pt.pollRange(fctx, in.From, in.Next)
		b.round = in.Round
		if err == nil {
			pt.log.Info("replaying the previous owner's block", zap.Int64("from", b.from), zap.Int64("next", b.next))
			err = pt.deliver(wctx, b)
		}
		pt.finish(b)
		if te := (*truncationError)(nil); errors.As(err, &te) {
			// Kafka's log no longer holds what the range was read
			// from: what comes next is read in a new generation.
			if err := pt.onTruncation(fctx, wctx, te.t); err != nil {
				return err
			}
			break
		}
		if herr := pt.handle(wctx, err); herr != nil {
			return herr
		}
		if err == nil || errors.Is(err, coordinator.ErrOffsetsChanged) || errors.Is(err, errRangeGone) {
			// Delivered; or an operator's reset, or the start policy
			// after retention took the range, moved the partition.
			break
		}
		pt.f.SeekTo(in.From)
		if retry.Wait(fctx) != nil {
			return errStopped
		}
	}
	retry.Reset()
	return nil
}

// abandoned counts and logs a block a stop cut short: rolled back,
// nothing lost, but the next owner writes it again.
func (pt *partition) abandoned(wctx context.Context, b *block) {
	pt.stats.abandoned.Add(1)
	fields := []zap.Field{zap.Int64("from", b.from), zap.Int64("next", b.next), zap.Int("rows", len(b.records))}
	switch cause := context.Cause(wctx); {
	case errors.Is(cause, errShutdownTimeout):
		pt.log.Warn("stop gave up on a block in flight (shutdown timeout): rolled back, the next owner replays it",
			append(fields, zap.Duration("shutdown_timeout", pt.cfg.ShutdownTimeout))...)
	default:
		pt.log.Warn("a block in flight was cut short: rolled back, the next owner replays it",
			append(fields, zap.NamedError("cause", cause))...)
	}
}

// pollFailed sorts a poll's error (the block so far delivered): a stop
// ends the partition, a truncation starts a new generation, a re-created
// topic or a batch past the budget waits, and any other error is retried
// after a backoff.
func (pt *partition) pollFailed(fctx, wctx context.Context, perr error, retry *backoff.Backoff) error {
	var truncErr *truncationError
	switch {
	case errors.Is(perr, errStopped) || fctx.Err() != nil:
		return errStopped
	case errors.As(perr, &truncErr):
		if err := pt.onTruncation(fctx, wctx, truncErr.t); err != nil {
			return err
		}
	default:
		var recreated *kafka.TopicRecreatedError
		if errors.As(perr, &recreated) {
			// Held until an operator resets the offsets: reading the
			// new topic from the old offset would skip its first
			// records, or read nothing for a long while.
			if pt.recreated.CompareAndSwap(false, true) {
				pt.stats.topicsRecreated.Add(1)
			}
			pt.log.Error("the topic was re-created: the partition waits for an operator's reset of its offsets", zap.Error(perr))
			if err := retry.Wait(fctx); err != nil {
				return errStopped
			}
			return nil
		}
		if errors.Is(perr, kafka.ErrBatchTooLarge) {
			// Retried, for the budget may be raised; the partition
			// goes no further until then, and says why.
			pt.stats.oversizedBatches.Add(1)
			pt.log.Error("a record batch inflates past the memory budget (--max-buffer-bytes); the partition waits", zap.Error(perr))
		} else {
			pt.log.Warn("poll failed; retrying", zap.Error(perr))
		}
		if err := retry.Wait(fctx); err != nil {
			return errStopped
		}
	}
	return nil
}

// rangeSource says where the next block's range comes from.
type rangeSource int

const (
	// freshPoll reads on from the cursor, by the block rules.
	freshPoll rangeSource = iota
	// exactReread reads again exactly the range of the last block, whose
	// write failed: the write may have reached the sink all the same, and
	// a sink that deduplicates a block by its range drops only one of the
	// same range.
	exactReread
)

// nextSource is where the block after last comes from: again is the range
// of a block whose write failed (nil for none); an operator's reset
// (resetSeen) moves the partition anyway, and a fresh poll reads it.
func nextSource(again *block, resetSeen bool) rangeSource {
	if again != nil && !resetSeen {
		return exactReread
	}
	return freshPoll
}

// replaysIntent tells whether a partition resumed at start replays the
// previous owner's intent (ok: there is one) as its first block: the range
// it was writing when it stopped, starting where the partition resumes.
func replaysIntent(in coordinator.Intent, ok bool, start int64) bool {
	return ok && in.From == start && in.Next > in.From
}

// rereadFailed sorts the failure of an exact re-read of again: nothing of
// a part of the range is written, so the whole range is read again (keep)
// after a backoff, unless the partition moved (a truncation, the range gone
// to retention) or the partition stops (err).
func (pt *partition) rereadFailed(fctx, wctx context.Context, again *block, perr error, retry *backoff.Backoff) (keep bool, err error) {
	te := (*truncationError)(nil)
	switch {
	case errors.As(perr, &te):
		return false, pt.onTruncation(fctx, wctx, te.t)
	case errors.Is(perr, errRangeGone):
		pt.log.Warn("the range of a block whose write failed is gone from kafka; going on where the start policy put the partition", zap.Error(perr))
		return false, nil
	case fctx.Err() != nil:
		return false, errStopped
	}
	pt.f.SeekTo(again.from)
	pt.log.Warn("reading a failed block's range again failed; retrying", zap.Error(perr))
	if err := retry.Wait(fctx); err != nil {
		return false, errStopped
	}
	return true, nil
}
