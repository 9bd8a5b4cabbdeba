package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/twmb/franz-go/pkg/kgo"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkManyTopicsRouted compares, in one run, a group reading one
// topic of TOPICS x PARTITIONS partitions into one PostgreSQL table (the
// "one" figures: the single-topic scale offsetkeeper reached before) with
// one group of REPLICAS replica processes
// (default 3, `offsetkeeper run` as the image builds it) reading TOPICS
// topics (default 2,000) of PARTITIONS partitions each (default 4: 8,000
// partitions) on kfake through --topics-regex, each topic routed to a
// PostgreSQL table of its own (table={topic}, raw mode: 2,000 tables,
// made as their topics' partitions are claimed); then a second group
// reading the first CH_TOPICS of them (default 200) into ClickHouse
// tables of their own (table=ch_{topic}). For each group it reports:
//
//   - claim-s: from starting the replicas to etcd holding a claim of
//     every partition;
//   - ready-s: to every partition having delivered its first record (one
//     produced to each once the claims are in), that is every table made
//     and every partition reading;
//   - etcd-txn/s: etcd write transactions per second while RATE records a
//     second (default 1,000) trickle round robin over the partitions for
//     WINDOW (default 10s): the revision's rise over it;
//   - peak-rss-MiB: the largest peak resident memory (VmHWM) of the
//     replicas once everything was delivered;
//   - the ClickHouse group's inserts/s/table: its blocks written over the
//     window (each an insert into one table; read from the replicas'
//     offsetkeeper_blocks_written_total) per second and per table.
//
// The figures of the single topic of 10,000 partitions to compare with
// are BenchmarkScale10k's and BenchmarkScaleTrickle's.
//
//	go test -run '^$' -bench 'ManyTopicsRouted$' -benchtime 1x -timeout 60m ./integration/
//	go test -short -run '^$' -bench 'ManyTopicsRouted$' -benchtime 1x ./integration/  # 100 topics, 20 into ClickHouse
func BenchmarkManyTopicsRouted(b *testing.B) {
	topics := scaleInt(b, "TOPICS", 2000, 100)
	parts := scaleInt(b, "PARTITIONS", 4, 4)
	chTopics := scaleInt(b, "CH_TOPICS", 200, 20)
	replicas := scaleInt(b, "REPLICAS", 3, 3)
	rate := scaleInt(b, "RATE", 1000, 200)
	window := scaleDuration(b, "WINDOW", 10*time.Second, 3*time.Second)

	names := make([]string, topics)
	for i := range names {
		names[i] = fmt.Sprintf("t%04d", i)
	}
	etcd := harness.StartEtcd(b, 1)
	cli := etcd.Client(b)
	k := harness.StartKafka(b, harness.SeedTopics(parts, names...), harness.SeedTopics(topics*parts, "one"))
	pg := harness.StartPostgres(b)
	ch := harness.StartClickHouse(b)
	prod := trickleProducer(b, k)

	chPattern := fmt.Sprintf("t0*(%s)", strings.Join(func() []string {
		out := make([]string, chTopics)
		for i := range out {
			out[i] = fmt.Sprint(i)
		}
		return out
	}(), "|"))
	db := pg.NewDatabase(b)
	groups := []struct {
		name, sink string
		flags      []string
		names      []string // the topics, each of parts partitions but one's
		parts      int
	}{
		// The baseline: as many partitions in one topic, into one table.
		{"one", withQuery(db, "table=one"), []string{"--topics", "one"}, []string{"one"}, topics * parts},
		{"pg", withQuery(db, "table={topic}"), []string{"--topics-regex", `t\d+`}, names, parts},
		{"ch", fmt.Sprintf("clickhouse://%s/%s?table=ch_{topic}&protocol=http", ch.HTTPAddr(), ch.Database()),
			[]string{"--topics-regex", chPattern}, names[:chTopics], parts},
	}
	round := 0
	for b.Loop() {
		round++
		for _, g := range groups {
			group := fmt.Sprintf("%s-%d", g.name, round)
			n := len(g.names) * g.parts
			start := time.Now()
			var procs []*harness.Process
			for i := range replicas {
				args := append([]string{"run", "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
					"--brokers", strings.Join(k.Brokers(), ","), "--group", group, "--sink", g.sink,
					"--replica-id", fmt.Sprintf("r%d", i), "--log-format", "console", "--log-level", "warn",
					"--http-addr", "127.0.0.1:0"}, g.flags...)
				procs = append(procs, harness.StartProcess(b, fmt.Sprintf("%s-r%d", group, i), imageBin(b), args...))
			}
			pollUntil(b, 10*time.Minute, 50*time.Millisecond, fmt.Sprintf("%d claims of %s", n, group), func() bool {
				sum := 0
				for _, c := range claimsByReplica(b, cli, group) {
					sum += c
				}
				stillRunning(b, "claims", procs...)
				return sum == n
			})
			claimed := time.Since(start)

			// One record to each partition: every table made, every
			// partition reading.
			base := committedTotal(b, cli, group)
			for _, t := range g.names {
				for p := range g.parts {
					prod.Produce(context.Background(), &kgo.Record{Topic: t, Partition: int32(p), Value: []byte("first")}, nil)
				}
			}
			if err := prod.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			watchCommitted(b, cli, group, base+int64(n)).wait(b, 10*time.Minute, "a record of every partition", procs...)
			ready := time.Since(start)

			blocks0 := blocksWritten(b, cli, group)
			rev0, t0 := harness.EtcdRevision(b, cli), time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), window)
			acked, err := trickleTopics(ctx, prod, g.names, g.parts, rate)
			cancel()
			rev1, t1 := harness.EtcdRevision(b, cli), time.Now()
			if err != nil {
				b.Fatalf("trickle: %v", err)
			}
			watchCommitted(b, cli, group, base+int64(n)+acked).wait(b, 5*time.Minute, "every record", procs...)
			blocks1 := blocksWritten(b, cli, group)

			var peak int64
			for _, p := range procs {
				_, pk, err := harness.ProcMemory(p.PID())
				if err != nil {
					b.Fatal(err)
				}
				peak = max(peak, pk)
			}
			stopProcesses(b, procs...)
			secs := t1.Sub(t0).Seconds()
			b.ReportMetric(claimed.Seconds(), g.name+"-claim-s")
			b.ReportMetric(ready.Seconds(), g.name+"-ready-s")
			b.ReportMetric(float64(rev1-rev0)/secs, g.name+"-etcd-txn/s")
			b.ReportMetric(float64(peak)/(1<<20), g.name+"-peak-rss-MiB")
			b.ReportMetric(float64(acked)/secs, g.name+"-records/s")
			if g.name == "ch" {
				b.ReportMetric(float64(blocks1-blocks0)/secs/float64(len(g.names)), "ch-inserts/s/table")
			}
		}
	}
}

