package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/integration/replicarun"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

// The scale benchmarks take their sizes from the environment, so that the
// same code runs small while developing and full size for the record:
// OKBENCH_<NAME> when set, else a small value under -short, else the full
// one. The names are shared (PARTITIONS, RECORDS, ...): set them for one
// benchmark at a time.
const scaleEnvPrefix = "OKBENCH_"

// scaleInt is the integer parameter name (see scaleEnvPrefix).
func scaleInt(b *testing.B, name string, full, short int) int {
	b.Helper()
	v := full
	if testing.Short() {
		v = short
	}
	if s, ok := os.LookupEnv(scaleEnvPrefix + name); ok {
		n, err := strconv.Atoi(strings.ReplaceAll(s, "_", ""))
		if err != nil || n <= 0 {
			b.Fatalf("%s%s=%q: want a positive integer", scaleEnvPrefix, name, s)
		}
		v = n
	}
	b.Logf("%s%s=%d", scaleEnvPrefix, name, v)
	return v
}

// scaleDuration is the duration parameter name (see scaleEnvPrefix).
func scaleDuration(b *testing.B, name string, full, short time.Duration) time.Duration {
	b.Helper()
	v := full
	if testing.Short() {
		v = short
	}
	if s, ok := os.LookupEnv(scaleEnvPrefix + name); ok {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			b.Fatalf("%s%s=%q: want a positive duration such as 10s", scaleEnvPrefix, name, s)
		}
		v = d
	}
	b.Logf("%s%s=%s", scaleEnvPrefix, name, v)
	return v
}

// benchKafkaEnv names the variable that chooses the Kafka the
// consumer and sink benchmarks read (benchKafka): OKBENCH_KAFKA.
const benchKafkaEnv = scaleEnvPrefix + "KAFKA"

// The values of OKBENCH_KAFKA.
const (
	benchKfake   = "kfake"   // franz-go's kfake in this process (the default)
	benchApache1 = "apache1" // Apache Kafka (harness.KafkaVersion), 1 node
	benchApache3 = "apache3" // Apache Kafka, 3 nodes, topics replicated 3 times
)

// benchBrokerJVMFlags are the JVM flags of Apache Kafka's nodes in the
// benchmarks, after the harness's own: kafka-server-start.sh's heap (1
// GiB) and kafka-run-class.sh's G1 and both JIT compilers, in place of
// the harness's serial collector and C1 alone, which start a node
// faster but serve records at a higher CPU cost.
var benchBrokerJVMFlags = []string{
	"-Xms1g", "-Xmx1g", "-XX:TieredStopAtLevel=4",
	"-XX:-UseSerialGC", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
	"-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
}

// benchKafka is the Kafka of a benchmark, chosen by OKBENCH_KAFKA.
type benchKafka struct {
	*harness.Kafka
}

// startBenchKafka starts the Kafka that OKBENCH_KAFKA names (kfake when
// unset) with topics of parts partitions each: on Apache Kafka a cluster
// of this benchmark's own, its nodes run with benchBrokerJVMFlags and its
// topics replicated min(3, nodes) times. Apache Kafka skips the benchmark
// without its jars, as harness.RequireApacheKafka does.
func startBenchKafka(b *testing.B, parts int, topics ...string) *benchKafka {
	b.Helper()
	name := benchKfake
	if s, ok := os.LookupEnv(benchKafkaEnv); ok {
		name = s
	}
	b.Logf("%s=%s", benchKafkaEnv, name)
	var nodes int
	switch name {
	case benchKfake:
		return &benchKafka{Kafka: harness.StartKafka(b, harness.SeedTopics(parts, topics...))}
	case benchApache1:
		nodes = 1
	case benchApache3:
		nodes = 3
	default:
		b.Fatalf("%s=%q: want %s, %s or %s", benchKafkaEnv, name, benchKfake, benchApache1, benchApache3)
	}
	k := harness.StartApacheKafka(b, harness.Nodes(nodes), harness.JVMFlags(benchBrokerJVMFlags...))
	for _, t := range topics {
		k.CreateTopic(b, t, parts)
	}
	return &benchKafka{Kafka: k}
}

// real tells whether the brokers are Apache Kafka's processes.
func (k *benchKafka) real() bool { return k.Cluster() == nil }

