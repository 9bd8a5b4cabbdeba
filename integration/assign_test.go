package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

func TestSIGKILLFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and lease expiry")
	}
	eachBackend(t, func(t *testing.T, kb kafkaBackend) {
		e := newEnvOn(t, kb, "orders", 12)
		dirs := map[string]string{"a": t.TempDir(), "b": t.TempDir(), "c": t.TempDir()}
		procs := map[string]*harness.Process{}
		for id, dir := range dirs {
			procs[id] = e.process(id, dir)
		}
		l := e.startLoad(2000)
		await(t, 20*time.Second, "4/4/4", func() bool { return balanced(e.owners(), map[string]int{"a": 4, "b": 4, "c": 4}) })
		if kb.real {
			// A leader moved while records flow, before the failover.
			electFault(0).inject(t, e.kafka, e.topic)
		}

		killed := time.Now()
		procs["b"].Kill()
		await(t, 2*time.Second+3*time.Second, "a and c to own all 12 within TTL+3s", func() bool {
			return balanced(e.owners(), map[string]int{"a": 6, "c": 6})
		})
		took := time.Since(killed)
		produced := l.stop(t)
		await(t, 30*time.Second, "everything committed", func() bool { return e.allCommitted(produced) })
		dups := e.readUnion(dirs["a"], dirs["b"], dirs["c"]).check(t, produced)
		for p, offs := range dups {
			if runs := contiguousRuns(offs); runs > 1 {
				t.Errorf("partition %d: %d duplicated ranges, want at most one replayed block", p, runs)
			}
		}
		t.Logf("failover after SIGKILL: %s (ttl 2s); duplicated offsets in %d partitions (one replayed block at most)", took.Round(10*time.Millisecond), len(dups))
	})
}

func TestSIGTERMHandoff(t *testing.T) {
	eachBackend(t, func(t *testing.T, kb kafkaBackend) {
		e := newEnvOn(t, kb, "orders", 12)
		da, db := t.TempDir(), t.TempDir()
		a := e.process("a", da, "--lease-ttl", "10s")
		e.process("b", db, "--lease-ttl", "10s")
		l := e.startLoad(2000)
		await(t, 20*time.Second, "6/6", func() bool { return balanced(e.owners(), map[string]int{"a": 6, "b": 6}) })
		await(t, 10*time.Second, "records flowing", func() bool { return len(e.committed()) == 12 })

		stopped := time.Now()
		a.Signal(syscall.SIGTERM)
		await(t, 2*time.Second, "b to own all 12 within 2s (ttl is 10s)", func() bool {
			return balanced(e.owners(), map[string]int{"b": 12})
		})
		took := time.Since(stopped)
		if code := a.Wait(10 * time.Second); code != 0 {
			t.Fatalf("a exited %d after SIGTERM, want 0", code)
		}
		produced := l.stop(t)
		await(t, 30*time.Second, "everything committed", func() bool { return e.allCommitted(produced) })
		if dups := e.readUnion(da, db).check(t, produced); len(dups) > 0 {
			t.Fatalf("duplicates after a graceful handoff: %v", dups)
		}
		t.Logf("handoff after SIGTERM: %s", took.Round(10*time.Millisecond))
	})
}

func TestJoinUnderLoadRebalancesWithoutDuplicates(t *testing.T) {
	e := newEnv(t, "orders", 12)
	e.leaseTTL = loadLeaseTTL
	sink, l := e.startEven(3000, "a", "b", "c")
	before := e.claimMap()

	joined := time.Now()
	e.start(e.config("d"), sink)
	await(t, 20*time.Second, "3/3/3/3", func() bool {
		return balanced(e.owners(), map[string]int{"a": 3, "b": 3, "c": 3, "d": 3})
	})
	took := time.Since(joined)
	after := e.claimMap()
	moved := 0
	for p, owner := range after {
		if before[p] != owner {
			moved++
			if owner != "d" {
				t.Errorf("partition %d moved from %s to %s, want moves only to the joiner", p, before[p], owner)
			}
		}
	}
	if moved > 3 {
		t.Errorf("%d partitions moved, want at most 3", moved)
	}
	produced := l.stop(t)
	await(t, 30*time.Second, "everything committed", func() bool { return e.allCommitted(produced) })
	sink.exactlyOnce(t, produced)
	t.Logf("join rebalance: %s, %d partitions moved", took.Round(10*time.Millisecond), moved)
}

func TestZombieSIGSTOPIsFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and lease expiry")
	}
	e := newEnv(t, "orders", 8)
	da, db := t.TempDir(), t.TempDir()
	a := e.process("a", da)
	e.process("b", db)
	l := e.startLoad(2000)
	await(t, 20*time.Second, "4/4", func() bool { return balanced(e.owners(), map[string]int{"a": 4, "b": 4}) })
	await(t, 10*time.Second, "records flowing", func() bool { return len(e.committed()) == 8 })

	a.Signal(syscall.SIGSTOP)
	await(t, 10*time.Second, "b to own all 8 after a's lease expired", func() bool {
		return balanced(e.owners(), map[string]int{"b": 8})
	})
	// More records while a is frozen, then it wakes up as a zombie.
	await(t, 10*time.Second, "b to commit past a's freeze", func() bool { return len(e.committed()) == 8 })
	a.Signal(syscall.SIGCONT)
	await(t, 20*time.Second, "a to rejoin and the group to rebalance to 4/4", func() bool {
		return balanced(e.owners(), map[string]int{"a": 4, "b": 4})
	})
	produced := l.stop(t)
	await(t, 30*time.Second, "everything committed", func() bool { return e.allCommitted(produced) })
	dups := e.readUnion(da, db).check(t, produced)
	for p, offs := range dups {
		if runs := contiguousRuns(offs); runs > 1 {
			t.Errorf("partition %d: %d duplicated ranges, want at most the one block a had in flight", p, runs)
		}
	}
	out := a.Output()
	if !strings.Contains(out, "session lost") {
		t.Errorf("the zombie never noticed it lost its session; its output:\n%s", out)
	}
	t.Logf("zombie: duplicated offsets in %d of 8 partitions", len(dups))
}

func TestCutOffFromEtcdStopsWriting(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and lease expiry")
	}
	e := newEnv(t, "orders", 4)
	proxy := harness.NewProxy(t, e.etcd.Addr(0))
	da, db := t.TempDir(), t.TempDir()
	const ttl = 4 * time.Second
	args := []string{"run",
		"--etcd-endpoints", proxy.Addr(),
		"--brokers", strings.Join(e.kafka.Brokers(), ","),
		"--group", e.group, "--topics", e.topic,
		"--sink", "file://" + da, "--replica-id", "a",
		"--lease-ttl", ttl.String(), "--flush-interval", "50ms", "--fetch-max-wait", "50ms",
		"--log-format", "console", "--http-addr", "127.0.0.1:0",
		"--allow-sink-change", // b writes a directory of its own, to see what each wrote
	}
	a := harness.StartProcess(t, "a", bin, args...)
	l := e.startLoad(2000)
	await(t, 20*time.Second, "a to own all 4", func() bool { return balanced(e.owners(), map[string]int{"a": 4}) })
	await(t, 10*time.Second, "a writing", func() bool { return !lastWrite(t, da).IsZero() })

	cut := time.Now()
	proxy.Blackhole()
	await(t, ttl/2+2*time.Second, "a to say it lost its session", func() bool { return strings.Contains(a.Output(), "session lost") })
	// Records keep arriving in Kafka, which a still reaches: it must not
	// write them.
	time.Sleep(time.Second)
	last := lastWrite(t, da)
	if stopped := last.Sub(cut); stopped > ttl/2+500*time.Millisecond {
		t.Fatalf("a wrote %s after it was cut off from etcd, want at most ttl/2 (%s) plus slack", stopped, ttl/2)
	}
	// Another replica takes over once a's lease expires, and nothing is
	// lost.
	e.process("b", db)
	await(t, 20*time.Second, "b to own all 4", func() bool { return balanced(e.owners(), map[string]int{"b": 4}) })
	produced := l.stop(t)
	await(t, 30*time.Second, "everything committed", func() bool { return e.allCommitted(produced) })
	e.readUnion(da, db).check(t, produced)
	t.Logf("last write %s after the cut (ttl/2 = %s)", last.Sub(cut).Round(10*time.Millisecond), ttl/2)
	proxy.Pass()
}

