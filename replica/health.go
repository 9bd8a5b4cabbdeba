package replica

// Whether the replica reads Kafka: what its member key says, which the plan
// follows (only members that read get partitions, while any does), and
// what its readiness and metrics say.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
)

// reach is what the replica knows of its path to Kafka.
type reach struct {
	mu sync.Mutex
	// metaOK is when a metadata read last succeeded; metaFailing since
	// when they fail (zero when the last one succeeded), metaErr the last
	// failure's error.
	metaOK, metaFailing time.Time
	metaErr             error
	// why is the last verdict: empty when the replica reads; whySince
	// since when it has not read, and graceOver whether the replica has
	// re-planned once its grace (keepFor) ended.
	why       string
	whySince  time.Time
	graceOver bool
}

// sawMetadata records the outcome of a metadata read.
func (k *reach) sawMetadata(now time.Time, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err == nil {
		k.metaOK, k.metaFailing, k.metaErr = now, time.Time{}, nil
		return
	}
	if k.metaFailing.IsZero() {
		k.metaFailing = now
	}
	k.metaErr = err
}

// failing reports whether a read of Kafka fails now: the replica then
// looks more often.
func (k *reach) failing(brokers []kafka.BrokerHealth) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.metaFailing.IsZero() {
		return true
	}
	for _, b := range brokers {
		if !b.FailingSince.IsZero() {
			return true
		}
	}
	return false
}

// judge decides whether the replica reads, and keeps the verdict: empty
// when it does, else why not. A replica that never read metadata since it
// started does not read; one that did, not once its metadata reads or a
// broker's fetches have failed for down.
func (k *reach) judge(now time.Time, down time.Duration, bootstrap []string, brokers []kafka.BrokerHealth) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	was := k.why
	defer func() {
		switch {
		case k.why == "":
			k.whySince = time.Time{}
		case was == "":
			k.whySince, k.graceOver = now, false
		}
	}()
	k.why = ""
	switch {
	case k.metaOK.IsZero() && k.metaErr != nil:
		k.why = fmt.Sprintf("no broker of %s answered since the start: %s (%v)", strings.Join(bootstrap, ","), kafka.Explain(k.metaErr), k.metaErr)
	case !k.metaFailing.IsZero() && now.Sub(k.metaFailing) >= down:
		k.why = fmt.Sprintf("no broker of %s answered for %s: %s (%v)", strings.Join(bootstrap, ","),
			now.Sub(k.metaFailing).Round(time.Second), kafka.Explain(k.metaErr), k.metaErr)
	default:
		for _, b := range brokers {
			if b.Failing(now, down) {
				k.why = fmt.Sprintf("fetches from broker %d failed for %s: %s (%v)", b.ID,
					now.Sub(b.FailingSince).Round(time.Second), kafka.Explain(b.Err), b.Err)
				break
			}
		}
	}
	return k.why
}

// keepFor is how long a replica that cannot read keeps its claims after
// it says so: long enough for the others to find out whether they read.
// When Kafka is down for all, every replica finds out within about one
// look of the others; were the first to find out to let go at once, the
// others would take its partitions just before finding out themselves.
func keepFor(down time.Duration) time.Duration { return down / 2 }

// keeping reports whether the replica cannot read and is still within
// keepFor of saying so; graceEnded reports, once, that the time is over.
func (k *reach) keeping(now time.Time, down time.Duration) (keeping, graceEnded bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.why == "" {
		return false, false
	}
	if now.Sub(k.whySince) < keepFor(down) {
		return true, false
	}
	ended := !k.graceOver
	k.graceOver = true
	return false, ended
}

// verdict is the last verdict of judge.
func (k *reach) verdict() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.why
}

// metadataEvery is when to read metadata next: sooner while a read of
// Kafka fails, so that a replica that cannot read says so, and one that
// reads again takes its share, without waiting out MetadataInterval.
func (r *Replica) metadataEvery(c *kafka.Consumer) time.Duration {
	if r.reach.failing(c.Brokers()) {
		return min(r.cfg.MetadataInterval, max(r.cfg.KafkaDownAfter/4, 100*time.Millisecond))
	}
	return r.cfg.MetadataInterval
}

