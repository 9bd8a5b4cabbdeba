package admin

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// GroupSummary is one group of an etcd cluster; its JSON fields are
// stable.
type GroupSummary struct {
	Group      string `json:"group"`
	Replicas   int    `json:"replicas"`
	Partitions int    `json:"partitions"`
}

// Groups summarizes the groups of the cluster named in groups (as
// coordinator.Groups lists them), each read at its own revision.
func Groups(ctx context.Context, cli *clientv3.Client, groups []string) ([]GroupSummary, error) {
	out := []GroupSummary{}
	for _, g := range groups {
		coord, err := coordinator.New(cli, g)
		if err != nil {
			continue // a key that is not a group's: not ours to show
		}
		snap, err := coord.Snapshot(ctx)
		if err != nil {
			return nil, err
		}
		parts := map[sinks.Partition]bool{}
		for p := range snap.Offsets {
			parts[p] = true
		}
		for p := range snap.Claims {
			parts[p] = true
		}
		out = append(out, GroupSummary{Group: g, Replicas: len(snap.Members), Partitions: len(parts)})
	}
	return out, nil
}

// ReplicaState is one live replica of a group; its JSON fields are stable.
// LeaseTTLLeft is in whole seconds, nil when the lease is already gone.
type ReplicaState struct {
	ID          string    `json:"id"`
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	Version     string    `json:"version"`
	StartedAt   time.Time `json:"started_at"`
	HTTPAddress string    `json:"http_address,omitempty"`
	Draining    bool      `json:"draining"`
	// Reads is whether the replica reads its topics from Kafka; when it
	// does not, Unreadable says why, and it holds no partitions while
	// another reads.
	Reads        bool     `json:"reads_kafka"`
	Unreadable   string   `json:"kafka_unreadable,omitempty"`
	ClaimCount   int      `json:"claim_count"`
	Claims       []string `json:"claims"`
	Lease        string   `json:"lease"`
	LeaseTTLLeft *int64   `json:"lease_ttl_left"`
}

// Replicas lists the group's live replicas (snap) with the partitions
// each claims and what is left of its lease.
func Replicas(ctx context.Context, cli *clientv3.Client, snap *coordinator.Snapshot) ([]ReplicaState, error) {
	claims := map[string][]sinks.Partition{}
	for p, c := range snap.Claims {
		claims[c.Replica] = append(claims[c.Replica], p)
	}
	out := []ReplicaState{}
	for _, m := range snap.Members {
		ps := claims[m.ID]
		sortPartitions(ps)
		names := make([]string, len(ps))
		for i, p := range ps {
			names[i] = p.String()
		}
		r := ReplicaState{
			ID: m.ID, Host: m.Host, PID: m.PID, Version: m.Version, StartedAt: m.StartedAt, HTTPAddress: m.HTTPAddr, Draining: m.Draining,
			Reads: m.Reads(), Unreadable: m.Unreadable,
			ClaimCount: len(ps), Claims: names, Lease: strconv.FormatInt(m.Lease, 16),
		}
		ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(m.Lease))
		if err != nil {
			return nil, err
		}
		if ttl.TTL >= 0 {
			r.LeaseTTLLeft = ptr(ttl.TTL)
		}
		out = append(out, r)
	}
	return out, nil
}

// GroupDeletion is what DeleteGroup found and did; its JSON fields are
// stable.
type GroupDeletion struct {
	Group    string `json:"group"`
	Replicas int    `json:"replicas"`
	Offsets  int    `json:"offsets"`
	Keys     int64  `json:"keys"`
	Deleted  bool   `json:"deleted"`
	DryRun   bool   `json:"dry_run"`
}

// DeleteGroup deletes every key of the group (snap its state), unless
// dryRun: then it only counts them. A group with live replicas, or one that
// a replica joins meanwhile, is an *InputError and nothing is deleted.
// Other errors are etcd's.
func DeleteGroup(ctx context.Context, cli *clientv3.Client, coord *coordinator.Coordinator, snap *coordinator.Snapshot, dryRun bool) (GroupDeletion, error) {
	group := coord.Group()
	if live := snap.Members; len(live) > 0 {
		ids := make([]string, len(live))
		for i, m := range live {
			ids[i] = m.ID
		}
		return GroupDeletion{}, inputf("group %q has %d live replicas (%s): stop them first; their offsets stay while they run",
			group, len(live), strings.Join(ids, ", "))
	}
	keys, err := cli.Get(ctx, coord.Keys().Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return GroupDeletion{}, err
	}
	d := GroupDeletion{Group: group, Offsets: len(snap.Offsets), Keys: keys.Count, DryRun: dryRun}
	if dryRun {
		return d, nil
	}
	n, err := coord.DeleteGroup(ctx)
	if errors.Is(err, coordinator.ErrGroupLive) {
		return GroupDeletion{}, inputf("group %q: a replica joined while deleting; nothing deleted: stop it first", group)
	}
	if err != nil {
		return GroupDeletion{}, err
	}
	d.Keys, d.Deleted = n, true
	return d, nil
}
