// Package integration_test runs replicas against a real in-process etcd and
// a Kafka-protocol broker (kfake), with faults injected for real; the
// guarantees of the failure table (docs/failures.md), and what only a real broker
// does, also against Apache Kafka itself, three nodes shared by the
// package (backends_test.go, apache_test.go).
package integration_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/integration/replicarun"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// bin is the offsetkeeper command, built once for tests that run replicas
// as processes.
var bin string

// The offsetkeeper command as the container image builds it, for the
// benchmarks' replicas (imageBin): built by TestMain when benchmarks run,
// before any is timed, and removed by it.
var (
	imageOnce    sync.Once
	imagePath    string
	imageErr     error
	imageCleanup = func() {}
)

// imageBin is harness.BuildImageOffsetkeeper's command, built once.
func imageBin(tb testing.TB) string {
	tb.Helper()
	imageOnce.Do(func() { imagePath, imageCleanup, imageErr = harness.BuildImageOffsetkeeper() })
	if imageErr != nil {
		tb.Fatal(imageErr)
	}
	return imagePath
}

func TestMain(m *testing.M) {
	path, cleanup, err := harness.BuildOffsetkeeper()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = path
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		imageOnce.Do(func() { imagePath, imageCleanup, imageErr = harness.BuildImageOffsetkeeper() })
	}
	code := m.Run()
	// The Apache Kafka the tests shared, if one asked for it, with its
	// clients: before the leak check.
	closeSharedKafka()
	if code == 0 {
		if err := goleak.Find(harness.GoleakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	cleanup()
	imageCleanup()
	os.Exit(code)
}

// env is one etcd, one Kafka and one topic.
type env struct {
	t      *testing.T
	etcd   *harness.Etcd
	kafka  *harness.Kafka
	topic  string
	parts  int
	group  string
	admin  *clientv3.Client
	coord  *coordinator.Coordinator
	logger *zap.Logger
	// leaseTTL is the replicas' lease TTL, 2s when zero: short, so that
	// the tests of a lost replica are quick.
	leaseTTL time.Duration
}

// loadLeaseTTL is the lease of the replicas of a test under load that
// loses no replica: it outlives a keepalive starved on a loaded machine
// (three replicas lost their 2s sessions at once in CI runs, of the join
// and of the drain tests), so that the change the test makes is the only
// one.
const loadLeaseTTL = 6 * time.Second

func newEnv(t *testing.T, topic string, partitions int, opts ...harness.KafkaOption) *env {
	t.Helper()
	etcd := harness.StartEtcd(t, 1)
	k := harness.StartKafka(t, append([]harness.KafkaOption{harness.SeedTopics(partitions, topic)}, opts...)...)
	return newEnvWith(t, etcd, k, topic, partitions)
}

// newEnvWith is an env of etcd and k, over topic, which k already holds
// (see newEnvOn).
func newEnvWith(t *testing.T, etcd *harness.Etcd, k *harness.Kafka, topic string, partitions int) *env {
	t.Helper()
	e := &env{t: t, topic: topic, parts: partitions, group: "g", etcd: etcd, kafka: k}
	e.admin = e.etcd.Client(t)
	c, err := coordinator.New(e.admin, e.group)
	if err != nil {
		t.Fatal(err)
	}
	e.coord = c
	e.logger = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	return e
}

// config is a replica config for tests: short TTL and quick polls.
func (e *env) config(id string) replica.Config {
	return replica.Config{
		Group:          e.group,
		ReplicaID:      id,
		Topics:         []string{e.topic},
		Kafka:          kafkaconf.Config{Brokers: e.kafka.Brokers(), FetchMaxWait: 100 * time.Millisecond},
		LeaseTTL:       cmp.Or(e.leaseTTL, 2*time.Second),
		FlushInterval:  100 * time.Millisecond,
		ResyncInterval: time.Second,
		RebalanceDelay: 20 * time.Millisecond,
	}
}

// produce writes n records per partition with values "<partition>-<i>".
func (e *env) produce(n int) {
	e.t.Helper()
	for p := 0; p < e.parts; p++ {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, `{"p":%d,"i":%d}`, p, i)}
		}
		e.kafka.Produce(e.t, e.topic, p, recs...)
	}
}

