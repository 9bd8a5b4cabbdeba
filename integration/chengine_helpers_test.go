package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// The benchmarks of ClickHouse's own Kafka table engine beside the
// replica (chengine_bench_test.go) share these: the records, the target
// table both fill, the engine's tables, and the replica's process.

// chEngineFields are the fields of the records' JSON values and the
// columns of the Kafka table that reads them: ts is the time the record
// was handed to the producer, in Unix milliseconds.
const chEngineFields = "id UInt64, name String, amount Int64, ts Int64, note String"

// chEngineTarget is the DDL of a target table named name, the same for the
// engine's materialized view and the replica's sink (columns mode): the
// fields, the records' own columns, and seen, the time ClickHouse inserted
// the row (a MATERIALIZED column, which the sink leaves to ClickHouse as
// the view's insert does). window is non_replicated_deduplication_window:
// the sink needs it above 0; the engine's users have ClickHouse's
// default, 0.
func chEngineTarget(name string, window int) string {
	return fmt.Sprintf(`CREATE TABLE %s (%s, kafka_topic String, kafka_partition Int32, kafka_offset Int64,
	seen DateTime64(3) MATERIALIZED now64(3))
	ENGINE = MergeTree ORDER BY (kafka_partition, kafka_offset)
	SETTINGS non_replicated_deduplication_window = %d`, name, chEngineFields, window)
}

// chEngineNote pads a record's value to about 100 bytes.
var chEngineNote = strings.Repeat("x", 18)

// chEngineValue is record id's JSON value, stamped ts (Unix ms).
func chEngineValue(id int64, ts int64) []byte {
	return fmt.Appendf(nil, `{"id":%d,"name":"customer-%07d","amount":%d,"ts":%d,"note":"%s"}`,
		id, id%10_000_000, id%1000, ts, chEngineNote)
}

// engineSettings are the settings of a Kafka table that matter for speed
// and delivery. Its name is its spec: n<consumers>-b<max block
// size>-f<flush ms>, then -tpc for kafka_thread_per_consumer = 1 and -ceb
// for kafka_commit_every_batch = 1.
type engineSettings struct {
	consumers, blockSize, flushMS int
	threadPerConsumer, everyBatch bool
}

func (s engineSettings) String() string {
	n := fmt.Sprintf("n%d-b%d-f%d", s.consumers, s.blockSize, s.flushMS)
	if s.threadPerConsumer {
		n += "-tpc"
	}
	if s.everyBatch {
		n += "-ceb"
	}
	return n
}

// parseEngineSettings reads an engineSettings spec (see engineSettings).
func parseEngineSettings(spec string) (engineSettings, error) {
	var s engineSettings
	parts := strings.Split(spec, "-")
	if len(parts) < 3 {
		return s, fmt.Errorf("engine settings %q: want n<consumers>-b<block rows>-f<flush ms>[-tpc][-ceb]", spec)
	}
	for i, p := range parts {
		if i >= 3 {
			switch p {
			case "tpc":
				s.threadPerConsumer = true
			case "ceb":
				s.everyBatch = true
			default:
				return s, fmt.Errorf("engine settings %q: %q: want tpc or ceb", spec, p)
			}
			continue
		}
		want := "nbf"[i]
		if len(p) < 2 || p[0] != want {
			return s, fmt.Errorf("engine settings %q: %q: want %c<number>", spec, p, want)
		}
		v, err := strconv.Atoi(p[1:])
		if err != nil || v <= 0 {
			return s, fmt.Errorf("engine settings %q: %q: want %c<positive number>", spec, p, want)
		}
		switch i {
		case 0:
			s.consumers = v
		case 1:
			s.blockSize = v
		default:
			s.flushMS = v
		}
	}
	return s, nil
}

