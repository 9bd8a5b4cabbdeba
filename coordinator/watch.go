package coordinator

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Changes are what a replica watches of its group, kept open by
// Coordinator.Watch: a watch that ends (compacted past its revision, a
// lost leader, a reconnect) is opened again.
type Changes struct {
	// Plan receives when the group's members, claims or release requests
	// changed, or when a watch of them was opened again (something may have
	// changed unseen): the partitions may have to be planned again. Signals
	// coalesce: one pending stands for any number.
	Plan <-chan struct{}
	// Resets receives each partition an operator reset, as its reset key
	// changes.
	Resets <-chan sinks.Partition
}

// Watch watches the group's members, claims, release requests and resets
// until ctx ends, keys only: the replica re-reads what it needs.
func (c *Coordinator) Watch(ctx context.Context) Changes {
	plan := make(chan struct{}, 1)
	resets := make(chan sinks.Partition, 64)
	signal := func() {
		select {
		case plan <- struct{}{}:
		default:
		}
	}
	for _, prefix := range []string{c.keys.MembersPrefix(), c.keys.ClaimsPrefix(), c.keys.ReleasePrefix()} {
		go c.watchPrefix(ctx, prefix, func(*clientv3.Event) { signal() }, signal)
	}
	go c.watchPrefix(ctx, c.keys.ResetsPrefix(), func(ev *clientv3.Event) {
		p, err := partitionOf(string(ev.Kv.Key), c.keys.ResetsPrefix())
		if err != nil {
			return
		}
		select {
		case resets <- p:
		case <-ctx.Done():
		}
	}, func() {})
	return Changes{Plan: plan, Resets: resets}
}

// watchPrefix calls event for each event under prefix until ctx ends; a
// watch that ends is opened again, and reopened is called.
func (c *Coordinator) watchPrefix(ctx context.Context, prefix string, event func(*clientv3.Event), reopened func()) {
	for ctx.Err() == nil {
		wc := c.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		for wr := range wc {
			for _, ev := range wr.Events {
				event(ev)
			}
		}
		if ctx.Err() != nil {
			return
		}
		reopened()
		// A watch that ends at once again (no leader) is not opened in a
		// tight loop.
		select {
		case <-time.After(rewatchPause):
		case <-ctx.Done():
		}
	}
}

// rewatchPause is the least time between two openings of one watch.
const rewatchPause = 100 * time.Millisecond

// MemberLease is the lease the member key of replica id is bound to;
// found is false when there is no such key.
func (c *Coordinator) MemberLease(ctx context.Context, id string) (lease int64, found bool, err error) {
	resp, err := c.cli.Get(ctx, c.keys.Member(id))
	if err != nil {
		return 0, false, fmt.Errorf("read member %s: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, false, nil
	}
	return resp.Kvs[0].Lease, true, nil
}
