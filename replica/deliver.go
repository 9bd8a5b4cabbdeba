package replica

// The commit path: a block written to the sink and committed through a
// guard.

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/guard"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// writeOptions are the block's etcd write options: a lingering round for a
// block of a quiet partition, none for a full one.
func (pt *partition) writeOptions(b *block) []coordinator.WriteOption {
	if b.full || pt.r.cfg.CommitLinger <= 0 {
		return nil
	}
	return []coordinator.WriteOption{coordinator.Linger(pt.r.cfg.CommitLinger)}
}

// deliver writes one block and commits its offset, through a guard.
func (pt *partition) deliver(ctx context.Context, b *block) error {
	// Before the guard, for decoding may end the block early (at a record
	// that stops the partition); a block that cannot be decoded yet (the
	// registry away) rolls back to be read again, as the guard would.
	if err := pt.decode(ctx, b); err != nil {
		pt.Rewind(b.from)
		return err
	}
	blk := &sinks.Block{
		Topic:      pt.p.Topic,
		Partition:  pt.p.Partition,
		Epoch:      pt.claim.Epoch(),
		Generation: pt.gen,
		From:       b.from,
		Next:       b.next,
		Records:    b.records,
	}
	opts := pt.writeOptions(b)
	if id := pt.f.TopicID(); !id.IsZero() {
		pt.claim.SetTopicID(id.String())
	}
	g := guard.New(committer{pt.claim, b, opts}, pt, b.from, b.next)
	defer g.Release()

	if pt.r.cfg.CommitMode == EveryBatch {
		// At-most-once: the offset moves before the write.
		start := time.Now()
		if err := g.Commit(ctx); err != nil {
			return err
		}
		pt.r.observeCommit(time.Since(start))
		pt.committed(b)
		if len(b.records) > 0 {
			start = time.Now()
			if err := pt.r.writer.Write(ctx, blk); err != nil {
				pt.r.stats.sinkErrors.Add(1)
				pt.log.Error("block lost: committed before a failed write (every-batch mode)",
					zap.Int64("from", b.from), zap.Int64("next", b.next), zap.Int("rows", len(b.records)), zap.Error(err))
				return nil
			}
			pt.r.observeWrite(len(b.records), time.Since(start))
			pt.r.stats.records.Add(int64(len(b.records)))
		}
		return nil
	}

	if len(b.records) > 0 {
		if needsIntent(pt.r.sink) {
			if err := pt.claim.PutIntent(ctx, b.from, b.next, opts...); err != nil {
				return err
			}
		}
		start := time.Now()
		if err := pt.r.writer.Write(ctx, blk); err != nil {
			pt.r.stats.sinkErrors.Add(1)
			return fmt.Errorf("write %s: %w", blk, err)
		}
		pt.r.observeWrite(len(b.records), time.Since(start))
		pt.r.stats.records.Add(int64(len(b.records)))
	}
	start := time.Now()
	if err := g.Commit(ctx); err != nil {
		return err
	}
	pt.r.observeCommit(time.Since(start))
	pt.committed(b)
	return nil
}

func (pt *partition) committed(b *block) {
	pt.next.Store(b.next)
	pt.pending.Store(0)
	pt.r.stats.blocks.Add(1)
	pt.r.stats.commits.Add(1)
	pt.log.Debug("block committed", zap.Int64("from", b.from), zap.Int64("next", b.next), zap.Int("rows", len(b.records)))
}

// Rewind is the guard's rollback: the next poll starts at the block again.
func (pt *partition) Rewind(from int64) {
	pt.pending.Store(0)
	pt.r.stats.rollbacks.Add(1)
	pt.f.SeekTo(from)
}

// committer adapts a claim to guard.Committer.
type committer struct {
	claim *coordinator.Claim
	b     *block // its records, as decoding left them, are the rows
	opts  []coordinator.WriteOption
}

func (c committer) Commit(ctx context.Context, next int64) error {
	return c.claim.Commit(ctx, next, int64(len(c.b.records)), c.opts...)
}

// needsIntent reports whether the replica writes an intent before each of
// the sink's blocks: for any sink but a Resumer, and for a Resumer that
// asks for them (a sinks.IntentKeeper). A sink that stores its own offsets
// with the rows and refuses a lower epoch needs no intent: a new owner
// resumes from what it holds, so the intent would only cost an etcd write
// per block. One that deduplicates only a block of the same range needs
// the new owner to replay exactly the range the previous owner wrote.
func needsIntent(s sinks.Sink) bool {
	if _, resumes := sinks.As[sinks.Resumer](s); !resumes {
		return true
	}
	ik, ok := sinks.As[sinks.IntentKeeper](s)
	return ok && ik.NeedsIntents()
}