// engineSettingsList is the settings OKBENCH_<name> lists (comma-separated
// specs), or def.
func engineSettingsList(b *testing.B, name string, def ...string) []engineSettings {
	b.Helper()
	specs := def
	if s, ok := os.LookupEnv(scaleEnvPrefix + name); ok {
		specs = strings.Split(s, ",")
	}
	b.Logf("%s%s=%s", scaleEnvPrefix, name, strings.Join(specs, ","))
	out := make([]engineSettings, 0, len(specs))
	for _, spec := range specs {
		s, err := parseEngineSettings(strings.TrimSpace(spec))
		if err != nil {
			b.Fatalf("%s%s: %v", scaleEnvPrefix, name, err)
		}
		out = append(out, s)
	}
	return out
}

// envList is the comma-separated list in OKBENCH_<name>, or def.
func envList(b *testing.B, name string, def ...string) []string {
	b.Helper()
	out := def
	if s, ok := os.LookupEnv(scaleEnvPrefix + name); ok {
		out = strings.Split(s, ",")
	}
	b.Logf("%s%s=%s", scaleEnvPrefix, name, strings.Join(out, ","))
	return out
}

// createEngine makes the engine's side of target: a Kafka table
// kq_<target> reading topic as group, and a materialized view
// mv_<target> from it into target (which exists). The engine's
// consumers start when the view is made.
func createEngine(b testing.TB, ch *harness.ClickHouse, k *benchKafka, topic, group, target string, s engineSettings) {
	b.Helper()
	tpc, ceb := 0, 0
	if s.threadPerConsumer {
		tpc = 1
	}
	if s.everyBatch {
		ceb = 1
	}
	ch.Exec(b, fmt.Sprintf(`CREATE TABLE kq_%s (%s) ENGINE = Kafka SETTINGS
		kafka_broker_list = '%s', kafka_topic_list = '%s', kafka_group_name = '%s', kafka_format = 'JSONEachRow',
		kafka_num_consumers = %d, kafka_max_block_size = %d, kafka_flush_interval_ms = %d,
		kafka_thread_per_consumer = %d, kafka_commit_every_batch = %d, kafka_disable_num_consumers_limit = 1`,
		target, chEngineFields, strings.Join(k.Brokers(), ","), topic, group,
		s.consumers, s.blockSize, s.flushMS, tpc, ceb))
	ch.Exec(b, fmt.Sprintf(`CREATE MATERIALIZED VIEW mv_%[1]s TO %[1]s AS
		SELECT id, name, amount, ts, note, _topic AS kafka_topic, toInt32(_partition) AS kafka_partition, toInt64(_offset) AS kafka_offset
		FROM kq_%[1]s`, target))
}

// createKeeperEngine makes a Kafka table of the engine's newer form, its
// offsets in Keeper under keeperPath as replica (kafka_keeper_path,
// kafka_replica_name; experimental), and its view into target, as
// createEngine does; dropEngine drops them. ClickHouse must know a Keeper
// (harness.ClickHouse.SetKeeper).
func createKeeperEngine(b testing.TB, ch *harness.ClickHouse, k *benchKafka, topic, group, target, keeperPath, replica string, s engineSettings) {
	b.Helper()
	ch.Exec(b, fmt.Sprintf(`CREATE TABLE kq_%s (%s) ENGINE = Kafka SETTINGS
		kafka_broker_list = '%s', kafka_topic_list = '%s', kafka_group_name = '%s', kafka_format = 'JSONEachRow',
		kafka_num_consumers = %d, kafka_max_block_size = %d, kafka_flush_interval_ms = %d,
		kafka_keeper_path = '%s', kafka_replica_name = '%s'
		SETTINGS allow_experimental_kafka_offsets_storage_in_keeper = 1`,
		target, chEngineFields, strings.Join(k.Brokers(), ","), topic, group, s.consumers, s.blockSize, s.flushMS, keeperPath, replica))
	ch.Exec(b, fmt.Sprintf(`CREATE MATERIALIZED VIEW mv_%[1]s TO %[1]s AS
		SELECT id, name, amount, ts, note, _topic AS kafka_topic, toInt32(_partition) AS kafka_partition, toInt64(_offset) AS kafka_offset
		FROM kq_%[1]s`, target))
}

