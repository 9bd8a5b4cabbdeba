package replica

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Collector exports a replica's metrics to Prometheus. It reads the
// replica's counters and lag at scrape time, so a scrape costs no etcd or
// Kafka request. Counters of one replica are named offsetkeeper_*; lag
// follows kafka-lag-exporter (kafka_consumergroup_group_lag and friends), so
// its dashboards and alerts work unchanged.
//
// Lag series exist only for the partitions this replica owns: the group's
// lag is the union over its replicas (aggregate the *_max_* and *_sum_*
// series with max and sum by group).
type Collector struct {
	r      *Replica
	mirror *Mirror
	descs  collectorDescs
}

// CollectorOption configures a Collector.
type CollectorOption func(*Collector)

// WithMirror adds the offset mirror's counters
// (offsetkeeper_mirror_commits_total, offsetkeeper_mirror_failures_total).
func WithMirror(m *Mirror) CollectorOption { return func(c *Collector) { c.mirror = m } }

// counterDesc is one metric read from the replica at scrape time.
type counterDesc struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(r *Replica) float64
}

type collectorDescs struct {
	scalars []counterDesc

	mirrorCommits, mirrorFailures *prometheus.Desc

	lag, lagSeconds, offset, latest *prometheus.Desc
	maxLag, maxLagSeconds, sumLag   *prometheus.Desc
}

