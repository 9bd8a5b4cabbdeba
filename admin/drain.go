package admin

import (
	"context"
	"errors"
	"time"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
)

// Drain marks replica id of the group as draining (undo clears the mark):
// the plan gives it no partitions, so it finishes its blocks, commits them
// and releases its claims. Draining the group's last member that is not
// draining is refused (an *InputError: nobody would read its partitions)
// unless force. A replica that is not a live member is an *InputError.
// Other errors are etcd's.
func Drain(ctx context.Context, coord *coordinator.Coordinator, id string, undo, force bool) error {
	if !undo && !force {
		if err := othersRead(ctx, coord, id); err != nil {
			return err
		}
	}
	if err := coord.SetDraining(ctx, id, !undo); err != nil {
		if errors.Is(err, coordinator.ErrNoMember) {
			return inputf("replica %q is not a live member of group %q (see 'offsetkeeper replicas list')", id, coord.Group())
		}
		return err
	}
	return nil
}

// othersRead refuses to drain the last member of the group that reads:
// every partition would then be read by nobody.
func othersRead(ctx context.Context, coord *coordinator.Coordinator, id string) error {
	ms, err := coord.Members(ctx)
	if err != nil {
		return err
	}
	found := false
	for _, m := range ms {
		switch {
		case m.ID == id:
			found = true
		case !m.Draining:
			return nil
		}
	}
	if !found {
		return nil // SetDraining says it is not a member
	}
	return inputf("replica %q is the last member of group %q that is not draining: drained, its partitions would be read by nobody; "+
		"start another replica first, or add --force", id, coord.Group())
}

// AwaitDrained waits until replica id owns no partition, telling progress
// each new count of the partitions it owns. It returns the last count,
// and ctx's error when ctx ended first.
func AwaitDrained(ctx context.Context, coord *coordinator.Coordinator, id string, progress func(owned int)) (int, error) {
	owned, last := -1, -1
	err := backoff.Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		s, err := coord.Snapshot(ctx)
		if err != nil {
			return false, nil // etcd may be briefly away; keep waiting
		}
		owned = 0
		for _, c := range s.Claims {
			if c.Replica == id {
				owned++
			}
		}
		if owned != last {
			progress(owned)
			last = owned
		}
		return owned == 0, nil
	})
	return owned, err
}
