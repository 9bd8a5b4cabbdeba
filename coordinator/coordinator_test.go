package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, harness.GoleakOptions()...)
}

func newCoordinator(t *testing.T, cli *clientv3.Client, group string) *coordinator.Coordinator {
	t.Helper()
	return newCoordinatorWith(t, cli, group)
}

func newCoordinatorWith(t *testing.T, cli *clientv3.Client, group string, opts ...coordinator.Option) *coordinator.Coordinator {
	t.Helper()
	c, err := coordinator.New(cli, group, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func join(t *testing.T, ctx context.Context, c *coordinator.Coordinator, id string, ttl time.Duration) *coordinator.Session {
	t.Helper()
	return joinWith(t, ctx, c, id, coordinator.WithTTL(ttl))
}

func joinWith(t *testing.T, ctx context.Context, c *coordinator.Coordinator, id string, opts ...coordinator.SessionOption) *coordinator.Session {
	t.Helper()
	s, err := c.Join(ctx, coordinator.Member{ID: id, Host: "test"}, opts...)
	if err != nil {
		t.Fatalf("join %s: %v", id, err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Close(cctx)
	})
	return s
}

// twoMembers starts a cluster of one member and joins a and b to group,
// each through a client and a coordinator of its own; c is a's.
func twoMembers(t *testing.T, ctx context.Context, group string) (etcd *harness.Etcd, c *coordinator.Coordinator, a, b *coordinator.Session) {
	t.Helper()
	etcd = harness.StartEtcd(t, 1)
	c = newCoordinator(t, etcd.Client(t), group)
	a = join(t, ctx, c, "a", coordinator.DefaultTTL)
	b = join(t, ctx, newCoordinator(t, etcd.Client(t), group), "b", coordinator.DefaultTTL)
	return etcd, c, a, b
}

func claim(t *testing.T, ctx context.Context, s *coordinator.Session, p sinks.Partition) *coordinator.Claim {
	t.Helper()
	c, err := s.Claim(ctx, p)
	if err != nil {
		t.Fatalf("%s claims %s: %v", s.ID(), p, err)
	}
	return c
}

// proxied returns a proxy in front of etcd's first member and a client
// that talks to etcd only through it.
func proxied(t *testing.T, etcd *harness.Etcd) (*harness.Proxy, *clientv3.Client) {
	t.Helper()
	proxy := harness.NewProxy(t, etcd.Addr(0))
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.Addr()}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return proxy, cli
}

// stored reads p's offsets straight from etcd.
func stored(t *testing.T, ctx context.Context, c *coordinator.Coordinator, p sinks.Partition) coordinator.Offsets {
	t.Helper()
	snap, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Offsets[p]
}

// eventually polls cond every 10ms until it holds or ctx ends.
func eventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

func TestClaimRaceExactlyOneWins(t *testing.T) {
	ctx := harness.Context(t, 60*time.Second)
	_, _, a, b := twoMembers(t, ctx, "race")
	wins := map[string]int{}
	for i := 0; i < 100; i++ {
		p := sinks.Partition{Topic: "t", Partition: i}
		var wg sync.WaitGroup
		var got [2]*coordinator.Claim
		var errs [2]error
		for j, s := range []*coordinator.Session{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[j], errs[j] = s.Claim(ctx, p)
			}()
		}
		wg.Wait()
		won := 0
		for j := range got {
			switch {
			case errs[j] == nil:
				won++
				wins[[]string{"a", "b"}[j]]++
			case !errors.Is(errs[j], coordinator.ErrClaimed):
				t.Fatalf("round %d: unexpected error %v", i, errs[j])
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1 (errors %v)", i, won, errs)
		}
	}
	t.Logf("wins: %v", wins)
}

func TestCommitFencing(t *testing.T) {
	// Each case makes a's claim stale in its own way while a's session
	// itself may still be alive; a's next commit must be fenced and the
	// stored offset must stay b's.
	cases := []struct {
		name  string
		stale func(t *testing.T, ctx context.Context, cli *clientv3.Client, a *coordinator.Session, p sinks.Partition)
	}{
		{"lease revoked", func(t *testing.T, ctx context.Context, cli *clientv3.Client, a *coordinator.Session, _ sinks.Partition) {
			if _, err := cli.Revoke(ctx, a.Lease()); err != nil {
				t.Fatal(err)
			}
		}},
		{"claim key deleted", func(t *testing.T, ctx context.Context, cli *clientv3.Client, _ *coordinator.Session, p sinks.Partition) {
			if _, err := cli.Delete(ctx, coordinator.KeysFor("fence").Claim(p)); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := harness.Context(t, 30*time.Second)
			etcd := harness.StartEtcd(t, 1)
			admin := etcd.Client(t)
			ca := newCoordinator(t, etcd.Client(t), "fence")
			cb := newCoordinator(t, etcd.Client(t), "fence")
			a := join(t, ctx, ca, fmt.Sprintf("a%d", i), coordinator.DefaultTTL)
			b := join(t, ctx, cb, fmt.Sprintf("b%d", i), coordinator.DefaultTTL)
			p := sinks.Partition{Topic: "orders", Partition: 3}

			ac := claim(t, ctx, a, p)
			if err := ac.Commit(ctx, 100, 100); err != nil {
				t.Fatal(err)
			}
			tc.stale(t, ctx, admin, a, p)
			bc := claim(t, ctx, b, p)
			if bc.Epoch() <= ac.Epoch() {
				t.Fatalf("new epoch %d not above old %d", bc.Epoch(), ac.Epoch())
			}
			if got := bc.Offsets().Next; got != 100 {
				t.Fatalf("b resumes at %d, want 100", got)
			}
			if err := bc.Commit(ctx, 150, 50); err != nil {
				t.Fatal(err)
			}
			err := ac.Commit(ctx, 120, 20)
			if !errors.Is(err, coordinator.ErrFenced) {
				t.Fatalf("zombie commit: got %v, want ErrFenced", err)
			}
			select {
			case <-ac.Lost():
			default:
				t.Fatal("fenced claim does not report lost")
			}
			if err := ac.PutIntent(ctx, 150, 160); !errors.Is(err, coordinator.ErrFenced) {
				t.Fatalf("zombie intent: got %v, want ErrFenced", err)
			}
			got := stored(t, ctx, cb, p)
			if got.Next != 150 || got.Epoch != bc.Epoch() || got.Replica != b.ID() {
				t.Fatalf("stored offsets %+v, want b's next=150 epoch=%d", got, bc.Epoch())
			}
		})
	}
}

func TestZombieCutOffByProxy(t *testing.T) {
	ctx := harness.Context(t, 30*time.Second)
	etcd := harness.StartEtcd(t, 1)
	proxy, zcli := proxied(t, etcd)
	ttl := 2 * time.Second
	a := join(t, ctx, newCoordinator(t, zcli, "zombie"), "a", ttl)
	cb := newCoordinator(t, etcd.Client(t), "zombie")
	b := join(t, ctx, cb, "b", ttl)
	p := sinks.Partition{Topic: "t", Partition: 0}
	ac := claim(t, ctx, a, p)
	if err := ac.Commit(ctx, 10, 10); err != nil {
		t.Fatal(err)
	}

	proxy.Blackhole()
	// The lease expires in etcd: b can claim.
	var bc *coordinator.Claim
	eventually(t, ctx, "b to claim after a's lease expired", func() bool {
		c, err := b.Claim(ctx, p)
		if err == nil {
			bc = c
		}
		return err == nil
	})
	if err := bc.Commit(ctx, 20, 10); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	proxy.Pass()
	if err := ac.Commit(ctx, 15, 5); !errors.Is(err, coordinator.ErrFenced) {
		t.Fatalf("zombie commit: got %v, want ErrFenced", err)
	}
	if got := stored(t, ctx, cb, p); got.Next != 20 || got.Replica != "b" {
		t.Fatalf("stored %+v, want b's 20", got)
	}
}

func TestOffsetsNeverMoveBackThroughStaleEpoch(t *testing.T) {
	ctx := harness.Context(t, 30*time.Second)
	_, c, a, b := twoMembers(t, ctx, "epochs")
	p := sinks.Partition{Topic: "t", Partition: 1}

	var last int64
	owner := []*coordinator.Session{a, b}
	var stale *coordinator.Claim
	for i := 0; i < 10; i++ {
		cl := claim(t, ctx, owner[i%2], p)
		if cl.Epoch() <= last {
			t.Fatalf("round %d: epoch %d not above previous %d", i, cl.Epoch(), last)
		}
		last = cl.Epoch()
		if stale != nil {
			// A claim of an older epoch whose release was lost must
			// never write.
			if err := stale.Commit(ctx, 1, 1); err == nil {
				t.Fatalf("round %d: stale epoch committed", i)
			}
		}
		next := int64(100 * (i + 1))
		if err := cl.Commit(ctx, next, 100); err != nil {
			t.Fatal(err)
		}
		if got := stored(t, ctx, c, p).Next; got != next {
			t.Fatalf("round %d: stored next %d, want %d", i, got, next)
		}
		if err := cl.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cl.Commit(ctx, next+1, 1); !errors.Is(err, coordinator.ErrReleased) {
			t.Fatalf("commit after release: got %v, want ErrReleased", err)
		}
		stale = cl
	}
}

func TestOperatorResetMakesOwnerReload(t *testing.T) {
	ctx := harness.Context(t, 30*time.Second)
	etcd := harness.StartEtcd(t, 1)
	c := newCoordinator(t, etcd.Client(t), "reset")
	op := newCoordinator(t, etcd.Client(t), "reset")
	s := join(t, ctx, c, "a", coordinator.DefaultTTL)
	p := sinks.Partition{Topic: "t", Partition: 0}
	cl := claim(t, ctx, s, p)
	if err := cl.Commit(ctx, 500, 500); err != nil {
		t.Fatal(err)
	}
	seen := stored(t, ctx, op, p)
	reset, err := op.ResetOffsets(ctx, p, 42, seen)
	if err != nil {
		t.Fatal(err)
	}
	if reset.Generation != seen.Generation+1 {
		t.Fatalf("generation %d, want %d", reset.Generation, seen.Generation+1)
	}
	// A second operator working from the same read conflicts.
	if _, err := op.ResetOffsets(ctx, p, 7, seen); !errors.Is(err, coordinator.ErrConflict) {
		t.Fatalf("second reset: got %v, want ErrConflict", err)
	}
	// The owner reloads and commits again.
	if err := cl.Commit(ctx, 50, 8); !errors.Is(err, coordinator.ErrOffsetsChanged) {
		t.Fatalf("owner commit after the reset: got %v, want ErrOffsetsChanged", err)
	}
	if err := cl.Commit(ctx, 50, 8); err != nil {
		t.Fatal(err)
	}
	// The owner committing after an operator's read is no conflict: the
	// reset is retried from the owner's commit, so a live group can be
	// reset.
	seen = stored(t, ctx, op, p)
	if err := cl.Commit(ctx, 60, 10); err != nil {
		t.Fatal(err)
	}
	reset, err = op.ResetOffsets(ctx, p, 42, seen)
	if err != nil {
		t.Fatalf("reset after an owner commit: %v", err)
	}
	if reset.Generation != seen.Generation+1 {
		t.Fatalf("generation %d, want %d", reset.Generation, seen.Generation+1)
	}

	err = cl.Commit(ctx, 600, 100)
	if !errors.Is(err, coordinator.ErrOffsetsChanged) {
		t.Fatalf("owner commit after reset: got %v, want ErrOffsetsChanged", err)
	}
	if got := cl.Offsets(); got.Next != 42 || got.Generation != reset.Generation {
		t.Fatalf("owner sees %+v, want next=42 generation=%d", got, reset.Generation)
	}
	if got := stored(t, ctx, op, p).Next; got != 42 {
		t.Fatalf("stored next %d after refused commit, want 42", got)
	}
	// The owner re-reads (Offsets) and goes on from 42.
	if err := cl.Commit(ctx, 90, 48); err != nil {
		t.Fatalf("commit after reload: %v", err)
	}
	got := stored(t, ctx, op, p)
	if got.Next != 90 || got.Generation != reset.Generation {
		t.Fatalf("stored %+v, want next=90 generation=%d", got, reset.Generation)
	}
}

func TestAmbiguousCommitResolvedByReadBack(t *testing.T) {
	ctx := harness.Context(t, 60*time.Second)
	etcd := harness.StartEtcd(t, 1)
	admin := etcd.Client(t)
	proxy, cli := proxied(t, etcd)
	c := newCoordinator(t, cli, "ambiguous")
	s := join(t, ctx, c, "a", 10*time.Second)
	p := sinks.Partition{Topic: "t", Partition: 0}
	cl := claim(t, ctx, s, p)
	if err := cl.Commit(ctx, 10, 10); err != nil {
		t.Fatal(err)
	}
	key := coordinator.KeysFor("ambiguous").Offsets(p)
	watch := admin.Watch(ctx, key)

	proxy.DropResponses()
	done := make(chan error, 1)
	go func() { done <- cl.Commit(ctx, 20, 10) }()
	// The request reaches etcd; its answer is lost.
	puts := 0
	select {
	case wr := <-watch:
		puts += len(wr.Events)
	case <-ctx.Done():
		t.Fatal("commit never reached etcd")
	}
	proxy.Cut()
	proxy.Pass()
	if err := <-done; err != nil {
		t.Fatalf("commit whose answer was lost: got %v, want success from read-back", err)
	}
	if got := cl.Offsets(); got.Next != 20 {
		t.Fatalf("claim sees next=%d, want 20", got.Next)
	}
	// It was not sent twice: one more commit is one more put, with no
	// conflict from a duplicate in between.
	if err := cl.Commit(ctx, 30, 10); err != nil {
		t.Fatalf("commit after read-back: %v", err)
	}
	select {
	case wr := <-watch:
		puts += len(wr.Events)
	case <-ctx.Done():
		t.Fatal("no put for the next commit")
	}
	if puts != 2 {
		t.Fatalf("%d puts of the offsets, want 2", puts)
	}
}

func TestCommitFailsAfterRetriesWithClearError(t *testing.T) {
	ctx := harness.Context(t, 60*time.Second)
	etcd := harness.StartEtcd(t, 1)
	proxy, cli := proxied(t, etcd)
	c := newCoordinator(t, cli, "retries")
	s := join(t, ctx, c, "a", 10*time.Second)
	p := sinks.Partition{Topic: "t", Partition: 0}
	cl := claim(t, ctx, s, p)
	proxy.Blackhole()
	err := cl.Commit(ctx, 20, 10)
	var ce *coordinator.CommitError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want *CommitError", err)
	}
	if ce.Next != 20 || ce.Partition != p {
		t.Fatalf("error names %s at %d, want %s at 20", ce.Partition, ce.Next, p)
	}
	for _, want := range []string{"t/0", "20", "already in the sink", "not committed"} {
		if !contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
	if c.CommitFailures() != 1 {
		t.Fatalf("commit failures %d, want 1", c.CommitFailures())
	}
	proxy.Pass()
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}

func TestLivenessLostBeforeLeaseExpires(t *testing.T) {
	ctx := harness.Context(t, 30*time.Second)
	etcd := harness.StartEtcd(t, 1)
	admin := etcd.Client(t)
	proxy, cli := proxied(t, etcd)
	ttl := 4 * time.Second
	s := join(t, ctx, newCoordinator(t, cli, "live"), "a", ttl)
	cl := claim(t, ctx, s, sinks.Partition{Topic: "t", Partition: 0})
	if !s.Alive() {
		t.Fatal("new session not alive")
	}
	cut := time.Now()
	proxy.Blackhole()
	select {
	case <-s.Lost():
	case <-time.After(ttl/2 + time.Second):
		t.Fatalf("session still alive %s after the cut (ttl/2 = %s)", time.Since(cut), ttl/2)
	}
	took := time.Since(cut)
	if s.Alive() {
		t.Fatal("Lost closed but Alive true")
	}
	select {
	case <-cl.Lost():
	case <-time.After(time.Second):
		t.Fatal("claim does not report lost with its session")
	}
	// etcd has not expired the lease yet: the replica stopped first.
	ttlResp, err := admin.TimeToLive(ctx, s.Lease())
	if err != nil {
		t.Fatal(err)
	}
	if ttlResp.TTL <= 0 {
		t.Fatalf("lease already expired in etcd (ttl %d) when the session noticed", ttlResp.TTL)
	}
	if err := cl.Commit(ctx, 5, 5); !errors.Is(err, coordinator.ErrFenced) || !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("commit on a lost session: got %v, want ErrFenced and ErrLeaseLost", err)
	}
	t.Logf("not alive %s after the cut; lease had %ds left in etcd", took.Round(time.Millisecond), ttlResp.TTL)
	proxy.Pass()
}