// NewCollector returns the collector of r; register it with a
// prometheus.Registry. Latency and size histograms are the replica's own,
// fed at each block's write and commit.
func NewCollector(r *Replica, opts ...CollectorOption) *Collector {
	c := &Collector{r: r}
	for _, o := range opts {
		o(c)
	}
	group := prometheus.Labels{"group": r.cfg.Group}
	own := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, nil, group)
	}
	stat := func(name, help string, typ prometheus.ValueType, v func(s *Stats) int64) counterDesc {
		return counterDesc{own(name, help), typ, func(r *Replica) float64 { return float64(v(&r.stats)) }}
	}
	d := &c.descs
	d.scalars = []counterDesc{
		stat("offsetkeeper_records_written_total",
			"Records written to the sink.",
			prometheus.CounterValue, func(s *Stats) int64 { return s.Records.Load() }),
		stat("offsetkeeper_blocks_written_total",
			"Blocks delivered and committed. A block of only undeliverable records (transaction markers, aborted records) is committed without a sink write and counts too.",
			prometheus.CounterValue, func(s *Stats) int64 { return s.Blocks.Load() }),
		stat("offsetkeeper_commits_total",
			"Offset commits to etcd that succeeded.",
			prometheus.CounterValue, func(s *Stats) int64 { return s.Commits.Load() }),
		{own("offsetkeeper_commit_failures_total",
			"Offset commits that failed after their retries: the block is in the sink but its offset is not committed, so the next owner replays it. Zero in a healthy group."),
			prometheus.CounterValue, func(r *Replica) float64 { return float64(r.coord.CommitFailures()) }},
		stat("offsetkeeper_fenced_total",
			"Partitions stopped because their claim was fenced (taken by another owner or epoch) at an intent, a commit or a sink write.",
			prometheus.CounterValue, func(s *Stats) int64 { return s.Fenced.Load() }),
		stat("offsetkeeper_rollbacks_total",
			"Blocks rolled back: polled but not committed, and read again (sink errors, fencing, operator resets, commit failures, hard stops).",
			prometheus.CounterValue, func(s *Stats) int64 { return s.Rollbacks.Load() }),
		stat("offsetkeeper_offsets_changed_total",
			"Commits refused because an operator reset the offsets; the partition rolled back and sought to the new offset.",
			prometheus.CounterValue, func(s *Stats) int64 { return s.OffsetsChanged.Load() }),
		stat("offsetkeeper_offset_resets_total",
			"Offsets Kafka reported out of range (deleted by retention, or past the log end), reset by the start policy.",
			prometheus.CounterValue, func(s *Stats) int64 { return s.OffsetResets.Load() }),
		stat("offsetkeeper_sink_write_errors_total",
			"Sink writes that failed.",
			prometheus.CounterValue, func(s *Stats) int64 { return s.SinkErrors.Load() }),
		stat("offsetkeeper_sink_calls_total",
			"Calls to the sink: one per block, or one per round of blocks for a sink that takes several at once (PostgreSQL, discard).",
			prometheus.CounterValue, func(s *Stats) int64 { return s.SinkCalls.Load() }),
		stat("offsetkeeper_oversized_batches_total",
			"Fetches of a record batch that would decompress past --max-buffer-bytes: its partition waits (retrying) until the budget is raised. Zero in a healthy group.",
			prometheus.CounterValue, func(s *Stats) int64 { return s.OversizedBatches.Load() }),
		stat("offsetkeeper_claims",
			"Partitions this replica holds now.",
			prometheus.GaugeValue, func(s *Stats) int64 { return s.Claims.Load() }),
		stat("offsetkeeper_rebalances_total",
			"Plans that made this replica claim or release partitions.",
			prometheus.CounterValue, func(s *Stats) int64 { return s.Rebalances.Load() }),
		stat("offsetkeeper_sessions_total",
			"Sessions (etcd leases) the replica joined the group with; above 1 it rejoined after losing its lease.",
			prometheus.CounterValue, func(s *Stats) int64 { return s.Sessions.Load() }),
		{own("offsetkeeper_session_alive",
			"1 while the replica can show its etcd lease alive (a keepalive succeeded within TTL/2), else 0: it then writes and commits nothing."),
			prometheus.GaugeValue, func(r *Replica) float64 { return boolFloat(r.Alive()) }},
		{own("offsetkeeper_dead_letters_total",
			"Records the sink set aside as dead letters or skipped by its policy (0 for sinks without one)."),
			prometheus.CounterValue, func(r *Replica) float64 {
				if dl, ok := sinks.As[sinks.DeadLetterCounter](r.sink); ok {
					return float64(dl.DeadLetters())
				}
				return 0
			}},
		{own("offsetkeeper_etcd_rounds_total",
			"Write transactions sent to etcd: each carries the claims, intents, commits and releases of many partitions, one nested transaction each."),
			prometheus.CounterValue, func(r *Replica) float64 { return float64(r.coord.Rounds()) }},
		{own("offsetkeeper_etcd_round_writes_total",
			"Partition writes (claims, intents, commits, releases) sent in etcd rounds; divided by offsetkeeper_etcd_rounds_total, the partitions per round."),
			prometheus.CounterValue, func(r *Replica) float64 { return float64(r.coord.RoundOps()) }},
		{own("offsetkeeper_fetch_requests_total",
			"Fetch requests sent to Kafka: one per broker per round trip, covering every partition the broker leads."),
			prometheus.CounterValue, func(r *Replica) float64 { n, _, _ := r.Fetching(); return float64(n) }},
		{own("offsetkeeper_buffer_bytes",
			"Bytes of records fetched (and decompressed) and not yet committed, all partitions together, with what requests in flight may return."),
			prometheus.GaugeValue, func(r *Replica) float64 { _, held, _ := r.Fetching(); return float64(held) }},
		{own("offsetkeeper_buffer_budget_bytes",
			"The budget of offsetkeeper_buffer_bytes (--max-buffer-bytes)."),
			prometheus.GaugeValue, func(r *Replica) float64 { _, _, b := r.Fetching(); return float64(b) }},
		{prometheus.NewDesc("offsetkeeper_build_info", "Always 1; labels name the version and the replica.", nil,
			prometheus.Labels{"group": r.cfg.Group, "version": r.cfg.Version, "replica": r.cfg.ReplicaID}),
			prometheus.GaugeValue, func(*Replica) float64 { return 1 }},
	}
	d.mirrorCommits = own("offsetkeeper_mirror_commits_total",
		"Passes that copied the committed offsets of the owned partitions to Kafka's group offsets.")
	d.mirrorFailures = own("offsetkeeper_mirror_failures_total",
		"Passes that failed to copy committed offsets to Kafka (wholly or for some partitions). Informational: etcd's offsets are unaffected.")

	lagLabels := []string{"group", "topic", "partition"}
	d.lag = prometheus.NewDesc("kafka_consumergroup_group_lag",
		"Records between the committed offset and the log end (last stable offset) of a partition this replica owns.", lagLabels, nil)
	d.lagSeconds = prometheus.NewDesc("kafka_consumergroup_group_lag_seconds",
		"Age of the oldest polled but uncommitted record of a partition that is behind: how late its records reach the sink and are committed. 0 when caught up.", lagLabels, nil)
	d.offset = prometheus.NewDesc("kafka_consumergroup_group_offset",
		"The committed offset (the next offset to read) of a partition this replica owns.", lagLabels, nil)
	d.latest = prometheus.NewDesc("kafka_partition_latest_offset",
		"The log end (last stable offset) last seen of a partition this replica owns.", []string{"topic", "partition"}, nil)
	d.maxLag = prometheus.NewDesc("kafka_consumergroup_group_max_lag",
		"The largest kafka_consumergroup_group_lag among the partitions this replica owns.", []string{"group"}, nil)
	d.maxLagSeconds = prometheus.NewDesc("kafka_consumergroup_group_max_lag_seconds",
		"The largest kafka_consumergroup_group_lag_seconds among the partitions this replica owns.", []string{"group"}, nil)
	d.sumLag = prometheus.NewDesc("kafka_consumergroup_group_sum_lag",
		"The sum of kafka_consumergroup_group_lag over the partitions this replica owns.", []string{"group"}, nil)
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	d := &c.descs
	for _, s := range d.scalars {
		ch <- s.desc
	}
	if c.mirror != nil {
		ch <- d.mirrorCommits
		ch <- d.mirrorFailures
	}
	for _, x := range []*prometheus.Desc{d.lag, d.lagSeconds, d.offset, d.latest, d.maxLag, d.maxLagSeconds, d.sumLag} {
		ch <- x
	}
	c.r.timings().describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	d := &c.descs
	for _, s := range d.scalars {
		ch <- prometheus.MustNewConstMetric(s.desc, s.typ, s.value(c.r))
	}
	if c.mirror != nil {
		ch <- prometheus.MustNewConstMetric(d.mirrorCommits, prometheus.CounterValue, float64(c.mirror.Commits()))
		ch <- prometheus.MustNewConstMetric(d.mirrorFailures, prometheus.CounterValue, float64(c.mirror.Failures()))
	}
	group := c.r.cfg.Group
	var maxLag, sumLag int64
	var maxSeconds float64
	for _, l := range c.r.Lag() {
		p := strconv.Itoa(l.Partition.Partition)
		ch <- prometheus.MustNewConstMetric(d.lag, prometheus.GaugeValue, float64(l.Lag), group, l.Partition.Topic, p)
		ch <- prometheus.MustNewConstMetric(d.lagSeconds, prometheus.GaugeValue, l.LagSeconds, group, l.Partition.Topic, p)
		ch <- prometheus.MustNewConstMetric(d.offset, prometheus.GaugeValue, float64(l.Committed), group, l.Partition.Topic, p)
		if l.LogEnd >= 0 {
			ch <- prometheus.MustNewConstMetric(d.latest, prometheus.GaugeValue, float64(l.LogEnd), l.Partition.Topic, p)
		}
		maxLag, sumLag, maxSeconds = max(maxLag, l.Lag), sumLag+l.Lag, max(maxSeconds, l.LagSeconds)
	}
	ch <- prometheus.MustNewConstMetric(d.maxLag, prometheus.GaugeValue, float64(maxLag), group)
	ch <- prometheus.MustNewConstMetric(d.maxLagSeconds, prometheus.GaugeValue, maxSeconds, group)
	ch <- prometheus.MustNewConstMetric(d.sumLag, prometheus.GaugeValue, float64(sumLag), group)
	c.r.timings().collect(ch)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// timings are a replica's histograms, fed where a block is written and
