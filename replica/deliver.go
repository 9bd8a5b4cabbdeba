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
// small block of a trickling partition (this block and the one before it
// ended quiet, and its records came after the partition had been read to
// its log end), none for a full block, a large one, the block that ends a
// backlog or one whose records were waiting in a backlog, whose commits
// would otherwise hold the end of a catch-up back by the linger, twice
// (intent and commit). A partition's backlog can be one small block, so a
// backlog of many small partitions would end late, its last commits
// lingering.
func (pt *partition) writeOptions(b *block) []coordinator.WriteOption {
	cfg := pt.cfg
	// Small: at most a 64th of a full block (one record at least), as a
	// trickle's blocks are; a larger one is a backlog's, whose own rows
	// dwarf its etcd writes.
	small := len(b.records) <= max(1, cfg.MaxBlockRows/64) && b.raw <= max(1, cfg.MaxBlockBytes/64)
	if b.full || !small || pt.lastFull || !b.afterLogEnd || cfg.CommitLinger <= 0 {
		return nil
	}
	return []coordinator.WriteOption{coordinator.Linger(cfg.CommitLinger)}
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
		Truncated:  pt.truncated != nil,
		Round:      b.round,
	}
	opts := pt.writeOptions(b)
	pt.lastFull = b.full
	if id := pt.f.TopicID(); !id.IsZero() {
		pt.claim.SetTopicID(id.String())
	}
	g := guard.New(committer{pt.claim, b, opts}, pt, b.from, b.next)
	defer g.Release()

	if pt.cfg.CommitMode == EveryBatch {
		// At-most-once: the offset moves before the write.
		start := time.Now()
		if err := g.Commit(ctx); err != nil {
			return err
		}
		pt.r.observeCommit(time.Since(start))
		pt.committed(b)
		if len(b.records) > 0 {
			start = time.Now()
			if err := pt.write(ctx, pt.r.writer, blk); err != nil {
				pt.log.Error("block lost: committed before a failed write (every-batch mode)",
					zap.Int64("from", b.from), zap.Int64("next", b.next), zap.Int("rows", len(b.records)), zap.Error(err))
				return nil
			}
			pt.r.observeWrite(len(b.records), time.Since(start))
			pt.stats.records.Add(int64(len(b.records)))
			pt.stats.stored.Add(int64(len(blk.Records) - blk.SetAside))
		}
		return nil
	}

	if len(b.records) > 0 {
		w := pt.r.writer
		switch {
		case pt.r.rounds != nil:
			// The intent goes with the round's, which the call's blocks
			// share (sinkRounds.send); the round it names is kept for
			// the block's retry.
			// Without the linger: the intents of a round are put all at
			// once, so they share their etcd rounds without waiting.
			w = roundWrite{rounds: pt.r.rounds, trickle: b.afterLogEnd && !b.full, intent: func(ctx context.Context, round string) error {
				return pt.claim.PutRoundIntent(ctx, b.from, b.next, round)
			}}
		case needsIntent(pt.r.sink):
			if err := pt.claim.PutIntent(ctx, b.from, b.next, opts...); err != nil {
				return err
			}
		}
		start := time.Now()
		err := pt.write(ctx, w, blk)
		b.round = blk.Round
		if err != nil {
			return err
		}
		pt.r.observeWrite(len(b.records), time.Since(start))
		pt.stats.records.Add(int64(len(b.records)))
		pt.stats.stored.Add(int64(len(blk.Records) - blk.SetAside))
	}
	start := time.Now()
	if err := g.Commit(ctx); err != nil {
		return err
	}
	pt.r.observeCommit(time.Since(start))
	pt.committed(b)
	return nil
}

// write writes blk within WriteTimeout: a write past it fails and rolls
// back, rather than hold the partition (and its lag) for as long as a lock
// or a silent server lasts.
func (pt *partition) write(ctx context.Context, w blockWriter, blk *sinks.Block) error {
	wctx, cancel := context.WithTimeout(ctx, pt.cfg.WriteTimeout)
	defer cancel()
	start := time.Now()
	pt.writing.Store(start.UnixNano())
	defer pt.writing.Store(0)
	slow := time.AfterFunc(pt.cfg.WriteTimeout/4, func() {
		pt.log.Warn("a sink write is taking long", zap.String("sink", pt.r.sinkName), zap.Int64("from", blk.From),
			zap.Int64("next", blk.Next), zap.Int("rows", len(blk.Records)), zap.Duration("so_far", time.Since(start)),
			zap.Duration("timeout", pt.cfg.WriteTimeout))
	})
	defer slow.Stop()
	err := w.Write(wctx, blk)
	if err == nil {
		return nil
	}
	pt.stats.sinkErrors.Add(1)
	if wctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
		pt.stats.writeTimeouts.Add(1)
		return fmt.Errorf("write %s to %s: no answer within the write timeout (%s): %w", blk, pt.r.sinkName, pt.cfg.WriteTimeout, err)
	}
	return fmt.Errorf("write %s to %s: %w", blk, pt.r.sinkName, err)
}

func (pt *partition) committed(b *block) {
	pt.epoch = b.epoch
	pt.f.Committed(b.next, b.epoch)
	pt.next.Store(b.next)
	pt.pending.Store(0)
	pt.progress.Store(time.Now().UnixNano())
	pt.stats.blocks.Add(1)
	pt.stats.commits.Add(1)
	pt.log.Debug("block committed", zap.Int64("from", b.from), zap.Int64("next", b.next), zap.Int("rows", len(b.records)))
}

// Rewind is the guard's rollback: the next poll starts at the block again.
// The oldest uncommitted record stays what it was: the lag in seconds goes
// on growing through rollbacks and retries.
func (pt *partition) Rewind(from int64) {
	pt.stats.rollbacks.Add(1)
	pt.f.SeekTo(from)
}

// committer adapts a claim to guard.Committer.
type committer struct {
	claim *coordinator.Claim
	b     *block // its records, as decoding left them, are the rows
	opts  []coordinator.WriteOption
}

func (c committer) Commit(ctx context.Context, next int64) error {
	return c.claim.CommitEpoch(ctx, next, c.b.epoch, int64(len(c.b.records)), c.opts...)
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
