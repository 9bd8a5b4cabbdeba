package admin

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Handover is a claim released: from its owner and epoch, to the replica
// that took it (when Done).
type Handover struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	From      string `json:"from"`
	FromEpoch int64  `json:"from_epoch"`
	To        string `json:"to,omitempty"`
	ToEpoch   int64  `json:"to_epoch,omitempty"`
	Done      bool   `json:"done"`
}

// Release asks p's owner to hand its claim over at its next block
// boundary. A partition without a claim is an *InputError that says
// whether the group knows it (snap is the group's state). Other errors
// are etcd's.
func Release(ctx context.Context, coord *coordinator.Coordinator, snap *coordinator.Snapshot, p sinks.Partition) (Handover, error) {
	before, ok := snap.Claims[p]
	if !ok {
		return Handover{}, notClaimed(snap, p, coord.Group())
	}
	epoch, err := coord.RequestRelease(ctx, p)
	if errors.Is(err, coordinator.ErrNotClaimed) {
		return Handover{}, &InputError{err}
	}
	if err != nil {
		return Handover{}, err
	}
	return Handover{Topic: p.Topic, Partition: p.Partition, From: before.Replica, FromEpoch: epoch}, nil
}

// Await waits until another claim of the partition replaces the one
// released, then clears the release request (also when ctx ends first,
// with ctx's error).
func (h *Handover) Await(ctx context.Context, coord *coordinator.Coordinator, etcdTimeout time.Duration) error {
	p := sinks.Partition{Topic: h.Topic, Partition: h.Partition}
	err := backoff.Poll(ctx, 50*time.Millisecond, func() (bool, error) {
		s, err := coord.Snapshot(ctx)
		if err != nil {
			return false, nil // etcd may be briefly away; keep waiting
		}
		if c, ok := s.Claims[p]; ok && c.Epoch != h.FromEpoch {
			h.To, h.ToEpoch, h.Done = c.Replica, c.Epoch, true
			return true, nil
		}
		return false, nil
	})
	cctx, cancel := context.WithTimeout(context.Background(), etcdTimeout)
	_ = coord.ClearRelease(cctx, p)
	cancel()
	return err
}

// notClaimed is the refusal to release p, which has no claim: it says
// whether the group knows the partition, and which of the topic's it knows.
func notClaimed(snap *coordinator.Snapshot, p sinks.Partition, group string) error {
	var ids []int
	for _, q := range GroupPartitions(snap) {
		if q.Topic == p.Topic {
			ids = append(ids, q.Partition)
		}
	}
	switch {
	case len(ids) == 0:
		return inputf("partition %s: group %q has no partition of topic %q in etcd (its topics: %s); nothing to release",
			p, group, p.Topic, strings.Join(GroupTopics(snap), ", "))
	case !slices.Contains(ids, p.Partition) && p.Partition > ids[len(ids)-1]:
		return inputf("partition %s does not exist in group %q: etcd knows %d partitions of %s (%d to %d); nothing to release",
			p, group, len(ids), p.Topic, ids[0], ids[len(ids)-1])
	}
	return inputf("partition %s of group %q is not claimed by any replica: nothing to release", p, group)
}
