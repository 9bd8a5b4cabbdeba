package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/integration/replicarun"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// The helpers of the operator commands' tests: a real in-process etcd, kfake,
// replicas run in this process, and the CLI called through execute.

// opsEnv is one etcd, one Kafka with a topic, and a group.
type opsEnv struct {
	t     *testing.T
	etcd  *harness.Etcd
	kafka *harness.Kafka
	cli   *clientv3.Client
	coord *coordinator.Coordinator
	group string
	topic string
	parts int
}

func newOpsEnv(t *testing.T, topic string, parts int) *opsEnv {
	t.Helper()
	e := &opsEnv{t: t, group: "g", topic: topic, parts: parts}
	e.etcd = harness.StartEtcd(t, 1)
	e.kafka = harness.StartKafka(t, harness.SeedTopics(parts, topic))
	e.cli = e.etcd.Client(t)
	c, err := coordinator.New(e.cli, e.group)
	if err != nil {
		t.Fatal(err)
	}
	e.coord = c
	return e
}

// flags are the cluster flags of every command.
func (e *opsEnv) flags() []string {
	return []string{
		"--etcd-endpoints", strings.Join(e.etcd.Endpoints(), ","),
		"--brokers", strings.Join(e.kafka.Brokers(), ","),
		"--group", e.group,
	}
}

// run calls the CLI with args followed by the cluster flags.
func (e *opsEnv) run(args ...string) opsResult {
	e.t.Helper()
	return opsRun(e.t, 30*time.Second, append(args, e.flags()...)...)
}

// opsResult is what one execute call gave.
type opsResult struct {
	code           int
	stdout, stderr string
}

