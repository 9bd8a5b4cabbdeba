package integration_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// What a replica tells of a stall: the lag in seconds keeps growing through
// rollbacks, the stall in seconds says how long nothing was committed, the
// lag in records follows the log end while nothing is fetched, and the
// failures are logged as errors naming the sink once they last.

// lagOf is partition p's lag as the replica reports it.
func lagOf(r *replica.Replica, p int) (replica.PartitionLag, bool) {
	for _, l := range r.Lag() {
		if l.Partition.Partition == p {
			return l, true
		}
	}
	return replica.PartitionLag{}, false
}

// Row 1 of the signals issue: the sink fails every write for a while (a
// full disk): the lag in seconds and the stall grow without a reset, the
// lag in records grows with the records produced meanwhile, the errors are
// counted, and an error naming the sink is logged; then the sink recovers
// and everything is delivered.
func TestFailingSinkStallIsReported(t *testing.T) {
	e := newEnv(t, "orders", 1)
	core, logs := observer.New(zapcore.WarnLevel)
	e.logger = zap.New(core)
	e.produce(100)
	fs, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var failing atomic.Bool
	sink := &hookSink{inner: fs, before: func(context.Context, *sinks.Block) error {
		if failing.Load() {
			return errors.New("write orders: no space left on device")
		}
		return nil
	}}
	cfg := e.config("r1")
	cfg.Sink = "file:///full-disk"
	cfg.LogEndInterval = 200 * time.Millisecond
	rn := e.start(cfg, sink)
	await(t, 20*time.Second, "the first records committed", func() bool { return e.committed()[0] == 100 })

	failing.Store(true)
	failed := time.Now()
	e.produce(100)
	var last replica.PartitionLag
	await(t, 20*time.Second, "three seconds of failing writes", func() bool { return time.Since(failed) > 3*time.Second })
	for range 5 {
		l, ok := lagOf(rn.r, 0)
		if !ok {
			t.Fatal("partition 0 not owned")
		}
		if l.Lag != 100 {
			t.Fatalf("lag %d records while nothing is written, want the 100 produced", l.Lag)
		}
		if l.LagSeconds < last.LagSeconds || l.StalledSeconds < last.StalledSeconds {
			t.Fatalf("lag went back through a rollback: %.2fs then %.2fs, stalled %.2fs then %.2fs",
				last.LagSeconds, l.LagSeconds, last.StalledSeconds, l.StalledSeconds)
		}
		last = l
		time.Sleep(300 * time.Millisecond)
	}
	if last.StalledSeconds < 3 || last.LagSeconds < 3 {
		t.Fatalf("after %v of failures: lag %.2fs, stalled %.2fs; want both past 3s", time.Since(failed), last.LagSeconds, last.StalledSeconds)
	}
	if n := rn.r.Stats().SinkErrors; n < 3 {
		t.Fatalf("%d sink errors counted", n)
	}
	errs := logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("keeps failing").All()
	if len(errs) == 0 || !strings.Contains(errs[0].ContextMap()["sink"].(string), "file:///full-disk") {
		t.Fatalf("no error log naming the sink after %d failures: %v", rn.r.Stats().SinkErrors, errs)
	}

	failing.Store(false)
	await(t, 20*time.Second, "everything committed once the sink recovers", func() bool { return e.committed()[0] == 200 })
	await(t, 10*time.Second, "the stall to end", func() bool {
		l, _ := lagOf(rn.r, 0)
		return l.StalledSeconds == 0 && l.LagSeconds == 0
	})
}