// brokerCPU is the CPU time the brokers have used: on Apache Kafka the
// sum of the nodes' JVMs (utime+stime of /proc/<pid>/stat); on kfake this
// process's, which holds the broker, etcd and the benchmark's own work.
func (k *benchKafka) brokerCPU(b *testing.B) time.Duration {
	b.Helper()
	d, err := k.readBrokerCPU()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// readBrokerCPU is brokerCPU that returns its error, for goroutines
// other than the benchmark's.
func (k *benchKafka) readBrokerCPU() (time.Duration, error) {
	if !k.real() {
		return harness.ProcCPU(os.Getpid())
	}
	var sum time.Duration
	for i := range k.Nodes() {
		pid := k.Node(i).PID()
		if pid == 0 {
			return 0, fmt.Errorf("kafka node %d is not running", i)
		}
		d, err := harness.ProcCPU(pid)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// groupKeys is the group's prefix in etcd, as docs/etcd.md's etcd layout
// documents it: written out here rather than taken from coordinator, so that
// the benchmarks measure whatever implements the layout.
func groupKeys(group string) string { return "/offsetkeeper/v1/groups/" + group + "/" }

// claimsByReplica counts the group's claims in etcd by owner.
func claimsByReplica(b *testing.B, cli *clientv3.Client, group string) map[string]int {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, groupKeys(group)+"claims/", clientv3.WithPrefix())
	if err != nil {
		b.Fatalf("read claims of %s: %v", group, err)
	}
	out := map[string]int{}
	for _, kv := range resp.Kvs {
		out[string(kv.Value)]++
	}
	return out
}

// committedWatch sums a group's committed offsets as etcd's watch reports
// their changes: its cost follows the commits, where reading every offset
// each poll (committedTotal) costs the benchmark's process, which shares
// the machine with the replica, a read and decode of every partition's key
// twenty times a second (at 10,000 partitions most of a core).
//
// It notes the moment the sum first reaches want, as the watch reports it:
// a benchmark that polled the sum would add half its polling interval to
// the time it measures.
type committedWatch struct {
	sum     atomic.Int64
	want    int64
	reached chan struct{} // closed when sum first reaches want, at
	at      time.Time
	cancel  context.CancelFunc
	done    chan struct{}
}

// watchCommitted starts a committedWatch of group until want; stop ends it.
func watchCommitted(b *testing.B, cli *clientv3.Client, group string, want int64) *committedWatch {
	b.Helper()
	prefix := groupKeys(group) + "offsets/"
	ctx, cancel := context.WithCancel(context.Background())
	w := &committedWatch{want: want, reached: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := cli.Get(rctx, prefix, clientv3.WithPrefix())
	rcancel()
	if err != nil {
		cancel()
		b.Fatalf("read offsets of %s: %v", group, err)
	}
	next := map[string]int64{}
	var sum int64
	parse := func(key string, v []byte) int64 {
		var o struct {
			Next int64 `json:"next"`
		}
		if err := json.Unmarshal(v, &o); err != nil {
			b.Errorf("offsets %s: %v", key, err)
		}
		return o.Next
	}
	for _, kv := range resp.Kvs {
		next[string(kv.Key)] = parse(string(kv.Key), kv.Value)
		sum += next[string(kv.Key)]
	}
	w.store(sum)
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	go func() {
		defer close(w.done)
		for wr := range wch {
			for _, ev := range wr.Events {
				k := string(ev.Kv.Key)
				sum -= next[k]
				next[k] = 0
				if ev.Type == clientv3.EventTypePut {
					next[k] = parse(k, ev.Kv.Value)
					sum += next[k]
				}
			}
			w.store(sum)
		}
	}()
	return w
}

func (w *committedWatch) store(sum int64) {
	w.sum.Store(sum)
	if sum >= w.want && w.at.IsZero() {
		w.at = time.Now()
		close(w.reached)
	}
}

func (w *committedWatch) total() int64 { return w.sum.Load() }

// wait waits up to timeout for the sum to reach want and returns when it
// did.
//
// A replica of procs that exits meanwhile fails the benchmark at once, with
// its output, rather than after timeout.
func (w *committedWatch) wait(b *testing.B, timeout time.Duration, what string, procs ...*harness.Process) time.Time {
	b.Helper()
	exited := make(chan *harness.Process, len(procs))
	stop := make(chan struct{})
	defer close(stop)
	for _, p := range procs {
		go func() {
			select {
			case <-p.Done():
				exited <- p
			case <-stop:
			}
		}()
	}
	select {
	case <-w.reached:
		return w.at
	case p := <-exited:
		b.Fatalf("a replica process exited while waiting for %s (%d of %d):\n%s", what, w.total(), w.want, p.Output())
	case <-time.After(timeout):
		b.Fatalf("timed out after %s waiting for %s: %d of %d", timeout, what, w.total(), w.want)
	}
	return time.Time{}
}

// stillRunning fails the benchmark if one of procs has exited while it waits
// for what.
func stillRunning(b *testing.B, what string, procs ...*harness.Process) {
	b.Helper()
	for _, p := range procs {
		if p.Exited() {
			b.Fatalf("a replica process exited while waiting for %s:\n%s", what, p.Output())
		}
	}
}

func (w *committedWatch) stop() {
	w.cancel()
	<-w.done
}

// committedTotal is the sum of the group's committed offsets in etcd: the
// number of records delivered, for a group that started at offset 0.
func committedTotal(b *testing.B, cli *clientv3.Client, group string) int64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, groupKeys(group)+"offsets/", clientv3.WithPrefix())
	if err != nil {
		b.Fatalf("read offsets of %s: %v", group, err)
	}
	var sum int64
	for _, kv := range resp.Kvs {
		var o struct {
			Next int64 `json:"next"`
		}
		if err := json.Unmarshal(kv.Value, &o); err != nil {
			b.Fatalf("offsets %s: %v", kv.Key, err)
		}
		sum += o.Next
	}
	return sum
}

// balancedCounts reports whether counts (claims by replica) cover want
// partitions over exactly replicas replicas, each holding want/replicas
// rounded down or up.
func balancedCounts(counts []int, want, replicas int) bool {
	if len(counts) != replicas {
		return false
	}
	sum := 0
	for _, n := range counts {
		if n < want/replicas || n > (want+replicas-1)/replicas {
			return false
		}
		sum += n
	}
	return sum == want
}

// byReplica lists the values of a claims-by-replica map.
func byReplica(m map[string]int) []int {
	out := make([]int, 0, len(m))
	for _, n := range m {
		out = append(out, n)
	}
	return out
}

// inProcessClaims is what each replica run in this process holds now.
func inProcessClaims(rs []*replicarun.Running) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = int(r.Stats().Claims)
	}
	return out
}

