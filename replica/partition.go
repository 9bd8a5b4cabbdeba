package replica

import (
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"

	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/guard"
	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// partition consumes one claimed partition: it polls batches, groups them
// into blocks and delivers each block through a guard. One goroutine runs
// it; stop asks it to finish the block it is on and return.
type partition struct {
	r     *Replica
	claim *coordinator.Claim
	p     coordinator.Partition
	f     *kafka.Cursor
	log   *zap.Logger

	gen int64 // generation of the offsets the position came from
	// policyStart, when set, has where the start policy puts the
	// partition, read for many partitions at once when they were claimed.
	policyStart *startBounds
	// etcdBehind: the resume point came from the sink, ahead of etcd.
	etcdBehind bool
	// spare is the records slice of the last finished block, for the
	// next one to fill.
	spare []sinks.Record

	// Progress, read by Lag from other goroutines.
	next    atomic.Int64 // committed offset
	logEnd  atomic.Int64 // last stable offset (or high watermark) last seen; -1 unknown
	pending atomic.Int64 // UnixNano of the oldest polled, uncommitted record; 0 none
	// resetSeen is set when an operator reset this partition's offsets:
	// the poll loop reads them again between batches and seeks.
	resetSeen atomic.Bool

	stop chan struct{} // closed: finish the block, release, return
	done chan struct{} // closed when run has returned
	err  error         // why run returned, when not stopped
}

func newPartition(r *Replica, c *coordinator.Claim, f *kafka.Cursor) *partition {
	p := c.Partition()
	pt := &partition{
		r:     r,
		claim: c,
		p:     p,
		f:     f,
		log:   r.log.With(zap.String("topic", p.Topic), zap.Int("partition", p.Partition), zap.Int64("epoch", c.Epoch())),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	pt.logEnd.Store(-1)
	return pt
}

// block is a block being built: whole polled batches, [from, next).
type block struct {
	from, next int64
	records    []sinks.Record
	bytes      int // what its batches hold of the memory budget
	// full: it ended by size (rows, bytes, the budget), so its etcd writes
	// go at once; a block that ended because the partition went quiet
	// lets them linger for others to share their round.
	full bool
}

// writeOptions are the block's etcd write options: a lingering round for a
// block of a quiet partition, none for a full one.
func (pt *partition) writeOptions(b *block) []coordinator.WriteOption {
	if b.full || pt.r.cfg.CommitLinger <= 0 {
		return nil
	}
	return []coordinator.WriteOption{coordinator.Linger(pt.r.cfg.CommitLinger)}
}

func (b *block) empty() bool { return b.next == b.from && len(b.records) == 0 }

// errRangeGone says an intent's range is no longer in Kafka (retention):
// the partition goes on where the start policy put it.
var errRangeGone = errors.New("the range is no longer in kafka")

// errStopped is how a poll says it was asked to stop.
var errStopped = errors.New("partition stopping")

// run consumes until stopped (nil: the claim was released at a block
// boundary), until the claim is lost (an error matching ErrFenced), or until
// ctx ends (hard stop: the block in flight rolls back). It closes done.
func (pt *partition) run(ctx context.Context) {
	defer close(pt.done)
	defer pt.f.Close()
	// fctx ends polls when asked to stop or when the claim is lost; writes
	// use wctx, which ends only with the claim, so a stop finishes its block.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	fctx, fcancel := context.WithCancel(wctx)
	defer fcancel()
	go func() {
		select {
		case <-pt.claim.Lost():
			wcancel()
		case <-pt.stop:
			fcancel()
		case <-wctx.Done():
		}
	}()

	pt.err = pt.consume(fctx, wctx)
	if ctx.Err() != nil && !pt.stopping() {
		return // hard stop: the session owner revokes the lease
	}
	// Whatever else ended the partition, a claim still held must go, or no
	// one would consume the partition until this replica leaves. The
	// release is conditioned on the claim's epoch: after an etcd fence it
	// changes nothing; after a sink's fence (a newer epoch wrote there) it
	// frees a claim etcd may still show as ours.
	rctx, cancel := context.WithTimeout(context.Background(), pt.r.cfg.LeaseTTL/2)
	defer cancel()
	if err := pt.claim.Release(rctx); err != nil {
		pt.log.Warn("release failed; the claim expires with the lease", zap.Error(err))
		return
	}
	pt.log.Debug("released", zap.NamedError("cause", pt.err))
}

func (pt *partition) stopping() bool {
	select {
	case <-pt.stop:
		return true
	default:
		return false
	}
}

func (pt *partition) consume(fctx, wctx context.Context) error {
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	start, err := pt.resume(fctx)
	for err != nil {
		pt.log.Warn("finding the resume point failed; retrying", zap.Error(err))
		if retry.Wait(fctx) != nil {
			return errStopped
		}
		start, err = pt.resume(fctx)
	}
	retry.Reset()
	pt.f.SeekTo(start)
	pt.log.Info("partition started", zap.Int64("next", start), zap.Int64("generation", pt.gen))
	pt.next.Store(start)
	if pt.etcdBehind {
		// The sink holds more than etcd: commit its offset now, without a
		// write, so lag and the intent are right before any new record.
		from := pt.claim.Offsets().Next
		if err := pt.handle(wctx, pt.deliver(wctx, &block{from: min(from, start), next: start})); err != nil {
			return err
		}
	}

	if in, ok := pt.claim.Intent(); ok && in.From == start && in.Next > in.From {
		// The previous owner was writing [From, Next) when it stopped:
		// write exactly that range again, so a sink keyed by range
		// overwrites instead of duplicating.
		// Until it is delivered: a poll that failed part way has moved the
		// cursor into the range, and no guard rolls that back.
		for {
			b, err := pt.pollRange(fctx, in.From, in.Next)
			if err == nil {
				pt.log.Info("replaying the previous owner's block", zap.Int64("from", b.from), zap.Int64("next", b.next))
				err = pt.deliver(wctx, b)
			}
			pt.finish(b)
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
	}

	for {
		b, perr := pt.poll(fctx)
		var derr error
		if !b.empty() {
			derr = pt.deliver(wctx, b)
		}
		// Committed or rolled back, the block's batches are done with.
		pt.finish(b)
		if err := pt.handle(wctx, derr); err != nil {
			return err
		}
		if derr != nil {
			if err := retry.Wait(fctx); err != nil {
				return errStopped
			}
			continue
		}
		switch {
		case perr == nil:
			retry.Reset()
		case errors.Is(perr, errStopped) || fctx.Err() != nil:
			return errStopped
		default:
			if errors.Is(perr, kafka.ErrBatchTooLarge) {
				// Retried, for the budget may be raised; the partition
				// goes no further until then, and says why.
				pt.r.stats.oversizedBatches.Add(1)
				pt.log.Error("a record batch inflates past the memory budget (--max-buffer-bytes); the partition waits", zap.Error(perr))
			} else {
				pt.log.Warn("poll failed; retrying", zap.Error(perr))
			}
			if err := retry.Wait(fctx); err != nil {
				return errStopped
			}
		}
	}
}

// handle sorts a delivery error: nil goes on, a lost claim ends the
// partition, a reset seeks to the operator's offset. Other errors (sink or
// etcd trouble) go on after the guard's rollback, with a backoff by the
// caller.
func (pt *partition) handle(ctx context.Context, err error) error {
	var ce *coordinator.CommitError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, coordinator.ErrFenced) || errors.Is(err, sinks.ErrFenced):
		pt.r.stats.fenced.Add(1)
		pt.log.Warn("claim lost; partition stopped", zap.Error(err))
		return fmt.Errorf("%s: %w", pt.p, coordinator.ErrFenced)
	case errors.Is(err, coordinator.ErrOffsetsChanged):
		o := pt.claim.Offsets()
		pt.next.Store(o.Next)
		pt.pending.Store(0)
		pt.r.stats.offsetsChanged.Add(1)
		pt.gen = o.Generation
		pt.f.SeekTo(o.Next)
		pt.log.Info("offsets reset by an operator; seeking", zap.Int64("next", o.Next), zap.Int64("generation", o.Generation))
		return nil
	case errors.As(err, &ce):
		// Counted by the coordinator: see Stats.CommitFailures.
		pt.log.Error("commit failed", zap.Error(err))
		return nil
	case ctx.Err() != nil:
		return errStopped
	default:
		pt.log.Warn("block rolled back", zap.Error(err))
		return nil
	}
}

// resume finds where to start: the committed offset, the sink's own if it
// is further and of the same generation, else the start policy.
func (pt *partition) resume(ctx context.Context) (int64, error) {
	o := pt.claim.Offsets()
	pt.gen = o.Generation
	next, have := o.Next, o.ModRevision != 0
	if rs, ok := sinks.As[sinks.Resumer](pt.r.sink); ok {
		sn, sgen, sok, err := rs.Resume(ctx, pt.p.Topic, pt.p.Partition)
		if err != nil {
			return 0, fmt.Errorf("resume %s from the sink: %w", pt.p, err)
		}
		if sok && sgen == o.Generation && (!have || sn > next) {
			pt.log.Info("resuming from the sink's offset", zap.Int64("next", sn), zap.Int64("etcd_next", next))
			pt.etcdBehind = true
			next, have = sn, true
		}
	}
	if have {
		return next, nil
	}
	if pt.policyStart != nil {
		if start, ok := pt.policyStart.start(ctx, pt.p); ok {
			return start, nil
		}
	}
	earliest, logEnd, err := pt.f.Bounds(ctx)
	if err != nil {
		return 0, fmt.Errorf("resume %s by the start policy: %w", pt.p, err)
	}
	if pt.r.cfg.Kafka.StartPolicy == StartLatest {
		return logEnd, nil
	}
	return earliest, nil
}

// poll builds one block by the rules: it ends, between batches, at
// MaxBlockRows rows or MaxBlockBytes bytes, when the partition holds its
// share of the memory budget, when it has caught up with the log end,
// FlushInterval after its first row, or after MaxEmptyPolls empty polls in a
// row; in EveryBatch mode after each batch. A failed or stopped poll returns
// what it has so far with the error.
func (pt *partition) poll(ctx context.Context) (*block, error) {
	cfg := &pt.r.cfg
	b := &block{from: pt.f.Offset(), next: pt.f.Offset(), records: pt.spare}
	pt.spare = nil
	var first time.Time
	empties := 0
	throttled := false
	for {
		b.full = len(b.records) >= cfg.MaxBlockRows || b.bytes >= cfg.MaxBlockBytes || (throttled && !b.empty())
		if b.full || (!first.IsZero() && time.Since(first) >= cfg.FlushInterval) ||
			(empties >= cfg.MaxEmptyPolls && !b.empty()) ||
			(cfg.CommitMode == EveryBatch && !b.empty()) {
			return b, nil
		}
		if ctx.Err() != nil {
			return b, errStopped
		}
		if pt.resetSeen.Swap(false) {
			if o, changed, err := pt.claim.Refresh(ctx); err != nil {
				pt.resetSeen.Store(true) // try again after the next batch
			} else if changed {
				// Nothing of the block is written yet: drop it and start
				// over where the operator said.
				pt.r.stats.offsetsChanged.Add(1)
				pt.gen = o.Generation
				pt.next.Store(o.Next)
				pt.pending.Store(0)
				pt.f.SeekTo(o.Next)
				pt.log.Info("offsets reset by an operator; seeking", zap.Int64("next", o.Next), zap.Int64("generation", o.Generation))
				pt.finish(b)
				*b = block{from: o.Next, next: o.Next, records: pt.spare}
				pt.spare = nil
				first, empties, throttled = time.Time{}, 0, false
				continue
			}
		}
		fetch := pt.f.Fetch
		if b.empty() && !pt.resetSeen.Load() {
			// Nothing in hand, so no rule waits on an empty poll: sleep
			// until records come (or a reset or a stop wakes us).
			fetch = pt.f.Next
		}
		batch, err := fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return b, errStopped
			}
			return b, err
		}
		if batch.Throttled {
			throttled = true
			continue
		}
		if batch.Reset != nil {
			pt.r.stats.offsetResets.Add(1)
			pt.log.Warn("offset out of range; reset by the start policy",
				zap.Int64("from", batch.Reset.From), zap.Int64("next", batch.Reset.To), zap.Stringer("policy", batch.Reset.Policy))
			if b.empty() {
				b.from, b.next = batch.Next, batch.Next
			}
			continue
		}
		if end := batch.LastStable; end >= 0 {
			pt.logEnd.Store(end)
		} else if batch.HighWatermark >= 0 {
			pt.logEnd.Store(batch.HighWatermark)
		}
		if batch.Next == batch.From {
			empties++
			continue
		}
		empties = 0
		if caughtUp(batch) {
			// Reaching the log end counts as an empty poll: with the
			// default MaxEmptyPolls, 1, the block ends at once, and the
			// records that come next go into the next one, so a trickle
			// is delivered without waiting out an empty poll.
			empties = 1
		}
		if b.empty() && b.next != batch.From {
			b.from = batch.From
		}
		if len(b.records) == 0 && len(batch.Records) > 0 {
			pt.pending.CompareAndSwap(0, batch.Records[0].Time.UnixNano())
		}
		if len(b.records) == 0 && cap(b.records) < 2*len(batch.Records) {
			// The batch's own slice, which is ours, saves a copy: with
			// many partitions a block is often one batch.
			b.records = batch.Records
		} else {
			b.records = append(b.records, batch.Records...)
		}
		b.bytes += batch.Bytes
		b.next = batch.Next
		if first.IsZero() {
			first = time.Now()
		}
	}
}

