package replica

// Plans and claims: which partitions a replica takes, and starting them.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// reconcile plans from one snapshot, claims the free partitions planned to
// this replica and asks the ones planned elsewhere to stop at their next
// block boundary.
func (r *Replica) reconcile(ctx context.Context, s *coordinator.Session, hard context.Context, partitions []sinks.Partition,
	wg *sync.WaitGroup, exited chan<- *partition) {
	if !s.Alive() {
		return
	}
	snap, err := r.coord.Snapshot(ctx)
	if err != nil {
		r.log.Warn("reading the group failed", zap.Error(err))
		return
	}
	r.releaseStrays(ctx, s, snap)
	// Only lease-bound members are live; draining ones get nothing, nor do
	// those that cannot read Kafka, unless none can: then nothing moves,
	// rather than partitions going round replicas that cannot read them.
	members, nobody := readers(snap.Members)
	if nobody {
		return
	}
	claims := make(map[sinks.Partition]string, len(snap.Claims))
	for p, c := range snap.Claims {
		owner := c.Replica
		if owner == s.ID() && c.Lease != int64(s.Lease()) {
			owner += " (previous session)" // not ours: it expires with its lease
		}
		claims[p] = owner
	}
	plan := coordinator.Plan(members, partitions, claims)
	toClaim, toRelease := coordinator.Diff(plan, claims, s.ID())
	if keeping, _ := r.reach.keeping(time.Now(), r.cfg.KafkaDownAfter); keeping {
		toRelease = nil // the others may not be able to read either
	}

	changed := false
	r.mu.Lock()
	why := whyPlanned
	if r.reach.verdict() != "" {
		why = whyUnreadable
	}
	var handing []string
	for _, p := range toRelease {
		if pt, ok := r.owned[p]; ok && !pt.stopping() {
			pt.stopFor(why)
			handing = append(handing, p.String())
			changed = true
		}
	}
	// An operator asked for these claims to be handed over: finish the
	// block, release, and let the plan decide again.
	for p, rr := range snap.Releases {
		if pt, ok := r.owned[p]; ok && pt.claim.Epoch() == rr.Epoch && !pt.stopping() {
			pt.log.Info("releasing on an operator's request")
			pt.stopFor(whyOperator)
			changed = true
		}
	}
	r.mu.Unlock()
	if len(handing) > 0 {
		r.log.Info("handing partitions over at their next block boundary", zap.String("why", why),
			zap.Int("partitions", len(handing)), zap.Strings("which", firstN(handing, 20)))
	}

	// Claim in an order of this replica's own, so replicas working from
	// slightly different snapshots collide less.
	h := fnv.New32a()
	h.Write([]byte(s.ID()))
	if n := len(toClaim); n > 0 {
		k := int(h.Sum32() % uint32(n))
		toClaim = append(toClaim[k:], toClaim[:k]...)
	}
	r.mu.Lock()
	toClaim = slices.DeleteFunc(toClaim, func(p sinks.Partition) bool { _, have := r.owned[p]; return have })
	r.mu.Unlock()
	var got []*coordinator.Claim
	var errs []error
	var early *startBounds
	if ctx.Err() == nil && s.Alive() && len(toClaim) > 0 {
		// Where the start policy puts the partitions etcd holds no
		// offsets of is read while they are claimed, not after: at
		// 10,000 partitions of a new group the read is 60 ms of a 0.4 s
		// start. The claims' own offsets still decide (start).
		var fresh []sinks.Partition
		for _, p := range toClaim {
			if _, ok := snap.Offsets[p]; !ok {
				fresh = append(fresh, p)
			}
		}
		if len(fresh) > 0 {
			early = r.readStarts(hard, fresh)
		}
		// Every claim is its own compare, the partitions share
		// transactions: a replica planned hundreds claims them in a few.
		got, errs = s.ClaimAll(ctx, toClaim)
	}
	var claimed []*coordinator.Claim
	for i, c := range got {
		if err := errs[i]; err != nil {
			if !errors.Is(err, coordinator.ErrClaimed) {
				r.log.Warn("claim failed", zap.String("topic", toClaim[i].Topic), zap.Int("partition", toClaim[i].Partition), zap.Error(err))
			}
			continue
		}
		claimed = append(claimed, c)
	}
	if r.start(ctx, hard, claimed, early, wg, exited) > 0 {
		changed = true
	}
	if changed {
		r.stats.rebalances.Add(1)
	}
}