// Row 2: a write hangs (a table locked by a migration): the write in flight
// is reported and grows, the lag in records follows the log end although
// the partition fetches nothing, the write fails at the write timeout and
// is counted, and a warning says once that it is slow.
func TestHangingWriteIsBoundedAndReported(t *testing.T) {
	e := newEnv(t, "orders", 1)
	core, logs := observer.New(zapcore.WarnLevel)
	e.logger = zap.New(core)
	fs, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var hang atomic.Bool
	hang.Store(true)
	sink := &hookSink{inner: fs, before: func(ctx context.Context, _ *sinks.Block) error {
		if hang.Load() {
			<-ctx.Done() // a lock that outlasts the write's bound
			return ctx.Err()
		}
		return nil
	}}
	cfg := e.config("r1")
	cfg.WriteTimeout = 2 * time.Second
	cfg.LogEndInterval = 200 * time.Millisecond
	rn := e.start(cfg, sink)
	e.produce(100)
	await(t, 10*time.Second, "a write in flight for a second", func() bool {
		l, ok := lagOf(rn.r, 0)
		return ok && l.WriteSeconds > 1
	})
	e.produce(100)
	await(t, 10*time.Second, "the lag in records to follow the log end during the write", func() bool {
		l, _ := lagOf(rn.r, 0)
		return l.Lag == 200
	})
	await(t, 10*time.Second, "the write to time out", func() bool { return rn.r.Stats().WriteTimeouts > 0 })
	if n := len(logs.FilterMessageSnippet("a sink write is taking long").All()); n == 0 {
		t.Fatal("no warning of the slow write")
	}
	hang.Store(false)
	await(t, 20*time.Second, "everything committed once the lock is gone", func() bool { return e.committed()[0] == 200 })
}

// Row 3: two deployments of one group with different sinks (a typo in
// one): the second replica refuses to start, exit 2, naming the member that
// writes elsewhere and both sinks; with --allow-sink-change it joins.
func TestSecondSinkForAGroupRefused(t *testing.T) {
	e := newEnv(t, "orders", 2)
	da, db := t.TempDir(), t.TempDir()
	a := e.processSink("a", "file://"+da)
	await(t, 20*time.Second, "a to own both partitions", func() bool { return balanced(e.owners(), map[string]int{"a": 2}) })
	b := e.processSink("b", "file://"+db)
	if code := b.Wait(20 * time.Second); code != 2 {
		t.Fatalf("b exited %d, want 2:\n%s", code, b.Output())
	}
	for _, want := range []string{`group "` + e.group + `"`, "file://" + da, "file://" + db, "member a", "--allow-sink-change"} {
		if !strings.Contains(b.Output(), want) {
			t.Errorf("b's error does not say %q:\n%s", want, b.Output())
		}
	}
	if owners := e.owners(); owners["a"] != 2 || len(owners) != 1 {
		t.Fatalf("owners %v after b was refused", owners)
	}
	// A replica that refuses to start leaves no claim in its directory.
	if _, err := os.Stat(filepath.Join(db, ".offsetkeeper-groups")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("b claimed its directory though it refused to start: %v", err)
	}
	e.processSink("c", "file://"+db, "--allow-sink-change")
	await(t, 20*time.Second, "c to join", func() bool { return balanced(e.owners(), map[string]int{"a": 1, "c": 1}) })
	if a.Exited() {
		t.Fatalf("a exited:\n%s", a.Output())
	}
}

// Issue 40, row 7: a replica started with other --topics than its group's
// live replicas (orders,small beside orders) is refused, exit 2, naming
// both lists and the flag that allows it; "small" gets no claim. Before,
// it joined, and once it stopped "small" stayed in the group unowned.
func TestOtherTopicsForAGroupRefused(t *testing.T) {
	e := newEnv(t, "orders", 2)
	e.kafka.CreateTopic(t, "small", 1)
	dir := t.TempDir()
	a := e.processSink("a", "file://"+dir)
	await(t, 20*time.Second, "a to own both partitions", func() bool { return balanced(e.owners(), map[string]int{"a": 2}) })
	b := e.processSink("b", "file://"+dir, "--topics", "small")
	if code := b.Wait(20 * time.Second); code != 2 {
		t.Fatalf("b exited %d, want 2:\n%s", code, b.Output())
	}
	for _, want := range []string{`group "` + e.group + `" reads topics orders (member a)`, "this replica orders,small", "--allow-topic-change"} {
		if !strings.Contains(b.Output(), want) {
			t.Errorf("b's error does not say %q:\n%s", want, b.Output())
		}
	}
	snap, err := e.coord.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for p := range snap.Claims {
		if p.Topic == "small" {
			t.Errorf("the refused replica's topic has a claim: %v", p)
		}
	}
	c := e.processSink("c", "file://"+dir, "--topics", "small", "--allow-topic-change")
	await(t, 20*time.Second, "c to join with --allow-topic-change", func() bool { return e.owners()["c"] > 0 })
	c.Signal(syscall.SIGTERM)
	if code := c.Wait(20 * time.Second); code != 0 {
		t.Errorf("c exited %d:\n%s", code, c.Output())
	}
	if a.Exited() {
		t.Fatalf("a exited:\n%s", a.Output())
	}
}

