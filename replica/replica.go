// Package replica runs one replica of a group: it joins the group in etcd,
// claims the partitions the plan gives it, consumes each with kafka-go's
// batch-level fetch, writes blocks to a sink and commits their offsets
// through a guard.
package replica

import (
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"

	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Replica is one running instance of a group.
type Replica struct {
	cfg   Config       // defaults applied
	kafka kafka.Config // cfg.Kafka, converted
	coord *coordinator.Coordinator
	sink  sinks.Sink
	// writer is how partitions write blocks: in rounds when the sink is a
	// sinks.BatchWriter, else one Write each. Set by Run.
	writer blockWriter
	log    *zap.Logger
	stats  counters
	hist   *timings // block rows, sink write and commit latencies

	// consumer fetches every partition the replica owns: one fetch loop
	// per broker, one memory budget. Set while Run runs; guarded by mu
	// for readers other than Run.
	consumer      *kafka.Consumer
	fetchedBefore int64 // fetch requests of consumers of earlier Runs

	mu      sync.Mutex
	session *coordinator.Session
	owned   map[coordinator.Partition]*partition

	killOnce sync.Once
	killed   chan struct{}
}

// Kill stops the replica as a crash would: partitions stop at once without
// finishing their blocks, nothing is released and the lease is left to
// expire. Run then returns. It is for chaos tests and the dev command.
func (r *Replica) Kill() { r.killOnce.Do(func() { close(r.killed) }) }

func (r *Replica) isKilled() bool {
	select {
	case <-r.killed:
		return true
	default:
		return false
	}
}

// New checks cfg and returns a replica that uses cli for etcd and writes to
// sink. The caller owns cli and sink, and closes them after Run returns.
func New(cfg Config, cli *clientv3.Client, sink sinks.Sink, log *zap.Logger) (*Replica, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	coord, err := coordinator.New(cli, cfg.Group, coordinator.WithLogger(log), coordinator.WithMaxTxnOps(cfg.EtcdMaxTxnOps))
	log = log.With(zap.String("group", cfg.Group), zap.String("replica", cfg.ReplicaID))
	if err != nil {
		return nil, err
	}
	return &Replica{cfg: cfg, kafka: cfg.Kafka.config(), coord: coord, sink: sink, log: log, owned: map[coordinator.Partition]*partition{}, killed: make(chan struct{}),
		hist: newTimings()}, nil
}

// Run joins the group and consumes until ctx ends, then stops gracefully:
// every partition finishes its block in flight (within ShutdownTimeout),
// commits, releases its claim, and the lease is revoked, so other replicas
// take over at once. A session that is lost (etcd unreachable for TTL/2) is
// replaced by a new one as soon as etcd answers again.
func (r *Replica) Run(ctx context.Context) error {
	consumer, err := kafka.NewConsumer(r.kafka, r.log, r.cfg.Topics...)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.consumer = consumer
	r.mu.Unlock()
	r.writer = countedSink{r.sink, &r.stats.sinkCalls}
	if bw, ok := r.sink.(sinks.BatchWriter); ok {
		rounds := newSinkRounds(bw, &r.stats.sinkCalls)
		stop, ended := make(chan struct{}), make(chan struct{})
		go func() { defer close(ended); rounds.run(stop) }()
		// Deferred before the partitions stop: runs after them.
		defer func() { close(stop); <-ended }()
		r.writer = rounds
	}
	defer func() {
		consumer.Close()
		r.mu.Lock()
		r.fetchedBefore += consumer.Stats().FetchRequests
		r.consumer = nil
		r.mu.Unlock()
	}()
	b := backoff.Backoff{Min: 200 * time.Millisecond, Max: max(200*time.Millisecond, r.cfg.LeaseTTL/2)}
	for {
		s, err := r.join(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.log.Warn("join failed; retrying", zap.Error(err))
			if b.Wait(ctx) != nil {
				return nil
			}
			continue
		}
		b.Reset()
		r.runSession(ctx, s)
		if ctx.Err() != nil || r.isKilled() {
			return nil
		}
		r.log.Warn("session lost; rejoining")
	}
}

func (r *Replica) join(ctx context.Context) (*coordinator.Session, error) {
	host, _ := os.Hostname()
	m := coordinator.Member{
		ID:        r.cfg.ReplicaID,
		Host:      host,
		PID:       os.Getpid(),
		Version:   r.cfg.Version,
		StartedAt: time.Now().UTC(),
		HTTPAddr:  r.cfg.HTTPAddr,
	}
	jctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseTTL)
	defer cancel()
	s, err := r.coord.Join(jctx, m, coordinator.WithTTL(r.cfg.LeaseTTL))
	if err != nil {
		return nil, err
	}
	r.stats.sessions.Add(1)
	r.mu.Lock()
	r.session = s
	r.mu.Unlock()
	return s, nil
}

