package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

func partitions(topic string, n int) []sinks.Partition {
	ps := make([]sinks.Partition, n)
	for i := range ps {
		ps[i] = sinks.Partition{Topic: topic, Partition: i}
	}
	return ps
}

// claimAll claims every partition of ps or fails the test.
func claimAll(t *testing.T, ctx context.Context, s *coordinator.Session, ps []sinks.Partition) []*coordinator.Claim {
	t.Helper()
	claims, errs := s.ClaimAll(ctx, ps)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s claims %s: %v", s.ID(), ps[i], err)
		}
		if claims[i] == nil || claims[i].Partition() != ps[i] {
			t.Fatalf("%s claims %s: got claim %v", s.ID(), ps[i], claims[i])
		}
	}
	return claims
}

// all runs f for every claim at once and returns each one's error.
func all(claims []*coordinator.Claim, f func(i int, c *coordinator.Claim) error) []error {
	errs := make([]error, len(claims))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = f(i, c)
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// intentAndCommitEach queues an intent and a commit to next of every claim
// at once, each commit behind its partition's intent, and fails the test if
// any write fails.
func intentAndCommitEach(t *testing.T, ctx context.Context, claims []*coordinator.Claim, next int64) {
	t.Helper()
	doubled := append(append([]*coordinator.Claim{}, claims...), claims...)
	errs := all(doubled, func(i int, cl *coordinator.Claim) error {
		if i < len(claims) {
			return cl.PutIntent(ctx, 0, next)
		}
		return cl.Commit(ctx, next, next)
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d of %s: %v", i, doubled[i].Partition(), err)
		}
	}
}

// storedNextIs fails the test unless etcd stores next for every partition
// of ps.
func storedNextIs(t *testing.T, ctx context.Context, c *coordinator.Coordinator, ps []sinks.Partition, next int64) {
	t.Helper()
	snap, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if got := snap.Offsets[p].Next; got != next {
			t.Fatalf("%s: stored next %d, want %d", p, got, next)
		}
	}
}

// revision is etcd's current revision.
func revision(t *testing.T, ctx context.Context, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(ctx, "revision-probe")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// TestRoundFailsOnePartitionAlone commits n partitions at once, in shared
// rounds, after one of them was disturbed: that one alone fails, with the
// error its disturbance calls for, and the others commit.
func TestRoundFailsOnePartitionAlone(t *testing.T) {
	const n = 64
	const victim = 17
	etcd := harness.StartEtcd(t, 1)
	admin := etcd.Client(t)
	cases := []struct {
		name    string
		disturb func(t *testing.T, ctx context.Context, group string, b *coordinator.Session, op *coordinator.Coordinator, p sinks.Partition)
		wantErr error
		lost    bool
		stored  int64 // the victim's next in etcd afterwards
	}{
		{"claim taken over", func(t *testing.T, ctx context.Context, group string, b *coordinator.Session, _ *coordinator.Coordinator, p sinks.Partition) {
			if _, err := admin.Delete(ctx, coordinator.KeysFor(group).Claim(p)); err != nil {
				t.Fatal(err)
			}
			claim(t, ctx, b, p)
		}, coordinator.ErrFenced, true, 100},
		{"operator reset", func(t *testing.T, ctx context.Context, _ string, _ *coordinator.Session, op *coordinator.Coordinator, p sinks.Partition) {
			if _, err := op.ResetOffsets(ctx, p, 42, stored(t, ctx, op, p)); err != nil {
				t.Fatal(err)
			}
		}, coordinator.ErrOffsetsChanged, false, 42},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := harness.Context(t, 60*time.Second)
			group := fmt.Sprintf("alone%d", i)
			ca := newCoordinator(t, etcd.Client(t), group)
			op := newCoordinator(t, etcd.Client(t), group)
			a := join(t, ctx, ca, "a", coordinator.DefaultTTL)
			b := join(t, ctx, newCoordinator(t, etcd.Client(t), group), "b", coordinator.DefaultTTL)
			ps := partitions("orders", n)
			claims := claimAll(t, ctx, a, ps)
			for i, err := range all(claims, func(_ int, c *coordinator.Claim) error { return c.Commit(ctx, 100, 100) }) {
				if err != nil {
					t.Fatalf("first commit of %s: %v", ps[i], err)
				}
			}
			tc.disturb(t, ctx, group, b, op, ps[victim])

			rev0, rounds0 := revision(t, ctx, admin), ca.Rounds()
			errs := all(claims, func(_ int, c *coordinator.Claim) error { return c.Commit(ctx, 200, 100) })
			revs, rounds := revision(t, ctx, admin)-rev0, ca.Rounds()-rounds0

			snap, err := ca.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i, err := range errs {
				p, c := ps[i], claims[i]
				if i == victim {
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("%s: got %v, want %v", p, err, tc.wantErr)
					}
					if got := snap.Offsets[p].Next; got != tc.stored {
						t.Fatalf("%s: stored next %d, want %d", p, got, tc.stored)
					}
					select {
					case <-c.Lost():
						if !tc.lost {
							t.Fatalf("%s: claim lost", p)
						}
					default:
						if tc.lost {
							t.Fatalf("%s: fenced claim does not report lost", p)
						}
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: commit in a round with a failing partition: %v", p, err)
				}
				if got := snap.Offsets[p]; got.Next != 200 || got.Epoch != c.Epoch() || got.Replica != "a" {
					t.Fatalf("%s: stored %+v, want next=200 epoch=%d by a", p, got, c.Epoch())
				}
			}
			t.Logf("%d commits in %d rounds, %d revisions", n, rounds, revs)
			if rounds > n/4 || revs > rounds || revs < 1 {
				t.Fatalf("%d commits took %d rounds and %d revisions, want shared rounds (<= %d)", n, rounds, revs, n/4)
			}
			if tc.lost {
				return
			}
			// Not lost: the owner goes on from what the operator wrote.
			if err := claims[victim].Commit(ctx, 60, 18); err != nil {
				t.Fatalf("commit after reload: %v", err)
			}
		})
	}
}