// Issue 40, row 6: a second replica given a live replica's --replica-id
// exits 2 after one lease TTL, naming the live one's host and PID; the
// live one keeps its partitions. Before, it retried "replica id already
// registered" forever.
func TestDuplicateReplicaIDRefused(t *testing.T) {
	e := newEnv(t, "orders", 2)
	dir := t.TempDir()
	a := e.processSink("a", "file://"+dir)
	await(t, 20*time.Second, "a to own both partitions", func() bool { return balanced(e.owners(), map[string]int{"a": 2}) })
	start := time.Now()
	twin := e.processSink("a", "file://"+dir)
	if code := twin.Wait(30 * time.Second); code != 2 {
		t.Fatalf("the second replica a exited %d, want 2:\n%s", code, twin.Output())
	}
	took := time.Since(start)
	if took < 2*time.Second {
		t.Errorf("refused after %s, within the lease TTL (2s): a restart of a crashed replica would be refused too", took)
	}
	for _, want := range []string{`replica id "a" is held in group "g"`, fmt.Sprintf("pid %d", a.PID()), "--replica-id"} {
		if !strings.Contains(twin.Output(), want) {
			t.Errorf("the error does not say %q:\n%s", want, twin.Output())
		}
	}
	if owners := e.owners(); owners["a"] != 2 || a.Exited() {
		t.Fatalf("owners %v after the twin was refused; a exited: %v", owners, a.Exited())
	}
}

// Row 8: a stop must stop. A replica started while etcd, or Kafka, does
// not answer (each behind a proxy that swallows every byte, as a
// partitioned network does) waits for it; SIGTERM during that wait ends
// the process at once, exit 0, rather than after the wait's own timeout.
func TestSIGTERMDuringStartWaitsStops(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(e *env) []string // the flags that point the replica at the cut-off server
	}{
		{"etcd", func(e *env) []string {
			p := harness.NewProxy(t, e.etcd.Endpoints()[0])
			p.Blackhole()
			return []string{"--etcd-endpoints", p.Addr()}
		}},
		{"kafka", func(e *env) []string {
			p := harness.NewProxy(t, e.kafka.Brokers()[0])
			p.Blackhole()
			return []string{"--brokers", p.Addr()}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "orders", 1)
			r := e.processSink("a", "file://"+t.TempDir(), tc.cut(e)...)
			// Its endpoints served: what follows is the wait on the server.
			await(t, 20*time.Second, "the replica to start and wait", func() bool {
				return strings.Contains(r.Output(), "serving http") || r.Exited()
			})
			if r.Exited() {
				t.Fatalf("the replica exited before it was stopped:\n%s", r.Output())
			}
			stopped := time.Now()
			r.Signal(syscall.SIGTERM)
			code := r.Wait(10 * time.Second)
			if took := time.Since(stopped); took > 3*time.Second {
				t.Errorf("SIGTERM took %s to stop a replica waiting on %s, want under 3s", took.Round(time.Millisecond), tc.name)
			}
			if code != 0 {
				t.Errorf("exit %d after SIGTERM, want 0:\n%s", code, r.Output())
			}
		})
	}
}

