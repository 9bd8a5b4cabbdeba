package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// What a replica reports of itself, from any goroutine, while it runs and
// after: for metrics, probes and tests.

// ID is the replica ID: Config.ReplicaID, or DefaultID.
func (r *Replica) ID() string { return r.cfg.ReplicaID }

// Config returns the configuration the replica runs with, defaults
// applied.
func (r *Replica) Config() Config { return r.cfg }

// Stats returns a snapshot of what the replica did since New.
func (r *Replica) Stats() Stats {
	s := r.stats.snapshot()
	s.CommitFailures = r.coord.CommitFailures()
	s.EtcdRounds, s.EtcdRoundWrites = r.coord.Rounds(), r.coord.RoundOps()
	r.mu.Lock()
	if r.consumer != nil {
		ks := r.consumer.Stats()
		s.KafkaThrottled, s.KafkaRelogins, s.KafkaLookups = ks.Throttled, ks.Relogins, ks.Lookups
		s.IncrementalFetches, s.FetchRequestBytes = ks.IncrementalFetches, ks.FetchRequestBytes
	}
	r.mu.Unlock()
	if dl, ok := sinks.As[sinks.DeadLetterCounter](r.sink); ok {
		s.DeadLetters = dl.DeadLetters()
	}
	if dc, ok := sinks.As[sinks.DDLCounter](r.sink); ok {
		s.SinkDDL = dc.DDL()
	}
	if ig, ok := sinks.As[sinks.IgnoredFieldCounter](r.sink); ok {
		s.IgnoredFields = ig.IgnoredFields()
	}
	if c := r.codec; c != nil {
		if c.registry != nil {
			rs := c.registry.Stats()
			s.RegistryRequests, s.RegistryErrors = int64(rs.Requests), int64(rs.Errors+rs.NotFound)
		}
		for _, d := range c.decoders {
			ds := d.Stats()
			s.SchemaCacheHits += ds.CacheHits
			s.SchemaCacheMisses += ds.CacheMisses
		}
	}
	return s
}

// Timings returns a snapshot of the replica's distributions: block sizes,
// sink write and commit latencies.
func (r *Replica) Timings() Timings { return r.hist.snapshot() }

// Owned lists the partitions this replica consumes now.
func (r *Replica) Owned() []sinks.Partition {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]sinks.Partition, 0, len(r.owned))
	for p := range r.owned {
		out = append(out, p)
	}
	slices.SortFunc(out, sinks.Partition.Compare)
	return out
}

// Fetching reports the fetch requests sent so far and the bytes of records
// held now against the budget (Kafka.MaxBufferBytes).
func (r *Replica) Fetching() (requests, held, budget int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	requests = r.fetchedBefore
	budget = int64(r.kafka.MaxBufferBytes)
	if r.consumer != nil {
		st := r.consumer.Stats()
		requests += st.FetchRequests
		held = st.BytesHeld
	}
	return requests, held, budget
}

// Alive reports whether the replica holds a live session.
func (r *Replica) Alive() bool {
	r.mu.Lock()
	s := r.session
	r.mu.Unlock()
	return s != nil && s.Alive()
}

// ErrNotReady is wrapped by every error of Ready.
var ErrNotReady = errors.New("replica not ready")

