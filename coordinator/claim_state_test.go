package coordinator_test

import (
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

func TestIntentFoundByNextOwnerAndDeletedByCommit(t *testing.T) {
	ctx := harness.Context(t, 30*time.Second)
	etcd, c, a, b := twoMembers(t, ctx, "intent")
	p := sinks.Partition{Topic: "t", Partition: 2}
	ac := claim(t, ctx, a, p)
	if err := ac.Commit(ctx, 10, 10); err != nil {
		t.Fatal(err)
	}
	if err := ac.PutIntent(ctx, 10, 25); err != nil {
		t.Fatal(err)
	}
	// a dies mid-block: its claim goes, the intent stays.
	if err := ac.Release(ctx); err != nil {
		t.Fatal(err)
	}
	bc := claim(t, ctx, b, p)
	in, ok := bc.Intent()
	if !ok || in.From != 10 || in.Next != 25 || in.Epoch != ac.Epoch() {
		t.Fatalf("intent %+v ok=%v, want [10, 25) of epoch %d", in, ok, ac.Epoch())
	}
	if err := bc.PutIntent(ctx, 10, 25); err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, 25, 15); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Intents[p]; ok {
		t.Fatal("intent left after the commit")
	}
	if got := snap.Claims[p]; got.Replica != "b" || got.Epoch != bc.Epoch() {
		t.Fatalf("claim %+v, want b at epoch %d", got, bc.Epoch())
	}
	if len(snap.Members) != 2 || snap.Members[0].ID != "a" {
		t.Fatalf("members %+v, want a then b", snap.Members)
	}
	groups, err := coordinator.Groups(ctx, etcd.Client(t))
	if err != nil || len(groups) != 1 || groups[0] != "intent" {
		t.Fatalf("groups %v %v, want [intent]", groups, err)
	}
}