func TestPartitionsAddedAreConsumed(t *testing.T) {
	e := newEnv(t, "orders", 2)
	sink := newCountingSink()
	cfg := e.config("a")
	cfg.MetadataInterval = 200 * time.Millisecond
	e.start(cfg, sink)
	e.produce(10)
	await(t, 20*time.Second, "2 partitions committed", func() bool { return e.allCommitted(perPartition(2, 10)) })
	e.kafka.AddPartitions(t, "orders", 2)
	e.parts = 4
	e.produce(10)
	await(t, 20*time.Second, "the 2 new partitions claimed and committed", func() bool {
		return e.allCommitted(map[int]int64{0: 20, 1: 20, 2: 10, 3: 10})
	})
}

// The replica reads its topics' partitions every MetadataInterval over the
// consumer's connections: a client of its own each time dialled a broker
// (a TLS handshake and a login where Kafka asks for them) and sent two
// metadata requests, one of them its transport's. A new connection begins
// with ApiVersions, so none is to be seen while the partitions are read.
func TestPartitionsReadOverTheConsumersConnections(t *testing.T) {
	e := newEnv(t, "orders", 2)
	cl := e.kafka.Cluster()
	var metadata, versions atomic.Int64
	count := func(key int16, n *atomic.Int64) {
		cl.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
			cl.KeepControl()
			n.Add(1)
			return nil, nil, false
		})
	}
	count(kmsg.Metadata.Int16(), &metadata)
	count(kmsg.ApiVersions.Int16(), &versions)
	cfg := e.config("a")
	cfg.MetadataInterval = 50 * time.Millisecond
	e.start(cfg, newCountingSink())
	e.produce(10)
	await(t, 20*time.Second, "2 partitions committed", func() bool { return e.allCommitted(perPartition(2, 10)) })
	v0, m0 := versions.Load(), metadata.Load()
	await(t, 20*time.Second, "the partitions read 10 times more", func() bool { return metadata.Load() >= m0+10 })
	if n := versions.Load() - v0; n != 0 {
		t.Errorf("%d connections made while the partitions were read %d times, want none", n, metadata.Load()-m0)
	}
}

func TestScaleThousandPartitionsTenReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 partitions")
	}
	const parts, replicas = 1000, 10
	e := newEnv(t, "wide", parts)
	var requests atomic.Int64
	count := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		requests.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	countStreams := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		requests.Add(1)
		return streamer(ctx, desc, cc, method, opts...)
	})
	start := time.Now()
	var rs []*replica.Replica
	for i := 0; i < replicas; i++ {
		cli, err := clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), DialTimeout: 5 * time.Second,
			Logger: zap.NewNop(), DialOptions: []grpc.DialOption{count, countStreams}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		cfg := e.config(fmt.Sprintf("r%02d", i))
		cfg.Kafka.FetchMaxWait = 10 * time.Second // 1,000 idle partitions: poll them slowly
		cfg.LeaseTTL = 10 * time.Second
		r, err := replica.New(cfg, cli, discard.New(), e.logger)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		rs = append(rs, r)
	}
	want := map[string]int{}
	for i := 0; i < replicas; i++ {
		want[fmt.Sprintf("r%02d", i)] = parts / replicas
	}
	await(t, 120*time.Second, "1,000 partitions balanced over 10 replicas, each running its claims", func() bool {
		if !balanced(e.owners(), want) {
			return false
		}
		// A replica learns of its claims one etcd answer after etcd
		// holds them: give that answer time to arrive.
		for _, r := range rs {
			if len(r.Owned()) != parts/replicas {
				return false
			}
		}
		return true
	})
	took, reqs := time.Since(start), requests.Load()
	for _, r := range rs {
		if n := len(r.Owned()); n != parts/replicas {
			t.Errorf("%s runs %d partitions, want %d", r.ID(), n, parts/replicas)
		}
	}
	t.Logf("1,000 partitions, 10 replicas: balanced in %s with %d etcd requests", took.Round(10*time.Millisecond), reqs)
}
