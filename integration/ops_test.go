package integration_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/replica"
	replicametrics "github.com/offsetkeeper/offsetkeeper/replica/metrics"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

// gateSink wraps a sink, counting what it writes; while shut, writes wait
// (the sink is stuck, and the partition falls behind). It is a Pinger with a
// settable answer and a DeadLetterCounter with a fixed count of its own,
// which hide the inner sink's; everything else of the inner sink shows
// through it (Unwrap, WriteBlocks).
type gateSink struct {
	inner   sinks.Sink
	records atomic.Int64

	mu   sync.Mutex
	open chan struct{} // closed while writes may pass
	ping error
}

// newGateSink returns an open gate over a discard sink.
func newGateSink() *gateSink { return gateAround(discard.New()) }

// gateAround returns an open gate over inner.
func gateAround(inner sinks.Sink) *gateSink {
	g := &gateSink{inner: inner, open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gateSink) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *gateSink) pass() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gateSink) Write(ctx context.Context, b *sinks.Block) error {
	if err := g.wait(ctx); err != nil {
		return err
	}
	if err := g.inner.Write(ctx, b); err != nil {
		return err
	}
	g.records.Add(int64(len(b.Records)))
	return nil
}

// WriteBlocks waits at the gate as Write does, then writes the blocks to the
// inner sink with sinks.WriteBlocks, so that the gate keeps its batching.
func (g *gateSink) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	errs := make([]error, len(blocks))
	if err := g.wait(ctx); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	errs = sinks.WriteBlocks(ctx, g.inner, blocks)
	for i, err := range errs {
		if err == nil && i < len(blocks) {
			g.records.Add(int64(len(blocks[i].Records)))
		}
	}
	return errs
}

// wait returns when the gate is open, or with ctx's error.
func (g *gateSink) wait(ctx context.Context) error {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gateSink) Close() error { return g.inner.Close() }

// Unwrap returns the gated sink.
func (g *gateSink) Unwrap() sinks.Sink { return g.inner }

func (g *gateSink) setPing(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ping = err
}

func (g *gateSink) Ping(context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ping
}

const gateDeadLetters = 3

func (g *gateSink) DeadLetters() int64 { return gateDeadLetters }

// opsRun is a replica run in this process with its HTTP endpoints (served
// by replicametrics.Handler on a loopback port) and, optionally, its offset
// mirror: what `offsetkeeper run` wires, without the process.
type opsRun struct {
	t      *testing.T
	r      *replica.Replica
	mirror *replica.Mirror
	srv    *httptest.Server

	cancel     context.CancelFunc
	done       chan struct{}
	stopOnce   sync.Once
	mirrorStop context.CancelFunc
	mirrorDone chan struct{}
	mirrorOnce sync.Once
}