func (r opsResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// opsRun calls execute with args, failing the test if it has not returned
// within d.
func opsRun(t *testing.T, d time.Duration, args ...string) opsResult {
	t.Helper()
	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	go func() { done <- execute(args, &stdout, &stderr) }()
	select {
	case code := <-done:
		return opsResult{code, stdout.String(), stderr.String()}
	case <-time.After(d):
		t.Fatalf("offsetkeeper %s: still running after %s\nstderr:\n%s", strings.Join(args, " "), d, stderr.String())
		return opsResult{}
	}
}

func (e *opsEnv) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

func (e *opsEnv) part(n int) sinks.Partition {
	return sinks.Partition{Topic: e.topic, Partition: n}
}

// commit writes p's offsets as a replica's commit would leave them.
func (e *opsEnv) commit(p sinks.Partition, next int64) {
	e.t.Helper()
	v, err := json.Marshal(coordinator.Offsets{Next: next, Epoch: 1, Replica: "seed", At: time.Now().UTC(), Rows: next})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := e.ctx()
	defer cancel()
	if _, err := e.cli.Put(ctx, e.coord.Keys().Offsets(p), string(v)); err != nil {
		e.t.Fatal(err)
	}
}

// uncommit deletes p's offsets.
func (e *opsEnv) uncommit(p sinks.Partition) {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	if _, err := e.cli.Delete(ctx, e.coord.Keys().Offsets(p)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *opsEnv) snapshot() *coordinator.Snapshot {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	s, err := e.coord.Snapshot(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// etcdDump is every key under the offsetkeeper prefix with its value and
// revisions, and the store's revision: equal dumps mean nothing was written.
type etcdDump struct {
	revision int64
	keys     map[string]string
}

func (e *opsEnv) dump() etcdDump {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	resp, err := e.cli.Get(ctx, "/offsetkeeper/", clientv3.WithPrefix())
	if err != nil {
		e.t.Fatal(err)
	}
	d := etcdDump{revision: resp.Header.Revision, keys: map[string]string{}}
	for _, kv := range resp.Kvs {
		d.keys[string(kv.Key)] = fmt.Sprintf("%s (create %d, mod %d, version %d, lease %x)",
			kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return d
}

func (d etcdDump) equal(o etcdDump) bool {
	return d.revision == o.revision && maps.Equal(d.keys, o.keys)
}

// produce writes n records to partition p of topic; record i has the value
// "<p>-<first+i>" and, when ts is not nil, the timestamp ts(i).
func (e *opsEnv) produce(topic string, p, n int, ts func(i int) time.Time) {
	e.t.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "%d-%d", p, i)}
		if ts != nil {
			recs[i].Timestamp = ts(i)
		}
	}
	e.kafka.Produce(e.t, topic, p, recs...)
}

// logEnd is Kafka's read_committed log end of p, read with the replica's
// Kafka client: a source independent of the command under test.
func (e *opsEnv) logEnd(p sinks.Partition) int64 {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	k := admin.NewKafka(kafkaconf.Config{Brokers: e.kafka.Brokers()}, p.Topic)
	defer k.Close()
	bounds, err := k.Bounds(ctx, []sinks.Partition{p})
	if err != nil {
		e.t.Fatal(err)
	}
	return bounds[p].End
}

// opsReplica is a replica run in this process.
type opsReplica struct {
	*replicarun.Running
	r *replica.Replica
}

// startReplica runs a replica of the group over the env's topic, with its
// own etcd client, writing to sink. It is stopped in t.Cleanup.
func (e *opsEnv) startReplica(id string, sink sinks.Sink) *opsReplica {
	e.t.Helper()
	cfg := replica.Config{
		Group:          e.group,
		ReplicaID:      id,
		Topics:         []string{e.topic},
		Kafka:          kafkaconf.Config{Brokers: e.kafka.Brokers(), FetchMaxWait: 100 * time.Millisecond},
		LeaseTTL:       2 * time.Second,
		FlushInterval:  100 * time.Millisecond,
		ResyncInterval: time.Second,
		RebalanceDelay: 20 * time.Millisecond,
		Version:        "test-1.2",
	}
	r, err := replica.New(cfg, e.etcd.Client(e.t), sink, zaptest.NewLogger(e.t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		e.t.Fatal(err)
	}
	return &opsReplica{Running: replicarun.Start(e.t, r), r: r}
}

func (rn *opsReplica) stop() { rn.Stop() }

// awaitCond polls cond until it holds, failing the test after d.
func awaitCond(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	harness.Await(t, d, what, cond)
}

// awaitCommitted waits until every partition in want has committed at
// least want[p].
func (e *opsEnv) awaitCommitted(want map[sinks.Partition]int64) {
	e.t.Helper()
	awaitCond(e.t, 30*time.Second, fmt.Sprintf("commits %v", want), func() bool {
		s := e.snapshot()
		for p, n := range want {
			if s.Offsets[p].Next < n {
				return false
			}
		}
		return true
	})
}

// recordingSink counts every offset written to it, per partition. While
// held, each Write waits at a gate until released (or its ctx ends).
type recordingSink struct {
	mu      sync.Mutex
	counts  map[sinks.Partition]map[int64]int
	gate    chan struct{}
	waiting map[sinks.Partition][2]int64 // blocks waiting at the gate
}

func newRecordingSink() *recordingSink {
	return &recordingSink{counts: map[sinks.Partition]map[int64]int{}, waiting: map[sinks.Partition][2]int64{}}
}

func (s *recordingSink) Write(ctx context.Context, b *sinks.Block) error {
	p := sinks.Partition{Topic: b.Topic, Partition: b.Partition}
	s.mu.Lock()
	gate := s.gate
	if gate != nil {
		s.waiting[p] = [2]int64{b.From, b.Next}
	}
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			s.mu.Lock()
			delete(s.waiting, p)
			s.mu.Unlock()
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiting, p)
	m := s.counts[p]
	if m == nil {
		m = map[int64]int{}
		s.counts[p] = m
	}
	for _, r := range b.Records {
		m[r.Offset]++
	}
	return nil
}

func (s *recordingSink) Close() error { return nil }

// hold makes writes wait until release.
func (s *recordingSink) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		s.gate = make(chan struct{})
	}
}

// release lets held writes through; later writes do not wait.
func (s *recordingSink) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

// held is the block of p waiting at the gate, if any.
func (s *recordingSink) held(p sinks.Partition) ([2]int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.waiting[p]
	return b, ok
}

// count is how many times offset off of p was written.
func (s *recordingSink) count(p sinks.Partition, off int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[p][off]
}

// parseTable splits a table printed by printTable into rows of cells, by the
// positions of the header's columns (a cell may hold spaces, as IN-FLIGHT
// "[10, 15)" does).
func parseTable(t *testing.T, out string, headers ...string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != strings.Join(headers, " ") {
		t.Fatalf("table header %q, want %q\n%s", lines[0], strings.Join(headers, "  "), out)
	}
	starts := make([]int, len(headers))
	for i, h := range headers {
		starts[i] = strings.Index(lines[0], h)
		if i > 0 && starts[i] <= starts[i-1] {
			t.Fatalf("header %q out of place in %q", h, lines[0])
		}
	}
	var rows []map[string]string
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, h := range headers {
			end := len(line)
			if i+1 < len(starts) {
				end = min(starts[i+1], len(line))
			}
			if starts[i] > len(line) {
				t.Fatalf("row %q shorter than the header %q", line, lines[0])
			}
			if i+1 < len(starts) && end > 0 && line[end-1] != ' ' {
				t.Fatalf("row %q: column %s runs into the next: not aligned with %q", line, h, lines[0])
			}
			row[h] = strings.TrimSpace(line[starts[i]:end])
		}
		rows = append(rows, row)
	}
	return rows
}

// rowsBy indexes table rows by "TOPIC/PARTITION".
func rowsBy(rows []map[string]string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, r := range rows {
		out[r["TOPIC"]+"/"+r["PARTITION"]] = r
	}
	return out
}

var ageRE = regexp.MustCompile(`^\d+[smhd]$`)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// writeFile writes a file in the test's folder and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := t.TempDir() + "/" + name
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
