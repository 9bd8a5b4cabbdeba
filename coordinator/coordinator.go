// Package coordinator keeps a group's members, claims, offsets and intents in
// etcd, in the layout and with the fenced transactions of DESIGN.md.
//
// A replica joins with Coordinator.Join, which returns a Session bound to one
// lease; Session.Claim takes a partition; Claim.Commit stores an offset only
// while the claim is still the replica's and of the same epoch.
//
// A session sends the writes of all its claims in write rounds (group
// commit): one etcd Txn holding one nested Txn per write, each with the
// contract's own compares, so that each partition is fenced, and fails,
// alone. While a round is in flight the next gathers, and goes beside it
// only once full (up to 3 at once, never two with one partition), so an
// idle session adds no latency and a busy one sends few transactions:
// Session.ClaimAll and ReleaseAll queue hundreds of writes at once, and
// concurrent Commits share rounds. Rounds are sized to etcd's --max-txn-ops
// (WithMaxTxnOps) and kept well below its request size limit
// (WithMaxTxnBytes).
package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Coordinator is a group's view of etcd. It is safe for concurrent use.
type Coordinator struct {
	cli   *clientv3.Client
	group string
	keys  Keys
	log   *zap.Logger

	maxTxnOps    int
	maxTxnBytes  int
	observeRound func(ops int)

	commitFailures atomic.Int64
	rounds         atomic.Int64
	roundOps       atomic.Int64
}

// CommitFailures counts commits that failed after their retries: blocks in
// the sink whose offsets are not committed. It reads zero in a healthy group.
func (c *Coordinator) CommitFailures() int64 { return c.commitFailures.Load() }

// Rounds counts the write rounds its sessions sent: etcd Txns, each holding
// the writes (claims, intents, commits, releases) of one session's claims.
func (c *Coordinator) Rounds() int64 { return c.rounds.Load() }

// RoundOps counts the writes sent in rounds; RoundOps/Rounds is the mean
// round size.
func (c *Coordinator) RoundOps() int64 { return c.roundOps.Load() }

// Option configures a Coordinator.
type Option func(*Coordinator)

// WithLogger sets the logger; the default logs nothing.
func WithLogger(l *zap.Logger) Option { return func(c *Coordinator) { c.log = l } }

// WithMaxTxnOps sets etcd's --max-txn-ops (default DefaultMaxTxnOps, at
// least 4): a write round of n writes is sized so that n plus the widest
// write's 2 or 3 stays within it. Set it to the server's value: below it,
// rounds are smaller than they could be; above it, etcd refuses them.
func WithMaxTxnOps(n int) Option { return func(c *Coordinator) { c.maxTxnOps = n } }

// WithMaxTxnBytes bounds the estimated encoded size of a write round
// (default DefaultMaxTxnBytes, at least 16 KiB). Keep it well below etcd's
// --max-request-bytes (1.5 MiB by default): a larger round is refused, and a
// large request holds up etcd's raft log for everyone.
func WithMaxTxnBytes(n int) Option { return func(c *Coordinator) { c.maxTxnBytes = n } }

// WithRoundObserver has f called with the number of writes of each round
// sent, for a histogram. f runs as each round comes back, on the round's own
// goroutine, and up to maxRoundsInFlight at once: it must be safe for
// concurrent use, quick, and must not block.
func WithRoundObserver(f func(ops int)) Option { return func(c *Coordinator) { c.observeRound = f } }

func (c *Coordinator) validate() error {
	if c.maxTxnOps < minTxnOps {
		return fmt.Errorf("max txn ops %d: want at least %d (one write of %d plus the round)", c.maxTxnOps, minTxnOps, maxOpWidth)
	}
	if c.maxTxnBytes < minTxnBytes {
		return fmt.Errorf("max txn bytes %d: want at least %d", c.maxTxnBytes, minTxnBytes)
	}
	return nil
}

// ValidGroup reports whether name can be a group name: 1 to 200 of
// A-Z a-z 0-9 . _ -, so that it is one etcd path segment.
func ValidGroup(name string) error {
	if !legal(name, 200) || name == "." || name == ".." {
		return fmt.Errorf("group %q: want 1 to 200 characters of A-Z a-z 0-9 . _ -", name)
	}
	return nil
}

// ValidTopic checks a topic name as Kafka does: 1 to 249 characters of
// A-Z a-z 0-9 . _ -, and not . or .., so that it is one etcd path segment
// too.
func ValidTopic(t string) error {
	if !legal(t, 249) || t == "." || t == ".." {
		return fmt.Errorf("topic %q: want 1 to 249 characters of A-Z a-z 0-9 . _ -", t)
	}
	return nil
}

