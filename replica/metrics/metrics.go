// Package metrics is a replica's Prometheus glue: a Collector that reads
// its counters, lag and timings at scrape time, and the HTTP Handler of its
// operational endpoints (/metrics, /healthz, /readyz). It is apart from
// package replica so that a service embedding a replica without Prometheus
// does not link client_golang.
package metrics

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/offsetkeeper/offsetkeeper/replica"
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
	r              Source
	group          string
	mirror         MirrorCounts
	partitionLimit int // WithPartitionLimit's; negative: no limit
	descs          collectorDescs
}

// Source is what a Collector reads, at scrape time: a *replica.Replica.
type Source interface {
	Config() replica.Config
	Stats() replica.Stats
	Alive() bool
	Fetching() (requests, held, budget int64)
	Lag() []replica.PartitionLag
	Timings() replica.Timings
	Etcd() (size, inUse, quota, compactions int64)
	Kafka() replica.KafkaState
}

// MirrorCounts is what a Collector reads of an offset mirror: a
// *replica.Mirror.
type MirrorCounts interface {
	Commits() int64
	Failures() int64
}

// CollectorOption configures a Collector.
type CollectorOption func(*Collector)

// WithMirror adds the offset mirror's counters
// (offsetkeeper_mirror_commits_total, offsetkeeper_mirror_failures_total).
func WithMirror(m MirrorCounts) CollectorOption { return func(c *Collector) { c.mirror = m } }

// DefaultPartitionLimit is how many partitions a replica may own and
// still export a series of each (WithPartitionLimit).
const DefaultPartitionLimit = 1000

// WithPartitionLimit exports the per-partition series (lag, offsets,
// stalls) only while the replica owns at most n partitions: a replica of
// thousands of partitions would otherwise export tens of thousands of
// series a scrape. Negative: always; 0: never. The per-topic series
// (offsetkeeper_topic_*) are exported whatever the limit. Without the
// option: always.
func WithPartitionLimit(n int) CollectorOption { return func(c *Collector) { c.partitionLimit = n } }

// counterDesc is one metric read from the replica at scrape time.
type counterDesc struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(s *replica.Stats, r Source) float64
}

type collectorDescs struct {
	scalars []counterDesc

	mirrorCommits, mirrorFailures *prometheus.Desc

	lag, lagSeconds, offset, latest *prometheus.Desc
	maxLag, maxLagSeconds, sumLag   *prometheus.Desc
	stalled, oldestWrite            *prometheus.Desc
	unstable, lsoStalled            *prometheus.Desc
	truncations                     *prometheus.Desc
	brokerUp, fetchErrors           *prometheus.Desc
	lastFetch                       *prometheus.Desc

	rows, write, commit *prometheus.Desc

	topicLag, topicLagSeconds, topicStalled, topicPartitions *prometheus.Desc
}

