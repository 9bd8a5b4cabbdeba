package metrics

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

// deadLetterSink is a sink with the optional DeadLetters and Ping.
type deadLetterSink struct {
	sinks.Sink
	n    int64
	ping error
}

func (s *deadLetterSink) DeadLetters() int64             { return s.n }
func (s *deadLetterSink) Ping(ctx context.Context) error { return s.ping }

// offlineReplica is a replica that never ran: no etcd is needed to read its
// metrics.
func offlineReplica(t *testing.T, sink sinks.Sink) *replica.Replica {
	t.Helper()
	r, err := replica.New(offlineConfig, nil, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var offlineConfig = replica.Config{Group: "orders", ReplicaID: "r1", Topics: []string{"t"}, Version: "v1.2.3",
	Kafka: kafkaconf.Config{Brokers: []string{"127.0.0.1:1"}}}

// fakeSource is a Source whose stats and timings a test sets.
type fakeSource struct {
	*replica.Replica
	stats   replica.Stats
	timings replica.Timings
	kafka   *replica.KafkaState
}

func (f *fakeSource) Kafka() replica.KafkaState {
	if f.kafka != nil {
		return *f.kafka
	}
	return f.Replica.Kafka()
}

func (f *fakeSource) Stats() replica.Stats     { return f.stats }
func (f *fakeSource) Timings() replica.Timings { return f.timings }

// fakeMirror is a MirrorCounts a test sets.
type fakeMirror struct{ commits, failures int64 }

func (m fakeMirror) Commits() int64  { return m.commits }
func (m fakeMirror) Failures() int64 { return m.failures }

func gather(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

func scalar(t *testing.T, fams map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok || len(f.Metric) != 1 {
		t.Fatalf("%s: not exported as one series", name)
	}
	m := f.Metric[0]
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("%s: neither counter nor gauge", name)
	return 0
}

func TestCollectorReadsStatsAtScrapeTime(t *testing.T) {
	sink := &deadLetterSink{Sink: discard.New(), n: 7}
	r := &fakeSource{Replica: offlineReplica(t, sink)}
	c := NewCollector(r)

	r.stats = replica.Stats{Records: 1007, Stored: 1000, Blocks: 12, Commits: 12, Fenced: 1, Rollbacks: 3, OffsetsChanged: 1, OffsetResets: 2,
		SinkErrors: 1, Claims: 4, Rebalances: 5, Sessions: 1, DeadLetters: r.Replica.Stats().DeadLetters}
	r.timings = r.Replica.Timings()
	r.timings.BlockRows = replica.Histogram{Count: 2, Sum: 400, Bounds: []float64{1, 1000}, Buckets: []uint64{0, 2}}
	r.timings.SinkWrite.Count = 2
	r.timings.Commit.Count = 1

	fams := gather(t, c)
	want := map[string]float64{
		"offsetkeeper_records_written_total":   1000,
		"offsetkeeper_records_delivered_total": 1007,
		"offsetkeeper_blocks_written_total":    12,
		"offsetkeeper_commits_total":           12,
		"offsetkeeper_commit_failures_total":   0,
		"offsetkeeper_fenced_total":            1,
		"offsetkeeper_rollbacks_total":         3,
		"offsetkeeper_offsets_changed_total":   1,
		"offsetkeeper_offset_resets_total":     2,
		"offsetkeeper_sink_write_errors_total": 1,
		"offsetkeeper_claims":                  4,
		"offsetkeeper_rebalances_total":        5,
		"offsetkeeper_sessions_total":          1,
		"offsetkeeper_session_alive":           0,
		"offsetkeeper_dead_letters_total":      7,
		"offsetkeeper_build_info":              1,
		"kafka_consumergroup_group_max_lag":    0,
		"kafka_consumergroup_group_sum_lag":    0,
	}
	for name, v := range want {
		if got := scalar(t, fams, name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	for name, f := range fams {
		if f.GetHelp() == "" {
			t.Errorf("%s has no help text", name)
		}
		if strings.HasPrefix(name, "offsetkeeper_") {
			for _, m := range f.Metric {
				if !hasLabel(m, "group", "orders") {
					t.Errorf("%s has no group=\"orders\" label", name)
				}
			}
		}
	}
	if _, ok := fams["offsetkeeper_mirror_failures_total"]; ok {
		t.Errorf("mirror metrics exported without a mirror")
	}
	if !hasLabel(fams["offsetkeeper_build_info"].Metric[0], "version", "v1.2.3") {
		t.Errorf("build info without the version")
	}

	h := fams["offsetkeeper_block_rows"].Metric[0].Histogram
	if h.GetSampleCount() != 2 || h.GetSampleSum() != 400 {
		t.Errorf("block rows: count %d sum %v, want 2 and 400", h.GetSampleCount(), h.GetSampleSum())
	}
	if n := fams["offsetkeeper_sink_write_duration_seconds"].Metric[0].Histogram.GetSampleCount(); n != 2 {
		t.Errorf("sink write durations: %d observed, want 2", n)
	}
	if n := fams["offsetkeeper_commit_duration_seconds"].Metric[0].Histogram.GetSampleCount(); n != 1 {
		t.Errorf("commit durations: %d observed, want 1", n)
	}

	// The values are read at scrape time, not when the collector was made.
	r.stats.Stored += 24
	if got := scalar(t, gather(t, c), "offsetkeeper_records_written_total"); got != 1024 {
		t.Errorf("records after 24 more: %v, want 1024", got)
	}
}

func TestCollectorWithMirror(t *testing.T) {
	r := offlineReplica(t, discard.New())
	fams := gather(t, NewCollector(r, WithMirror(fakeMirror{commits: 5, failures: 2})))
	if got := scalar(t, fams, "offsetkeeper_mirror_failures_total"); got != 2 {
		t.Errorf("mirror failures %v, want 2", got)
	}
	if got := scalar(t, fams, "offsetkeeper_mirror_commits_total"); got != 5 {
		t.Errorf("mirror commits %v, want 5", got)
	}
}

func TestMetricsPassPromlint(t *testing.T) {
	r := offlineReplica(t, discard.New())
	m := replica.NewMirror(r)
	defer m.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(r, WithMirror(m)))
	srv := httptest.NewServer(Handler(r, reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	problems, err := promlint.New(resp.Body).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.Label {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func TestHandlerProbes(t *testing.T) {
	r := offlineReplica(t, discard.New())
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(r))
	srv := httptest.NewServer(Handler(r, reg, WithProfiles()))
	defer srv.Close()
	// Profiles only when asked for: a heap profile holds records and
	// credentials.
	plain := httptest.NewServer(Handler(r, reg))
	defer plain.Close()

	tests := []struct {
		srv    *httptest.Server
		path   string
		status int
		body   string
	}{
		{srv, "/healthz", http.StatusOK, "ok"},
		{srv, "/readyz", http.StatusServiceUnavailable, "no live session"},
		{srv, "/metrics", http.StatusOK, "offsetkeeper_records_written_total"},
		{srv, "/debug/pprof/", http.StatusOK, "goroutine"},
		{srv, "/debug/pprof/heap?debug=1", http.StatusOK, "heap profile"},
		{srv, "/nope", http.StatusNotFound, ""},
		{plain, "/metrics", http.StatusOK, "offsetkeeper_records_written_total"},
		{plain, "/debug/pprof/", http.StatusNotFound, ""},
		{plain, "/debug/pprof/heap?debug=1", http.StatusNotFound, ""},
	}
	for _, tc := range tests {
		resp, err := http.Get(tc.srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.body) {
			t.Errorf("GET %s: %d %q, want %d and %q", tc.path, resp.StatusCode, b, tc.status, tc.body)
		}
	}
}

// What a replica knows of Kafka is exported: whether it reads, each
// broker's state, fetch errors by cause, and the age of the last answer.
func TestCollectorKafkaState(t *testing.T) {
	r := &fakeSource{Replica: offlineReplica(t, discard.New())}
	c := NewCollector(r)
	if got := scalar(t, gather(t, c), "offsetkeeper_kafka_readable"); got != 1 {
		t.Errorf("readable of a replica that never failed = %v", got)
	}
	r.kafka = &replica.KafkaState{Why: "no broker answered", FetchErrors: map[string]int64{"refused": 3},
		Brokers: []replica.BrokerState{{ID: 1, Up: true, LastOK: time.Now().Add(-90 * time.Second)}, {ID: 2, Err: "refused"}}}
	fams := gather(t, c)
	if got := scalar(t, fams, "offsetkeeper_kafka_readable"); got != 0 {
		t.Errorf("readable of a replica that cannot read = %v", got)
	}
	if got := scalar(t, fams, "offsetkeeper_kafka_last_fetch_seconds"); got < 90 || got > 100 {
		t.Errorf("last fetch %v s ago, want 90", got)
	}
	up := map[string]float64{}
	for _, m := range fams["offsetkeeper_kafka_broker_up"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "broker" {
				up[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	if up["1"] != 1 || up["2"] != 0 || len(up) != 2 {
		t.Errorf("broker up %v, want 1: 1, 2: 0", up)
	}
	for _, m := range fams["offsetkeeper_kafka_fetch_errors_total"].GetMetric() {
		if hasLabel(m, "cause", "refused") && m.GetCounter().GetValue() != 3 {
			t.Errorf("refused fetch errors %v, want 3", m.GetCounter().GetValue())
		}
	}
}

// lagSource is a Source whose partitions' lag a test sets.
type lagSource struct {
	*replica.Replica
	lags []replica.PartitionLag
}

func (l lagSource) Lag() []replica.PartitionLag { return l.lags }

// TestCollectorPartitionLimit: a replica of more partitions than the
// limit exports one series of each topic and none of each partition;
// within the limit, both.
func TestCollectorPartitionLimit(t *testing.T) {
	var lags []replica.PartitionLag
	for p := range 6 {
		topic := []string{"orders.eu", "orders.us"}[p%2]
		lags = append(lags, replica.PartitionLag{Partition: sinks.Partition{Topic: topic, Partition: p}, Lag: int64(10 * p), LagSeconds: float64(p), LogEnd: -1, HighWatermark: -1})
	}
	src := lagSource{Replica: offlineReplica(t, discard.New()), lags: lags}
	for _, c := range []struct {
		limit, perPartition int
	}{{5, 0}, {6, 6}, {-1, 6}} {
		fams := gather(t, NewCollector(src, WithPartitionLimit(c.limit)))
		if n := len(fams["kafka_consumergroup_group_lag"].GetMetric()); n != c.perPartition {
			t.Errorf("limit %d: %d per-partition lag series, want %d", c.limit, n, c.perPartition)
		}
		topics := map[string]float64{}
		for _, m := range fams["offsetkeeper_topic_lag"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "topic" {
					topics[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
		if topics["orders.eu"] != 0+20+40 || topics["orders.us"] != 10+30+50 || len(topics) != 2 {
			t.Errorf("limit %d: per-topic lag %v, want orders.eu 60 and orders.us 90", c.limit, topics)
		}
		if got := scalar(t, fams, "kafka_consumergroup_group_sum_lag"); got != 150 {
			t.Errorf("limit %d: sum lag %v, want 150 whatever the limit", c.limit, got)
		}
	}
}