// Row 10: a graceful stop whose block in flight outlasts the shutdown
// timeout gives it up: the stop ends within the timeout, the block is rolled
// back (its offset not committed), a warning names it (partition, range)
// and says the next owner replays it, and Abandoned counts it. The next
// owner delivers every record: nothing lost.
func TestStopThatGivesUpABlockSaysSo(t *testing.T) {
	e := newEnv(t, "orders", 1)
	core, logs := observer.New(zapcore.WarnLevel)
	e.logger = zap.New(core)
	var inFlight atomic.Bool
	stuck := &hookSink{inner: &recordSink{}, before: func(ctx context.Context, _ *sinks.Block) error {
		inFlight.Store(true)
		<-ctx.Done() // a write that never ends by itself
		return ctx.Err()
	}}
	cfg := e.config("a")
	cfg.ShutdownTimeout = time.Second
	cfg.WriteTimeout = time.Minute
	ra := e.start(cfg, stuck)
	e.produce(100)
	await(t, 10*time.Second, "a write in flight", inFlight.Load)

	began := time.Now()
	ra.stop()
	if took := time.Since(began); took > cfg.ShutdownTimeout+3*time.Second {
		t.Errorf("the stop took %s with a shutdown timeout of %s", took.Round(time.Millisecond), cfg.ShutdownTimeout)
	}
	if n := ra.r.Stats().Abandoned; n != 1 {
		t.Errorf("Abandoned %d, want 1", n)
	}
	said := logs.FilterMessageSnippet("stop gave up on a block in flight").All()
	if len(said) != 1 {
		t.Fatalf("%d warnings of the block given up, want 1; warnings: %v", len(said), logs.All())
	}
	ctx := said[0].ContextMap()
	if ctx["partition"] != int64(0) || ctx["from"] != int64(0) || ctx["next"] != int64(100) || !strings.Contains(said[0].Message, "replays") {
		t.Errorf("the warning %q %v does not name partition 0, [0, 100) and the replay", said[0].Message, ctx)
	}
	if got := e.committed()[0]; got != 0 {
		t.Fatalf("committed %d after the block was given up, want 0", got)
	}

	sink := &recordSink{}
	e.start(e.config("b"), sink)
	await(t, 20*time.Second, "the next owner to commit all 100", func() bool { return e.committed()[0] == 100 })
	seen := map[int64]bool{}
	for _, w := range sink.from(0) {
		seen[w.offset] = true
	}
	if len(seen) != 100 {
		t.Fatalf("the next owner delivered %d distinct offsets, want 100", len(seen))
	}
}

// Row 8 for ClickHouse, and for dev: a replica, or `dev`, waiting for a
// ClickHouse that does not answer at start (a closed port) stops at once on
// SIGTERM, exit 0; dev has printed its endpoints before it waits.
func TestSIGTERMWhileClickHouseDownAtStart(t *testing.T) {
	url := "clickhouse://" + harness.Refused(t) + "/default?table=events&protocol=http&retry_timeout=60s"
	t.Run("run", func(t *testing.T) {
		e := newEnv(t, "orders", 1)
		sigtermWhileDown(t, e.processSink("r1", url), "ClickHouse", "clickhouse unreachable at start; retrying", 30*time.Second)
	})
	t.Run("dev", func(t *testing.T) {
		d := harness.StartProcess(t, "dev", bin, "dev", "--messages", "10", "--sink", url)
		// Its endpoints first: the user can see what it waits on.
		sigtermWhileDown(t, d, "ClickHouse", "kafka:", 30*time.Second)
		if !strings.Contains(d.Output(), "etcd:") {
			t.Errorf("dev did not print its endpoints before waiting for the sink:\n%s", d.Output())
		}
	})
}