// releaseStrays deletes claims of this session that no partition runs: a
// claim whose answer was lost in a timeout, or whose release failed. They
// would otherwise hold their partition, unconsumed, until the lease ends.
func (r *Replica) releaseStrays(ctx context.Context, s *coordinator.Session, snap *coordinator.Snapshot) {
	for p, c := range snap.Claims {
		if c.Replica != s.ID() || c.Lease != int64(s.Lease()) {
			continue
		}
		r.mu.Lock()
		_, running := r.owned[p]
		r.mu.Unlock()
		if running {
			continue
		}
		if err := s.ReleaseStray(ctx, p, c.Epoch); err != nil {
			r.log.Warn("releasing a stray claim failed", zap.String("topic", p.Topic), zap.Int("partition", p.Partition), zap.Error(err))
			continue
		}
		r.log.Info("released a claim no partition ran", zap.String("topic", p.Topic), zap.Int("partition", p.Partition), zap.Int64("epoch", c.Epoch))
		delete(snap.Claims, p)
	}
}

// start runs a partition for each new claim and returns how many it
// started. Where the start policy decides a partition's first offset (etcd
// holds none), it comes from early, read while the partitions were claimed,
// or else from one read of all of them: one ListOffsets per broker.
func (r *Replica) start(ctx, hard context.Context, claims []*coordinator.Claim, early *startBounds, wg *sync.WaitGroup, exited chan<- *partition) int {
	pts := make([]*partition, 0, len(claims))
	var unplaced []*partition
	for _, c := range claims {
		p := c.Partition()
		f, err := r.consumer.Open(p.Topic, p.Partition)
		if err != nil {
			r.log.Error("cannot read partition", zap.String("topic", p.Topic), zap.Int("partition", p.Partition), zap.Error(err))
			_ = c.Release(ctx)
			continue
		}
		pt := newPartition(r, c, f)
		pts = append(pts, pt)
		r.mu.Lock()
		r.owned[pt.p] = pt
		r.mu.Unlock()
		r.stats.claims.Add(1)
		if c.Offsets().ModRevision != 0 {
			continue
		}
		if early.covers(p) {
			pt.policyStart = early
		} else {
			unplaced = append(unplaced, pt)
		}
	}
	if len(unplaced) > 0 {
		tps := make([]sinks.Partition, len(unplaced))
		for i, pt := range unplaced {
			tps[i] = pt.p
		}
		sb := r.readStarts(hard, tps)
		for _, pt := range unplaced {
			pt.policyStart = sb
		}
	}
	for _, pt := range pts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pt.run(hard)
			exited <- pt
		}()
	}
	return len(pts)
}

// readStarts reads where the start policy puts tps, one request per broker
// for all of them, on the side: the session's loop does not wait on Kafka,
// and a partition that this misses finds its bounds alone.
func (r *Replica) readStarts(ctx context.Context, tps []sinks.Partition) *startBounds {
	sb := &startBounds{done: make(chan struct{}), asked: make(map[sinks.Partition]bool, len(tps))}
	for _, tp := range tps {
		sb.asked[tp] = true
	}
	consumer := r.consumer // Run clears it when it ends
	go func() {
		defer close(sb.done)
		starts, err := consumer.StartOffsets(ctx, tps)
		if err != nil {
			r.log.Warn("reading the start offsets of new partitions failed", zap.Error(err))
		}
		sb.starts = starts
	}()
	return sb
}

// covers reports whether p was asked for. sb may be nil.
func (sb *startBounds) covers(p sinks.Partition) bool {
	return sb != nil && sb.asked[p]
}

// start returns where the start policy puts p, if the shared read found it.
func (sb *startBounds) start(ctx context.Context, p sinks.Partition) (int64, bool) {
	select {
	case <-sb.done:
	case <-ctx.Done():
		return 0, false
	}
	at, ok := sb.starts[p]
	return at, ok
}

// startBounds are where the start policy puts newly claimed partitions,
// read for all of them at once; starts is set when done is closed.
type startBounds struct {
	asked  map[sinks.Partition]bool
	done   chan struct{}
	starts map[sinks.Partition]int64
}

// firstN is at most the first n of s, for a log line.
func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}