// trickleTopics produces rate records a second round robin over the
// partitions of topics until ctx ends, and returns how many were
// acknowledged.
func trickleTopics(ctx context.Context, cl *kgo.Client, topics []string, parts, rate int) (int64, error) {
	var acked atomic.Int64
	var first atomic.Value
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			first.CompareAndSwap(nil, err)
			return
		}
		acked.Add(1)
	}
	value := []byte(strings.Repeat("t", 100))
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	n := int64(len(topics) * parts)
	var sent int64
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case now := <-tick.C:
			for due := int64(now.Sub(start).Seconds() * float64(rate)); sent < due; sent++ {
				i := sent % n
				cl.Produce(context.Background(), &kgo.Record{Topic: topics[i/int64(parts)], Partition: int32(i % int64(parts)), Value: value}, promise)
			}
		}
	}
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Flush(fctx); err != nil {
		return acked.Load(), err
	}
	if err, _ := first.Load().(error); err != nil {
		return acked.Load(), err
	}
	return acked.Load(), nil
}

// blocksWritten sums offsetkeeper_blocks_written_total over the group's
// replicas, read from the /metrics each advertises in its member key.
func blocksWritten(b *testing.B, cli *clientv3.Client, group string) int64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, groupKeys(group)+"members/", clientv3.WithPrefix())
	if err != nil {
		b.Fatal(err)
	}
	var sum int64
	for _, kv := range resp.Kvs {
		var m struct {
			HTTP string `json:"http_address"`
		}
		if err := json.Unmarshal(kv.Value, &m); err != nil || m.HTTP == "" {
			b.Fatalf("member %s: no HTTP address (%v)", kv.Key, err)
		}
		r, err := http.Get("http://" + m.HTTP + "/metrics")
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "offsetkeeper_blocks_written_total") {
				f := strings.Fields(line)
				v, err := strconv.ParseFloat(f[len(f)-1], 64)
				if err != nil {
					b.Fatal(err)
				}
				sum += int64(v)
			}
		}
	}
	return sum
}
