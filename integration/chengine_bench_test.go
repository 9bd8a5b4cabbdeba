package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// chEngineDefaultVariants are the Kafka table settings
// BenchmarkClickHouseEngineVsReplica tries by default (see
// engineSettings for the spelling): one consumer with blocks of 65,536
// rows flushed each second (the settings the replica's blocks have by
// default), the same with ClickHouse's default flush (7,500 ms) and
// blocks of 524,288 rows, and 2 and 8 consumers (more than the 2 cores:
// kafka_disable_num_consumers_limit = 1), in one thread and in a thread
// each.
var chEngineDefaultVariants = []string{
	"n1-b65536-f1000",
	"n1-b524288-f7500",
	"n2-b65536-f1000",
	"n2-b65536-f1000-tpc",
	"n8-b65536-f1000-tpc",
}

// chEngineSession are the librdkafka properties the crash and latency
// benchmarks give the engine's consumers (ClickHouse's <kafka>
// configuration section): a session of 6 s, the brokers' least
// (group.min.session.timeout.ms), in place of librdkafka's 45 s, so that a
// consumer of a killed engine leaves the group as fast as a killed
// replica's claims move (--lease-ttl 6s beside it).
var chEngineSession = []string{"session_timeout_ms", "6000", "heartbeat_interval_ms", "1000"}

// chEngineLeaseTTL is the replicas' lease in the crash benchmark: the
// engine's session (chEngineSession).
const chEngineLeaseTTL = "6s"