// finish gives a finished block's bytes back to the budget and keeps its
// records slice for the next block: a sink keeps no slice of a block once
// its write returns, and a block of 65,536 rows would otherwise grow a new
// slice of several megabytes every time.
func (pt *partition) finish(b *block) {
	pt.f.Free(b.bytes)
	b.bytes = 0
	clear(b.records) // keep no record's bytes alive
	pt.spare, b.records = b.records[:0], nil
}

// pollRange reads exactly [from, next), cutting the last batch at next and
// seeking there, for the replay of an intent.
func (pt *partition) pollRange(ctx context.Context, from, next int64) (*block, error) {
	b := &block{from: from, next: from}
	for b.next < next {
		batch, err := pt.f.Fetch(ctx)
		if err != nil {
			return b, fmt.Errorf("replay %s [%d, %d): %w", pt.p, from, next, err)
		}
		if batch.Reset != nil {
			pt.r.stats.offsetResets.Add(1)
			return b, fmt.Errorf("replay %s [%d, %d): offsets out of range, reset to %d: %w", pt.p, from, next, batch.Reset.To, errRangeGone)
		}
		for _, rec := range batch.Records {
			if rec.Offset < next {
				b.records = append(b.records, rec)
			}
		}
		// The range was a block of the previous owner's, which may be
		// larger than this replica's share of the budget: it is read
		// whole all the same, off the budget, so that the replay cannot
		// wait on memory only its own commit frees.
		pt.f.Free(batch.Bytes)
		b.next = min(batch.Next, next)
	}
	pt.f.SeekTo(next)
	return b, nil
}