// running is a replica started with start.
type running struct {
	*replicarun.Running
	r *replica.Replica
}

// start runs a replica in this process with its own etcd client.
func (e *env) start(cfg replica.Config, sink sinks.Sink) *running {
	e.t.Helper()
	r, err := replica.New(cfg, e.etcd.Client(e.t), sink, e.logger.With(zap.String("test_replica", cfg.ReplicaID)))
	if err != nil {
		e.t.Fatal(err)
	}
	return &running{Running: replicarun.Start(e.t, r), r: r}
}

func (rn *running) stop() { rn.Stop() }
func (rn *running) kill() { rn.Kill() }

// await polls cond until it holds, failing the test after d.
func await(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	harness.Await(t, d, what, cond)
}

// snapshot reads the group's state from etcd.
func (e *env) snapshot() *coordinator.Snapshot {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snap, err := e.coord.Snapshot(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return snap
}

// committed is the group's committed offsets by partition number.
func (e *env) committed() map[int]int64 {
	e.t.Helper()
	snap := e.snapshot()
	out := map[int]int64{}
	for p, o := range snap.Offsets {
		if p.Topic == e.topic {
			out[p.Partition] = o.Next
		}
	}
	return out
}

// allCommitted reports whether every partition's offset reached want.
func (e *env) allCommitted(want map[int]int64) bool {
	got := e.committed()
	for p, n := range want {
		if got[p] < n {
			return false
		}
	}
	return true
}

// logEnds is the log-end offset of every partition.
func (e *env) logEnds() map[int]int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := admin.NewKafka(kafkaconf.Config{Brokers: e.kafka.Brokers()}, e.topic)
	defer k.Close()
	var ps []sinks.Partition
	for p := 0; p < e.parts; p++ {
		ps = append(ps, sinks.Partition{Topic: e.topic, Partition: p})
	}
	bounds, err := k.Bounds(ctx, ps)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int]int64{}
	for p, b := range bounds {
		out[p.Partition] = b.End
	}
	return out
}

// checkFileSink asserts that dir holds every offset below want[p] exactly
// once, with the value produced for it.
func (e *env) checkFileSink(dir string, want map[int]int64) {
	e.t.Helper()
	for p, n := range want {
		recs, err := file.ReadAll(dir, e.topic, p)
		if err != nil {
			e.t.Fatal(err)
		}
		if int64(len(recs)) != n {
			e.t.Errorf("partition %d: %d records in the sink, want %d", p, len(recs), n)
		}
		for i, r := range recs {
			if r.Offset != int64(i) {
				e.t.Fatalf("partition %d: record %d has offset %d: lost or duplicated", p, i, r.Offset)
			}
		}
	}
}

// startEven starts a replica for each of ids, all on one counting sink,
// and a load of perSecond records a second, and waits until the replicas
// own the partitions in even shares.
func (e *env) startEven(perSecond int, ids ...string) (*countingSink, *load) {
	e.t.Helper()
	sink := newCountingSink()
	want := map[string]int{}
	var shares []string
	for _, id := range ids {
		e.start(e.config(id), sink)
		want[id] = e.parts / len(ids)
		shares = append(shares, strconv.Itoa(want[id]))
	}
	l := e.startLoad(perSecond)
	await(e.t, 20*time.Second, strings.Join(shares, "/"), func() bool { return balanced(e.owners(), want) })
	return sink, l
}

// process starts `offsetkeeper run` as a separate process writing to the
// file sink in dir. The tests give each replica a directory of its own, to
// see which one wrote what: a group whose sink differs from member to member
// on purpose, which --allow-sink-change lets the replicas join.
func (e *env) process(id, dir string, extra ...string) *harness.Process {
	e.t.Helper()
	return e.processSink(id, "file://"+dir, append([]string{"--allow-sink-change"}, extra...)...)
}
