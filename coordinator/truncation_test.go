package coordinator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// CommitTruncation: the owner starts a new generation at the divergence
// point, recording the truncation and the leader epoch; its later commits
// keep the generation and the record, an operator's reset drops it; and a
// replica that lost the claim is fenced, writing nothing.
func TestCommitTruncationIsFencedAndKeptByTheGeneration(t *testing.T) {
	ctx := harness.Context(t, 30*time.Second)
	etcd := harness.StartEtcd(t, 1)
	c := newCoordinator(t, etcd.Client(t), "trunc")
	a := join(t, ctx, c, "a", 10*time.Second)
	p := sinks.Partition{Topic: "t", Partition: 0}
	ac := claim(t, ctx, a, p)
	if err := ac.CommitEpoch(ctx, 1500, 3, 1500); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, ctx, c, p); got.LeaderEpoch == nil || *got.LeaderEpoch != 3 || got.Generation != 0 {
		t.Fatalf("stored %+v, want leader epoch 3 in generation 0", got)
	}
	tr := coordinator.Truncation{At: 1000, Was: 1500, Committed: 1500, When: time.Now().UTC()}
	if err := ac.CommitTruncation(ctx, 1000, 4, tr); err != nil {
		t.Fatal(err)
	}
	got := stored(t, ctx, c, p)
	if got.Next != 1000 || got.Generation != 1 || got.Truncated == nil || got.Truncated.Lost() != 500 || *got.LeaderEpoch != 4 {
		t.Fatalf("after the truncation: %+v, want next 1000, generation 1, 500 lost, leader epoch 4", got)
	}
	if err := ac.CommitEpoch(ctx, 1100, 4, 100); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, ctx, c, p); got.Generation != 1 || got.Truncated == nil || got.Truncated.At != 1000 {
		t.Fatalf("a later commit: %+v, want generation 1 with the truncation kept", got)
	}

	// An operator's reset starts another generation, without the record.
	if _, err := c.ResetOffsets(ctx, p, 0, stored(t, ctx, c, p)); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, ctx, c, p); got.Truncated != nil || got.LeaderEpoch != nil || got.Generation != 2 {
		t.Fatalf("after a reset: %+v, want generation 2 without truncation or epoch", got)
	}

	// The claim taken over (its key deleted, as when the lease expired,
	// and claimed by b): a's late truncation is fenced and writes nothing.
	if _, err := etcd.Client(t).Delete(ctx, coordinator.KeysFor("trunc").Claim(p)); err != nil {
		t.Fatal(err)
	}
	b := join(t, ctx, c, "b", 10*time.Second)
	claim(t, ctx, b, p)
	before := stored(t, ctx, c, p)
	if err := ac.CommitTruncation(ctx, 0, 1, tr); !errors.Is(err, coordinator.ErrFenced) {
		t.Fatalf("a truncation committed by a replica whose claim was taken over: %v, want ErrFenced", err)
	}
	if got := stored(t, ctx, c, p); got.ModRevision != before.ModRevision {
		t.Fatalf("the offsets changed under a fenced truncation: %+v, was %+v", got, before)
	}
}
