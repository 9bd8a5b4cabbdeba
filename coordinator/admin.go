package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

var (
	// ErrNotClaimed means no replica holds the partition.
	ErrNotClaimed = errors.New("partition not claimed")
	// ErrNoMember means no live member has the replica ID.
	ErrNoMember = errors.New("no such replica")
)

// RequestRelease asks the owner of p to finish its block and release the
// claim, so that the planned replica (possibly the same one, under a new
// epoch) takes it with nothing replayed. It returns the epoch of the claim
// the request is for.
func (c *Coordinator) RequestRelease(ctx context.Context, p sinks.Partition) (int64, error) {
	ck := c.keys.Claim(p)
	resp, err := c.cli.Get(ctx, ck)
	if err != nil {
		return 0, fmt.Errorf("release %s: %w", p, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("release %s: %w", p, ErrNotClaimed)
	}
	epoch := resp.Kvs[0].CreateRevision
	v, err := jsonString(ReleaseRequest{Epoch: epoch, At: time.Now().UTC()})
	if err != nil {
		return 0, err
	}
	tx, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(ck), "=", epoch)).
		Then(clientv3.OpPut(c.keys.Release(p), v)).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("release %s: %w", p, err)
	}
	if !tx.Succeeded {
		return 0, fmt.Errorf("release %s: the claim changed while asking; look again", p)
	}
	return epoch, nil
}

// ClearRelease deletes the release request of p, once it was served.
func (c *Coordinator) ClearRelease(ctx context.Context, p sinks.Partition) error {
	if _, err := c.cli.Delete(ctx, c.keys.Release(p)); err != nil {
		return fmt.Errorf("clear release request of %s: %w", p, err)
	}
	return nil
}

// SetDraining marks the member id as draining (or not). A draining member is
// planned no partitions: it hands over its claims at block boundaries and
// stays a member. The mark lives in the member key, so a replica that
// restarts joins undrained. The write keeps the member's lease and is
// conditioned on the key not having changed since it was read.
func (c *Coordinator) SetDraining(ctx context.Context, id string, draining bool) error {
	err := c.editMember(ctx, id, 0, func(m map[string]any) {
		if draining {
			m["draining"] = true
		} else {
			delete(m, "draining")
		}
	})
	if err != nil {
		return fmt.Errorf("drain %s: %w", id, err)
	}
	return nil
}

// SetUnreadable says in the session's member key why the replica cannot
// read its topics from Kafka, or, with why empty, that it reads them: the
// plan gives partitions only to members that read (Member.Reads). The
// write keeps the lease and the join order.
func (s *Session) SetUnreadable(ctx context.Context, why string) error {
	err := s.c.editMember(ctx, s.member.ID, int64(s.lease), func(m map[string]any) {
		if why != "" {
			m["unreadable"] = why
		} else {
			delete(m, "unreadable")
		}
	})
	if err != nil {
		return fmt.Errorf("member %s: %w", s.member.ID, err)
	}
	s.member.Unreadable = why
	return nil
}

// errMemberChanged: a member key changed between its read and its write.
var errMemberChanged = errors.New("the member changed while it was written; try again")

// editMember rewrites the value of member id with edit, keeping its lease,
// conditioned on the key not having changed since it was read; lease, when
// not zero, must be the key's.
func (c *Coordinator) editMember(ctx context.Context, id string, lease int64, edit func(map[string]any)) error {
	key := c.keys.Member(id)
	resp, err := c.cli.Get(ctx, key)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 || (lease != 0 && resp.Kvs[0].Lease != lease) {
		return fmt.Errorf("%w in group %s", ErrNoMember, c.group)
	}
	kv := resp.Kvs[0]
	var m map[string]any
	if err := json.Unmarshal(kv.Value, &m); err != nil {
		return fmt.Errorf("member value: %w", err)
	}
	edit(m)
	v, err := jsonString(m)
	if err != nil {
		return err
	}
	tx, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
		Then(clientv3.OpPut(key, v, clientv3.WithIgnoreLease())).
		Commit()
	if err != nil {
		return err
	}
	if !tx.Succeeded {
		return errMemberChanged
	}
	return nil
}

// ErrGroupLive is DeleteGroup's error when a member of the group is live.
var ErrGroupLive = errors.New("the group has live members")

// DeleteGroup deletes every key of the group: offsets, claims, intents,
// resets, everything below its prefix. It is one transaction conditioned
// on no member key existing, so a replica that joins meanwhile makes it
// fail with ErrGroupLive rather than lose its offsets under it. It returns
// how many keys it deleted.
func (c *Coordinator) DeleteGroup(ctx context.Context) (int64, error) {
	tx, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(c.keys.MembersPrefix()).WithPrefix(), "=", 0)).
		Then(clientv3.OpDelete(c.keys.Prefix(), clientv3.WithPrefix())).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("delete group %s: %w", c.group, err)
	}
	if !tx.Succeeded {
		return 0, fmt.Errorf("delete group %s: %w", c.group, ErrGroupLive)
	}
	return tx.Responses[0].GetResponseDeleteRange().Deleted, nil
}
