package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// DefaultMirrorInterval is how often a Mirror copies the committed offsets
// to Kafka. Shorter shows progress sooner in Kafka's tools at the cost of
// one OffsetCommit request per interval.
const DefaultMirrorInterval = 5 * time.Second

// Mirror copies the offsets a replica committed to etcd into Kafka's
// offsets for the group of the same name, so kafka-consumer-groups.sh
// --describe, Burrow and lag exporters see the group's progress.
//
// The copy is informational: it is committed the way a standalone consumer
// commits (generation -1, no member ID), etcd stays the only truth, and a
// failed copy is counted and logged, never fatal, and never moves or even
// writes an etcd key. A partition is copied only once its committed offset
// is above 0, so a partition that is still finding its resume point never
// moves Kafka's offset back to 0.
type Mirror struct {
	group    string
	replica  string
	interval time.Duration
	started  time.Time
	log      *zap.Logger

	lags    func() []PartitionLag
	offsets func(ctx context.Context) (map[sinks.Partition]coordinator.Offsets, error)

	kc    *kafka.Client // nil when it could not be made: see clientErr
	kcErr error

	mu      sync.Mutex
	seen    map[sinks.Partition]bool // partitions copied since the start, for Flush
	failing bool                     // the last pass failed: log the recovery

	commits  atomic.Int64
	failures atomic.Int64
}

// MirrorOption configures a Mirror.
type MirrorOption func(*Mirror)

// WithMirrorInterval sets how often Run copies the offsets (default
// DefaultMirrorInterval).
func WithMirrorInterval(d time.Duration) MirrorOption {
	return func(m *Mirror) {
		if d > 0 {
			m.interval = d
		}
	}
}

// NewMirror returns the mirror of r: it reads r's committed offsets and
// writes them to the Kafka cluster r consumes from, with r's connection
// settings (TLS, SASL) but connections of its own. Call it before r.Run. It
// connects lazily; Close releases the connections.
func NewMirror(r *Replica, opts ...MirrorOption) *Mirror {
	offsets := func(ctx context.Context) (map[sinks.Partition]coordinator.Offsets, error) {
		if r.Stats().Commits == 0 {
			// Nothing committed since New (a replica that never joined:
			// etcd out of reach): nothing to copy, and no reason to wait
			// on etcd at the stop.
			return nil, nil
		}
		s, err := r.coord.Snapshot(ctx)
		if err != nil {
			return nil, err
		}
		return s.Offsets, nil
	}
	return newMirror(r.cfg.Group, r.cfg.ReplicaID, r.kafka, r.cfg.Topics, r.Lag, offsets, r.log, opts...)
}

