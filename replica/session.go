package replica

// The session loop: what a replica does while it holds one etcd session.

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
)

// runSession owns the partitions of one session. It returns when ctx ends
// (after a graceful stop) or when the session is lost (after stopping every
// partition at once).
func (r *Replica) runSession(ctx context.Context, s *coordinator.Session, consumer *kafka.Consumer) {
	// hard ends the partitions: at once when the session is lost, after
	// ShutdownTimeout on a graceful stop.
	hard, cancelHard := context.WithCancelCause(context.Background())
	defer cancelHard(nil)

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

// partitions reads the topics' partitions over the consumer's connections:
// a client of its own each MetadataInterval dialled a broker (a TLS
// handshake, a login) and sent two metadata requests of the whole topics,
// one of them its transport's.
func (r *Replica) partitions(ctx context.Context, c *kafka.Consumer) ([]coordinator.Partition, error) {
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	byTopic, err := c.Partitions(mctx, r.cfg.Topics...)
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