// startBalanced starts n replicas of cfg in this process, named by idFormat
// and their index, each with an etcd client of its own and the sink that
// sink gives, and waits, checking every every for at most timeout, until
// they hold the parts partitions balanced; took is from the start to then.
func startBalanced(b *testing.B, etcd *harness.Etcd, cfg replica.Config, n int, idFormat string, sink func() sinks.Sink, parts int, timeout, every time.Duration) (rs []*replicarun.Running, took time.Duration) {
	b.Helper()
	start := time.Now()
	rs = make([]*replicarun.Running, n)
	for i := range rs {
		cfg.ReplicaID = fmt.Sprintf(idFormat, i)
		r, err := replica.New(cfg, etcd.Client(b), sink(), nil)
		if err != nil {
			b.Fatal(err)
		}
		rs[i] = replicarun.Start(b, r)
	}
	at := pollUntil(b, timeout, every, "the partitions claimed and balanced", func() bool {
		return balancedCounts(inProcessClaims(rs), parts, n)
	})
	return rs, at.Sub(start)
}

// pollUntil checks cond every interval until it holds and returns the time
// it was first seen to hold; it fails the benchmark after timeout. Unlike
// harness.Await its interval is chosen, since conditions that read etcd
// would load the machine if checked every few milliseconds.
func pollUntil(b *testing.B, timeout, every time.Duration, what string, cond func() bool) time.Time {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return time.Now()
		}
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(every)
	}
}

// produceBacklog writes perPart records to every partition of topic: keys
// key-<i>, and values of size bytes that are all the same slice (nothing
// is compressed, so the content does not matter). Records go in calls of at
// most 16 MiB, so the producer never buffers much more.
func produceBacklog(b *testing.B, k *harness.Kafka, topic string, parts, perPart, size int) {
	b.Helper()
	value := []byte(strings.Repeat("v", size))
	chunk := max(1, min(perPart, (16<<20)/max(size, 1)))
	for p := 0; p < parts; p++ {
		for from := 0; from < perPart; from += chunk {
			recs := make([]*kgo.Record, min(chunk, perPart-from))
			for i := range recs {
				recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "key-%07d", from+i), Value: value}
			}
			k.Produce(b, topic, p, recs...)
		}
	}
}

// replicaProcess starts `offsetkeeper run` on topic into the discard sink,
// with the defaults of the command but quieter logs and a free HTTP port:
// the command as the container image builds it (imageBin).
func replicaProcess(b *testing.B, etcd *harness.Etcd, k *harness.Kafka, group, topic, id string, extra ...string) *harness.Process {
	b.Helper()
	args := []string{"run",
		"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
		"--brokers", strings.Join(k.Brokers(), ","),
		"--group", group,
		"--topics", topic,
		"--sink", "discard:",
		"--replica-id", id,
		"--log-format", "console",
		"--log-level", "warn",
		"--http-addr", "127.0.0.1:0",
	}
	return harness.StartProcess(b, id, imageBin(b), append(args, extra...)...)
}

