package integration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// TestOldestEtcd: the oldest etcd offsetkeeper supports, 3.4 (Debian's
// etcd-server), runs a group as the embedded current release does: two
// replicas as processes join, claim and commit (nested transactions in
// one round), one SIGKILLed hands its partitions over when its lease
// expires, history is compacted (--etcd-compact-interval), the database
// size is read (etcd 3.4 reports no quota), and groups delete's
// conditional delete of a prefix works.
func TestOldestEtcd(t *testing.T) {
	path := harness.EtcdBinaryPath()
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no etcd binary of another version: test.sh installs Debian's etcd-server (3.4)")
		}
		t.Skip("no etcd binary (Debian's etcd-server, or $OFFSETKEEPER_ETCD_BIN)")
	}
	etcd := harness.StartEtcdBinary(t, path)
	t.Logf("etcd %s", etcd.Version)
	k := harness.StartKafka(t, harness.SeedTopics(4, "orders"))
	cli := etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(id string) *harness.Process {
		return harness.StartProcess(t, id, bin, "run", "--http-addr", "127.0.0.1:0", "--etcd-endpoints", etcd.Endpoint(),
			"--brokers", strings.Join(k.Brokers(), ","), "--group", "g", "--topics", "orders", "--sink", "file://"+t.TempDir(),
			"--allow-sink-change", "--replica-id", id, "--lease-ttl", "2s", "--flush-interval", "100ms", "--fetch-max-wait", "100ms",
			"--etcd-compact-interval", "1s", "--log-format", "console")
	}
	coord, err := coordinator.New(cli, "g")
	if err != nil {
		t.Fatal(err)
	}
	owners := func() map[string]int {
		snap, err := coord.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, c := range snap.Claims {
			out[c.Replica]++
		}
		return out
	}
	committed := func() int64 {
		snap, err := coord.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, o := range snap.Offsets {
			n += o.Next
		}
		return n
	}
	a, b := start("a"), start("b")
	await(t, 30*time.Second, "a and b to share the partitions", func() bool { return balanced(owners(), map[string]int{"a": 2, "b": 2}) })
	produce := func(n int) {
		for p := range 4 {
			recs := make([]*kgo.Record, n)
			for i := range recs {
				recs[i] = &kgo.Record{Value: fmt.Appendf(nil, `{"i":%d}`, i)}
			}
			k.Produce(t, "orders", p, recs...)
		}
	}
	produce(100)
	await(t, 30*time.Second, "400 records committed", func() bool { return committed() == 400 })
	b.Kill()
	await(t, 30*time.Second, "a to take b's partitions", func() bool { return balanced(owners(), map[string]int{"a": 4}) })
	produce(50)
	await(t, 30*time.Second, "600 records committed", func() bool { return committed() == 600 })

	// Compacted: a read at revision 1 is refused.
	await(t, 30*time.Second, "a compaction of etcd's history", func() bool {
		_, err := cli.Get(ctx, "x", clientv3.WithRev(1))
		return errors.Is(err, rpctypes.ErrCompacted)
	})
	a.Signal(syscall.SIGTERM)
	if code := a.Wait(20 * time.Second); code != 0 {
		t.Fatalf("a exited %d:\n%s", code, a.Output())
	}
	del := harness.StartProcess(t, "groups delete", bin, "groups", "delete", "--etcd-endpoints", etcd.Endpoint(), "--group", "g", "--execute")
	if code := del.Wait(30 * time.Second); code != 0 {
		t.Fatalf("groups delete on etcd %s: exit %d\n%s", etcd.Version, code, del.Output())
	}
	resp, err := cli.Get(ctx, coordinator.KeysFor("g").Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("after groups delete: %d keys, %v", resp.Count, err)
	}
}

// Issue 40, dev to production: `dev --etcd-endpoints --brokers` runs the
// same replicas, faults, verdict and audit against an existing etcd and
// Apache Kafka: its topic is created there (events-<time>), every record
// is delivered, and the run's group is gone from etcd when it ends.
func TestDevAgainstAnExistingCluster(t *testing.T) {
	k := harness.StartApacheKafka(t, harness.Nodes(1))
	etcd := harness.StartEtcd(t, 1)
	p := harness.StartProcess(t, "dev", bin, "dev", "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
		"--brokers", strings.Join(k.Brokers(), ","), "--messages", "3000", "--partitions", "4", "--replicas", "2",
		"--chaos", "--faults", "kill,kafka-cut,release", "--duration", "6s", "--chaos-every", "1s", "--timeout", "2m")
	if code := p.Wait(3 * time.Minute); code != 0 {
		t.Fatalf("dev against an existing cluster exited %d:\n%s", code, p.Output())
	}
	out := p.Output()
	for _, want := range []string{"kafka:   " + strings.Join(k.Brokers(), ","), "topic:   events-", "group:   dev-",
		"produced=3000 delivered=3000 lost=0 duplicates=0"} {
		if !strings.Contains(out, want) {
			t.Errorf("dev's output does not say %q:\n%s", want, out)
		}
	}
	groups, err := coordinator.Groups(context.Background(), etcd.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 0 {
		t.Errorf("groups left in etcd: %v", groups)
	}
}