// BenchmarkClickHouseEngineVsReplica loads OKBENCH_RECORDS JSON records
// (2,000,000; -short 200,000) of about 100 bytes over OKBENCH_PARTITIONS
// partitions (8) into the Kafka that OKBENCH_KAFKA names (kfake in this
// process, apache1, apache3), and reads them all, one after another into
// tables of the same shape (chEngineTarget) in one ClickHouse:
//   - engine: ClickHouse's own Kafka table (JSONEachRow) with a
//     materialized view into the table, once per setting of
//     OKBENCH_CHENGINE_VARIANTS (chEngineDefaultVariants);
//   - replica: `offsetkeeper run` (a process, its defaults) into the same
//     table through the ClickHouse sink in columns mode, over the
//     protocols of OKBENCH_CHENGINE_REPLICA (http,native).
//
// Each run is timed from the view's creation, or the process's start, to
// the first poll (every 50 ms) of count() that finds every row; each table
// is then checked to hold every id once. It reports rows/s of each, the
// CPU seconds per million rows of ClickHouse (which is the engine's
// consumer too), of the replica process, and of the brokers (on kfake:
// this whole process, which holds kfake, etcd and the poller), and the
// replica's rows/s over the best engine setting's.
//
//	OKBENCH_KAFKA=apache3 go test -run '^$' -bench 'ClickHouseEngineVsReplica$' -benchtime 1x -timeout 30m ./integration/
func BenchmarkClickHouseEngineVsReplica(b *testing.B) {
	parts := scaleInt(b, "PARTITIONS", 8, 8)
	total := scaleInt(b, "RECORDS", 2_000_000, 200_000)
	perPart := total / parts
	total = perPart * parts
	variants := engineSettingsList(b, "CHENGINE_VARIANTS", chEngineDefaultVariants...)
	protocols := envList(b, "CHENGINE_REPLICA", "http", "native")
	for _, p := range protocols {
		if p != "http" && p != "native" {
			b.Fatalf("%sCHENGINE_REPLICA: %q: want http or native", scaleEnvPrefix, p)
		}
	}
	ch := harness.StartClickHouse(b)
	etcd := harness.StartEtcd(b, 1)
	k := startBenchKafka(b, parts, "chengine")
	loadJSON(b, k, "chengine", parts, perPart, time.Now())
	poll := newCHPoller(ch)

	type side struct {
		name                      string
		engine                    *engineSettings
		protocol                  string
		took, chCPU, own, brokers time.Duration
		parts                     int64 // inserts into MergeTree (parts written)
	}
	var sides []*side
	for i := range variants {
		sides = append(sides, &side{name: "engine-" + variants[i].String(), engine: &variants[i]})
	}
	for _, p := range protocols {
		sides = append(sides, &side{name: "replica-" + p, protocol: p})
	}
	round := 0
	for b.Loop() {
		round++
		for _, s := range sides {
			target := fmt.Sprintf("t_%s_%d", strings.ReplaceAll(s.name, "-", "_"), round)
			ch.Exec(b, chEngineTarget(target, 1000))
			ch0, br0, parts0 := chCPU(b, ch), k.brokerCPU(b), poll.event(b, "MergeTreeDataWriterBlocks")
			start := time.Now()
			var p *harness.Process
			if s.engine != nil {
				createEngine(b, ch, k, "chengine", "g_"+target, target, *s.engine)
			} else {
				p = chReplicaProcess(b, etcd, k, "g_"+target, "chengine", "r_"+target, chReplicaSink(ch, target, s.protocol))
			}
			end := poll.awaitRows(b, target, int64(total), 50*time.Millisecond, 10*time.Minute)
			s.took += end.Sub(start)
			s.chCPU += chCPU(b, ch) - ch0
			s.brokers += k.brokerCPU(b) - br0
			s.parts += poll.event(b, "MergeTreeDataWriterBlocks") - parts0
			if p != nil {
				s.own += procCPU(b, p)
				stopProcesses(b, p)
			} else {
				dropEngine(b, ch, target)
			}
			if t := poll.tally(b, target, int64(total)); t.rows != int64(total) || t.lost != 0 {
				b.Fatalf("%s: %v; want %d rows, each id once", s.name, t, total)
			}
		}
	}
	rows := int64(total * round)
	b.Logf("%d records × %d round(s), %d partitions, Kafka %s; CPU s per million rows (brokers: %s)",
		total, round, parts, k.kind(), k.brokerWhat())
	b.Logf("%-30s %12s %10s %10s %10s %10s", "consumer", "rows/s", "ClickHouse", "replica", "brokers", "rows/part")
	var best float64
	bestName := ""
	for _, s := range sides {
		rate := float64(rows) / s.took.Seconds()
		b.ReportMetric(rate, s.name+"-rows/s")
		b.ReportMetric(perMillion(s.chCPU, rows), s.name+"-ch-cpu-s/M")
		b.ReportMetric(perMillion(s.brokers, rows), s.name+"-broker-cpu-s/M")
		own := "—"
		if s.engine == nil {
			b.ReportMetric(perMillion(s.own, rows), s.name+"-replica-cpu-s/M")
			own = fmt.Sprintf("%.2f", perMillion(s.own, rows))
		} else if rate > best {
			best, bestName = rate, s.name
		}
		perPart := float64(rows) / float64(max(1, s.parts))
		b.ReportMetric(perPart, s.name+"-rows/part")
		b.Logf("%-30s %12.0f %10.2f %10s %10.2f %10.0f", s.name, rate, perMillion(s.chCPU, rows), own, perMillion(s.brokers, rows), perPart)
	}
	for _, s := range sides {
		if s.engine == nil && best > 0 {
			ratio := float64(rows) / s.took.Seconds() / best
			b.ReportMetric(ratio, s.name+"/best-engine")
			b.Logf("%s / best engine (%s): %.2f", s.name, bestName, ratio)
		}
	}
}

// kind names the Kafka of the benchmark.
func (k *benchKafka) kind() string {
	if !k.real() {
		return benchKfake
	}
	return fmt.Sprintf("Apache Kafka %s, %d node(s)", harness.KafkaVersion, k.Nodes())
}