// NewCollector returns the collector of r; register it with a
// prometheus.Registry. Latency and size histograms are the replica's own
// (replica.Timings), fed at each block's write and commit.
func NewCollector(r Source, opts ...CollectorOption) *Collector {
	cfg := r.Config()
	c := &Collector{r: r, group: cfg.Group, partitionLimit: -1}
	for _, o := range opts {
		o(c)
	}
	group := prometheus.Labels{"group": cfg.Group}
	own := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, nil, group)
	}
	// stat is a metric of one of the replica's Stats, read once a scrape.
	stat := func(name, help string, typ prometheus.ValueType, v func(s *replica.Stats) int64) counterDesc {
		return counterDesc{own(name, help), typ, func(s *replica.Stats, _ Source) float64 { return float64(v(s)) }}
	}
	// live is a metric the replica answers apart from its Stats.
	live := func(name, help string, typ prometheus.ValueType, v func(r Source) float64) counterDesc {
		return counterDesc{own(name, help), typ, func(_ *replica.Stats, r Source) float64 { return v(r) }}
	}
	d := &c.descs
	d.scalars = []counterDesc{
		stat("offsetkeeper_records_written_total",
			"Records the sink stored as rows. Its dead letters and the records its policy skipped are not among them: offsetkeeper_dead_letters_total counts those.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.Stored }),
		stat("offsetkeeper_records_delivered_total",
			"Records delivered to the sink and committed past: stored as rows, or set aside by the sink (dead letters, skipped).",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.Records }),
		stat("offsetkeeper_blocks_written_total",
			"Blocks delivered and committed. A block of only undeliverable records (transaction markers, aborted records) is committed without a sink write and counts too.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.Blocks }),
		stat("offsetkeeper_commits_total",
			"Offset commits to etcd that succeeded.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.Commits }),
		stat("offsetkeeper_commit_failures_total",
			"Offset commits that failed after their retries: the block is in the sink but its offset is not committed, so the next owner replays it. Zero in a healthy group.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.CommitFailures }),
		stat("offsetkeeper_fenced_total",
			"Partitions stopped because their claim was fenced (taken by another owner or epoch) at an intent, a commit or a sink write.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.Fenced }),
		stat("offsetkeeper_rollbacks_total",
			"Blocks rolled back: polled but not committed, and read again (sink errors, fencing, operator resets, commit failures, hard stops).",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.Rollbacks }),
		stat("offsetkeeper_offsets_changed_total",
			"Commits refused because an operator reset the offsets; the partition rolled back and sought to the new offset.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.OffsetsChanged }),
		stat("offsetkeeper_offset_resets_total",
			"Offsets Kafka reported out of range: below the log start (retention or DeleteRecords passed them; reading resumed at the log start) or past the log end (the log was truncated; reading resumed at the log end).",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.OffsetResets }),
		stat("offsetkeeper_offsets_skipped_total",
			"Offsets never read because the log start moved past them before they were (retention or DeleteRecords): records gone from Kafka, not delivered. Zero in a healthy group.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.OffsetsSkipped }),
		stat("offsetkeeper_offsets_truncated_total",
			"Committed offsets whose records Kafka no longer holds after a log truncation: records the sink holds that Kafka lost. Zero in a healthy group.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.OffsetsTruncated }),
		stat("offsetkeeper_topics_recreated_total",
			"Partitions held because their topic was deleted and created again (its id changed): nothing more is read from them until an operator resets their offsets. Zero in a healthy group.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.TopicsRecreated }),
		stat("offsetkeeper_topics",
			"Topics the replica reads: those of --topics and those matching --topics-regex at its last read of the metadata.",
			prometheus.GaugeValue, func(s *replica.Stats) int64 { return s.Topics }),
		stat("offsetkeeper_topics_found_total",
			"Topics that appeared between two reads of the metadata (created while the group runs, matching --topics-regex).",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.TopicsFound }),
		stat("offsetkeeper_topics_gone_total",
			"Topics that went between two reads of the metadata (deleted): their partitions are released.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.TopicsGone }),
		stat("offsetkeeper_kafka_relogins_total",
			"SASL logins again on open Kafka connections before their sessions ended (KIP-368, connections.max.reauth.ms).",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.KafkaRelogins }),
		stat("offsetkeeper_fetch_incremental_requests_total",
			"Fetch requests sent in a fetch session (KIP-227): they list only the partitions whose fetch changed, so an idle partition costs nothing per request. Of offsetkeeper_fetch_requests_total.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.IncrementalFetches }),
		stat("offsetkeeper_fetch_request_bytes_total",
			"Bytes of the fetch requests written to Kafka, all brokers.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.FetchRequestBytes }),
		stat("offsetkeeper_decode_budget_stops_total",
			"Blocks ended early because the JSON their records decoded into filled the partition's share of --max-buffer-bytes; the next block starts at the record that did not fit. A few at start are normal; a steady rate means the budget is small for the records' JSON.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.DecodeBudgetStops }),
		stat("offsetkeeper_kafka_metadata_lookups_total",
			"Metadata lookups of the partitions' leaders: periodic, and after a leader moved or a fetch went unanswered.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.KafkaLookups }),
		{own("offsetkeeper_kafka_throttled_seconds_total",
			"Time Kafka brokers throttled this replica's fetches by their quotas (KIP-219): no fetch is sent to a broker while it throttles."),
			prometheus.CounterValue, func(s *replica.Stats, _ Source) float64 { return s.KafkaThrottled.Seconds() }},
		stat("offsetkeeper_sink_write_errors_total",
			"Sink writes that failed (each is rolled back and retried).",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.SinkErrors }),
		stat("offsetkeeper_sink_write_timeouts_total",
			"Sink writes that did not end within --write-timeout (also counted as errors): a lock, a server that stopped answering.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.WriteTimeouts }),
		stat("offsetkeeper_abandoned_blocks_total",
			"Blocks a graceful stop gave up on when --shutdown-timeout passed: rolled back, and replayed by the next owner.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.Abandoned }),
		stat("offsetkeeper_sink_calls_total",
			"Calls to the sink: one per block, or one per round of blocks for a sink that takes several at once (PostgreSQL, discard).",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.SinkCalls }),
		stat("offsetkeeper_oversized_batches_total",
			"Fetches of a record batch that would decompress past --max-buffer-bytes: its partition waits (retrying) until the budget is raised. Zero in a healthy group.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.OversizedBatches }),
		stat("offsetkeeper_claims",
			"Partitions this replica holds now.",
			prometheus.GaugeValue, func(s *replica.Stats) int64 { return s.Claims }),
		stat("offsetkeeper_rebalances_total",
			"Plans that made this replica claim or release partitions.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.Rebalances }),
		stat("offsetkeeper_sessions_total",
			"Sessions (etcd leases) the replica joined the group with; above 1 it rejoined after losing its lease.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.Sessions }),
		live("offsetkeeper_session_alive",
			"1 while the replica can show its etcd lease alive (a keepalive succeeded within TTL/2), else 0: it then writes and commits nothing.",
			prometheus.GaugeValue, func(r Source) float64 { return boolFloat(r.Alive()) }),
		stat("offsetkeeper_dead_letters_total",
			"Records the sink set aside as dead letters or skipped by its policy (0 for sinks without one).",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.DeadLetters }),
		stat("offsetkeeper_decode_errors_total",
			"Records whose key or value could not be decoded by its format (wrong magic byte, unknown schema id, bytes that do not match the schema), each time tried: dead-lettered, skipped, or holding their partition (--on-decode-error).",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.DecodeErrors }),
		stat("offsetkeeper_decode_skipped_total",
			"Records left out of their block because they could not be decoded (--on-decode-error skip).",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.DecodeSkipped }),
		stat("offsetkeeper_registry_waits_total",
			"Blocks rolled back, to be read again, because the Schema Registry did not give a schema: nothing is lost or set aside for it.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.RegistryWaits }),
		stat("offsetkeeper_registry_requests_total",
			"Requests sent to the Schema Registry: one per schema id first seen, and per reference.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.RegistryRequests }),
		stat("offsetkeeper_registry_errors_total",
			"Schema Registry requests that failed (unreachable, timed out, refused, or not found).",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.RegistryErrors }),
		stat("offsetkeeper_schema_cache_hits_total",
			"Records whose schema was found compiled in the cache.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.SchemaCacheHits }),
		stat("offsetkeeper_schema_cache_misses_total",
			"Schema lookups that had to fetch and compile the schema.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.SchemaCacheMisses }),
		stat("offsetkeeper_ignored_fields_total",
			"Decoded fields the sink had no column for and ignored (PostgreSQL without evolve=add-columns).",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.IgnoredFields }),
		stat("offsetkeeper_sink_ddl_total",
			"Statements the sink ran to change its tables' shape with evolve=add-columns: tables made, columns added (each also logged at INFO).",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.SinkDDL }),
		stat("offsetkeeper_etcd_rounds_total",
			"Write transactions sent to etcd: each carries the claims, intents, commits and releases of many partitions, one nested transaction each.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.EtcdRounds }),
		stat("offsetkeeper_etcd_round_writes_total",
			"Partition writes (claims, intents, commits, releases) sent in etcd rounds; divided by offsetkeeper_etcd_rounds_total, the partitions per round.",
			prometheus.CounterValue, func(s *replica.Stats) int64 { return s.EtcdRoundWrites }),
		live("offsetkeeper_fetch_requests_total",
			"Fetch requests sent to Kafka: one per broker per round trip, covering every partition the broker leads.",
			prometheus.CounterValue, func(r Source) float64 { n, _, _ := r.Fetching(); return float64(n) }),
		live("offsetkeeper_etcd_db_size_bytes",
			"The size of etcd's database file, the largest over its members, as last read (every 30s). At its quota etcd refuses every write, commits included.",
			prometheus.GaugeValue, func(r Source) float64 { s, _, _, _ := r.Etcd(); return float64(s) }),
		live("offsetkeeper_etcd_db_size_in_use_bytes",
			"Of offsetkeeper_etcd_db_size_bytes, the bytes in use: the rest is freed space that a defragmentation (etcdctl defrag) gives back.",
			prometheus.GaugeValue, func(r Source) float64 { _, u, _, _ := r.Etcd(); return float64(u) }),
		live("offsetkeeper_etcd_db_quota_bytes",
			"etcd's backend quota (--quota-backend-bytes) as its members report it; 0 when they do not (etcd before 3.6).",
			prometheus.GaugeValue, func(r Source) float64 { _, _, q, _ := r.Etcd(); return float64(q) }),
		live("offsetkeeper_etcd_compactions_total",
			"Compactions of etcd's history this replica made (--etcd-compact-interval): the replicas on one etcd cluster take the rounds in turn.",
			prometheus.CounterValue, func(r Source) float64 { _, _, _, c := r.Etcd(); return float64(c) }),
		live("offsetkeeper_buffer_bytes",
			"Bytes of records fetched (and decompressed) and not yet committed, all partitions together, with what requests in flight may return.",
			prometheus.GaugeValue, func(r Source) float64 { _, held, _ := r.Fetching(); return float64(held) }),
		live("offsetkeeper_buffer_budget_bytes",
			"The budget of offsetkeeper_buffer_bytes (--max-buffer-bytes).",
			prometheus.GaugeValue, func(r Source) float64 { _, _, b := r.Fetching(); return float64(b) }),
		live("offsetkeeper_kafka_readable",
			"1 while the replica reads its topics from Kafka; 0 once its metadata reads or a broker's fetches have failed for --kafka-down-after (or it never reached Kafka since it started): it then holds no partitions while any replica of the group reads, and /readyz says why.",
			prometheus.GaugeValue, func(r Source) float64 { return boolFloat(r.Kafka().Reads) }),
		{prometheus.NewDesc("offsetkeeper_build_info", "Always 1; labels name the version and the replica.", nil,
			prometheus.Labels{"group": cfg.Group, "version": cfg.Version, "replica": cfg.ReplicaID}),
			prometheus.GaugeValue, func(*replica.Stats, Source) float64 { return 1 }},
	}
	d.mirrorCommits = own("offsetkeeper_mirror_commits_total",
		"Passes that copied the committed offsets of the owned partitions to Kafka's group offsets.")
	d.mirrorFailures = own("offsetkeeper_mirror_failures_total",
		"Passes that failed to copy committed offsets to Kafka (wholly or for some partitions). Informational: etcd's offsets are unaffected.")

	d.truncations = prometheus.NewDesc("offsetkeeper_log_truncations_total",
		"Times Kafka's log of a partition was found truncated below what the replica had read (an unclean leader election, or a leader that lost acknowledged records), by cause: the leader epoch stored with the offset validated when the partition was claimed, when its leader changed, or when an offset was out of range (reading went on from the divergence point in a new generation); or an offset past the log end without an epoch (reading resumed at the log end). Zero in a healthy group.",
		[]string{"cause"}, group)
	d.brokerUp = prometheus.NewDesc("offsetkeeper_kafka_broker_up",
		"1 while the last fetch from a broker (by its node ID) was answered, 0 while its fetches fail. Only brokers the replica fetched from are listed.",
		[]string{"broker"}, group)
	d.fetchErrors = prometheus.NewDesc("offsetkeeper_kafka_fetch_errors_total",
		"Errors of fetches, of whole requests and of single partitions, by cause: tls, auth, refused (nothing listens), timeout, closed, leader_moved, unknown_topic, unsupported, other. leader_moved passes with every leader election.",
		[]string{"cause"}, group)
	d.lastFetch = own("offsetkeeper_kafka_last_fetch_seconds",
		"Seconds since a fetch of this replica was last answered, by any broker. Absent before the first. It grows while the replica holds no partitions, which fetch nothing.")
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
	d.stalled = prometheus.NewDesc("offsetkeeper_partition_stalled_seconds",
		"Seconds a partition this replica owns has been behind without a commit: 0 when caught up, about the flush interval at most when it keeps up, growing while it is stuck (a failing or hanging sink write, fetches that do not return).", lagLabels, nil)
	d.unstable = prometheus.NewDesc("offsetkeeper_partition_unstable_records",
		"Records between the last stable offset and the high watermark of a partition this replica owns (read_committed): records of open transactions, which the lag does not count. Exported under read_committed only.", lagLabels, nil)
	d.lsoStalled = prometheus.NewDesc("offsetkeeper_partition_lso_stalled_seconds",
		"Seconds the last stable offset of a partition this replica owns has not moved while records lay past it: a transaction left open (a producer gone without aborting) holds every record behind it until transaction.timeout.ms, lag reading 0 meanwhile. 0 when nothing lies past it. Exported under read_committed only.", lagLabels, nil)
	d.oldestWrite = prometheus.NewDesc("offsetkeeper_sink_write_in_flight_seconds",
		"Seconds the oldest sink write in flight has been going; 0 when none. Writes past --write-timeout fail and are retried.", []string{"group"}, nil)

	topicLabels := []string{"group", "topic"}
	d.topicLag = prometheus.NewDesc("offsetkeeper_topic_lag",
		"The sum of kafka_consumergroup_group_lag over the partitions of a topic this replica owns: exported whatever the number of partitions (--metrics-partition-limit bounds the per-partition series).", topicLabels, nil)
	d.topicLagSeconds = prometheus.NewDesc("offsetkeeper_topic_max_lag_seconds",
		"The largest kafka_consumergroup_group_lag_seconds among the partitions of a topic this replica owns.", topicLabels, nil)
	d.topicStalled = prometheus.NewDesc("offsetkeeper_topic_max_stalled_seconds",
		"The largest offsetkeeper_partition_stalled_seconds among the partitions of a topic this replica owns.", topicLabels, nil)
	d.topicPartitions = prometheus.NewDesc("offsetkeeper_topic_partitions",
		"Partitions of a topic this replica owns.", topicLabels, nil)
	d.rows = own("offsetkeeper_block_rows", "Rows per block written to the sink.")
	d.write = own("offsetkeeper_sink_write_duration_seconds", "Time a successful sink write of one block took.")
	d.commit = own("offsetkeeper_commit_duration_seconds", "Time a successful offset commit to etcd took, retries included.")
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
	for _, x := range []*prometheus.Desc{d.lag, d.lagSeconds, d.offset, d.latest, d.maxLag, d.maxLagSeconds, d.sumLag, d.stalled, d.unstable, d.lsoStalled, d.truncations, d.brokerUp, d.fetchErrors, d.lastFetch, d.oldestWrite, d.rows, d.write, d.commit,
		d.topicLag, d.topicLagSeconds, d.topicStalled, d.topicPartitions} {
		ch <- x
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	d := &c.descs
	stats := c.r.Stats()
	for _, s := range d.scalars {
		ch <- prometheus.MustNewConstMetric(s.desc, s.typ, s.value(&stats, c.r))
	}
	for _, cause := range replica.TruncationCauses {
		ch <- prometheus.MustNewConstMetric(d.truncations, prometheus.CounterValue, float64(stats.LogTruncations[cause]), cause)
	}
	c.collectKafka(ch)
	if c.mirror != nil {
		ch <- prometheus.MustNewConstMetric(d.mirrorCommits, prometheus.CounterValue, float64(c.mirror.Commits()))
		ch <- prometheus.MustNewConstMetric(d.mirrorFailures, prometheus.CounterValue, float64(c.mirror.Failures()))
	}
	group := c.group
	var maxLag, sumLag int64
	var maxSeconds, oldestWrite float64
	lags := c.r.Lag()
	each := c.partitionLimit < 0 || len(lags) <= c.partitionLimit
	type topicSums struct {
		lag              int64
		seconds, stalled float64
		partitions       int
	}
	topics := map[string]*topicSums{}
	for _, l := range lags {
		ts := topics[l.Partition.Topic]
		if ts == nil {
			ts = &topicSums{}
			topics[l.Partition.Topic] = ts
		}
		ts.lag, ts.partitions = ts.lag+l.Lag, ts.partitions+1
		ts.seconds, ts.stalled = max(ts.seconds, l.LagSeconds), max(ts.stalled, l.StalledSeconds)
		maxLag, sumLag, maxSeconds = max(maxLag, l.Lag), sumLag+l.Lag, max(maxSeconds, l.LagSeconds)
		oldestWrite = max(oldestWrite, l.WriteSeconds)
		if !each {
			continue
		}
		p := strconv.Itoa(l.Partition.Partition)
		ch <- prometheus.MustNewConstMetric(d.lag, prometheus.GaugeValue, float64(l.Lag), group, l.Partition.Topic, p)
		ch <- prometheus.MustNewConstMetric(d.lagSeconds, prometheus.GaugeValue, l.LagSeconds, group, l.Partition.Topic, p)
		ch <- prometheus.MustNewConstMetric(d.offset, prometheus.GaugeValue, float64(l.Committed), group, l.Partition.Topic, p)
		if l.LogEnd >= 0 {
			ch <- prometheus.MustNewConstMetric(d.latest, prometheus.GaugeValue, float64(l.LogEnd), l.Partition.Topic, p)
		}
		ch <- prometheus.MustNewConstMetric(d.stalled, prometheus.GaugeValue, l.StalledSeconds, group, l.Partition.Topic, p)
		if l.HighWatermark >= 0 {
			ch <- prometheus.MustNewConstMetric(d.unstable, prometheus.GaugeValue, float64(l.Unstable), group, l.Partition.Topic, p)
			ch <- prometheus.MustNewConstMetric(d.lsoStalled, prometheus.GaugeValue, l.LSOStalledSeconds, group, l.Partition.Topic, p)
		}
	}
	for topic, ts := range topics {
		ch <- prometheus.MustNewConstMetric(d.topicLag, prometheus.GaugeValue, float64(ts.lag), group, topic)
		ch <- prometheus.MustNewConstMetric(d.topicLagSeconds, prometheus.GaugeValue, ts.seconds, group, topic)
		ch <- prometheus.MustNewConstMetric(d.topicStalled, prometheus.GaugeValue, ts.stalled, group, topic)
		ch <- prometheus.MustNewConstMetric(d.topicPartitions, prometheus.GaugeValue, float64(ts.partitions), group, topic)
	}
	ch <- prometheus.MustNewConstMetric(d.oldestWrite, prometheus.GaugeValue, oldestWrite, group)
	ch <- prometheus.MustNewConstMetric(d.maxLag, prometheus.GaugeValue, float64(maxLag), group)
	ch <- prometheus.MustNewConstMetric(d.maxLagSeconds, prometheus.GaugeValue, maxSeconds, group)
	ch <- prometheus.MustNewConstMetric(d.sumLag, prometheus.GaugeValue, float64(sumLag), group)
	t := c.r.Timings()
	for _, h := range []struct {
		desc *prometheus.Desc
		h    replica.Histogram
	}{{d.rows, t.BlockRows}, {d.write, t.SinkWrite}, {d.commit, t.Commit}} {
		buckets := make(map[float64]uint64, len(h.h.Bounds))
		for i, b := range h.h.Bounds {
			buckets[b] = h.h.Buckets[i]
		}
		ch <- prometheus.MustNewConstHistogram(h.desc, h.h.Count, h.h.Sum, buckets)
	}
}

// collectKafka exports what the replica knows of its brokers.
func (c *Collector) collectKafka(ch chan<- prometheus.Metric) {
	d := &c.descs
	k := c.r.Kafka()
	for _, cause := range replica.FetchErrorCauses {
		ch <- prometheus.MustNewConstMetric(d.fetchErrors, prometheus.CounterValue, float64(k.FetchErrors[cause]), cause)
	}
	var last time.Time
	for _, b := range k.Brokers {
		ch <- prometheus.MustNewConstMetric(d.brokerUp, prometheus.GaugeValue, boolFloat(b.Up), strconv.Itoa(int(b.ID)))
		if b.LastOK.After(last) {
			last = b.LastOK
		}
	}
	if !last.IsZero() {
		ch <- prometheus.MustNewConstMetric(d.lastFetch, prometheus.GaugeValue, time.Since(last).Seconds())
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Readier is what Handler asks for readiness: a *replica.Replica.
type Readier interface {
	Ready(ctx context.Context) error
}

// DefaultReadyTimeout bounds one readiness check of Handler: below the
// default timeout of a Kubernetes probe (1s) it would leave no margin, so it
// is that, and a slower etcd or sink reads as not ready.
const DefaultReadyTimeout = time.Second

// HandlerOption configures Handler.
type HandlerOption func(*handlerConfig)

type handlerConfig struct{ profiles bool }

// WithProfiles serves Go's profiles (net/http/pprof) under /debug/pprof/.
// A heap profile holds what the process holds, records and credentials
// among it: serve them only where operators alone can reach.
func WithProfiles() HandlerOption { return func(c *handlerConfig) { c.profiles = true } }

// Handler serves a replica's operational endpoints:
//
//	/metrics  what g gathers, in the Prometheus exposition format
//	/healthz  200 "ok" while the process serves HTTP: a liveness probe
//	/readyz   200 "ready" when r.Ready is nil, else 503 and the reason
//	/debug/pprof/  with WithProfiles, Go's profiles (net/http/pprof): where
//	          the CPU and the memory go, for a replica slower than it should be
//
// r is typically a *replica.Replica (see Replica.Ready); g a registry
// holding NewCollector(r) and the Go and process collectors.
func Handler(r Readier, g prometheus.Gatherer, opts ...HandlerOption) http.Handler {
	var cfg handlerConfig
	for _, o := range opts {
		o(&cfg)
	}
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
	if cfg.profiles {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}