// stopProcesses sends SIGTERM to every process and waits for each to exit 0.
func stopProcesses(b *testing.B, ps ...*harness.Process) {
	b.Helper()
	for _, p := range ps {
		p.Signal(sigterm)
	}
	for _, p := range ps {
		if code := p.Wait(60 * time.Second); code != 0 {
			b.Errorf("replica exited %d after SIGTERM, want 0:\n%s", code, p.Output())
		}
	}
}

// procCPU is harness.ProcCPU that fails the benchmark on error.
func procCPU(b *testing.B, p *harness.Process) time.Duration {
	b.Helper()
	d, err := harness.ProcCPU(p.PID())
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// latencySink passes blocks on to a discard sink and keeps, for every
// record written, how long after its Kafka timestamp the write returned:
// the produce-to-sink latency when producers stamp records as they send
// them. It is safe for concurrent use, so replicas may share it.
type latencySink struct {
	inner   *discard.Sink
	lastKey []byte // the record whose arrival ends a run

	mu       sync.Mutex
	lat      []time.Duration
	lastSeen time.Duration // latency of the record keyed lastKey; 0 until seen
	records  atomic.Int64
}

var _ sinks.Sink = (*latencySink)(nil)

func newLatencySink(lastKey string) *latencySink {
	return &latencySink{inner: discard.New(), lastKey: []byte(lastKey)}
}

// Write implements sinks.Sink.
func (s *latencySink) Write(ctx context.Context, blk *sinks.Block) error {
	if err := s.inner.Write(ctx, blk); err != nil {
		return err
	}
	s.seen(blk)
	return nil
}

// WriteBlocks implements sinks.BatchWriter with sinks.WriteBlocks, so the
// replica writes in rounds as it does to discard.
func (s *latencySink) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	errs := sinks.WriteBlocks(ctx, s.inner, blocks)
	for i, b := range blocks {
		if i < len(errs) && errs[i] == nil {
			s.seen(b)
		}
	}
	return errs
}

// Close closes the discard sink.
func (s *latencySink) Close() error { return s.inner.Close() }

// Unwrap returns the discard sink.
func (s *latencySink) Unwrap() sinks.Sink { return s.inner }

func (s *latencySink) seen(blk *sinks.Block) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range blk.Records {
		d := now.Sub(r.Time)
		s.lat = append(s.lat, d)
		if string(r.Key) == string(s.lastKey) {
			s.lastSeen = d
		}
	}
	s.records.Add(int64(len(blk.Records)))
}

// reset forgets everything seen so far.
func (s *latencySink) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lat, s.lastSeen = nil, 0
	s.records.Store(0)
}

// last is the latency of the record keyed lastKey, and whether it arrived.
func (s *latencySink) last() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSeen, s.lastSeen != 0
}

// quantiles returns the given quantiles (0..1) of the latencies seen.
func (s *latencySink) quantiles(qs ...float64) []time.Duration {
	s.mu.Lock()
	lat := slices.Clone(s.lat)
	s.mu.Unlock()
	slices.Sort(lat)
	out := make([]time.Duration, len(qs))
	if len(lat) == 0 {
		return out
	}
	for i, q := range qs {
		out[i] = lat[min(len(lat)-1, int(q*float64(len(lat))))]
	}
	return out
}

// trickle produces rate records per second, round robin over the
// partitions of topic, each stamped with the time it is sent, until ctx
// ends; then it waits for the acknowledgements and returns how many were
// acknowledged and the first error. It runs on the caller's goroutine.
func trickle(ctx context.Context, cl *kgo.Client, topic string, parts, rate, size int) (int64, error) {
	return trickleCounted(ctx, cl, topic, parts, rate, size, new(atomic.Int64))
}

// trickleCounted is trickle that counts the records acknowledged in acked
// as they are, for a caller that watches them.
func trickleCounted(ctx context.Context, cl *kgo.Client, topic string, parts, rate, size int, acked *atomic.Int64) (int64, error) {
	var (
		mu    sync.Mutex
		first error
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
			return
		}
		acked.Add(1)
	}
	value := []byte(strings.Repeat("t", size))
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var sent int64
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-tick.C:
			due := int64(now.Sub(start).Seconds() * float64(rate))
			for ; sent < due; sent++ {
				cl.Produce(context.Background(), &kgo.Record{
					Topic: topic, Partition: int32(sent % int64(parts)),
					Key: fmt.Appendf(nil, "t-%d", sent), Value: value, Timestamp: time.Now(),
				}, promise)
			}
		}
	}
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Flush(fctx); err != nil {
		return acked.Load(), err
	}
	mu.Lock()
	defer mu.Unlock()
	return acked.Load(), first
}

// trickleProducer is a kgo client that sends each record at once to the
// partition it names.
func trickleProducer(b testing.TB, k *harness.Kafka) *kgo.Client {
	b.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(k.Brokers()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	return cl
}