// brokerWhat says what the brokers' CPU counts.
func (k *benchKafka) brokerWhat() string {
	if !k.real() {
		return "this benchmark process: kfake, etcd and the poller"
	}
	return "the nodes' JVMs, utime+stime"
}

// crashScenario is one run of BenchmarkClickHouseEngineVsReplicaCrashes.
type crashScenario struct {
	name string
	// engine: the Kafka table's settings; nil for replicas.
	engine *engineSettings
	// killCH: SIGKILL ClickHouse (always for the engine, whose consumer it
	// is; every other kill beside replicas).
	killCH bool
}

// crashScenarios are the scenarios by name.
var crashScenarios = map[string]crashScenario{
	"engine":     {name: "engine", engine: &engineSettings{consumers: 1, blockSize: 65536, flushMS: 1000}, killCH: true},
	"engine-ceb": {name: "engine-ceb", engine: &engineSettings{consumers: 1, blockSize: 65536, flushMS: 1000, everyBatch: true}, killCH: true},
	"replica":    {name: "replica"},
	"replica-ch": {name: "replica-ch", killCH: true},
}

// BenchmarkClickHouseEngineVsReplicaCrashes produces OKBENCH_RATE records
// a second (5,000) for OKBENCH_DURATION (30 s; -short 8 s), each with a
// unique id, over OKBENCH_PARTITIONS partitions (8), while their consumer
// is SIGKILLed and started again at once: after a wait drawn between half
// and one and a half times OKBENCH_KILL_EVERY (5 s), prolonged until the
// table has grown since the last kill, and then up to 1 s more, so that a
// kill lands while rows flow, at any point of a block. Then, once the
// consumer has committed every record (or after OKBENCH_DRAIN_TIMEOUT, 2
// minutes), it counts what the table holds against the ids produced: rows,
// distinct ids, duplicate rows, ids missing, and of those the ones below
// the committed offsets, which the consumer will not read again (lost for
// good); for replicas it logs where those are, the replicas' log lines
// about retries, tokens and resumes, and ClickHouse's about deduplication
// and broken parts.
//
// The scenarios (OKBENCH_CHCRASH_SCENARIOS, all by default), each on a
// topic and table of its own in one ClickHouse:
//   - engine: ClickHouse's Kafka table (one consumer, blocks of 65,536,
//     flush 1 s) with a view into a MergeTree table with ClickHouse's
//     defaults (no deduplication window); the consumer lives in
//     ClickHouse, so ClickHouse is SIGKILLed and started again;
//     kafka_commit_every_batch = 0, the default;
//   - engine-ceb: the same with kafka_commit_every_batch = 1;
//   - replica: 3 `offsetkeeper run` processes (--lease-ttl 6s) into a
//     table of the same shape with the deduplication window the sink
//     needs, over HTTP; a random one SIGKILLed and a new one started;
//   - replica-ch: the same, SIGKILLing in turn a replica and ClickHouse.
//
// The engine's consumers have a session of 6 s (chEngineSession), the
// replicas a lease of 6 s. It is a benchmark so that the normal `go test`
// does not run it (it takes some 3 to 4 minutes):
//
//	OKBENCH_KAFKA=apache1 go test -run '^$' -bench 'ClickHouseEngineVsReplicaCrashes$' -benchtime 1x -timeout 30m ./integration/
func BenchmarkClickHouseEngineVsReplicaCrashes(b *testing.B) {
	parts := scaleInt(b, "PARTITIONS", 8, 8)
	rate := scaleInt(b, "RATE", 5000, 5000)
	dur := scaleDuration(b, "DURATION", 30*time.Second, 8*time.Second)
	every := scaleDuration(b, "KILL_EVERY", 5*time.Second, 3*time.Second)
	drainTimeout := scaleDuration(b, "DRAIN_TIMEOUT", 2*time.Minute, time.Minute)
	var scenarios []crashScenario
	for _, n := range envList(b, "CHCRASH_SCENARIOS", "engine", "engine-ceb", "replica", "replica-ch") {
		s, ok := crashScenarios[n]
		if !ok {
			b.Fatalf("%sCHCRASH_SCENARIOS: %q: want engine, engine-ceb, replica or replica-ch", scaleEnvPrefix, n)
		}
		scenarios = append(scenarios, s)
	}
	ch := harness.StartClickHouse(b)
	ch.SetKafkaClientConfig(b, chEngineSession...)
	etcd := harness.StartEtcd(b, 1)
	k := startBenchKafka(b, parts)
	poll := newCHPoller(ch)
	cl := trickleProducer(b, k.Kafka)
	admin := k.Client(b)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed))
	want := int64(rate) * int64(dur/time.Millisecond) / 1000

	type result struct {
		tally
		kills, chKills int
		// orphans: the table's deduplication-log block ids that no part
		// covers after ClickHouse's restarts (harness.DedupOrphans: a kill
		// between recording a part's block id and renaming the part), at
		// most; repairs: the sink's re-inserts of rows such a block id made
		// it drop (its WARN, in the replicas' logs).
		orphans, repairs int
		lostCommitted    int64         // missing below the committed offsets
		drain            time.Duration // from the last record produced to all committed
	}
	results := map[string]*result{}
	round := 0
	for b.Loop() {
		round++
		for _, sc := range scenarios {
			name := fmt.Sprintf("crash_%s_%d", strings.ReplaceAll(sc.name, "-", "_"), round)
			k.CreateTopic(b, name, parts)
			group := "g_" + name
			var procs, all []*harness.Process
			startReplica := func() {
				p := chReplicaProcess(b, etcd, k, group, name, fmt.Sprintf("r%d_%s", len(all)+1, name),
					chReplicaSink(ch, name, "http"), "--lease-ttl", chEngineLeaseTTL, "--log-level", "info")
				procs, all = append(procs, p), append(all, p)
			}
			if sc.engine != nil {
				ch.Exec(b, chEngineTarget(name, 0))
				createEngine(b, ch, k, name, group, name, *sc.engine)
			} else {
				ch.Exec(b, chEngineTarget(name, 10000))
				for range 3 {
					startReplica()
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			type produced struct {
				n   int64
				err error
			}
			done := make(chan produced, 1)
			go func() {
				n, err := paceJSON(ctx, cl, name, parts, rate, 0, want)
				done <- produced{n, err}
			}()
			r := &result{}
			var prod produced
			// A kill lands while rows flow: after the wait, once the table
			// has grown since the last kill (the engine's consumer rejoins
			// its group first), and then up to a second later, so at any
			// point of a block's second.
			rows0 := int64(0)
			for running := true; running; {
				wait := time.Duration(float64(every) * (0.5 + rng.Float64()))
				grown := false
				for deadline := time.Now().Add(wait); running && (!grown || time.Now().Before(deadline)); {
					select {
					case prod = <-done:
						running = false
					case <-time.After(100 * time.Millisecond):
						grown = grown || poll.count(name) > rows0
					}
				}
				if !running {
					continue
				}
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
				rows0 = max(rows0, poll.count(name))
				r.kills++
				if sc.killCH && (sc.engine != nil || r.kills%2 == 0) {
					ch.Restart()
					r.chKills++
					if sc.engine == nil {
						orphans := ch.DedupOrphans(b, name)
						r.orphans = max(r.orphans, len(orphans))
						if len(orphans) > 0 {
							b.Logf("%s: after ClickHouse's restart %d, block ids without their part: %v", sc.name, r.chKills, orphans)
						}
					}
					continue
				}
				i := rng.IntN(len(procs))
				procs[i].Kill()
				procs = slices.Delete(procs, i, i+1)
				startReplica()
			}
			cancel()
			if prod.err != nil || prod.n != want {
				b.Fatalf("%s: produced %d of %d: %v", sc.name, prod.n, want, prod.err)
			}
			producedAt := time.Now()
			// Every record committed: by the engine to Kafka, by the
			// replicas to etcd. Then the table's count holds still.
			committed := func() int64 {
				if sc.engine != nil {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					n, err := groupCommitted(ctx, admin, group, name, parts)
					if err != nil {
						return -1
					}
					return n
				}
				return committedTotal(b, etcd.Client(b), group)
			}
			deadline := time.Now().Add(drainTimeout)
			for committed() < want {
				if time.Now().After(deadline) {
					b.Logf("%s: %d of %d records committed %s after the last was produced; counting what is there",
						sc.name, committed(), want, drainTimeout)
					if sc.engine != nil {
						b.Logf("%s: the engine's consumers: %v", sc.name, ch.Query(b, `SELECT consumer_id, assignments.partition_id,
							assignments.current_offset, exceptions.time, exceptions.text, num_messages_read, num_commits, last_poll_time,
							last_rebalance_time, num_rebalance_assignments, num_rebalance_revocations, is_currently_used
							FROM system.kafka_consumers`))
					}
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
			r.drain = time.Since(producedAt)
			poll.awaitStable(name, 250*time.Millisecond, 3*time.Second, time.Minute)
			r.tally = poll.tally(b, name, want)
			// Of the ids missing, those below the committed offsets are
			// lost for good; the others are not delivered yet (a consumer
			// that did not catch up).
			if sc.engine != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				offs, err := groupOffsets(ctx, admin, group, name, parts)
				cancel()
				if err != nil {
					b.Fatalf("%s: %v", sc.name, err)
				}
				r.lostCommitted = poll.lostBelow(b, name, offs)
			} else {
				offs := etcdOffsets(b, etcd, group, name)
				r.lostCommitted = poll.lostBelow(b, name, offs)
				if r.lostCommitted > 0 {
					// Where, and what the replicas and ClickHouse said.
					b.Logf("%s: offsets missing below the committed ones: %v", sc.name, poll.gaps(b, name, offs))
					for _, p := range all {
						for _, l := range strings.Split(p.Output(), "\n") {
							if strings.Contains(l, "token") || strings.Contains(l, "retry") || strings.Contains(l, "resum") || strings.Contains(l, "ERROR") {
								b.Logf("%s: replica: %s", sc.name, l)
							}
						}
					}
					for _, l := range ch.ServerLogLines("eduplicat", "broken", "nexpected", "Removing part", "Detaching", "<Error>") {
						b.Logf("%s: clickhouse: %s", sc.name, l)
					}
				}
			}
			if sc.engine != nil {
				dropEngine(b, ch, name)
			}
			for _, p := range procs {
				p.Kill()
			}
			for _, p := range all {
				r.repairs += sinkRepairs(p.Output())
			}
			b.Logf("%-11s %d records at %d/s: %d kills (%d of ClickHouse); %v, of which below the committed offsets %d; waited %s after the last was produced; "+
				"orphan block ids %d, repairs by the sink %d",
				sc.name, want, rate, r.kills, r.chKills, r.tally, r.lostCommitted, r.drain.Round(100*time.Millisecond), r.orphans, r.repairs)
			if prev := results[sc.name]; prev != nil {
				prev.rows += r.rows
				prev.distinct += r.distinct
				prev.duplicated += r.duplicated
				prev.lost += r.lost
				prev.lostCommitted += r.lostCommitted
				prev.kills += r.kills
				prev.chKills += r.chKills
				prev.orphans += r.orphans
				prev.repairs += r.repairs
				prev.drain += r.drain
			} else {
				results[sc.name] = r
			}
		}
	}
	b.Logf("seed %d, Kafka %s, %d round(s) of %d records each", seed, k.kind(), round, want)
	for _, sc := range scenarios {
		r := results[sc.name]
		n := float64(round)
		b.ReportMetric(float64(r.dup())/n, sc.name+"-dup-rows")
		b.ReportMetric(float64(r.lost)/n, sc.name+"-missing")
		b.ReportMetric(float64(r.lostCommitted)/n, sc.name+"-lost-below-committed")
		b.ReportMetric(float64(r.kills)/n, sc.name+"-kills")
		if sc.engine == nil && sc.killCH {
			b.ReportMetric(float64(r.orphans)/n, sc.name+"-orphan-block-ids")
			b.ReportMetric(float64(r.repairs)/n, sc.name+"-repairs")
		}
		b.Logf("%-11s rows %d, distinct %d, duplicate rows %d, missing %d (below the committed offsets: %d), kills %d (ClickHouse %d), per round",
			sc.name, r.rows/int64(round), r.distinct/int64(round), r.dup()/int64(round), r.lost/int64(round), r.lostCommitted/int64(round),
			r.kills/round, r.chKills/round)
	}
}

// BenchmarkClickHouseEngineVsReplicaLatency produces OKBENCH_RATE records
// a second (10,000) for OKBENCH_DURATION (20 s; -short 3 s) over
// OKBENCH_PARTITIONS partitions (8), each carrying the time it was handed
// to the producer (ts, Unix ms), to ClickHouse's Kafka table (one consumer,
// blocks of 65,536, kafka_flush_interval_ms of OKBENCH_FLUSH) and, on a
// topic of its own, to one `offsetkeeper run` (--flush-interval
// OKBENCH_FLUSH, the sink in columns mode over HTTP), each into a table of
// chEngineTarget's shape, whose column seen is ClickHouse's now64(3) when
// it inserted the row (MATERIALIZED: the same for the view's insert and
// the sink's). A row's latency is seen - ts: from the producer to the
// insert, on one clock. Before the stream, one record per partition is
// waited for, so that the consumers have joined. It reports p50, p99 and
// the maximum of each, and the CPU seconds per million rows of
// ClickHouse, the replica and the brokers over the stream. OKBENCH_FLUSH
// is 1s by default, the replica's default and the engine setting of
// BenchmarkClickHouseEngineVsReplica (ClickHouse's own is 7.5 s).
//
//	OKBENCH_KAFKA=apache1 go test -run '^$' -bench 'ClickHouseEngineVsReplicaLatency$' -benchtime 1x -timeout 30m ./integration/
func BenchmarkClickHouseEngineVsReplicaLatency(b *testing.B) {
	parts := scaleInt(b, "PARTITIONS", 8, 8)
	rate := scaleInt(b, "RATE", 10_000, 10_000)
	dur := scaleDuration(b, "DURATION", 20*time.Second, 3*time.Second)
	flush := scaleDuration(b, "FLUSH", time.Second, time.Second)
	ch := harness.StartClickHouse(b)
	ch.SetKafkaClientConfig(b, chEngineSession...)
	etcd := harness.StartEtcd(b, 1)
	k := startBenchKafka(b, parts)
	poll := newCHPoller(ch)
	cl := trickleProducer(b, k.Kafka)
	want := int64(rate) * int64(dur/time.Millisecond) / 1000
	settings := engineSettings{consumers: 1, blockSize: 65536, flushMS: int(flush / time.Millisecond)}

	type result struct {
		p50, p99, max       []int64 // ms, per round
		chCPU, own, brokers time.Duration
		parts               int64 // inserts into MergeTree (parts written)
	}
	results := map[string]*result{"engine": {}, "replica": {}}
	round := 0
	for b.Loop() {
		round++
		for _, side := range []string{"engine", "replica"} {
			name := fmt.Sprintf("lat_%s_%d", side, round)
			k.CreateTopic(b, name, parts)
			var p *harness.Process
			if side == "engine" {
				ch.Exec(b, chEngineTarget(name, 0))
				createEngine(b, ch, k, name, "g_"+name, name, settings)
			} else {
				ch.Exec(b, chEngineTarget(name, 10000))
				p = chReplicaProcess(b, etcd, k, "g_"+name, name, "r_"+name, chReplicaSink(ch, name, "http"),
					"--flush-interval", flush.String())
			}
			// One record per partition (ids 0..parts-1), and the stream
			// after it (ids from parts on).
			if n, err := paceJSON(context.Background(), cl, name, parts, 1000, 0, int64(parts)); err != nil || n != int64(parts) {
				b.Fatalf("%s: warm-up: %d records: %v", side, n, err)
			}
			poll.awaitRows(b, name, int64(parts), 50*time.Millisecond, 2*time.Minute)
			r := results[side]
			ch0, br0, parts0 := chCPU(b, ch), k.brokerCPU(b), poll.event(b, "MergeTreeDataWriterBlocks")
			var own0 time.Duration
			if p != nil {
				own0 = procCPU(b, p)
			}
			n, err := paceJSON(context.Background(), cl, name, parts, rate, int64(parts), want)
			if err != nil || n != want {
				b.Fatalf("%s: produced %d of %d: %v", side, n, want, err)
			}
			poll.awaitRows(b, name, int64(parts)+want, 50*time.Millisecond, 2*time.Minute)
			r.chCPU += chCPU(b, ch) - ch0
			r.brokers += k.brokerCPU(b) - br0
			r.parts += poll.event(b, "MergeTreeDataWriterBlocks") - parts0
			if p != nil {
				r.own += procCPU(b, p) - own0
				stopProcesses(b, p)
			} else {
				dropEngine(b, ch, name)
			}
			q, err := poll.ints(fmt.Sprintf(`SELECT quantilesExact(0.5, 0.99)(l)[1], quantilesExact(0.5, 0.99)(l)[2], max(l), count()
				FROM (SELECT toUnixTimestamp64Milli(seen) - ts AS l FROM %s WHERE id >= %d)`, name, parts))
			if err != nil || len(q) != 4 || q[3] != want {
				b.Fatalf("%s: latencies %v: %v; want %d rows", side, q, err, want)
			}
			r.p50, r.p99, r.max = append(r.p50, q[0]), append(r.p99, q[1]), append(r.max, q[2])
			b.Logf("%-8s %d records at %d/s: produce to insert p50 %d ms, p99 %d ms, max %d ms", side, want, rate, q[0], q[1], q[2])
		}
	}
	rows := want * int64(round)
	b.Logf("Kafka %s, flush %s; CPU s per million rows (brokers: %s)", k.kind(), flush, k.brokerWhat())
	b.Logf("%-8s %8s %8s %8s %10s %10s %10s %10s", "consumer", "p50 ms", "p99 ms", "max ms", "ClickHouse", "replica", "brokers", "rows/part")
	for _, side := range []string{"engine", "replica"} {
		r := results[side]
		med := func(v []int64) int64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
		b.ReportMetric(float64(med(r.p50)), side+"-p50-ms")
		b.ReportMetric(float64(med(r.p99)), side+"-p99-ms")
		b.ReportMetric(float64(slices.Max(r.max)), side+"-max-ms")
		b.ReportMetric(perMillion(r.chCPU, rows), side+"-ch-cpu-s/M")
		b.ReportMetric(perMillion(r.brokers, rows), side+"-broker-cpu-s/M")
		own := "—"
		if side == "replica" {
			b.ReportMetric(perMillion(r.own, rows), side+"-replica-cpu-s/M")
			own = fmt.Sprintf("%.2f", perMillion(r.own, rows))
		}
		perPart := float64(rows) / float64(max(1, r.parts))
		b.ReportMetric(perPart, side+"-rows/part")
		b.Logf("%-8s %8d %8d %8d %10.2f %10s %10.2f %10.0f", side, med(r.p50), med(r.p99), slices.Max(r.max),
			perMillion(r.chCPU, rows), own, perMillion(r.brokers, rows), perPart)
	}
}