// dropEngine stops the engine's consumers of target and drops its tables.
func dropEngine(b testing.TB, ch *harness.ClickHouse, target string) {
	b.Helper()
	ch.Exec(b, fmt.Sprintf(`DROP VIEW IF EXISTS mv_%s SYNC`, target))
	ch.Exec(b, fmt.Sprintf(`DROP TABLE IF EXISTS kq_%s SYNC`, target))
}

// chReplicaProcess starts `offsetkeeper run` on topic into sinkURL, with
// the command's defaults but quieter logs, a free HTTP port, and extra: the
// command as the container image builds it (imageBin).
func chReplicaProcess(b *testing.B, etcd *harness.Etcd, k *benchKafka, group, topic, id, sinkURL string, extra ...string) *harness.Process {
	b.Helper()
	args := []string{"run",
		"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
		"--brokers", strings.Join(k.Brokers(), ","),
		"--group", group,
		"--topics", topic,
		"--sink", sinkURL,
		"--replica-id", id,
		"--log-format", "console",
		"--log-level", "warn",
		"--http-addr", "127.0.0.1:0",
	}
	return harness.StartProcess(b, id, imageBin(b), append(args, extra...)...)
}

// chReplicaSink is the sink URL of table in ch's database, in columns
// mode, over protocol (http or native), with OKBENCH_CH_PARAMS's
// parameters added (insert_interval=0, say).
func chReplicaSink(ch *harness.ClickHouse, table, protocol string) string {
	addr := ch.NativeAddr()
	if protocol == "http" {
		addr = ch.HTTPAddr()
	}
	u := fmt.Sprintf("clickhouse://%s/%s?table=%s&mode=columns&protocol=%s", addr, ch.Database(), table, protocol)
	if more := os.Getenv("OKBENCH_CH_PARAMS"); more != "" {
		u += "&" + more
	}
	return u
}

// chPoller asks ClickHouse over HTTP (keep-alive), which survives the
// engine's restarts without a client to reopen.
type chPoller struct {
	ch *harness.ClickHouse
	hc *http.Client
}

func newCHPoller(ch *harness.ClickHouse) *chPoller {
	return &chPoller{ch: ch, hc: &http.Client{Timeout: 10 * time.Second}}
}

// ints runs a query of one row of integers.
func (p *chPoller) ints(sql string) ([]int64, error) {
	u := "http://" + p.ch.HTTPAddr() + "/?database=" + p.ch.Database() + "&query=" + url.QueryEscape(sql+" FORMAT TSV")
	resp, err := p.hc.Get(u)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", sql, resp.Status, strings.TrimSpace(string(body)))
	}
	var out []int64
	for _, f := range strings.Fields(string(body)) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", sql, body, err)
		}
		out = append(out, int64(v))
	}
	return out, nil
}

// event is the engine's counter name of system.events (0 before its first
// count): e.g. MergeTreeDataWriterBlocks, the parts inserts wrote.
func (p *chPoller) event(b *testing.B, name string) int64 {
	b.Helper()
	v, err := p.ints(fmt.Sprintf(`SELECT sum(value) FROM system.events WHERE event = '%s'`, name))
	if err != nil || len(v) != 1 {
		b.Fatalf("system.events %s: %v %v", name, v, err)
	}
	return v[0]
}

// count is SELECT count() of table, or -1 while ClickHouse does not answer.
func (p *chPoller) count(table string) int64 {
	v, err := p.ints("SELECT count() FROM " + table)
	if err != nil || len(v) != 1 {
		return -1
	}
	return v[0]
}

// awaitRows polls table's count() every every until it holds at least
// want rows, and returns when that was first seen; it fails the benchmark
// after timeout.
func (p *chPoller) awaitRows(b *testing.B, table string, want int64, every, timeout time.Duration) time.Time {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := p.count(table)
		if n >= want {
			return time.Now()
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: %d rows after %s, want %d", table, n, timeout, want)
		}
		time.Sleep(every)
	}
}

