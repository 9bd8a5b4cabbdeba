package replica

// What a replica refuses to join as: an ID a live member holds, topics other
// than the group's.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

// DuplicateIDError is Run's error when a live member of the group holds the
// replica's ID for longer than a lease TTL: not this replica's own earlier
// session, whose lease would have expired, but another process.
type DuplicateIDError struct {
	Group, ID string
	Theirs    coordinator.Member
	For       time.Duration
}

func (e *DuplicateIDError) Error() string {
	m := e.Theirs
	return fmt.Sprintf("replica id %q is held in group %q by a live replica (host %s, pid %d, started %s, lease %x) for %s, "+
		"longer than a lease TTL: give each replica its own --replica-id (the pod's name, or leave it out for host-pid), "+
		"or stop the other one", e.ID, e.Group, m.Host, m.PID, m.StartedAt.Format(time.RFC3339), m.Lease, e.For.Round(time.Second))
}

// duplicate is called when joining found the replica's ID held. The holder
// may be this replica's own session that was lost (its lease not yet
// expired in etcd), or a replica that crashed and restarts: both end
// within a lease TTL. Past one TTL (and etcd's expiry check), since *since,
// the holder is another live process: duplicate returns the error that
// names it.
func (r *Replica) duplicate(ctx context.Context, since *time.Time) error {
	now := time.Now()
	if since.IsZero() {
		*since = now
		r.log.Warn("replica id held by a live member; waiting up to a lease TTL for its lease to expire",
			zap.Duration("lease_ttl", r.cfg.LeaseTTL))
		return nil
	}
	if now.Sub(*since) < r.cfg.LeaseTTL+time.Second {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseTTL/2)
	defer cancel()
	members, err := r.coord.Members(cctx)
	if err != nil {
		return nil
	}
	host, _ := os.Hostname()
	for _, m := range members {
		if m.ID != r.cfg.ReplicaID || m.Lease == 0 {
			continue
		}
		if m.Host == host && m.PID == os.Getpid() {
			return nil // this process's own earlier session: it expires
		}
		return &DuplicateIDError{Group: r.cfg.Group, ID: r.cfg.ReplicaID, Theirs: m, For: now.Sub(*since)}
	}
	return nil
}

// TopicsMismatchError is Run's error when live members of the group read
// other topics than Config.Topics and Config.TopicsRegex.
type TopicsMismatchError struct {
	Group, Member        string
	Theirs, Ours         []string
	TheirRegex, OurRegex string
}

func (e *TopicsMismatchError) Error() string {
	return fmt.Sprintf("group %q reads topics %s (member %s), this replica %s: replicas of a group must read the same topics, "+
		"or the plan gives each partitions it does not read, and a topic only one replica names is left unowned when it stops; "+
		"fix --topics and --topics-regex, or to change the group's topics on purpose start the replicas with --allow-topic-change",
		e.Group, topicsText(e.Theirs, e.TheirRegex), e.Member, topicsText(e.Ours, e.OurRegex))
}

// topicsText says which topics a list and a pattern name.
func topicsText(topics []string, pattern string) string {
	var parts []string
	if len(topics) > 0 {
		parts = append(parts, strings.Join(topics, ","))
	}
	if pattern != "" {
		parts = append(parts, fmt.Sprintf("those matching %q", pattern))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " and ")
}

// sameTopics reports whether a and b name the same topics, in any order.
func sameTopics(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