// startOpsRun starts a replica with cli (the env's own when nil) and
// serves its endpoints. mirrorEvery > 0 also runs a mirror at that interval.
func (e *env) startOpsRun(cfg replica.Config, sink sinks.Sink, cli *clientv3.Client, mirrorEvery time.Duration) *opsRun {
	e.t.Helper()
	if cli == nil {
		cli = e.etcd.Client(e.t)
	}
	r, err := replica.New(cfg, cli, sink, e.logger.With(zap.String("test_replica", cfg.ReplicaID)))
	if err != nil {
		e.t.Fatal(err)
	}
	o := &opsRun{t: e.t, r: r, done: make(chan struct{}), mirrorDone: make(chan struct{})}
	var copts []replicametrics.CollectorOption
	if mirrorEvery > 0 {
		o.mirror = replica.NewMirror(r, replica.WithMirrorInterval(mirrorEvery))
		copts = append(copts, replicametrics.WithMirror(o.mirror))
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(replicametrics.NewCollector(r, copts...))
	o.srv = httptest.NewServer(replicametrics.Handler(r, reg))

	ctx, cancel := context.WithCancel(context.Background())
	o.cancel = cancel
	go func() {
		defer close(o.done)
		_ = r.Run(ctx)
	}()
	if o.mirror != nil {
		mctx, mcancel := context.WithCancel(ctx)
		o.mirrorStop = mcancel
		go func() {
			defer close(o.mirrorDone)
			o.mirror.Run(mctx)
		}()
	} else {
		close(o.mirrorDone)
	}
	e.t.Cleanup(func() {
		o.stop()
		o.srv.Close()
		if o.mirror != nil {
			_ = o.mirror.Close()
		}
	})
	return o
}

// stopMirrorLoop ends the mirror's periodic copy.
func (o *opsRun) stopMirrorLoop() {
	o.mirrorOnce.Do(func() {
		if o.mirrorStop != nil {
			o.mirrorStop()
		}
		<-o.mirrorDone
	})
}

// stop is a graceful stop of the replica, as SIGTERM.
func (o *opsRun) stop() {
	o.stopOnce.Do(func() {
		o.stopMirrorLoop()
		o.cancel()
		<-o.done
	})
}

func (o *opsRun) get(path string) (int, string) {
	o.t.Helper()
	return httpGet(o.t, o.srv.URL+path)
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// metrics is one scrape of /metrics.
type metrics map[string]*dto.MetricFamily

func scrape(t *testing.T, url string) metrics {
	t.Helper()
	code, body := httpGet(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// value is the value of the series of name whose labels include want
// (alternating names and values); -1 when there is none.
func (m metrics) value(name string, want ...string) float64 {
	f, ok := m[name]
	if !ok {
		return -1
	}
next:
	for _, s := range f.Metric {
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, l := range s.Label {
				if l.GetName() == want[i] && l.GetValue() == want[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case s.Counter != nil:
			return s.Counter.GetValue()
		case s.Gauge != nil:
			return s.Gauge.GetValue()
		case s.Histogram != nil:
			return float64(s.Histogram.GetSampleCount())
		}
	}
	return -1
}

func (m metrics) lag(p int) float64 {
	return m.value("kafka_consumergroup_group_lag", "group", "g", "partition", strconv.Itoa(p))
}

func (m metrics) lagSeconds(p int) float64 {
	return m.value("kafka_consumergroup_group_lag_seconds", "group", "g", "partition", strconv.Itoa(p))
}

func TestMetricsAfterRun(t *testing.T) {
	e := newEnv(t, "metered", 2)
	e.produce(500)
	sink := newGateSink()
	o := e.startOpsRun(e.config("a"), sink, nil, 0)
	url := o.srv.URL + "/metrics"

	var m metrics
	// The block counters move just after the committed offsets (and so
	// the lag): wait for them too.
	await(t, 30*time.Second, "1000 records written and no lag", func() bool {
		m = scrape(t, url)
		return m.value("offsetkeeper_records_written_total") == 1000 && m.lag(0) == 0 && m.lag(1) == 0 &&
			m.value("offsetkeeper_blocks_written_total") == m.value("offsetkeeper_block_rows")
	})
	blocks, commits := m.value("offsetkeeper_blocks_written_total"), m.value("offsetkeeper_commits_total")
	if blocks < 2 || commits < blocks {
		t.Errorf("blocks %v commits %v: want at least one block per partition and a commit per block", blocks, commits)
	}
	// The histograms count every written block and every commit.
	if rows, writes, took := m.value("offsetkeeper_block_rows"), m.value("offsetkeeper_sink_write_duration_seconds"),
		m.value("offsetkeeper_commit_duration_seconds"); rows != blocks || writes != blocks || took < blocks {
		t.Errorf("histogram counts: block rows %v, sink writes %v, commits %v; want %v, %v and at least %v", rows, writes, took, blocks, blocks, blocks)
	}
	committed := e.committed()
	want := map[string]float64{
		"offsetkeeper_commit_failures_total":   0,
		"offsetkeeper_rollbacks_total":         0,
		"offsetkeeper_fenced_total":            0,
		"offsetkeeper_sink_write_errors_total": 0,
		"offsetkeeper_claims":                  2,
		"offsetkeeper_session_alive":           1,
		"offsetkeeper_sessions_total":          1,
		"offsetkeeper_dead_letters_total":      gateDeadLetters,
		"kafka_consumergroup_group_max_lag":    0,
		"kafka_consumergroup_group_sum_lag":    0,
	}
	for name, v := range want {
		if got := m.value(name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	for p := 0; p < 2; p++ {
		if got := m.value("kafka_consumergroup_group_offset", "partition", strconv.Itoa(p)); got != float64(committed[p]) || got != 500 {
			t.Errorf("partition %d: committed offset metric %v, etcd %d, want 500", p, got, committed[p])
		}
		if got := m.value("kafka_partition_latest_offset", "topic", "metered", "partition", strconv.Itoa(p)); got != 500 {
			t.Errorf("partition %d: latest offset metric %v, want 500", p, got)
		}
		if got := m.lagSeconds(p); got != 0 {
			t.Errorf("partition %d: lag %v seconds when caught up", p, got)
		}
	}
	if m.value("offsetkeeper_rebalances_total") < 1 {
		t.Errorf("no rebalance counted, yet the replica claimed 2 partitions")
	}

	// The sink is stuck while 100 more records arrive in partition 0: it
	// falls behind, in records and in seconds.
	sink.shut()
	recs := make([]*kgo.Record, 100)
	for i := range recs {
		recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "late-%d", i)}
	}
	e.kafka.Produce(t, e.topic, 0, recs...)
	await(t, 20*time.Second, "partition 0 lagging", func() bool {
		m = scrape(t, url)
		return m.lag(0) > 0 && m.lagSeconds(0) > 0
	})
	if l := m.lag(0); l > 100 || m.value("kafka_consumergroup_group_max_lag") != l || m.value("kafka_consumergroup_group_sum_lag") != l {
		t.Errorf("lag %v (max %v, sum %v): want at most the 100 records behind, and max = sum = it",
			l, m.value("kafka_consumergroup_group_max_lag"), m.value("kafka_consumergroup_group_sum_lag"))
	}
	if m.lag(1) != 0 || m.value("offsetkeeper_records_written_total") != 1000 {
		t.Errorf("partition 1 lag %v, records %v: want 0 and 1000 while the sink is stuck",
			m.lag(1), m.value("offsetkeeper_records_written_total"))
	}

	sink.pass()
	await(t, 20*time.Second, "caught up again", func() bool {
		m = scrape(t, url)
		return m.value("offsetkeeper_records_written_total") == 1100 && m.lag(0) == 0 && m.lagSeconds(0) == 0
	})
	if got := m.value("offsetkeeper_commit_failures_total"); got != 0 {
		t.Errorf("commit failures %v in a healthy run", got)
	}
	if got := sink.records.Load(); got != 1100 {
		t.Errorf("sink holds %d records, metrics say 1100", got)
	}
}

func TestReadyzFollowsEtcd(t *testing.T) {
	e := newEnv(t, "probed", 2)
	proxy := harness.NewProxy(t, e.etcd.Addr(0))
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	sink := newGateSink()
	o := e.startOpsRun(e.config("a"), sink, cli, 0)

	ready := func() bool { code, _ := o.get("/readyz"); return code == http.StatusOK }
	healthy := func() {
		t.Helper()
		if code, body := o.get("/healthz"); code != http.StatusOK {
			t.Fatalf("/healthz: %d %s, want 200 whatever etcd does", code, body)
		}
	}
	await(t, 20*time.Second, "/readyz 200", ready)
	healthy()

	// A sink that does not answer makes the replica not ready.
	sink.setPing(errors.New("database is down"))
	if code, body := o.get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "database is down") {
		t.Errorf("/readyz with the sink down: %d %q, want 503 naming the sink's error", code, body)
	}
	sink.setPing(nil)
	await(t, 5*time.Second, "/readyz 200 with the sink back", ready)

	cut := time.Now()
	proxy.Blackhole()
	await(t, 10*time.Second, "/readyz 503 with etcd cut off", func() bool { return !ready() })
	t.Logf("not ready %s after the cut (lease TTL 2s)", time.Since(cut).Round(10*time.Millisecond))
	healthy()
	await(t, 10*time.Second, "the session reported lost", func() bool {
		code, body := o.get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "no live session")
	})
	if got := scrape(t, o.srv.URL+"/metrics").value("offsetkeeper_session_alive"); got != 0 {
		t.Errorf("offsetkeeper_session_alive %v while cut off, want 0", got)
	}
	healthy()

	proxy.Pass()
	await(t, 30*time.Second, "/readyz 200 after etcd is back", ready)
	healthy()
	if n := o.r.Stats().Sessions; n < 2 {
		t.Errorf("%d sessions: ready again without rejoining", n)
	}
	if got := scrape(t, o.srv.URL+"/metrics").value("offsetkeeper_sessions_total"); got < 2 {
		t.Errorf("offsetkeeper_sessions_total %v after a rejoin, want at least 2", got)
	}
	// And it works again.
	e.produce(10)
	await(t, 20*time.Second, "records after the rejoin committed", func() bool { return e.allCommitted(perPartition(2, 10)) })
}

// kafkaOffsets reads the group's offsets in Kafka with an OffsetFetch.
func (e *env) kafkaOffsets() map[int]int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = e.group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = e.topic
	for p := 0; p < e.parts; p++ {
		rt.Partitions = append(rt.Partitions, int32(p))
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, e.kafka.Client(e.t))
	if err != nil {
		e.t.Fatalf("offset fetch of group %s: %v", e.group, err)
	}
	out := map[int]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				e.t.Fatalf("offset fetch of %s/%d: error code %d", t.Topic, p.Partition, p.ErrorCode)
			}
			if p.Offset >= 0 {
				out[int(p.Partition)] = p.Offset
			}
		}
	}
	return out
}

