package coordinator

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// CompactKey is the key the replicas of every group take turns on to
// compact etcd's history: the etcd layout's one key outside a group (etcd
// keeps one history for all its keys). Its value is the revision the last
// compaction kept from.
const CompactKey = "/offsetkeeper/v1/compact"

// DefaultCompactInterval is how often the replicas compact etcd's history,
// to the revision of one interval before: kube-apiserver's default.
const DefaultCompactInterval = 5 * time.Minute

// Compactor keeps etcd's history bounded, as kube-apiserver does: every
// interval, one transaction on CompactKey, conditioned on the key's version
// it saw last, elects one compactor among all that run (every replica of
// every group on the cluster), which compacts to the revision it saw one
// interval earlier. A watch that started since, and every read of the
// current state, are untouched; a history of the last interval is kept.
// Without it, every commit of every block stays in etcd's history until
// its database reaches its quota (2 GiB by default) and etcd refuses every
// write.
type Compactor struct {
	cli      *clientv3.Client
	interval time.Duration
	log      *zap.Logger

	compactions atomic.Int64 // compactions this compactor made
	revision    atomic.Int64 // the revision its last compaction kept from
}

// NewCompactor returns a compactor of cli's etcd every interval.
func NewCompactor(cli *clientv3.Client, interval time.Duration, log *zap.Logger) *Compactor {
	if log == nil {
		log = zap.NewNop()
	}
	return &Compactor{cli: cli, interval: interval, log: log}
}

// Compactions counts the compactions this compactor made.
func (c *Compactor) Compactions() int64 { return c.compactions.Load() }

// Run compacts every interval until ctx ends. A failed round is logged
// and tried again at the next tick.
func (c *Compactor) Run(ctx context.Context) {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	var version, rev int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		version, rev, err = c.compact(ctx, version, rev)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("compacting etcd's history failed; trying again at the next interval", zap.Duration("interval", c.interval), zap.Error(err))
		}
	}
}

// compact is one round: seen is the version of CompactKey this compactor
// saw last and rev the revision of that moment. If no one moved the key
// since, this compactor moves it and compacts to rev (not on its first
// round, which only records where it stands). It returns the key's version
// and the revision now.
func (c *Compactor) compact(ctx context.Context, seen, rev int64) (version, now int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.interval)
	defer cancel()
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(CompactKey), "=", seen)).
		Then(clientv3.OpPut(CompactKey, strconv.FormatInt(rev, 10))).
		Else(clientv3.OpGet(CompactKey)).
		Commit()
	if err != nil {
		return seen, rev, fmt.Errorf("elect the compactor: %w", err)
	}
	now = resp.Header.Revision
	if !resp.Succeeded {
		// Another compactor took this round: follow its count.
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			return kvs[0].Version, now, nil
		}
		return 0, now, nil
	}
	version = seen + 1
	if rev == 0 {
		return version, now, nil
	}
	if _, err := c.cli.Compact(ctx, rev); err != nil {
		return version, now, fmt.Errorf("compact to revision %d: %w", rev, err)
	}
	c.compactions.Add(1)
	c.revision.Store(rev)
	c.log.Debug("etcd's history compacted", zap.Int64("revision", rev))
	return version, now, nil
}

// EtcdStatus is what the etcd members report of their databases: the
// largest of each over the endpoints that answered.
type EtcdStatus struct {
	DBSize      int64 // the database file's size, bytes
	DBSizeInUse int64 // of which in use (the rest is freed by a defragmentation)
	DBQuota     int64 // the backend quota (--quota-backend-bytes); 0 when the member does not say (etcd before 3.6)
}

// Status asks each endpoint of cli for its database's size and quota.
func Status(ctx context.Context, cli *clientv3.Client) (EtcdStatus, error) {
	var st EtcdStatus
	var first error
	answered := false
	for _, ep := range cli.Endpoints() {
		resp, err := cli.Status(ctx, ep)
		if err != nil {
			if first == nil {
				first = fmt.Errorf("status of %s: %w", ep, err)
			}
			continue
		}
		answered = true
		st.DBSize = max(st.DBSize, resp.DbSize)
		st.DBSizeInUse = max(st.DBSizeInUse, resp.DbSizeInUse)
		st.DBQuota = max(st.DBQuota, resp.DbSizeQuota)
	}
	if !answered {
		return st, first
	}
	return st, nil
}