// runSession owns the partitions of one session. It returns when ctx ends
// (after a graceful stop) or when the session is lost (after stopping every
// partition at once).
func (r *Replica) runSession(ctx context.Context, s *coordinator.Session) {
	// hard ends the partitions: at once when the session is lost, after
	// ShutdownTimeout on a graceful stop.
	hard, cancelHard := context.WithCancel(context.Background())
	defer cancelHard()

	// Membership and claims drive re-planning; offsets and intents, written
	// with every block, are not watched.
	wctx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	watch := func(prefix string) clientv3.WatchChan {
		return r.coord.Client().Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	}
	members, claims := watch(r.coord.Keys().MembersPrefix()), watch(r.coord.Keys().ClaimsPrefix())
	releases := watch(r.coord.Keys().ReleasePrefix())
	resets := watch(r.coord.Keys().ResetsPrefix())

	var partitions []coordinator.Partition
	metadata := time.NewTimer(0)
	defer metadata.Stop()
	resync := time.NewTicker(r.cfg.ResyncInterval)
	defer resync.Stop()
	replan := time.NewTimer(time.Hour)
	replan.Stop()
	defer replan.Stop()
	exited := make(chan *partition, 16)
	var wg sync.WaitGroup

	schedule := func() {
		// Jitter by replica, so a dead replica's partitions are not
		// fought over by every survivor at the same instant.
		replan.Reset(r.cfg.RebalanceDelay + time.Duration(rand.Int64N(int64(r.cfg.RebalanceDelay)+1)))
	}

	defer func() {
		r.stopAll(s, cancelHard, &wg, exited)
	}()

	for {
		select {
		case <-ctx.Done():
			return
		case <-r.killed:
			cancelHard()
			return
		case <-s.Lost():
			r.log.Warn("session lost; stopping every partition")
			cancelHard()
			return
		case <-metadata.C:
			ps, err := r.partitions(ctx)
			if err != nil {
				r.log.Warn("reading topic metadata failed", zap.Error(err))
			} else if !slices.Equal(ps, partitions) {
				if partitions == nil {
					replan.Reset(0) // the first plan of a session waits for nothing
				} else {
					schedule()
				}
				partitions = ps
			}
			metadata.Reset(r.cfg.MetadataInterval)
		case wr, ok := <-members:
			if !ok {
				members = watch(r.coord.Keys().MembersPrefix())
			}
			if !ok || len(wr.Events) > 0 {
				schedule()
			}
		case wr, ok := <-claims:
			if !ok {
				claims = watch(r.coord.Keys().ClaimsPrefix())
			}
			if !ok || len(wr.Events) > 0 {
				schedule()
			}
		case wr, ok := <-resets:
			if !ok {
				resets = watch(r.coord.Keys().ResetsPrefix())
				continue
			}
			r.resetsSeen(wr.Events)
		case wr, ok := <-releases:
			if !ok {
				releases = watch(r.coord.Keys().ReleasePrefix())
			}
			if !ok || len(wr.Events) > 0 {
				schedule()
			}
		case <-resync.C:
			schedule()
		case pt := <-exited:
			r.forget(pt)
			schedule()
		case <-replan.C:
			if partitions != nil {
				r.reconcile(ctx, s, hard, partitions, &wg, exited)
			}
		}
	}
}

func (r *Replica) partitions(ctx context.Context) ([]coordinator.Partition, error) {
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	byTopic, err := kafka.Partitions(mctx, r.kafka, r.cfg.Topics...)
	if err != nil {
		return nil, err
	}
	var out []coordinator.Partition
	for t, ps := range byTopic {
		for _, p := range ps {
			out = append(out, coordinator.Partition{Topic: t, Partition: p})
		}
	}
	slices.SortFunc(out, coordinator.Partition.Compare)
	return out, nil
}

