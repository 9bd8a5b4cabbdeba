package replica

// etcd kept small: its history compacted, its database's size watched.

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

// etcdNearQuota is the share of etcd's quota past which a replica warns:
// at the quota etcd refuses every write, commits included.
const etcdNearQuota = 0.8

// etcdState is what a replica last read of etcd's database.
type etcdState struct {
	size, inUse, quota atomic.Int64
	compactor          atomic.Pointer[coordinator.Compactor]
}

// tendEtcd runs the compaction of etcd's history, unless NoCompaction, and
// reads the database's size every EtcdStatusInterval, warning when it
// nears the quota, until ctx ends or the replica is killed.
func (r *Replica) tendEtcd(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.killed:
			cancel()
		case <-ctx.Done():
		}
	}()
	done := make(chan struct{})
	if r.cfg.NoCompaction {
		close(done)
	} else {
		c := coordinator.NewCompactor(r.coord.Client(), r.cfg.CompactInterval, r.log)
		r.etcd.compactor.Store(c)
		go func() { defer close(done); c.Run(ctx) }()
	}
	defer func() { <-done }()
	t := time.NewTimer(0)
	defer t.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(r.cfg.EtcdStatusInterval)
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := coordinator.Status(sctx, r.coord.Client())
		scancel()
		if err != nil {
			r.log.Debug("reading etcd's status failed", zap.Error(err))
			continue
		}
		r.etcd.size.Store(st.DBSize)
		r.etcd.inUse.Store(st.DBSizeInUse)
		r.etcd.quota.Store(st.DBQuota)
		near := st.DBQuota > 0 && float64(st.DBSize) > etcdNearQuota*float64(st.DBQuota)
		if near && !warned {
			r.log.Warn("etcd's database nears its quota: at the quota etcd refuses every write, commits included; "+
				"compact its history (offsetkeeper does every --etcd-compact-interval, unless 0), defragment it "+
				"(etcdctl defrag) and raise --quota-backend-bytes if need be",
				zap.Int64("db_size", st.DBSize), zap.Int64("db_size_in_use", st.DBSizeInUse), zap.Int64("quota", st.DBQuota))
		}
		warned = near
	}
}

// Etcd reports what the replica last read of etcd's database (zero before
// the first read; quota 0 from etcd before 3.6) and the compactions it
// made of etcd's history.
func (r *Replica) Etcd() (size, inUse, quota, compactions int64) {
	if c := r.etcd.compactor.Load(); c != nil {
		compactions = c.Compactions()
	}
	return r.etcd.size.Load(), r.etcd.inUse.Load(), r.etcd.quota.Load(), compactions
}
