package replica

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// partition consumes one claimed partition: it polls batches, groups them
// into blocks and delivers each block through a guard. One goroutine runs
// it; stop asks it to finish the block it is on and return.
type partition struct {
	r     *Replica
	cfg   *Config    // the replica's, defaults applied
	stats *counters  // the replica's
	rules blockRules // when its blocks end
	claim *coordinator.Claim
	p     sinks.Partition
	f     *kafka.Cursor
	log   *zap.Logger

	gen int64 // generation of the offsets the position came from
	// policyStart, when set, has where the start policy puts the
	// partition, read for many partitions at once when they were claimed.
	policyStart *startBounds
	// etcdBehind: the resume point came from the sink, ahead of etcd.
	etcdBehind bool
	// epoch is the Kafka leader epoch of the record before next, -1
	// unknown: stored with each commit, for a later owner to tell whether
	// Kafka's log still holds what was read.
	epoch int32
	// truncated is set while the generation is one that began at a
	// truncation of Kafka's log (Offsets.Truncated).
	truncated *coordinator.Truncation
	// lastFull: the last block ended full (a backlog's); until one
	// does, the partition is taken to trickle. See writeOptions.
	lastFull bool
	// spare is the records slice of the last finished block, for the
	// next one to fill.
	spare []sinks.Record
	// decodeBuf and decodedSpare hold the last block's decoded keys and
	// values, for the next block to reuse (see decode).
	decodeBuf    []byte
	decodedSpare []sinks.Decoded

	// Progress, read by Lag from other goroutines.
	next   atomic.Int64 // committed offset
	logEnd atomic.Int64 // last stable offset (or high watermark) last seen; -1 unknown
	// hw is the high watermark last seen under read_committed (-1
	// otherwise), and lsoMoved the UnixNano the last stable offset last
	// moved, or was seen equal to the high watermark.
	hw       atomic.Int64
	lsoMoved atomic.Int64
	pending  atomic.Int64 // UnixNano of the oldest polled, uncommitted record; 0 none
	// progress is the UnixNano of the last commit, or of the last moment
	// the partition was seen caught up: how long it has been behind
	// without committing is the time since.
	progress atomic.Int64
	// writing is the UnixNano the sink write in flight started; 0 none.
	writing atomic.Int64
	// failures counts the blocks that failed in a row.
	failures atomic.Int64
	// recreated: the partition waits for an operator's reset, its topic
	// having been re-created.
	recreated atomic.Bool
	// resetSeen is set when an operator reset this partition's offsets:
	// the poll loop reads them again between batches and seeks.
	resetSeen atomic.Bool

	stop chan struct{} // closed: finish the block, release, return
	// stopWhy says why stop was closed, for the log; set by stopFor
	// before it closes stop.
	stopWhy string
	done    chan struct{} // closed when run has returned
	err     error         // why run returned, when not stopped
}

func newPartition(r *Replica, c *coordinator.Claim, f *kafka.Cursor) *partition {
	p := c.Partition()
	pt := &partition{
		r:     r,
		cfg:   &r.cfg,
		stats: &r.stats,
		rules: newBlockRules(&r.cfg, r.rounds),
		claim: c,
		p:     p,
		f:     f,
		log:   r.log.With(zap.String("topic", p.Topic), zap.Int("partition", p.Partition), zap.Int64("epoch", c.Epoch())),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	pt.logEnd.Store(-1)
	pt.hw.Store(-1)
	pt.progress.Store(time.Now().UnixNano())
	if r.codec != nil {
		f.ExpectDecoding()
	}
	return pt
}

// errRangeGone says an intent's range is no longer in Kafka (retention):
// the partition goes on where the start policy put it.
var errRangeGone = errors.New("the range is no longer in kafka")

// errStopped is how a poll says it was asked to stop.
var errStopped = errors.New("partition stopping")

// Why a partition's writes were cut short (the cause of its hard context),
// for the log line of the block it gave up.
var (
	errShutdownTimeout = errors.New("shutdown timeout")
	errSessionLost     = errors.New("session lost")
	errKilled          = errors.New("replica killed")
)

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
	rctx, cancel := context.WithTimeout(context.Background(), pt.cfg.LeaseTTL/2)
	defer cancel()
	if err := pt.claim.Release(rctx); err != nil {
		pt.log.Warn("release failed; the claim expires with the lease", zap.Error(err))
		return
	}
	// stopWhy is read only once stop is seen closed: its write happened
	// before the close.
	if !pt.stopping() || pt.stopWhy == whyShutdown {
		pt.log.Debug("released", zap.NamedError("cause", pt.err))
		return
	}
	pt.log.Info("partition released", zap.String("why", pt.stopWhy), zap.Int64("next", pt.next.Load()), zap.NamedError("cause", pt.err))
}

// Why a partition is asked to stop, for its log line.
const (
	whyPlanned    = "planned to another replica"
	whyOperator   = "an operator asked for it (claims release)"
	whyUnreadable = "this replica cannot read Kafka"
	whyShutdown   = "the replica stops"
)

// stopFor asks the partition to finish its block and release, saying why.
// r.mu is held.
func (pt *partition) stopFor(why string) {
	if !pt.stopping() {
		pt.stopWhy = why
		close(pt.stop)
	}
}

