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
			ps, err := r.partitions(ctx, consumer)
			r.reach.sawMetadata(time.Now(), err)
			r.advertise(ctx, s, consumer)
			if _, ended := r.reach.keeping(time.Now(), r.cfg.KafkaDownAfter); ended {
				schedule() // let go of the claims, if any replica reads
			}
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
// one of them its transport's.
func (r *Replica) partitions(ctx context.Context, c *kafka.Consumer) ([]sinks.Partition, error) {
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	byTopic, err := c.Partitions(mctx, r.cfg.Topics...)
	if err != nil {
		return nil, err
	}
	var out []sinks.Partition
	for t, ps := range byTopic {
		for _, p := range ps {
			out = append(out, sinks.Partition{Topic: t, Partition: p})
		}
	}
	slices.SortFunc(out, sinks.Partition.Compare)
	return out, nil
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