// committed (partition.deliver) through observeWrite and observeCommit.
type timings struct {
	rows, write, commit prometheus.Histogram
}

func newTimings(group string) *timings {
	labels := prometheus.Labels{"group": group}
	return &timings{
		rows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "offsetkeeper_block_rows", ConstLabels: labels,
			Help:    "Rows per block written to the sink.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10), // 1 .. 262,144
		}),
		write: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "offsetkeeper_sink_write_duration_seconds", ConstLabels: labels,
			Help:    "Time a successful sink write of one block took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16), // 1ms .. 33s
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "offsetkeeper_commit_duration_seconds", ConstLabels: labels,
			Help:    "Time a successful offset commit to etcd took, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5ms .. 16s
		}),
	}
}

func (t *timings) describe(ch chan<- *prometheus.Desc) {
	t.rows.Describe(ch)
	t.write.Describe(ch)
	t.commit.Describe(ch)
}

func (t *timings) collect(ch chan<- prometheus.Metric) {
	t.rows.Collect(ch)
	t.write.Collect(ch)
	t.commit.Collect(ch)
}

func (r *Replica) timings() *timings { return r.hist }

// observeWrite records a successful sink write of a block of rows records
// that took d. partition.deliver calls it.
func (r *Replica) observeWrite(rows int, d time.Duration) {
	t := r.timings()
	t.rows.Observe(float64(rows))
	t.write.Observe(d.Seconds())
}