func TestThreeMemberLeaderStop(t *testing.T) {
	ctx := harness.Context(t, 60*time.Second)
	etcd := harness.StartEtcd(t, 3)
	c := newCoordinator(t, etcd.Client(t), "ha")
	s := join(t, ctx, c, "a", 10*time.Second)
	var claims []*coordinator.Claim
	for i := 0; i < 4; i++ {
		cl := claim(t, ctx, s, sinks.Partition{Topic: "t", Partition: i})
		if err := cl.Commit(ctx, int64(100+i), 1); err != nil {
			t.Fatal(err)
		}
		claims = append(claims, cl)
	}
	etcd.StopMember(etcd.Leader())
	// Commits succeed again after the election (they retry within the TTL).
	for i, cl := range claims {
		if err := cl.Commit(ctx, int64(200+i), 1); err != nil {
			t.Fatalf("commit after leader stop: %v", err)
		}
	}
	// New claims too.
	if _, err := s.Claim(ctx, sinks.Partition{Topic: "t", Partition: 9}); err != nil {
		t.Fatalf("claim after leader stop: %v", err)
	}
	snap, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range claims {
		p := sinks.Partition{Topic: "t", Partition: i}
		if got := snap.Offsets[p].Next; got != int64(200+i) {
			t.Fatalf("%s: next %d after election, want %d", p, got, 200+i)
		}
	}
	if !s.Alive() {
		t.Fatal("session lost across a leader election")
	}
}

func TestJoinRefusesDuplicateIDAndValidates(t *testing.T) {
	ctx := harness.Context(t, 30*time.Second)
	etcd := harness.StartEtcd(t, 1)
	c := newCoordinator(t, etcd.Client(t), "dup")
	join(t, ctx, c, "same", coordinator.DefaultTTL)
	if _, err := c.Join(ctx, coordinator.Member{ID: "same"}); !errors.Is(err, coordinator.ErrMemberExists) {
		t.Fatalf("second join: got %v, want ErrMemberExists", err)
	}
	if _, err := c.Join(ctx, coordinator.Member{ID: "x"}, coordinator.WithTTL(time.Second)); err == nil || !contains(err.Error(), "1s") {
		t.Fatalf("ttl 1s: got %v, want an error naming 1s", err)
	}
	if _, err := coordinator.New(etcd.Client(t), "a/b"); err == nil || !contains(err.Error(), `"a/b"`) {
		t.Fatalf("group a/b: got %v, want an error naming it", err)
	}
}