// startEtcdWith starts a single-member etcd with configure applied, for the
// limits the shared harness does not set, and returns a client of it.
func startEtcdWith(t *testing.T, configure func(*embed.Config)) *clientv3.Client {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "m0"
	cfg.Dir = t.TempDir()
	client, peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}, url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 20, 300
	cfg.UnsafeNoFsync = true
	cfg.Logger, cfg.LogLevel = "zap", "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	configure(cfg)
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(srv.Close)
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		t.Fatalf("etcd failed while starting: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("etcd not ready after 20s")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{srv.Clients[0].Addr().String()},
		DialTimeout: 3 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// nestedTxns is a Txn of n nested Txns of width 3 on keys below prefix.
func nestedTxns(prefix string, n int) []clientv3.Op {
	ops := make([]clientv3.Op, n)
	for i := range ops {
		k := fmt.Sprintf("%s%d", prefix, i)
		ops[i] = clientv3.OpTxn(
			[]clientv3.Cmp{
				clientv3.Compare(clientv3.CreateRevision(k), "=", 0),
				clientv3.Compare(clientv3.ModRevision(k), "=", 0),
				clientv3.Compare(clientv3.Version(k), "=", 0),
			},
			[]clientv3.Op{clientv3.OpPut(k, "v"), clientv3.OpGet(k + "/a"), clientv3.OpGet(k + "/b")},
			nil)
	}
	return ops
}

// TestRoundsRespectEtcdLimits runs 200 partitions' claims, intents and
// commits at once against an etcd with a small limit and the matching
// option: every write succeeds, in several rounds, none above the limit.
func TestRoundsRespectEtcdLimits(t *testing.T) {
	const n = 200
	longTopic := strings.Repeat("t", 240)
	cases := []struct {
		name      string
		configure func(*embed.Config)
		opts      []coordinator.Option
		topic     string
		// maxOps is the most writes a round may hold: n + w <= max-txn-ops,
		// so a round of intents (width 2) holds one more than a round with
		// a claim or a commit (width 3).
		maxOps int
		check  func(t *testing.T, ctx context.Context, cli *clientv3.Client)
	}{
		{
			name:      "max txn ops 16",
			configure: func(c *embed.Config) { c.MaxTxnOps = 16 },
			opts:      []coordinator.Option{coordinator.WithMaxTxnOps(16)},
			topic:     "t",
			maxOps:    16 - 2,
			// The rule the rounds are sized by, as etcd applies it: n
			// nested Txns of width w pass when n + w <= max-txn-ops.
			check: func(t *testing.T, ctx context.Context, cli *clientv3.Client) {
				if _, err := cli.Txn(ctx).Then(nestedTxns("probe-a/", 13)...).Commit(); err != nil {
					t.Fatalf("13 nested txns of width 3 with max-txn-ops 16: %v", err)
				}
				if _, err := cli.Txn(ctx).Then(nestedTxns("probe-b/", 14)...).Commit(); err == nil || !strings.Contains(err.Error(), "too many operations") {
					t.Fatalf("14 nested txns of width 3 with max-txn-ops 16: got %v, want too many operations", err)
				}
			},
		},
		{
			name:      "max request bytes 64 KiB",
			configure: func(c *embed.Config) { c.MaxRequestBytes = 64 << 10 },
			opts:      []coordinator.Option{coordinator.WithMaxTxnBytes(64<<10 - 512)},
			topic:     longTopic,
			maxOps:    coordinator.DefaultMaxTxnOps - 2,
			check: func(t *testing.T, ctx context.Context, cli *clientv3.Client) {
				if _, err := cli.Put(ctx, "probe", strings.Repeat("x", 65<<10)); err == nil || !strings.Contains(err.Error(), "too large") {
					t.Fatalf("a 65 KiB put: got %v, want request too large", err)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := harness.Context(t, 60*time.Second)
			cli := startEtcdWith(t, tc.configure)
			tc.check(t, ctx, cli)
			var largest atomic.Int64
			observe := func(ops int) {
				for {
					cur := largest.Load()
					if int64(ops) <= cur || largest.CompareAndSwap(cur, int64(ops)) {
						return
					}
				}
			}
			c := newCoordinatorWith(t, cli, "limits", append(tc.opts, coordinator.WithRoundObserver(observe))...)
			s := joinWith(t, ctx, c, "a")
			ps := partitions(tc.topic, n)
			claims := claimAll(t, ctx, s, ps)
			errs := all(claims, func(i int, cl *coordinator.Claim) error {
				if err := cl.PutIntent(ctx, 0, 10); err != nil {
					return err
				}
				return cl.Commit(ctx, 10, 10)
			})
			for i, err := range errs {
				if err != nil {
					t.Fatalf("%s: %v", ps[i], err)
				}
			}
			storedNextIs(t, ctx, c, ps, 10)
			rounds, ops := c.Rounds(), c.RoundOps()
			t.Logf("%d writes in %d rounds, largest %d", ops, rounds, largest.Load())
			if ops != 3*n {
				t.Fatalf("%d writes sent, want %d (a claim, an intent and a commit each)", ops, 3*n)
			}
			if max := int64(tc.maxOps); largest.Load() > max || largest.Load() < 2 {
				t.Fatalf("largest round %d writes, want 2 to %d", largest.Load(), max)
			}
			if rounds < 3*n/int64(tc.maxOps) {
				t.Fatalf("%d rounds for %d writes of at most %d a round", rounds, ops, tc.maxOps)
			}
		})
	}
}

// TestClaimAllTakesFewTransactions claims 512 partitions, commits and
// releases them, each in a handful of transactions, and shows a second
// session every partition claimed, then free.
func TestClaimAllTakesFewTransactions(t *testing.T) {
	const n = 512
	ctx := harness.Context(t, 60*time.Second)
	etcd, ca, a, b := twoMembers(t, ctx, "many")
	admin := etcd.Client(t)
	ps := partitions("t", n)

	few := func(what string, rev0 int64) {
		t.Helper()
		revs := revision(t, ctx, admin) - rev0
		t.Logf("%s of %d partitions: %d revisions", what, n, revs)
		if revs < 1 || revs > 10 {
			t.Fatalf("%s of %d partitions took %d revisions, want 1 to 10", what, n, revs)
		}
	}
	rev0 := revision(t, ctx, admin)
	claims := claimAll(t, ctx, a, ps)
	few("ClaimAll", rev0)
	epochs := map[int64]int{}
	for _, c := range claims {
		epochs[c.Epoch()]++
	}
	if len(epochs) > 10 {
		t.Fatalf("%d distinct epochs, want one per round", len(epochs))
	}

	rev0 = revision(t, ctx, admin)
	for i, err := range all(claims, func(i int, c *coordinator.Claim) error { return c.Commit(ctx, int64(i+1), 1) }) {
		if err != nil {
			t.Fatalf("commit %s: %v", ps[i], err)
		}
	}
	few("commits", rev0)
	snap, err := ca.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range claims {
		p := ps[i]
		if got := snap.Claims[p]; got.Replica != "a" || got.Epoch != c.Epoch() {
			t.Fatalf("%s: claim %+v, want a's of epoch %d", p, got, c.Epoch())
		}
		if got := snap.Offsets[p]; got.Next != int64(i+1) || got.Epoch != c.Epoch() {
			t.Fatalf("%s: offsets %+v, want next=%d epoch=%d", p, got, i+1, c.Epoch())
		}
	}

	rev0 = revision(t, ctx, admin)
	_, errs := b.ClaimAll(ctx, ps)
	for i, err := range errs {
		if !errors.Is(err, coordinator.ErrClaimed) {
			t.Fatalf("b claims %s held by a: got %v, want ErrClaimed", ps[i], err)
		}
	}
	if revs := revision(t, ctx, admin) - rev0; revs != 0 {
		t.Fatalf("refused claims wrote %d revisions", revs)
	}

	rev0 = revision(t, ctx, admin)
	if err := coordinator.ReleaseAll(ctx, claims); err != nil {
		t.Fatal(err)
	}
	few("ReleaseAll", rev0)
	for _, c := range claims {
		select {
		case <-c.Lost():
		default:
			t.Fatalf("released %s does not report lost", c.Partition())
		}
	}
	for i, bc := range claimAll(t, ctx, b, ps) {
		if bc.Epoch() <= claims[i].Epoch() || bc.Offsets().Next != int64(i+1) {
			t.Fatalf("%s: b's claim epoch %d next %d, want above %d at %d", ps[i], bc.Epoch(), bc.Offsets().Next, claims[i].Epoch(), i+1)
		}
	}
}

// TestSameKeyOpsNeverShareARound races an intent and a commit of each
// partition, with a linger so that both are queued when a round is cut:
// etcd would refuse a round holding both (duplicate key), so every write
// succeeding shows the second went to a later round.
func TestSameKeyOpsNeverShareARound(t *testing.T) {
	const n = 50
	ctx := harness.Context(t, 60*time.Second)
	etcd := harness.StartEtcd(t, 1)
	c := newCoordinator(t, etcd.Client(t), "samekey")
	s := joinWith(t, ctx, c, "a", coordinator.WithLinger(coordinator.DefaultTTL/16))
	ps := partitions("t", n)
	claims := claimAll(t, ctx, s, ps)
	rounds0 := c.Rounds()
	intentAndCommitEach(t, ctx, claims, 20)
	if rounds := c.Rounds() - rounds0; rounds < 2 {
		t.Fatalf("%d writes of %d partitions in %d rounds, want the second of each in a later round", 2*n, n, rounds)
	}
	storedNextIs(t, ctx, c, ps, 20)
}

// TestWaiterLeavingTheQueueIsNeverSent ends the ctx of writes still queued
// (a linger holds the round): they fail with the ctx's error and never reach
// etcd, while a write behind them goes through.
func TestWaiterLeavingTheQueueIsNeverSent(t *testing.T) {
	ctx := harness.Context(t, 30*time.Second)
	etcd := harness.StartEtcd(t, 1)
	c := newCoordinator(t, etcd.Client(t), "leave")
	s := joinWith(t, ctx, c, "a", coordinator.WithLinger(coordinator.DefaultTTL/16))
	left, kept := claim(t, ctx, s, sinks.Partition{Topic: "t", Partition: 0}), claim(t, ctx, s, sinks.Partition{Topic: "t", Partition: 1})
	ops0 := c.RoundOps()

	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := left.PutIntent(gone, 0, 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("intent with an ended ctx: got %v, want context.Canceled", err)
	}
	var ce *coordinator.CommitError
	if err := left.Commit(gone, 10, 10); !errors.As(err, &ce) || !errors.Is(err, context.Canceled) {
		t.Fatalf("commit with an ended ctx: got %v, want *CommitError of context.Canceled", err)
	}
	if err := kept.PutIntent(ctx, 0, 10); err != nil {
		t.Fatal(err)
	}
	if sent := c.RoundOps() - ops0; sent != 1 {
		t.Fatalf("%d writes sent, want 1: those whose waiter left were sent", sent)
	}
	snap, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Intents[left.Partition()]; ok {
		t.Fatal("intent of a waiter that left was written")
	}
	if _, ok := snap.Offsets[left.Partition()]; ok {
		t.Fatal("commit of a waiter that left was written")
	}
	if _, ok := snap.Intents[kept.Partition()]; !ok {
		t.Fatal("intent behind them missing")
	}
}

// TestClaimTakenAfterCallerLeftIsReleased has a claim's caller stop waiting
// while its round is in flight on a slow link: the claim is taken, nobody
// holds a Claim for it, so the session releases it.
func TestClaimTakenAfterCallerLeftIsReleased(t *testing.T) {
	ctx := harness.Context(t, 30*time.Second)
	etcd := harness.StartEtcd(t, 1)
	admin := etcd.Client(t)
	proxy, cli := proxied(t, etcd)
	s := join(t, ctx, newCoordinator(t, cli, "orphan"), "a", 20*time.Second)
	p := sinks.Partition{Topic: "t", Partition: 0}
	key := coordinator.KeysFor("orphan").Claim(p)
	watch := admin.Watch(ctx, key)

	proxy.Delay(400 * time.Millisecond) // a round trip of 800ms, in a round timeout of 2.5s
	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	if _, err := s.Claim(short, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("claim whose caller left: got %v, want context.DeadlineExceeded", err)
	}
	var events []string
	for len(events) < 2 {
		select {
		case wr := <-watch:
			for _, ev := range wr.Events {
				events = append(events, ev.Type.String())
			}
		case <-ctx.Done():
			t.Fatalf("claim key events %v, want PUT then DELETE", events)
		}
	}
	if events[0] != "PUT" || events[1] != "DELETE" {
		t.Fatalf("claim key events %v, want PUT then DELETE", events)
	}
	proxy.Pass()
	if _, err := s.Claim(ctx, p); err != nil {
		t.Fatalf("claim again: %v", err)
	}
}

// TestRoundFailureReachesEveryWrite cuts etcd off under commits of several
// partitions sharing rounds: each fails on its own with a *CommitError that
// names it, and each is counted.
func TestRoundFailureReachesEveryWrite(t *testing.T) {
	const n = 8
	ctx := harness.Context(t, 30*time.Second)
	etcd := harness.StartEtcd(t, 1)
	proxy, cli := proxied(t, etcd)
	c := newCoordinator(t, cli, "unreachable")
	s := join(t, ctx, c, "a", 4*time.Second)
	ps := partitions("t", n)
	claims := claimAll(t, ctx, s, ps)
	proxy.Blackhole()
	defer proxy.Pass()
	for i, err := range all(claims, func(i int, cl *coordinator.Claim) error { return cl.Commit(ctx, int64(10+i), 1) }) {
		var ce *coordinator.CommitError
		if !errors.As(err, &ce) || ce.Partition != ps[i] || ce.Next != int64(10+i) {
			t.Fatalf("%s: got %v, want *CommitError of %s at %d", ps[i], err, ps[i], 10+i)
		}
	}
	if got := c.CommitFailures(); got != n {
		t.Fatalf("commit failures %d, want %d", got, n)
	}
}

func TestRoundOptionsAreValidated(t *testing.T) {
	ctx := harness.Context(t, 10*time.Second)
	cases := []struct {
		name string
		new  func() error
		want []string // in the error
	}{
		{"max txn ops below one write", func() error {
			_, err := coordinator.New(nil, "g", coordinator.WithMaxTxnOps(3))
			return err
		}, []string{"3", "4"}},
		{"max txn bytes too small", func() error {
			_, err := coordinator.New(nil, "g", coordinator.WithMaxTxnBytes(100))
			return err
		}, []string{"100", "16384"}},
		{"negative linger", func() error {
			_, err := newCoordinator(t, nil, "g").Join(ctx, coordinator.Member{ID: "a"}, coordinator.WithLinger(-time.Millisecond))
			return err
		}, []string{"-1ms", "625ms"}},
		{"linger above ttl/16", func() error {
			_, err := newCoordinator(t, nil, "g").Join(ctx, coordinator.Member{ID: "a"}, coordinator.WithLinger(time.Second))
			return err
		}, []string{"1s", "625ms"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.new()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// Writes made with Linger wait for others to share their round; a write
// without linger goes at once, and takes the lingering ones along.
func TestLingeringWritesShareARound(t *testing.T) {
	etcd := harness.StartEtcd(t, 1)
	ctx := harness.Context(t, 30*time.Second)
	c := newCoordinator(t, etcd.Client(t), "linger")
	s := join(t, ctx, c, "a", coordinator.DefaultTTL)
	claims := claimAll(t, ctx, s, partitions("t", 3))
	const linger = 300 * time.Millisecond

	// Two lingering commits made 50ms apart: one round.
	before := c.Rounds()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 1 {
				<-time.After(50 * time.Millisecond) // the second write comes later
			}
			errs[i] = claims[i].Commit(ctx, 10, 10, coordinator.Linger(linger))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	if took, rounds := time.Since(start), c.Rounds()-before; rounds != 1 || took < linger {
		t.Fatalf("two lingering commits took %d rounds in %s, want 1 round after the %s linger", rounds, took, linger)
	}

	// A lingering intent, then an urgent commit: both go at once, in one round.
	before, start = c.Rounds(), time.Now()
	intent := make(chan error, 1)
	go func() { intent <- claims[0].PutIntent(ctx, 10, 20, coordinator.Linger(linger)) }()
	harness.Await(t, 5*time.Second, "the intent queued", func() bool { return time.Since(start) > 20*time.Millisecond })
	if err := claims[2].Commit(ctx, 5, 5); err != nil {
		t.Fatal(err)
	}
	if err := <-intent; err != nil {
		t.Fatal(err)
	}
	if took, rounds := time.Since(start), c.Rounds()-before; rounds != 1 || took >= linger {
		t.Fatalf("a lingering intent and an urgent commit took %d rounds in %s, want 1 round before the linger ends", rounds, took)
	}
}

// Lingering writes that fill a round go at once: no more can join them,
// so waiting out their linger would only delay them. Those left over,
// too few for a round, still linger.
func TestLingeringWritesThatFillARoundGoAtOnce(t *testing.T) {
	etcd := harness.StartEtcd(t, 1)
	ctx := harness.Context(t, 60*time.Second)
	// 13 commits (width 3) fill a round of max-txn-ops 16.
	c := newCoordinatorWith(t, etcd.Client(t), "linger-full", coordinator.WithMaxTxnOps(16))
	const ttl = 60 * time.Second
	const linger = ttl / 16 // the longest linger a session of ttl allows
	s := join(t, ctx, c, "a", ttl)
	const fill, extra = 13, 4
	claims := claimAll(t, ctx, s, partitions("t", fill+extra))

	before, start := c.Rounds(), time.Now()
	took := make(chan time.Duration, fill+extra)
	for i := range claims {
		go func() {
			if err := claims[i].Commit(ctx, 10, 10, coordinator.Linger(linger)); err != nil {
				t.Errorf("commit %d: %v", i, err)
			}
			took <- time.Since(start)
		}()
	}
	var early, late int
	for range fill + extra {
		if d := <-took; d < linger/2 {
			early++
		} else if d >= linger {
			late++
		}
	}
	if early != fill || late != extra {
		t.Fatalf("%d commits went before half their %s linger and %d after it, want %d (a full round) and %d (the rest)",
			early, linger, late, fill, extra)
	}
	if rounds := c.Rounds() - before; rounds != 2 {
		t.Fatalf("%d rounds, want 2: the full round and the rest", rounds)
	}
}

// TestFullRoundsGoSideBySide sends writes through a client whose every Txn
// takes 20 ms longer: full rounds (1,000 claims, then an intent and a
// commit of each partition) go up to 3 at once, never two with a key of one
// partition, and every write lands; writes too few to fill a round go one
// round at a time.
func TestFullRoundsGoSideBySide(t *testing.T) {
	const n = 1000
	ctx := harness.Context(t, 60*time.Second)
	etcd := harness.StartEtcd(t, 1)
	var (
		mu     sync.Mutex
		flying = map[string]bool{} // the keys of the rounds in flight
		now    int                 // rounds in flight
		most   int
		shared []string // keys found in two rounds in flight
	)
	slow := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		txn, ok := req.(*pb.TxnRequest)
		if !ok {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		keys := map[string]bool{}
		for _, op := range txn.Success {
			nested := op.GetRequestTxn()
			if nested == nil {
				continue
			}
			for _, c := range nested.Compare {
				keys[string(c.Key)] = true
			}
			for _, o := range append(append([]*pb.RequestOp{}, nested.Success...), nested.Failure...) {
				switch {
				case o.GetRequestPut() != nil:
					keys[string(o.GetRequestPut().Key)] = true
				case o.GetRequestRange() != nil:
					keys[string(o.GetRequestRange().Key)] = true
				case o.GetRequestDeleteRange() != nil:
					keys[string(o.GetRequestDeleteRange().Key)] = true
				}
			}
		}
		mu.Lock()
		now++
		most = max(most, now)
		for k := range keys {
			if flying[k] {
				shared = append(shared, k)
			}
			flying[k] = true
		}
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		err := invoker(ctx, method, req, reply, cc, opts...)
		mu.Lock()
		now--
		for k := range keys {
			delete(flying, k)
		}
		mu.Unlock()
		return err
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), DialOptions: []grpc.DialOption{slow}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	c := newCoordinator(t, cli, "side")
	s := joinWith(t, ctx, c, "a")
	// peak returns the most rounds in flight at once since the last call,
	// and fails the test if two of them shared a key.
	peak := func(what string) int {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(shared) > 0 {
			t.Fatalf("%s: rounds in flight at once shared keys %v", what, shared[:min(len(shared), 5)])
		}
		p := most
		most = 0
		return p
	}

	ps := partitions("t", n)
	claims := claimAll(t, ctx, s, ps)
	if p := peak("claims"); p < 2 || p > 3 {
		t.Fatalf("%d claims (8 full rounds): at most %d rounds in flight at once, want 2 or 3", n, p)
	}

	// An intent and a commit of every partition, queued together: the
	// rounds are full, and each partition's commit must wait for its
	// intent's round to be back.
	intentAndCommitEach(t, ctx, claims, 7)
	if p := peak("intents and commits"); p < 2 || p > 3 {
		t.Fatalf("%d intents and commits: at most %d rounds in flight at once, want 2 or 3", 2*n, p)
	}
	storedNextIs(t, ctx, c, ps, 7)

	// A trickle: 20 partitions committing over and over, never a full
	// round queued.
	errs := all(claims[:20], func(i int, cl *coordinator.Claim) error {
		for next := int64(8); next < 13; next++ {
			if err := cl.Commit(ctx, next, 1); err != nil {
				return err
			}
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("commit of %s: %v", ps[i], err)
		}
	}
	if p := peak("a trickle"); p != 1 {
		t.Fatalf("commits of 20 partitions, never a full round: %d rounds in flight at once, want 1", p)
	}

	// Full by bytes: 100 claims, fewer than a round's ops, are three
	// rounds of a 16 KiB limit (about 40 claims each), so the second goes
	// beside the first.
	small := newCoordinatorWith(t, cli, "side-bytes", coordinator.WithMaxTxnBytes(16<<10))
	claimAll(t, ctx, joinWith(t, ctx, small, "b"), partitions("t", 100))
	if p := peak("claims full by bytes"); p < 2 {
		t.Fatalf("100 claims over a 16 KiB round limit: at most %d round in flight at once, want 2 or more", p)
	}
}