// New returns the coordinator of group over cli. The caller owns cli.
func New(cli *clientv3.Client, group string, opts ...Option) (*Coordinator, error) {
	if err := ValidGroup(group); err != nil {
		return nil, err
	}
	c := &Coordinator{
		cli:         cli,
		group:       group,
		keys:        KeysFor(group),
		log:         zap.NewNop(),
		maxTxnOps:   DefaultMaxTxnOps,
		maxTxnBytes: DefaultMaxTxnBytes,
	}
	for _, o := range opts {
		o(c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	c.log = c.log.With(zap.String("group", group))
	return c, nil
}

// Group is the group's name.
func (c *Coordinator) Group() string { return c.group }

// Keys is the group's etcd layout.
func (c *Coordinator) Keys() Keys { return c.keys }

// Client is the etcd client the coordinator uses.
func (c *Coordinator) Client() *clientv3.Client { return c.cli }

// ClaimInfo is one claim as seen by a reader.
type ClaimInfo struct {
	Replica string `json:"replica"`
	Epoch   int64  `json:"epoch"`
	Lease   int64  `json:"lease"`
}

// Snapshot is the whole state of a group at one etcd revision.
type Snapshot struct {
	Revision int64
	Members  []Member // by join order
	Claims   map[sinks.Partition]ClaimInfo
	Offsets  map[sinks.Partition]Offsets
	Intents  map[sinks.Partition]Intent
	Releases map[sinks.Partition]ReleaseRequest
	// Unreadable lists the group's keys that could not be parsed, each with
	// why, so that tools can show what the views above leave out.
	Unreadable []string
}

// Snapshot reads the group's members, claims, offsets and intents with one
// range request, so every replica that plans from it sees one revision.
func (c *Coordinator) Snapshot(ctx context.Context) (*Snapshot, error) {
	resp, err := c.cli.Get(ctx, c.keys.Prefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read group %s: %w", c.group, err)
	}
	s := &Snapshot{
		Revision: resp.Header.Revision,
		Claims:   map[sinks.Partition]ClaimInfo{},
		Offsets:  map[sinks.Partition]Offsets{},
		Intents:  map[sinks.Partition]Intent{},
		Releases: map[sinks.Partition]ReleaseRequest{},
	}
	skip := func(key, what string, err error) {
		c.log.Warn("skipping unreadable "+what, zap.String("key", key), zap.Error(err))
		s.Unreadable = append(s.Unreadable, fmt.Sprintf("%s: %v", key, err))
	}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		switch {
		case strings.HasPrefix(key, c.keys.MembersPrefix()):
			var m Member
			if err := json.Unmarshal(kv.Value, &m); err != nil {
				skip(key, "member", err)
				continue
			}
			m.Revision, m.Lease = kv.CreateRevision, kv.Lease
			s.Members = append(s.Members, m)
		case strings.HasPrefix(key, c.keys.ClaimsPrefix()):
			p, err := partitionOf(key, c.keys.ClaimsPrefix())
			if err != nil {
				skip(key, "claim", err)
				continue
			}
			s.Claims[p] = ClaimInfo{Replica: string(kv.Value), Epoch: kv.CreateRevision, Lease: kv.Lease}
		case strings.HasPrefix(key, c.keys.OffsetsPrefix()):
			p, o, err := partitionValue(key, c.keys.OffsetsPrefix(), kv.Value, func(v []byte) (Offsets, error) {
				return decodeOffsets(v, kv.ModRevision)
			})
			if err != nil {
				skip(key, "offsets", err)
				continue
			}
			s.Offsets[p] = o
		case strings.HasPrefix(key, c.keys.IntentsPrefix()):
			p, in, err := partitionValue(key, c.keys.IntentsPrefix(), kv.Value, decodeJSON[Intent])
			if err != nil {
				skip(key, "intent", err)
				continue
			}
			s.Intents[p] = in
		case strings.HasPrefix(key, c.keys.ReleasePrefix()):
			// A release request nobody can read is dropped silently: it only
			// asks a replica to let go sooner.
			if p, rr, err := partitionValue(key, c.keys.ReleasePrefix(), kv.Value, decodeJSON[ReleaseRequest]); err == nil {
				s.Releases[p] = rr
			}
		}
	}
	sort.Slice(s.Members, func(i, j int) bool { return s.Members[i].Revision < s.Members[j].Revision })
	return s, nil
}

// Members lists the live members of the group by join order.
func (c *Coordinator) Members(ctx context.Context) ([]Member, error) {
	s, err := c.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return s.Members, nil
}

// Groups lists the groups that have any key in etcd.
func Groups(ctx context.Context, cli *clientv3.Client) ([]string, error) {
	resp, err := cli.Get(ctx, rootPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), rootPrefix)
		g, _, ok := strings.Cut(rest, "/")
		if ok && !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	sort.Strings(out)
	return out, nil
}

// partitionValue parses the partition of key, a key below prefix, and
// decodes its value v with decode.
func partitionValue[T any](key, prefix string, v []byte, decode func([]byte) (T, error)) (sinks.Partition, T, error) {
	p, err := partitionOf(key, prefix)
	if err != nil {
		var zero T
		return p, zero, err
	}
	t, err := decode(v)
	return p, t, err
}

// decodeJSON decodes a JSON value of a group key.
func decodeJSON[T any](v []byte) (T, error) {
	var t T
	err := json.Unmarshal(v, &t)
	return t, err
}

func decodeOffsets(v []byte, modRev int64) (Offsets, error) {
	var o Offsets
	if err := json.Unmarshal(v, &o); err != nil {
		return Offsets{}, err
	}
	o.ModRevision = modRev
	return o, nil
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", v, err)
	}
	return string(b), nil
}