func (pt *partition) stopping() bool { return isClosed(pt.stop) }

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (pt *partition) consume(fctx, wctx context.Context) error {
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	start, err := pt.start(fctx, wctx, &retry)
	if err != nil {
		return err
	}
	if in, ok := pt.claim.Intent(); replaysIntent(in, ok, start) {
		if err := pt.replayIntent(fctx, wctx, in, &retry); err != nil {
			return err
		}
	}

	// again is the range of the last block, when its write failed: the
	// next block is exactly that range. The write may have reached the
	// sink all the same (an answer lost, a check after the insert that
	// failed), and a sink that deduplicates a block by its range
	// (ClickHouse's tokens) drops only one of the same range: a larger
	// block from the same offset would write the first one's records twice.
	var again *block
	for {
		var b *block
		var perr error
		switch nextSource(again, pt.resetSeen.Load()) {
		case exactReread:
			b, perr = pt.pollRange(fctx, again.from, again.next)
			b.round = again.round
			if perr != nil {
				pt.finish(b)
				keep, err := pt.rereadFailed(fctx, wctx, again, perr, &retry)
				if err != nil {
					return err
				}
				if !keep {
					again = nil
				}
				continue
			}
		default:
			again = nil // an operator's reset moves the partition anyway: poll reads it
			b, perr = pt.poll(fctx)
		}
		var derr error
		if !b.empty() {
			derr = pt.deliver(wctx, b)
			// A graceful stop past its timeout, or a lost session (which cuts
			// the writes at once, whether or not the stop reached this
			// partition first).
			cut := pt.stopping() || errors.Is(context.Cause(wctx), errSessionLost)
			if derr != nil && wctx.Err() != nil && cut && !errors.Is(derr, coordinator.ErrFenced) {
				pt.abandoned(wctx, b)
			}
		}
		// Committed or rolled back, the block's batches are done with.
		pt.finish(b)
		if err := pt.handle(wctx, derr); err != nil {
			return err
		}
		again = nil
		if derr != nil && pt.cfg.CommitMode != EveryBatch && !errors.Is(derr, coordinator.ErrOffsetsChanged) &&
			!errors.As(derr, new(*decodeStop)) {
			// Rolled back to b.from (the guard): the same range next.
			again = &block{from: b.from, next: b.next, epoch: -1, round: b.round}
		}
		if derr != nil {
			if err := retry.Wait(fctx); err != nil {
				return errStopped
			}
			continue
		}
		if perr == nil {
			retry.Reset()
			continue
		}
		if err := pt.pollFailed(fctx, wctx, perr, &retry); err != nil {
			return err
		}
	}
}

// handle sorts a delivery error: nil goes on, a lost claim ends the
// partition, a reset seeks to the operator's offset. Other errors (sink or
// etcd trouble) go on after the guard's rollback, with a backoff by the
// caller.
func (pt *partition) handle(ctx context.Context, err error) error {
	var ce *coordinator.CommitError
	if err == nil {
		pt.failures.Store(0)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, coordinator.ErrFenced) || errors.Is(err, sinks.ErrFenced):
		pt.stats.fenced.Add(1)
		pt.log.Warn("claim lost; partition stopped", zap.Error(err))
		return fmt.Errorf("%s: %w", pt.p, coordinator.ErrFenced)
	case errors.Is(err, coordinator.ErrOffsetsChanged):
		pt.seekReset(pt.claim.Offsets())
		return nil
	case errors.As(err, new(*decodeStop)):
		pt.log.Error("partition stopped at a record that cannot be decoded; retrying (see --on-decode-error)", zap.Error(err))
		return nil
	case errors.As(err, &ce):
		// Counted by the coordinator: see Stats.CommitFailures.
		pt.log.Error("commit failed", zap.Error(err))
		return nil
	case ctx.Err() != nil:
		return errStopped
	default:
		// Retried with a backoff by the caller: a passing failure is a
		// warning, one that lasts an error naming the sink.
		n := pt.failures.Add(1)
		switch {
		case n < failuresBeforeError:
			pt.log.Warn("block rolled back; retrying", zap.Int64("failures", n), zap.Error(err))
		case n == failuresBeforeError || n%20 == 0:
			pt.log.Error("the block keeps failing; retrying until it succeeds (nothing is committed past it)",
				zap.String("sink", pt.r.sinkName), zap.Int64("failures", n), zap.Error(err))
		}
		return nil
	}
}

// failuresBeforeError is how many failures of a block in a row are logged
// as warnings before they are an error.
const failuresBeforeError = 3

// seekReset moves the partition to the offsets an operator's reset wrote.
func (pt *partition) seekReset(o coordinator.Offsets) {
	pt.stats.offsetsChanged.Add(1)
	pt.gen = o.Generation
	pt.truncated = o.Truncated
	pt.next.Store(o.Next)
	pt.epoch = -1
	pt.pending.Store(0)
	pt.f.SeekTo(o.Next)
	// A topic that was re-created is read from the operator's offset on.
	pt.f.AcceptTopic()
	pt.recreated.Store(false)
	pt.log.Info("offsets reset by an operator; seeking", zap.Int64("next", o.Next), zap.Int64("generation", o.Generation))
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
	if pt.cfg.Kafka.StartPolicy == kafkaconf.StartLatest {
		return logEnd, nil
	}
	return earliest, nil
}
