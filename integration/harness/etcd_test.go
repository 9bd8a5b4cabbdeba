package harness_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, harness.GoleakOptions()...)
}

// mustGet returns the value of key read through cli, or "" if it is absent.
func mustGet(t *testing.T, cli *clientv3.Client, key string) string {
	t.Helper()
	resp, err := cli.Get(harness.Context(t, 5*time.Second), key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// putEventually retries a put until it succeeds or ctx ends, since requests
// can fail while a new leader is being elected.
func putEventually(ctx context.Context, t *testing.T, cli *clientv3.Client, key, val string) {
	t.Helper()
	for {
		attempt, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		_, err := cli.Put(attempt, key, val)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("put %q: %v (last error %v)", key, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestEtcdSingleMember(t *testing.T) {
	e := harness.StartEtcd(t, 1)
	if got := e.Members(); got != 1 {
		t.Fatalf("Members() = %d, want 1", got)
	}
	if got := e.Endpoints(); len(got) != 1 || got[0] != e.Endpoint(0) {
		t.Fatalf("Endpoints() = %v, want [%s]", got, e.Endpoint(0))
	}
	if l := e.Leader(); l != 0 {
		t.Fatalf("Leader() = %d, want 0", l)
	}
	cli := e.Client(t)
	if _, err := cli.Put(harness.Context(t, 5*time.Second), "k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	if got := mustGet(t, cli, "k"); got != "v" {
		t.Fatalf("get = %q, want %q", got, "v")
	}
}

func TestEtcdSingleMemberRestartKeepsData(t *testing.T) {
	e := harness.StartEtcd(t, 1)
	cli := e.Client(t)
	if _, err := cli.Put(harness.Context(t, 5*time.Second), "k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	e.StopMember(0)
	if got := e.Endpoints(); len(got) != 0 {
		t.Fatalf("Endpoints() with the member stopped = %v, want none", got)
	}
	if _, err := cli.Get(harness.Context(t, 300*time.Millisecond), "k"); err == nil {
		t.Fatal("get succeeded while the only member was stopped")
	}
	e.RestartMember(0)
	// The client may be in gRPC's reconnect back-off: bound the wait generously.
	resp, err := cli.Get(harness.Context(t, 10*time.Second), "k")
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get after restart = %v, want v", resp.Kvs)
	}
}

func TestEtcdThreeMembersLeaderFailover(t *testing.T) {
	e := harness.StartEtcd(t, 3)
	cli := e.Client(t)
	putEventually(harness.Context(t, 5*time.Second), t, cli, "k", "1")

	old := e.WaitLeader(t)
	stopped := time.Now()
	e.StopMember(old)
	if got := len(e.Endpoints()); got != 2 {
		t.Fatalf("Endpoints() after a stop has %d entries, want 2", got)
	}

	leader := e.WaitLeader(t)
	elected := time.Since(stopped)
	putEventually(harness.Context(t, 5*time.Second), t, cli, "k", "2")
	t.Logf("stopped leader %d: member %d elected after %v, put succeeded after %v",
		old, leader, elected, time.Since(stopped))
	if leader == old {
		t.Fatalf("leader is still the stopped member %d", old)
	}

	e.RestartMember(old)
	if got := len(e.Endpoints()); got != 3 {
		t.Fatalf("Endpoints() after restart has %d entries, want 3", got)
	}
	// A linearizable read served by the restarted member alone sees the write
	// made while it was down.
	direct, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint(old)}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("client on restarted member: %v", err)
	}
	defer direct.Close()
	if got := mustGet(t, direct, "k"); got != "2" {
		t.Fatalf("get from restarted member = %q, want %q", got, "2")
	}
}

func TestEtcdThreeMembersFullRestart(t *testing.T) {
	e := harness.StartEtcd(t, 3)
	cli := e.Client(t)
	putEventually(harness.Context(t, 5*time.Second), t, cli, "k", "v")
	for i := range e.Members() {
		e.StopMember(i)
	}
	if l := e.Leader(); l != -1 {
		t.Fatalf("Leader() with all members stopped = %d, want -1", l)
	}
	for i := range e.Members() {
		e.RestartMember(i) // the second one restores the quorum and waits
	}
	e.WaitLeader(t)
	resp, err := cli.Get(harness.Context(t, 10*time.Second), "k")
	if err != nil {
		t.Fatalf("get after full restart: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get after full restart = %v, want v", resp.Kvs)
	}
}