func TestMirroredOffsetsMatchEtcd(t *testing.T) {
	e := newEnv(t, "mirrored", 4)
	e.produce(200)
	o := e.startOpsRun(e.config("a"), newGateSink(), nil, 50*time.Millisecond)
	await(t, 30*time.Second, "200 per partition committed", func() bool { return e.allCommitted(perPartition(4, 200)) })
	await(t, 10*time.Second, "kafka's offsets equal etcd's", func() bool { return maps.Equal(e.kafkaOffsets(), e.committed()) })

	// Without the periodic copy, the blocks committed now reach Kafka only
	// through the flush at shutdown.
	o.stopMirrorLoop()
	e.produce(50)
	await(t, 30*time.Second, "250 per partition committed", func() bool { return e.allCommitted(perPartition(4, 250)) })
	if got := e.kafkaOffsets(); !maps.Equal(got, perPartition(4, 200)) {
		t.Fatalf("kafka holds %v with the mirror stopped, want 200 each", got)
	}
	o.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := o.mirror.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := e.kafkaOffsets(), e.committed(); !maps.Equal(got, want) || !maps.Equal(want, perPartition(4, 250)) {
		t.Fatalf("after the flush kafka holds %v, etcd %v, want 250 each in both", got, want)
	}
	m := scrape(t, o.srv.URL+"/metrics")
	if m.value("offsetkeeper_mirror_commits_total") < 2 || m.value("offsetkeeper_mirror_failures_total") != 0 {
		t.Errorf("mirror commits %v failures %v, want at least 2 and 0",
			m.value("offsetkeeper_mirror_commits_total"), m.value("offsetkeeper_mirror_failures_total"))
	}
}