// reconcile plans from one snapshot, claims the free partitions planned to
// this replica and asks the ones planned elsewhere to stop at their next
// block boundary.
func (r *Replica) reconcile(ctx context.Context, s *coordinator.Session, hard context.Context, partitions []coordinator.Partition,
	wg *sync.WaitGroup, exited chan<- *partition) {
	if !s.Alive() {
		return
	}
	snap, err := r.coord.Snapshot(ctx)
	if err != nil {
		r.log.Warn("reading the group failed", zap.Error(err))
		return
	}
	var members []coordinator.Member
	for _, m := range snap.Members {
		// Only lease-bound members are live; draining ones get nothing.
		if m.Lease != 0 && !m.Draining {
			members = append(members, m)
		}
	}
	r.releaseStrays(ctx, s, snap)
	claims := make(map[coordinator.Partition]string, len(snap.Claims))
	for p, c := range snap.Claims {
		owner := c.Replica
		if owner == s.ID() && c.Lease != int64(s.Lease()) {
			owner += " (previous session)" // not ours: it expires with its lease
		}
		claims[p] = owner
	}
	plan := coordinator.Plan(members, partitions, claims)
	toClaim, toRelease := coordinator.Diff(plan, claims, s.ID())

	changed := false
	r.mu.Lock()
	for _, p := range toRelease {
		if pt, ok := r.owned[p]; ok && !pt.stopping() {
			close(pt.stop)
			changed = true
		}
	}
	// An operator asked for these claims to be handed over: finish the
	// block, release, and let the plan decide again.
	for p, rr := range snap.Releases {
		if pt, ok := r.owned[p]; ok && pt.claim.Epoch() == rr.Epoch && !pt.stopping() {
			pt.log.Info("releasing on an operator's request")
			close(pt.stop)
			changed = true
		}
	}
	r.mu.Unlock()

	// Claim in an order of this replica's own, so replicas working from
	// slightly different snapshots collide less.
	h := fnv.New32a()
	h.Write([]byte(s.ID()))
	if n := len(toClaim); n > 0 {
		k := int(h.Sum32() % uint32(n))
		toClaim = append(toClaim[k:], toClaim[:k]...)
	}
	r.mu.Lock()
	toClaim = slices.DeleteFunc(toClaim, func(p coordinator.Partition) bool { _, have := r.owned[p]; return have })
	r.mu.Unlock()
	var got []*coordinator.Claim
	var errs []error
	if ctx.Err() == nil && s.Alive() && len(toClaim) > 0 {
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
	if r.start(ctx, hard, claimed, wg, exited) > 0 {
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
// started. Where the start policy decides a partition's first offset, the
// bounds of all of them are read at once: one ListOffsets per broker.
func (r *Replica) start(ctx, hard context.Context, claims []*coordinator.Claim, wg *sync.WaitGroup, exited chan<- *partition) int {
	pts := make([]*partition, 0, len(claims))
	var unplaced []kafka.TopicPartition
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
		if c.Offsets().ModRevision == 0 {
			unplaced = append(unplaced, kafka.TopicPartition{Topic: p.Topic, Partition: p.Partition})
		}
	}
	if len(unplaced) > 0 {
		// One request per broker for all of them, on the side: the
		// session's loop does not wait on Kafka, and a partition that
		// this misses finds its bounds alone.
		sb := &startBounds{done: make(chan struct{})}
		consumer := r.consumer // Run clears it when it ends
		go func() {
			defer close(sb.done)
			starts, err := consumer.StartOffsets(hard, unplaced)
			if err != nil {
				r.log.Warn("reading the start offsets of new partitions failed", zap.Error(err))
			}
			sb.starts = starts
		}()
		for _, pt := range pts {
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

// startBounds are where the start policy puts newly claimed partitions,
// read for all of them at once; starts is set when done is closed.
type startBounds struct {
	done   chan struct{}
	starts map[kafka.TopicPartition]int64
}

// start returns where the start policy puts p, if the shared read found it.
func (sb *startBounds) start(ctx context.Context, p coordinator.Partition) (int64, bool) {
	select {
	case <-sb.done:
	case <-ctx.Done():
		return 0, false
	}
	at, ok := sb.starts[kafka.TopicPartition{Topic: p.Topic, Partition: p.Partition}]
	return at, ok
}

// resetsSeen tells the partitions an operator reset that their offsets
// changed: an idle one would otherwise learn it only at its next commit.
func (r *Replica) resetsSeen(events []*clientv3.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range events {
		p, err := coordinator.PartitionOf(string(ev.Kv.Key), r.coord.Keys().ResetsPrefix())
		if err != nil {
			continue
		}
		if pt, ok := r.owned[p]; ok {
			pt.resetSeen.Store(true)
			pt.f.Wake() // an idle partition waits for records: look now
		}
	}
}

func (r *Replica) forget(pt *partition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.owned[pt.p] == pt {
		delete(r.owned, pt.p)
		r.stats.claims.Add(-1)
	}
}

// stopAll ends a session: partitions finish their blocks (or are cut at
// once when hard is already done), then the lease is revoked.
func (r *Replica) stopAll(s *coordinator.Session, cancelHard context.CancelFunc,
	wg *sync.WaitGroup, exited chan *partition) {
	killed := r.isKilled()
	if !killed {
		r.mu.Lock()
		for _, pt := range r.owned {
			if !pt.stopping() {
				close(pt.stop)
			}
		}
		r.mu.Unlock()
	}
	timer := time.AfterFunc(r.cfg.ShutdownTimeout, cancelHard)
	defer timer.Stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case pt := <-exited:
			r.forget(pt)
			continue
		case <-done:
		}
		break
	}
	for {
		select {
		case pt := <-exited:
			r.forget(pt)
			continue
		default:
		}
		break
	}
	defer func() {
		r.mu.Lock()
		r.session = nil
		r.mu.Unlock()
	}()
	if killed {
		s.Abandon()
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), r.cfg.LeaseTTL/2)
	defer cancel()
	if err := s.Close(cctx); err != nil {
		r.log.Warn("leaving the group failed; the lease expires by itself", zap.Error(err))
	}
}
