package replica

// The session loop: what a replica does while it holds one etcd session.

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// runSession owns the partitions of one session. It returns when ctx ends
// (after a graceful stop) or when the session is lost (after stopping every
// partition at once).
func (r *Replica) runSession(ctx context.Context, s *coordinator.Session, consumer *kafka.Consumer) {
	// hard ends the partitions: at once when the session is lost, after
	// ShutdownTimeout on a graceful stop.
	hard, cancelHard := context.WithCancelCause(context.Background())
	defer cancelHard(nil)

	// Membership, claims and release requests drive re-planning, resets
	// wake their partitions; offsets and intents, written with every
	// block, are not watched.
	wctx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	changes := r.coord.Watch(wctx)

	var partitions []sinks.Partition
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
			cancelHard(errKilled)
			return
		case <-s.Lost():
			r.log.Warn("session lost; stopping every partition")
			cancelHard(errSessionLost)
			return
		case <-metadata.C:
			ps, err := r.partitions(ctx, consumer, partitions)
			r.reach.sawMetadata(time.Now(), err)
			r.advertise(ctx, s, consumer)
			if _, ended := r.reach.keeping(time.Now(), r.cfg.KafkaDownAfter); ended {
				schedule() // let go of the claims, if any replica reads
			}
			if err != nil {
				r.log.Warn("reading topic metadata failed", zap.Error(err))
			} else if !slices.Equal(ps, partitions) {
				r.noteTopics(partitions, ps)
				if partitions == nil {
					replan.Reset(0) // the first plan of a session waits for nothing
				} else {
					schedule()
				}
				partitions = ps
			}
			metadata.Reset(r.metadataEvery(consumer))
		case <-changes.Plan:
			schedule()
		case p := <-changes.Resets:
			r.resetSeen(p)
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

// partitions reads the topics' partitions over the consumer's connections:
// a client of its own each MetadataInterval dialled a broker (a TLS
// handshake, a login) and sent two metadata requests of the whole topics,
// one of them its transport's. known are the partitions of the read
// before, kept for a matching topic answered with an error for now.
func (r *Replica) partitions(ctx context.Context, c *kafka.Consumer, known []sinks.Partition) ([]sinks.Partition, error) {
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	byTopic, err := c.Partitions(mctx, r.cfg.Topics...)
	if err != nil {
		return nil, err
	}
	if r.pattern != nil {
		every, unsettled, err := c.EveryTopic(mctx)
		if err != nil {
			return nil, err
		}
		for t, ps := range every {
			if r.pattern.MatchString(t) {
				byTopic[t] = ps
			}
		}
		// A topic answered with an error for now (a leader election)
		// keeps the partitions known before, rather than being released
		// and claimed again at the next read.
		for _, p := range known {
			if slices.Contains(unsettled, p.Topic) && r.pattern.MatchString(p.Topic) {
				byTopic[p.Topic] = append(byTopic[p.Topic], p.Partition)
			}
		}
	}
	// Not nil, even empty: nil is "not read yet" to the session loop, and
	// a pattern whose every topic was deleted has its claims released.
	out := make([]sinks.Partition, 0, len(byTopic))
	for t, ps := range byTopic {
		for _, p := range ps {
			out = append(out, sinks.Partition{Topic: t, Partition: p})
		}
	}
	slices.SortFunc(out, sinks.Partition.Compare)
	return out, nil
}

// noteTopics says which topics appeared and which went between two reads
// of the metadata, and counts them. A topic gone from Kafka (deleted) has
// no partitions in the plan any more: its claims are handed over to
// nobody, that is released at their next block boundary.
func (r *Replica) noteTopics(before, now []sinks.Partition) {
	was, is := topicsOf(before), topicsOf(now)
	r.stats.topics.Store(int64(len(is)))
	var found, gone []string
	for t := range is {
		if !was[t] {
			found = append(found, t)
		}
	}
	for t := range was {
		if !is[t] {
			gone = append(gone, t)
		}
	}
	slices.Sort(found)
	slices.Sort(gone)
	if before != nil && len(found) > 0 {
		r.stats.topicsFound.Add(int64(len(found)))
		r.log.Info("new topics to read", zap.Int("topics", len(found)), zap.Strings("which", firstN(found, 20)))
	}
	if len(gone) > 0 {
		r.stats.topicsGone.Add(int64(len(gone)))
		r.log.Info("topics gone from Kafka (deleted, or no longer matching): releasing their partitions",
			zap.Int("topics", len(gone)), zap.Strings("which", firstN(gone, 20)))
	}
}

func topicsOf(ps []sinks.Partition) map[string]bool {
	out := make(map[string]bool)
	for _, p := range ps {
		out[p.Topic] = true
	}
	return out
}

// resetSeen tells p's partition, if the replica owns it, that an operator
// reset its offsets.
func (r *Replica) resetSeen(p sinks.Partition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pt, ok := r.owned[p]; ok {
		pt.resetSeen.Store(true)
		pt.f.Wake() // an idle partition waits for records: look now
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