// TestRunServesEndpointsAndMirrors runs `offsetkeeper run` as a process:
// the member key advertises where its endpoints listen, they answer, and
// at SIGTERM the final offsets reach Kafka.
func TestRunServesEndpointsAndMirrors(t *testing.T) {
	e := newEnv(t, "served", 2)
	e.produce(100)
	p := e.process("a", t.TempDir(), "--mirror-interval", "100ms")

	var addr string
	await(t, 20*time.Second, "a to register with its http address", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ms, err := e.coord.Members(ctx)
		if err != nil || len(ms) != 1 {
			return false
		}
		addr = ms[0].HTTPAddr
		return addr != ""
	})
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("advertised http address %q, want the bound 127.0.0.1:port", addr)
	}
	base := "http://" + addr
	if code, _ := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	await(t, 20*time.Second, "/readyz 200", func() bool { code, _ := httpGet(t, base+"/readyz"); return code == http.StatusOK })
	await(t, 30*time.Second, "200 records written", func() bool {
		m := scrape(t, base+"/metrics")
		return m.value("offsetkeeper_records_written_total", "group", "g") == 200 && m.value("go_goroutines") > 0
	})
	await(t, 10*time.Second, "kafka's offsets equal etcd's", func() bool { return maps.Equal(e.kafkaOffsets(), e.committed()) })

	e.produce(20)
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
	if got, want := e.kafkaOffsets(), e.committed(); !maps.Equal(got, want) {
		t.Fatalf("after shutdown kafka holds %v, etcd %v", got, want)
	}
	if _, err := (&http.Client{Timeout: time.Second}).Get(base + "/healthz"); err == nil {
		t.Errorf("the endpoints still answer after the process exited")
	}
}