// awaitStable polls table's count() every every until it has not changed
// for quiet, or until timeout; it returns the last count.
func (p *chPoller) awaitStable(table string, every, quiet, timeout time.Duration) int64 {
	deadline := time.Now().Add(timeout)
	last, since := int64(-2), time.Now()
	for time.Now().Before(deadline) {
		n := p.count(table)
		if n != last || n < 0 {
			last, since = n, time.Now()
		} else if time.Since(since) >= quiet {
			return n
		}
		time.Sleep(every)
	}
	return last
}

// tally is what a table holds of the ids 0..produced-1.
type tally struct {
	rows, distinct, duplicated int64 // duplicated: ids held more than once
	lost, foreign              int64 // ids missing; ids not produced
}

// dup is the rows past each id's first.
func (t tally) dup() int64 { return t.rows - t.distinct }

func (t tally) String() string {
	return fmt.Sprintf("rows %d, distinct ids %d, duplicate rows %d (%d ids), lost %d", t.rows, t.distinct, t.dup(), t.duplicated, t.lost)
}

// tally tallies table against ids 0..produced-1.
func (p *chPoller) tally(b *testing.B, table string, produced int64) tally {
	b.Helper()
	v, err := p.ints(fmt.Sprintf(`SELECT count(), uniqExact(id), uniqExactIf(id, id < %[1]d), countIf(id >= %[1]d),
		(SELECT count() FROM (SELECT id FROM %[2]s GROUP BY id HAVING count() > 1)) FROM %[2]s`, produced, table))
	if err != nil || len(v) != 5 {
		b.Fatalf("tally %s: %v %v", table, v, err)
	}
	return tally{rows: v[0], distinct: v[1], lost: produced - v[2], foreign: v[3], duplicated: v[4]}
}

// groupOffsets is the Kafka group's committed offsets on topic's
// partitions 0..parts-1 (a partition without one is left out).
func groupOffsets(ctx context.Context, cl *kgo.Client, group, topic string, parts int) (map[int32]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range parts {
		rt.Partitions = append(rt.Partitions, int32(p))
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	if err := kerrCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("offsets of group %s: %w", group, err)
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerrCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("offsets of group %s, %s/%d: %w", group, topic, p.Partition, err)
			}
			if p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out, nil
}

// groupCommitted is the sum of groupOffsets.
func groupCommitted(ctx context.Context, cl *kgo.Client, group, topic string, parts int) (int64, error) {
	offs, err := groupOffsets(ctx, cl, group, topic, parts)
	var sum int64
	for _, o := range offs {
		sum += o
	}
	return sum, err
}

// lostBelow is how many offsets below each partition's committed offset
// (offs) table does not hold: records the consumer will not read again.
func (p *chPoller) lostBelow(b *testing.B, table string, offs map[int32]int64) int64 {
	b.Helper()
	var lost int64
	for part, next := range offs {
		v, err := p.ints(fmt.Sprintf(`SELECT uniqExact(kafka_offset) FROM %s WHERE kafka_partition = %d AND kafka_offset < %d`, table, part, next))
		if err != nil || len(v) != 1 {
			b.Fatalf("offsets of %s/%d: %v %v", table, part, v, err)
		}
		lost += next - v[0]
	}
	return lost
}

// gaps lists, per partition, the ranges [from, to) of offsets below
// offs that table does not hold.
func (p *chPoller) gaps(b *testing.B, table string, offs map[int32]int64) []string {
	b.Helper()
	var out []string
	for part, next := range offs {
		v, err := p.ints(fmt.Sprintf(`SELECT DISTINCT kafka_offset FROM %s WHERE kafka_partition = %d AND kafka_offset < %d ORDER BY kafka_offset`, table, part, next))
		if err != nil {
			b.Fatalf("offsets of %s/%d: %v", table, part, err)
		}
		at := int64(0)
		for _, o := range append(v, next) {
			if o > at {
				out = append(out, fmt.Sprintf("%d:[%d,%d)", part, at, o))
			}
			at = o + 1
		}
	}
	return out
}

