package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Watch signals a change of members, claims and release requests on Plan,
// hands each reset partition over on Resets, and outlives the loss of the
// cluster's leader: the watch is opened again, and says so on Plan.
func TestWatchSurvivesALostLeader(t *testing.T) {
	etcd := harness.StartEtcd(t, 3)
	cli := etcd.Client(t)
	c := newCoordinator(t, cli, "g")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch := c.Watch(wctx)
	plan := func(what string) {
		t.Helper()
		select {
		case <-ch.Plan:
		case <-time.After(10 * time.Second):
			t.Fatalf("no Plan signal after %s", what)
		}
	}
	drain := func() {
		for {
			select {
			case <-ch.Plan:
			case <-time.After(300 * time.Millisecond):
				return
			}
		}
	}
	keys := c.Keys()
	p := sinks.Partition{Topic: "t", Partition: 3}
	// The watches open in the background: the member key is written until
	// one sees it.
	for i := 0; ; i++ {
		if _, err := cli.Put(ctx, keys.Member("r1"), fmt.Sprintf(`{"id":"r1","pid":%d}`, i)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch.Plan:
		case <-time.After(200 * time.Millisecond):
			if i < 50 {
				continue
			}
			t.Fatal("no Plan signal after a member joined")
		}
		break
	}
	drain()
	if _, err := cli.Put(ctx, keys.Release(p), `{"epoch":1}`); err != nil {
		t.Fatal(err)
	}
	plan("a release request")
	drain()
	if _, err := cli.Put(ctx, keys.Reset(p), "1"); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ch.Resets:
		if got != p {
			t.Fatalf("Resets gave %s, want %s", got, p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reset seen")
	}

	// The cluster loses its leader: the watches (which require one) end,
	// are opened again and say so on Plan; once a leader is back, changes
	// flow again.
	drain()
	etcd.StopMember(1)
	etcd.StopMember(2)
	plan("the leader was lost")
	etcd.RestartMember(1)
	etcd.RestartMember(2)
	etcd.WaitLeader(t)
	drain()
	if _, err := cli.Delete(ctx, keys.Member("r1")); err != nil {
		t.Fatal(err)
	}
	plan("a member left after the leader came back")
	if _, err := cli.Put(ctx, keys.Reset(p), "2"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch.Resets:
	case <-time.After(10 * time.Second):
		t.Fatal("no reset seen after the leader came back")
	}
	lease, found, err := c.MemberLease(ctx, "nobody")
	if err != nil || found || lease != 0 {
		t.Errorf("MemberLease(nobody) = %d, %v, %v; want not found", lease, found, err)
	}
}
