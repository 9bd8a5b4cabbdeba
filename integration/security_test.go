package integration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// securityTimeout bounds each wait of the security tests.
const securityTimeout = 60 * time.Second

// replicaArgs are the flags of `offsetkeeper run` for group, consuming
// topic into a file sink in a new directory, which it returns.
func replicaArgs(t *testing.T, etcdEndpoints, brokers []string, group, topic string, extra ...string) ([]string, string) {
	dir := t.TempDir()
	return append([]string{"run",
		"--etcd-endpoints", strings.Join(etcdEndpoints, ","),
		"--brokers", strings.Join(brokers, ","),
		"--group", group,
		"--topics", topic,
		"--sink", "file://" + dir,
		"--replica-id", group + "-replica",
		"--lease-ttl", "2s",
		"--flush-interval", "100ms",
		"--fetch-max-wait", "100ms",
		"--log-format", "console",
		"--log-level", "debug", // every line the replica can write is checked for the password
		"--http-addr", "127.0.0.1:0", // processes share the host
	}, extra...), dir
}

// committedOf is group's committed offsets by partition of topic, read as
// root.
func committedOf(t *testing.T, cli *clientv3.Client, group, topic string) map[int]int64 {
	t.Helper()
	coord, err := coordinator.New(cli, group)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snap, err := coord.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int64{}
	for p, o := range snap.Offsets {
		if p.Topic == topic {
			out[p.Partition] = o.Next
		}
	}
	return out
}

func reached(got map[int]int64, partitions int, n int64) bool {
	for p := 0; p < partitions; p++ {
		if got[p] < n {
			return false
		}
	}
	return true
}

// noSecret fails the test if any line of out holds one of the secrets.
func noSecret(t *testing.T, who, out string, secrets ...string) {
	t.Helper()
	for i, line := range strings.Split(out, "\n") {
		for _, s := range secrets {
			if strings.Contains(line, s) {
				t.Errorf("%s: line %d shows a password: %s", who, i+1, line)
			}
		}
	}
}