// advertise judges whether the replica reads and, when its member key says
// otherwise, rewrites it: the group's plan then gives the replica its
// share, or gives its partitions to the replicas that read.
func (r *Replica) advertise(ctx context.Context, s *coordinator.Session, c *kafka.Consumer) {
	c.Probe(ctx, r.kafka.WithDefaults().RequestTimeout/4)
	why := r.reach.judge(time.Now(), r.cfg.KafkaDownAfter, r.kafka.Brokers, c.Brokers())
	was := s.Member().Unreadable
	if why == was {
		return
	}
	actx, cancel := context.WithTimeout(ctx, r.cfg.LeaseTTL/2)
	defer cancel()
	if err := s.SetUnreadable(actx, why); err != nil {
		r.log.Warn("saying in the group whether this replica reads Kafka failed; trying again", zap.Error(err))
		return
	}
	switch {
	case why == "":
		r.log.Info("reads Kafka again: taking a share of the partitions", zap.String("was", was))
	case was == "":
		r.log.Warn("cannot read Kafka: giving this replica's partitions to replicas that read, if any does",
			zap.String("why", why), zap.Int("partitions", len(r.Owned())))
	default:
		r.log.Warn("still cannot read Kafka", zap.String("why", why))
	}
}

// readers keeps the members a plan may give partitions: lease-bound, not
// draining, and reading Kafka. When members read none, it returns none
// and nobody is false: nothing is to move while nobody reads.
func readers(all []coordinator.Member) (members []coordinator.Member, nobody bool) {
	live := 0
	for _, m := range all {
		if m.Lease == 0 || m.Draining {
			continue
		}
		live++
		if m.Reads() {
			members = append(members, m)
		}
	}
	return members, live > 0 && len(members) == 0
}

// KafkaState is what a replica knows of its path to Kafka.
type KafkaState struct {
	// Reads is whether the replica can read its topics; Why, when it
	// cannot, says why (its member key says the same).
	Reads bool
	Why   string
	// Brokers are the brokers it fetched from, by ID.
	Brokers []BrokerState
	// FetchErrors counts the errors of its fetches by cause: tls, auth,
	// refused, timeout, closed, leader_moved, unknown_topic, unsupported,
	// other.
	FetchErrors map[string]int64
}

// FetchErrorCauses are the keys of KafkaState.FetchErrors.
var FetchErrorCauses = []string{kafka.CauseTLS, kafka.CauseAuth, kafka.CauseRefused, kafka.CauseTimeout, kafka.CauseClosed,
	kafka.CauseLeader, kafka.CauseUnknown, kafka.CauseUnsupported, kafka.CauseOther}

// BrokerState is what a replica's fetches found of one broker.
type BrokerState struct {
	ID         int32
	Partitions int       // fetched from it now
	LastOK     time.Time // its last fetch answered; zero if none
	// Up is false while its fetches fail, since FailingSince, with Err.
	Up           bool
	FailingSince time.Time
	Err          string
}

// Kafka reports what the replica knows of its path to Kafka: its verdict
// as of its last look (every MetadataInterval), and its fetches' now.
func (r *Replica) Kafka() KafkaState {
	why := r.reach.verdict()
	st := KafkaState{Reads: why == "", Why: why}
	r.mu.Lock()
	c := r.consumer
	r.mu.Unlock()
	if c == nil {
		return st
	}
	st.FetchErrors = c.FetchErrors()
	for _, b := range c.Brokers() {
		bs := BrokerState{ID: b.ID, Partitions: b.Partitions, LastOK: b.LastOK, Up: b.FailingSince.IsZero(), FailingSince: b.FailingSince}
		if b.Err != nil {
			bs.Err = b.Err.Error()
		}
		st.Brokers = append(st.Brokers, bs)
	}
	return st
}