// Ready reports whether the replica can do its work now: its session is
// alive (a keepalive succeeded within TTL/2), it reads Kafka (see
// Config.KafkaDownAfter), its member key is registered in etcd under that
// session's lease (one read, bounded by ctx), and the sink answers when it (or a sink it wraps) is a sinks.Pinger. The error says which failed.
func (r *Replica) Ready(ctx context.Context) error {
	r.mu.Lock()
	s := r.session
	r.mu.Unlock()
	if s == nil || !s.Alive() {
		return fmt.Errorf("%w: no live session in group %s", ErrNotReady, r.cfg.Group)
	}
	if why := r.reach.verdict(); why != "" {
		return fmt.Errorf("%w: cannot read Kafka, so holds no partitions: %s", ErrNotReady, why)
	}
	lease, found, err := r.coord.MemberLease(ctx, r.cfg.ReplicaID)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	if !found || lease != int64(s.Lease()) {
		return fmt.Errorf("%w: member %s not registered under lease %x", ErrNotReady, r.cfg.ReplicaID, int64(s.Lease()))
	}
	if p, ok := sinks.As[sinks.Pinger](r.sink); ok {
		if err := p.Ping(ctx); err != nil {
			return fmt.Errorf("%w: sink unreachable: %w", ErrNotReady, err)
		}
	}
	return nil
}

// PartitionLag is how far a partition this replica owns is behind.
type PartitionLag struct {
	Partition sinks.Partition
	Epoch     int64
	Committed int64 // the committed offset
	LogEnd    int64 // the log end last seen (last stable offset); -1 unknown
	// Lag is LogEnd - Committed in records, 0 when LogEnd is unknown.
	Lag int64
	// LagSeconds is how old the oldest polled but uncommitted record is:
	// the delay a record now sees before its offset is committed. A
	// rollback or a retry does not reset it. Behind with nothing polled
	// (the partition waits for memory, or its fetches fail), it is
	// StalledSeconds, a lower bound of the unread records' age.
	LagSeconds float64
	// StalledSeconds is how long the partition has been behind without a
	// commit: 0 when caught up, about the flush interval at most for a
	// partition that keeps up, and growing for one stuck on a write, a
	// failing sink, or a fetch that does not return.
	StalledSeconds float64
	// WriteSeconds is how long the sink write in flight has been going;
	// 0 when none.
	WriteSeconds float64
	// HighWatermark is the high watermark last seen under read_committed
	// (-1 otherwise, or unknown). Unstable is HighWatermark - LogEnd: the
	// records of transactions still open, which Lag does not count; and
	// LSOStalledSeconds how long the last stable offset has not moved while
	// such records lay past it (0 when none do): a transaction left open
	// holds it until its timeout.
	HighWatermark     int64
	Unstable          int64
	LSOStalledSeconds float64
}

// Lag reports every owned partition, for metrics.
func (r *Replica) Lag() []PartitionLag {
	r.mu.Lock()
	pts := make([]*partition, 0, len(r.owned))
	for _, pt := range r.owned {
		pts = append(pts, pt)
	}
	r.mu.Unlock()
	now := time.Now()
	out := make([]PartitionLag, 0, len(pts))
	for _, pt := range pts {
		l := PartitionLag{Partition: pt.p, Epoch: pt.claim.Epoch(), Committed: pt.next.Load(), LogEnd: pt.logEnd.Load()}
		if l.LogEnd >= 0 && l.LogEnd > l.Committed {
			l.Lag = l.LogEnd - l.Committed
		}
		if l.Lag > 0 {
			l.StalledSeconds = max(0, now.Sub(time.Unix(0, pt.progress.Load())).Seconds())
			l.LagSeconds = l.StalledSeconds
			if ns := pt.pending.Load(); ns > 0 {
				l.LagSeconds = max(0, now.Sub(time.Unix(0, ns)).Seconds())
			}
		}
		if ns := pt.writing.Load(); ns > 0 {
			l.WriteSeconds = max(0, now.Sub(time.Unix(0, ns)).Seconds())
		}
		l.HighWatermark = pt.hw.Load()
		if l.HighWatermark >= 0 && l.LogEnd >= 0 && l.HighWatermark > l.LogEnd {
			l.Unstable = l.HighWatermark - l.LogEnd
			if ns := pt.lsoMoved.Load(); ns > 0 {
				l.LSOStalledSeconds = max(0, now.Sub(time.Unix(0, ns)).Seconds())
			}
		}
		out = append(out, l)
	}
	return out
}