// deliver writes one block and commits its offset, through a guard.
func (pt *partition) deliver(ctx context.Context, b *block) error {
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
	g := guard.New(committer{pt.claim, int64(len(b.records)), opts}, pt, b.from, b.next)
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
		if _, resumes := sinks.As[sinks.Resumer](pt.r.sink); !resumes {
			// A sink that stores its own offsets with the rows needs no
			// intent: a new owner resumes from what it holds, and it
			// refuses a lower epoch, so the intent would only cost an etcd
			// write per block.
			if err := pt.claim.PutIntent(ctx, b.from, b.next, opts...); err != nil {
				return err
			}
		}
		start := time.Now()
		if err := pt.r.writer.Write(ctx, blk); err != nil {
			pt.r.stats.sinkErrors.Add(1)
			return fmt.Errorf("write %s [%d, %d): %w", pt.p, b.from, b.next, err)
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
	rows  int64
	opts  []coordinator.WriteOption
}

func (c committer) Commit(ctx context.Context, next int64) error {
	return c.claim.Commit(ctx, next, c.rows, c.opts...)
}

// caughtUp reports whether a batch reached what can be read now: the last
// stable offset (read_committed) or the high watermark.
func caughtUp(b kafka.PolledBatch) bool {
	end := b.LastStable
	if end < 0 {
		end = b.HighWatermark
	}
	return end >= 0 && b.Next >= end
}