// etcdOffsets is the group's committed offsets of topic in etcd, by
// partition (docs/etcd.md's layout: offsets/<topic>/<partition>).
func etcdOffsets(b *testing.B, etcd *harness.Etcd, group, topic string) map[int32]int64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := groupKeys(group) + "offsets/" + topic + "/"
	resp, err := etcd.Client(b).Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		b.Fatalf("read offsets of %s: %v", group, err)
	}
	out := map[int32]int64{}
	for _, kv := range resp.Kvs {
		p, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), prefix))
		var o struct {
			Next int64 `json:"next"`
		}
		if err != nil {
			b.Fatalf("offsets key %s: %v", kv.Key, err)
		}
		if err := json.Unmarshal(kv.Value, &o); err != nil {
			b.Fatalf("offsets %s: %v", kv.Key, err)
		}
		out[int32(p)] = o.Next
	}
	return out
}

// kerrCode is a Kafka error code as an error, nil for 0.
func kerrCode(code int16) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("kafka error code %d", code)
}

// paceJSON produces total records of chEngineValue, ids from first on,
// at rate records per second (in ticks of 10 ms), round robin over parts
// partitions of topic, each stamped as it is handed to the client; it
// stops early when ctx ends. It returns how many were acknowledged, and
// the first error. It runs on the caller's goroutine.
func paceJSON(ctx context.Context, cl *kgo.Client, topic string, parts, rate int, first, total int64) (int64, error) {
	var (
		acked atomic.Int64
		mu    sync.Mutex
		ferr  error
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if ferr == nil {
				ferr = err
			}
			mu.Unlock()
			return
		}
		acked.Add(1)
	}
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var sent int64
loop:
	for sent < total {
		select {
		case <-ctx.Done():
			break loop
		case now := <-tick.C:
			due := min(total, int64(now.Sub(start).Seconds()*float64(rate)))
			for ; sent < due; sent++ {
				id := first + sent
				now := time.Now()
				cl.Produce(context.Background(), &kgo.Record{
					Topic: topic, Partition: int32(id % int64(parts)),
					Value: chEngineValue(id, now.UnixMilli()), Timestamp: now,
				}, promise)
			}
		}
	}
	fctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.Flush(fctx); err != nil {
		return acked.Load(), err
	}
	mu.Lock()
	defer mu.Unlock()
	return acked.Load(), ferr
}

// loadJSON writes perPart records of chEngineValue to each of parts
// partitions of topic (ids p*perPart+i), stamped at, in calls of at most
// 100,000 records.
func loadJSON(b *testing.B, k *benchKafka, topic string, parts, perPart int, at time.Time) {
	b.Helper()
	const chunk = 100_000
	for p := range parts {
		for from := 0; from < perPart; from += chunk {
			recs := make([]*kgo.Record, min(chunk, perPart-from))
			for i := range recs {
				id := int64(p*perPart + from + i)
				recs[i] = &kgo.Record{Value: chEngineValue(id, at.UnixMilli()), Timestamp: at}
			}
			k.Produce(b, topic, p, recs...)
		}
	}
}

// perMillion is CPU seconds per million of rows.
func perMillion(d time.Duration, rows int64) float64 {
	return d.Seconds() / (float64(rows) / 1e6)
}

// sinkRepairs counts a replica's log lines saying the ClickHouse sink
// inserted rows again under a token of their own: after a server crash
// left a block id without its part, or for a block of a round whose
// first insert held other blocks.
func sinkRepairs(out string) int {
	return strings.Count(out, "some of its rows are not in the table") + strings.Count(out, "with its round's token is not in the table")
}

// sinkRetries counts a replica's log lines saying the ClickHouse sink
// retried: an insert (with the same token), or the read of which of a
// round's rows are in the table.
func sinkRetries(out string) int {
	return strings.Count(out, "retrying with the same token") + strings.Count(out, "rows are in the table failed; retrying")
}