// The etcd cluster serves TLS only, requires client certificates and has
// auth on. The replica's user holds one role: readwrite on its group's
// prefix. Its replica consumes; a replica of another group with the same
// credentials is refused at start with an error that names the group and
// the permission it lacks, and writes nothing.
func TestEtcdTLSAuthLimitsReplicaToItsGroup(t *testing.T) {
	const (
		topic, parts, n = "orders", 2, 200
		user, role      = "orders-writer", "orders-g1"
		password        = "s3cret-etcd-Pa55"
	)
	pki := harness.NewEtcdTLS(t)
	etcd := harness.StartEtcdTLS(t, 1, pki)
	root := etcd.Client(t)

	ctx, cancel := context.WithTimeout(context.Background(), securityTimeout)
	defer cancel()
	prefix := coordinator.KeysFor("g1").Prefix()
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, role); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, role, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, user, password); return err },
		func() error { _, err := root.UserGrantRole(ctx, user, role); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("etcd auth setup: %v", err)
		}
	}
	etcd.EnableAuth(t)

	kafka := harness.StartKafka(t, harness.SeedTopics(parts, topic))
	for p := 0; p < parts; p++ {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Value: fmt.Appendf(nil, `{"p":%d,"i":%d}`, p, i)}
		}
		kafka.Produce(t, topic, p, recs...)
	}

	// The certificate's name is no etcd user: only the password grants.
	cert, key := pki.ClientCert(t, "offsetkeeper")
	pwFile := filepath.Join(t.TempDir(), "etcd-password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsFlags := []string{"--etcd-cacert", pki.CAFile, "--etcd-cert", cert, "--etcd-key", key, "--etcd-user", user}

	args, dir := replicaArgs(t, etcd.Endpoints(), kafka.Brokers(), "g1", topic, append(tlsFlags, "--etcd-password-file", pwFile)...)
	g1 := harness.StartProcess(t, "g1", bin, args...)
	await(t, securityTimeout, "g1 to commit every record", func() bool {
		if g1.Exited() {
			t.Fatalf("the g1 replica exited:\n%s", g1.Output())
		}
		return reached(committedOf(t, root, "g1", topic), parts, n)
	})
	for p := 0; p < parts; p++ {
		recs, err := file.ReadAll(dir, topic, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != n {
			t.Errorf("partition %d: %d records in the g1 sink, want %d", p, len(recs), n)
		}
	}

	// The same user for group g2, the password from the environment this
	// time.
	t.Setenv("OFFSETKEEPER_ETCD_PASSWORD", password)
	args, _ = replicaArgs(t, etcd.Endpoints(), kafka.Brokers(), "g2", topic, tlsFlags...)
	g2 := harness.StartProcess(t, "g2", bin, args...)
	if code := g2.Wait(securityTimeout); code != 1 {
		t.Fatalf("the g2 replica exited %d, want 1:\n%s", code, g2.Output())
	}
	out := g2.Output()
	for _, want := range []string{"permission denied", `group "g2"`, `user "orders-writer"`, "/offsetkeeper/v1/groups/g2/"} {
		if !strings.Contains(out, want) {
			t.Errorf("the g2 replica's error does not say %q:\n%s", want, out)
		}
	}
	if got := committedOf(t, root, "g2", topic); len(got) != 0 {
		t.Errorf("g2 has offsets in etcd: %v", got)
	}
	resp, err := root.Get(ctx, coordinator.KeysFor("g2").Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("g2 left %d keys in etcd", resp.Count)
	}

	g1.Signal(syscall.SIGTERM)
	if code := g1.Wait(securityTimeout); code != 0 {
		t.Errorf("the g1 replica exited %d after SIGTERM:\n%s", code, g1.Output())
	}
	noSecret(t, "g1", g1.Output(), password)
	noSecret(t, "g2", out, password)
}

// kfake requires SASL; the replica's user is a SCRAM-SHA-512 user. With the
// right password the replica consumes; with a wrong one it fails at start
// with an error that names the mechanism and the user. No log line of
// either shows a password.
func TestKafkaSASLSCRAM(t *testing.T) {
	const (
		topic, parts, n = "payments", 2, 200
		user            = "offsetkeeper"
		password        = "kafka-Pa55-w0rd"
		wrong           = "not-the-Pa55-w0rd"
	)
	etcd := harness.StartEtcd(t, 1)
	root := etcd.Client(t)
	kafka := harness.StartKafka(t, harness.SeedTopics(parts, topic), harness.KfakeOptions(
		kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", user, password),
	))

	producer, err := kgo.NewClient(
		kgo.SeedBrokers(kafka.Brokers()...),
		kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), securityTimeout)
	defer cancel()
	var recs []*kgo.Record
	for p := 0; p < parts; p++ {
		for i := 0; i < n; i++ {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(p), Value: fmt.Appendf(nil, `{"p":%d,"i":%d}`, p, i)})
		}
	}
	if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce with SASL: %v", err)
	}

	sasl := []string{"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-user", user}

	t.Setenv("OFFSETKEEPER_KAFKA_PASSWORD", wrong)
	args, _ := replicaArgs(t, etcd.Endpoints(), kafka.Brokers(), "bad", topic, sasl...)
	bad := harness.StartProcess(t, "bad", bin, args...)
	if code := bad.Wait(securityTimeout); code != 1 {
		t.Fatalf("the replica with a wrong password exited %d, want 1:\n%s", code, bad.Output())
	}
	badOut := bad.Output()
	for _, want := range []string{"SASL Authentication Failed", `SCRAM-SHA-512 as "offsetkeeper"`, "kafka at " + kafka.Brokers()[0]} {
		if !strings.Contains(badOut, want) {
			t.Errorf("the refused replica's error does not say %q:\n%s", want, badOut)
		}
	}
	if got := committedOf(t, root, "bad", topic); len(got) != 0 {
		t.Errorf("the refused replica committed offsets: %v", got)
	}

	t.Setenv("OFFSETKEEPER_KAFKA_PASSWORD", password)
	args, _ = replicaArgs(t, etcd.Endpoints(), kafka.Brokers(), "good", topic, sasl...)
	good := harness.StartProcess(t, "good", bin, args...)
	await(t, securityTimeout, "the replica with the right password to commit every record", func() bool {
		if good.Exited() {
			t.Fatalf("the replica with the right password exited:\n%s", good.Output())
		}
		return reached(committedOf(t, root, "good", topic), parts, n)
	})
	good.Signal(syscall.SIGTERM)
	if code := good.Wait(securityTimeout); code != 0 {
		t.Errorf("the replica exited %d after SIGTERM:\n%s", code, good.Output())
	}
	noSecret(t, "good", good.Output(), password, wrong)
	noSecret(t, "bad", badOut, password, wrong)
}