// observeCommit records a successful offset commit that took d.
// partition.deliver calls it.
func (r *Replica) observeCommit(d time.Duration) {
	r.timings().commit.Observe(d.Seconds())
}

// ErrNotReady is wrapped by every error of Ready.
var ErrNotReady = errors.New("replica not ready")

// Ready reports whether the replica can do its work now: its session is
// alive (a keepalive succeeded within TTL/2), its member key is registered
// in etcd under that session's lease (one read, bounded by ctx), and the
// sink answers when it (or a sink it wraps) is a sinks.Pinger. The error says which failed.
func (r *Replica) Ready(ctx context.Context) error {
	r.mu.Lock()
	s := r.session
	r.mu.Unlock()
	if s == nil || !s.Alive() {
		return fmt.Errorf("%w: no live session in group %s", ErrNotReady, r.cfg.Group)
	}
	key := r.coord.Keys().Member(r.cfg.ReplicaID)
	resp, err := r.coord.Client().Get(ctx, key)
	if err != nil {
		return fmt.Errorf("%w: read member %s: %w", ErrNotReady, r.cfg.ReplicaID, err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease != int64(s.Lease()) {
		return fmt.Errorf("%w: member %s not registered under lease %x", ErrNotReady, r.cfg.ReplicaID, int64(s.Lease()))
	}
	if p, ok := sinks.As[sinks.Pinger](r.sink); ok {
		if err := p.Ping(ctx); err != nil {
			return fmt.Errorf("%w: sink unreachable: %w", ErrNotReady, err)
		}
	}
	return nil
}

// DefaultReadyTimeout bounds one readiness check of Handler: below the
// default timeout of a Kubernetes probe (1s) it would leave no margin, so it
// is that, and a slower etcd or sink reads as not ready.
const DefaultReadyTimeout = time.Second

// Handler serves a replica's operational endpoints:
//
//	/metrics  what g gathers, in the Prometheus exposition format
//	/healthz  200 "ok" while the process serves HTTP: a liveness probe
//	/readyz   200 "ready" when Ready is nil, else 503 and the reason
//
// g is typically a registry holding NewCollector(r) and the Go and process
// collectors.
func Handler(r *Replica, g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), DefaultReadyTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := r.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintln(w, err)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}