func newMirror(group, replica string, fc kafkaconf.Config, topics []string, lags func() []PartitionLag,
	offsets func(context.Context) (map[sinks.Partition]coordinator.Offsets, error),
	log *zap.Logger, opts ...MirrorOption) *Mirror {
	// A client of its own: a replica's config is valid, so this fails
	// only with a config made up by a test, and every pass then says why.
	kc, err := kafka.NewClient(fc, topics...)
	if log == nil {
		log = zap.NewNop()
	}
	m := &Mirror{
		group:    group,
		replica:  replica,
		interval: DefaultMirrorInterval,
		started:  time.Now(),
		log:      log,
		lags:     lags,
		offsets:  offsets,
		kc:       kc,
		kcErr:    err,
		seen:     map[sinks.Partition]bool{},
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Commits counts passes that copied every owned partition's offset.
func (m *Mirror) Commits() int64 { return m.commits.Load() }

// Failures counts passes that failed, wholly or for some partitions. A pass
// whose context was cancelled (Run stopping) is not a failure.
func (m *Mirror) Failures() int64 { return m.failures.Load() }

// Run copies the owned partitions' committed offsets every interval until
// ctx ends. Failures are counted and logged; Run itself never fails. Call
// Flush after the replica stopped, to copy the offsets its last blocks
// committed.
func (m *Mirror) Run(ctx context.Context) {
	tick := time.NewTicker(m.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_ = m.Sync(ctx)
		}
	}
}

// Sync copies the committed offset of every partition the replica owns now,
// in one OffsetCommit request. The error is also counted and logged.
func (m *Mirror) Sync(ctx context.Context) error {
	offsets := map[sinks.Partition]int64{}
	for _, l := range m.lags() {
		if l.Committed > 0 {
			offsets[l.Partition] = l.Committed
		}
	}
	return m.commit(ctx, offsets)
}

// Flush copies, from etcd, the committed offsets of the partitions this
// mirror copied before and of those this replica committed since the
// mirror started. Call it once after the replica's Run returned: the blocks
// finished at shutdown are then in etcd but no longer owned. It reads etcd
// and writes only to Kafka.
func (m *Mirror) Flush(ctx context.Context) error {
	start := time.Now()
	m.mu.Lock()
	seen := len(m.seen)
	m.mu.Unlock()
	all, err := m.offsets(ctx)
	if err == nil && all == nil && seen == 0 {
		return nil
	}
	if err != nil {
		err = fmt.Errorf("mirror offsets of group %s to kafka: read etcd: %w", m.group, err)
		m.failed(err)
		return err
	}
	m.mu.Lock()
	offsets := map[sinks.Partition]int64{}
	for p, o := range all {
		if o.Next > 0 && (m.seen[p] || (o.Replica == m.replica && !o.At.Before(m.started))) {
			offsets[p] = o.Next
		}
	}
	m.mu.Unlock()
	err = m.commit(ctx, offsets)
	if err == nil {
		m.log.Debug("offsets mirrored to kafka at shutdown", zap.Int("partitions", len(offsets)), zap.Duration("took", time.Since(start)))
	}
	return err
}

func (m *Mirror) commit(ctx context.Context, offsets map[sinks.Partition]int64) error {
	if len(offsets) == 0 {
		return nil
	}
	topics := map[string][]kafkago.OffsetCommit{}
	for p, next := range offsets {
		topics[p.Topic] = append(topics[p.Topic], kafkago.OffsetCommit{
			Partition: p.Partition,
			Offset:    next,
			Metadata:  "offsetkeeper " + m.replica,
		})
	}
	if m.kc == nil {
		err := fmt.Errorf("mirror offsets of group %s to kafka: %w", m.group, m.kcErr)
		m.failed(err)
		return err
	}
	var err error
	// A Kafka that never had a group's offsets creates __consumer_offsets
	// on the first commit, and answers that nobody coordinates the group
	// until it has: wait for it a few times before calling it a failure.
	for try := 0; ; try++ {
		var resp *kafkago.OffsetCommitResponse
		resp, err = m.kc.Kafka().OffsetCommit(ctx, &kafkago.OffsetCommitRequest{
			Addr:         m.kc.Addr(),
			GroupID:      m.group,
			GenerationID: -1, // a standalone consumer's commit: no group membership
			Topics:       topics,
		})
		if err == nil {
			err = partitionErrors(resp)
		}
		if err == nil || !coordinatorMoving(err) || try == coordinatorTries-1 {
			break
		}
		m.log.Debug("the group's coordinator is not ready; trying again", zap.Error(err))
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(try+1) * 200 * time.Millisecond):
			continue
		}
		break
	}
	if err != nil {
		err = fmt.Errorf("mirror offsets of group %s to kafka: %w", m.group, err)
		if errors.Is(ctx.Err(), context.Canceled) {
			// The caller stopped the pass (Run's end): nothing failed, and
			// offsetkeeper_mirror_failures_total, which alerts read, must
			// not say so. A pass that ran out of time still counts.
			m.log.Debug("mirroring offsets to kafka stopped with its run", zap.Error(err))
			return err
		}
		m.failed(err)
		return err
	}
	m.commits.Add(1)
	m.mu.Lock()
	for p := range offsets {
		m.seen[p] = true
	}
	recovered := m.failing
	m.failing = false
	m.mu.Unlock()
	if recovered {
		m.log.Info("mirroring offsets to kafka works again", zap.Int64("failures", m.failures.Load()))
	}
	return nil
}

// coordinatorTries bounds the commits of one pass that a coordinator
// being found, loaded or moved makes wait: 3 s of waits in all.
const coordinatorTries = 6

// coordinatorMoving reports an error of a group coordinator being created,
// loaded or moved, which passes within seconds.
func coordinatorMoving(err error) bool {
	return errors.Is(err, kafkago.NotCoordinatorForGroup) || errors.Is(err, kafkago.GroupCoordinatorNotAvailable) ||
		errors.Is(err, kafkago.GroupLoadInProgress)
}

// failed counts a failed pass and logs it: at Warn when a run of failures
// starts, then at Debug, so an unreachable Kafka logs once, not every pass.
func (m *Mirror) failed(err error) {
	m.failures.Add(1)
	m.mu.Lock()
	first := !m.failing
	m.failing = true
	m.mu.Unlock()
	if first {
		m.log.Warn("mirroring offsets to kafka failed; etcd's offsets are unaffected", zap.Error(err))
	} else {
		m.log.Debug("mirroring offsets to kafka failed", zap.Error(err))
	}
}

func partitionErrors(resp *kafkago.OffsetCommitResponse) error {
	var errs []error
	topics := make([]string, 0, len(resp.Topics))
	for t := range resp.Topics {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	for _, t := range topics {
		for _, p := range resp.Topics[t] {
			if p.Error != nil {
				errs = append(errs, fmt.Errorf("%s/%d: %w", t, p.Partition, p.Error))
			}
		}
	}
	return errors.Join(errs...)
}

// Close releases the mirror's connections. Run and Flush must have
// returned.
func (m *Mirror) Close() error {
	if m.kc == nil {
		return nil
	}
	return m.kc.Close()
}
