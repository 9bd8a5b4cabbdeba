package replica

// Kafka's log truncated below what a partition had read: the cursor finds
// it by the leader epochs stored with the offsets (internal/kafka,
// truncation.go), and the partition goes on from the divergence point in a
// new generation.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
)

// truncationError is how a poll says that Kafka's log diverges below what
// the partition had read: the block in hand is dropped, not written.
type truncationError struct{ t *kafka.Truncation }

func (e *truncationError) Error() string { return e.t.String() }

// onTruncation starts a new generation where Kafka's log diverges from what
// was read, or at the committed offset if that is lower (records read
// since were not committed, and may have reached the sink: read again in
// the new generation, a sink takes them as new). The new generation is
// committed before anything more is read, in one fenced transaction that
// records the truncation (coordinator.Claim.CommitTruncation), so that a
// crash after it reads again from the same point and a sink knows its rows
// from there on are of an older log. It is retried until it is committed,
// the claim is lost or an operator's reset moves the partition.
func (pt *partition) onTruncation(fctx, wctx context.Context, t *kafka.Truncation) error {
	committed := pt.next.Load()
	at, epoch := t.To, t.Epoch
	if committed < at {
		at, epoch = committed, pt.epoch
	}
	rec := coordinator.Truncation{At: at, Was: t.From, Committed: committed, When: time.Now().UTC()}
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		err := pt.claim.CommitTruncation(wctx, at, epoch, rec)
		if err == nil {
			break
		}
		if errors.Is(err, coordinator.ErrOffsetsChanged) || errors.Is(err, coordinator.ErrFenced) || wctx.Err() != nil {
			return pt.handle(wctx, err)
		}
		pt.log.Warn("recording a truncation of Kafka's log failed; retrying before anything more is read", zap.Error(err))
		if retry.Wait(fctx) != nil {
			return errStopped
		}
	}
	o := pt.claim.Offsets()
	pt.gen, pt.truncated = o.Generation, o.Truncated
	pt.epoch = epoch
	pt.next.Store(at)
	pt.pending.Store(0)
	pt.progress.Store(time.Now().UnixNano())
	pt.f.Committed(at, epoch)
	pt.f.SeekTo(at)
	lost := rec.Lost()
	pt.stats.truncations[truncationCause(t.Cause)].Add(1)
	pt.stats.offsetsTruncated.Add(lost)
	fields := []zap.Field{zap.Int64("diverges_at", t.To), zap.Int64("read_up_to", t.From), zap.Int64("committed", committed),
		zap.Int64("lost_by_kafka", lost), zap.Int64("next", at), zap.Int64("generation", o.Generation), zap.String("cause", t.Cause)}
	if lost > 0 {
		fields = append(fields, zap.String("lost_range", fmt.Sprintf("[%d, %d)", t.To, committed)))
	}
	pt.log.Error("Kafka's log of the partition was truncated below what had been read (an unclean leader election, "+
		"or a leader that lost acknowledged records): reading again from where it diverges, in a new generation; "+
		"the records the sink holds from there on of older generations are no longer in Kafka", fields...)
	return nil
}