// sigtermWhileDown waits up to d until p prints waiting, its wait for
// the store that is down (failing the test if p exits instead), then
// SIGTERMs it: it must exit within 2 s, with status 0.
func sigtermWhileDown(t *testing.T, p *harness.Process, store, waiting string, d time.Duration) {
	t.Helper()
	await(t, d, "the wait for "+store, func() bool {
		return strings.Contains(p.Output(), waiting) || p.Exited()
	})
	if p.Exited() {
		t.Fatalf("exited while %s was down:\n%s", store, p.Output())
	}
	stopped := time.Now()
	p.Signal(syscall.SIGTERM)
	code := p.Wait(10 * time.Second)
	if took := time.Since(stopped); took > 2*time.Second {
		t.Errorf("SIGTERM took %s to stop a wait for %s, want under 2s", took.Round(time.Millisecond), store)
	}
	if code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0:\n%s", code, p.Output())
	}
}

// Issue 40, row 11: logs an operator can follow. The start line names the
// replica, the brokers, etcd and the lease TTL; the giving side of a
// rebalance says at Info what it hands over and why, and each release; a
// stop says what it is finishing before it leaves.
func TestLogsAnOperatorCanFollow(t *testing.T) {
	e := newEnv(t, "orders", 2)
	dir := t.TempDir()
	a := e.processSink("a", "file://"+dir)
	await(t, 20*time.Second, "a to own both partitions", func() bool { return balanced(e.owners(), map[string]int{"a": 2}) })
	b := e.processSink("b", "file://"+dir)
	await(t, 20*time.Second, "b to take one", func() bool { return balanced(e.owners(), map[string]int{"a": 1, "b": 1}) })
	// etcd holds b's claim a moment before b runs the partition: the stop
	// line counts the partitions running.
	await(t, 20*time.Second, "b to start its partition", func() bool { return strings.Contains(b.Output(), "partition started") })
	b.Signal(syscall.SIGTERM)
	if code := b.Wait(20 * time.Second); code != 0 {
		t.Fatalf("b exited %d:\n%s", code, b.Output())
	}
	for who, wants := range map[*harness.Process][]string{
		a: {
			`replica starting	{"replica": "a", "group": "g", "topics": ["orders"]`,
			`"brokers": ["` + e.kafka.Brokers()[0], `"etcd": ["` + e.etcd.Endpoints()[0], `"lease_ttl": 2`,
			`handing partitions over at their next block boundary	{"group": "g", "replica": "a", "why": "planned to another replica", "partitions": 1`,
			`partition released	{"group": "g", "replica": "a", "topic": "orders"`,
		},
		b: {`stopping: finishing the blocks in flight, committing and releasing every partition, then leaving the group	{"group": "g", "replica": "b", "partitions": 1`},
	} {
		out := who.Output()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("the log does not say %q:\n%s", want, out)
			}
		}
	}
}

// Issue 40, row 5: run pointed at an etcd address where nothing listens
// says so ("refused the connection: nothing listens there") rather than
// "context deadline exceeded", is not ready, and a SIGTERM ends it at
// once, with nothing logged after "replica stopped" (the final offset
// mirror waited on etcd for 5 s, and warned).
func TestRunWithRefusedEtcdSaysSoAndStops(t *testing.T) {
	k := harness.StartKafka(t, harness.SeedTopics(1, "orders"))
	closed := harness.Refused(t)
	p := harness.StartProcess(t, "a", bin, "run", "--http-addr", "127.0.0.1:0", "--etcd-endpoints", closed,
		"--brokers", strings.Join(k.Brokers(), ","), "--group", "g", "--topics", "orders", "--sink", "file://"+t.TempDir(),
		"--lease-ttl", "2s", "--log-format", "console")
	await(t, 20*time.Second, "a WARN that etcd refused the connection", func() bool {
		return strings.Contains(p.Output(), "etcd at "+closed+" refused the connection: nothing listens there")
	})
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, p.Output())
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the stop took %s, want at once", took)
	}
	out := p.Output()
	if i := strings.Index(out, "replica stopped"); i < 0 || strings.Contains(out[i:], "WARN") {
		t.Errorf("a WARN after \"replica stopped\", or no such line:\n%s", out)
	}
}
