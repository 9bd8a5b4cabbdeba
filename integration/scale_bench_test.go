package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/integration/replicarun"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

// The scale benchmarks. Each is sized by OKBENCH_* environment variables
// (see scaleInt) with a small version under -short; the full sizes are in
// each doc comment, and every run logs the values it used (-v). Run one at
// a time: they load the whole machine.

// BenchmarkScaleGroupVsFranz512 loads RECORDS records (default 2,000,000)
// of RECORD_BYTES-byte values (default 100) over PARTITIONS partitions
// (default 512) into the Kafka that OKBENCH_KAFKA names once:
//
//   - kfake (the default): franz-go's kfake, in the benchmark's process;
//   - apache1, apache3: Apache Kafka (harness.KafkaVersion) of 1 or 3
//     nodes, each a JVM of its own (benchBrokerJVMFlags: G1 and both JIT
//     compilers, as Kafka's scripts run a broker), topics replicated
//     min(3, nodes) times, records produced with acks=all.
//
// It then measures in the same run, on the same records, in this order,
// four consumers that each read everything from the start:
//
//   - franz: a kgo group consumer (ConsumerGroup, DisableAutoCommit and
//     CommitUncommittedOffsets after each poll), in a process of its own
//     (integration/franzconsume), timed and CPU-counted (getrusage
//     RUSAGE_SELF) inside that process from before kgo.NewClient to after
//     the last commit;
//   - java: Kafka's own Java consumer as its consumer-perf-test.sh runs
//     it: org.apache.kafka.tools.ConsumerPerformance from the fetched jars
//     (--messages RECORDS, a new --group, no --from-latest, so from the
//     earliest offset; its defaults: auto-commit every 5 s, check.crcs
//     off, max.partition.fetch.bytes 1 MiB), in a JVM of its own with the
//     script's flags (harness.KafkaScriptJVMFlags). Its time is its own
//     report's, from after the KafkaConsumer is made (the group join
//     included) to the last record polled; its CPU is the JVM's from the
//     line it prints before it makes the consumer to its exit (closing the
//     consumer included). The JVM's start up to that line (log4j2 and
//     option parsing included) is left out of both and reported apart, as
//     java-start-cpu-s, CPU seconds per run;
//   - raw: kafka-go's raw drain of BenchmarkReplicaVsRawDrain (one
//     connection per partition, DialLeader and ReadBatch, nothing else),
//     in the benchmark's process, as there: its CPU is this process's over
//     the drain, which on Apache Kafka holds besides it only an idle etcd,
//     and on kfake the broker too;
//   - replica: one `offsetkeeper run --sink discard:` process, built as
//     the container image builds it (imageBin), timed from its start
//     (exec, the runtime's and the packages' initialisers included) until
//     etcd holds offsets summing to RECORDS, its CPU read from
//     /proc/<pid>/stat (utime+stime) at that moment.
//
// Before the first round the broker is warmed, untimed: a franz consumer
// commits once (the first group makes __consumer_offsets) and a raw drain
// reads everything (the JIT compiles the fetch path). It reports records/s
// of each, CPU seconds per million records of each, the ratios
// replica/franz ("ratio", "cpu-ratio"), replica/java ("ratio-java",
// "cpu-ratio-java") and replica/raw ("ratio-raw", "cpu-ratio-raw"):
// records/s over records/s, CPU over CPU. Beside each consumer it reports
// the broker's CPU seconds per million records over that consumer's run
// (<consumer>-broker-cpu-s/Mrec; java's from its header line, without the
// JVM's start): on Apache Kafka the nodes' JVMs summed
// (/proc/<pid>/stat), which includes their idle work (KRaft heartbeats,
// reported as broker-idle-cores, measured for 3 s before the first
// round); on kfake this process's CPU, which holds kfake, etcd and the
// benchmark's polling of etcd, and is not told apart from the raw drain's
// own (no raw-broker figure there). Also replica-claim-s: how much of the
// replica's time went to claiming every partition (etcd holding a claim
// for each, polled every 50 ms; the offsets are watched, committedWatch),
// and replica-peak-rss-MiB: the highest peak resident memory (VmHWM) of
// the replica's runs, read once it has committed everything. The full size needs
// about 1 GiB on kfake, and about 250 MB of disk a replica on Apache Kafka.
// Without Apache Kafka's jars (KAFKA_LIBS) or java, the java consumer is
// left out on kfake, and apache1 and apache3 skip. On kfake it is left out
// too when its fetches would reach fetch.max.bytes (50 MiB), as at the
// full size of 512 partitions: see kfakeCutsJavaFetch.
//
//	go test -run '^$' -bench 'ScaleGroupVsFranz512$' -benchtime 3x -timeout 60m ./integration/
//	OKBENCH_KAFKA=apache3 go test -run '^$' -bench 'ScaleGroupVsFranz512$' -benchtime 2x -timeout 60m ./integration/
//	go test -short -run '^$' -bench 'ScaleGroupVsFranz512$' -benchtime 1x ./integration/  # 100,000 records
func BenchmarkScaleGroupVsFranz512(b *testing.B) {
	groupVsFranz(b,
		scaleInt(b, "PARTITIONS", 512, 512),
		scaleInt(b, "RECORDS", 2_000_000, 100_000),
		scaleInt(b, "RECORD_BYTES", 100, 100))
}

// BenchmarkScaleCPUPerRecord8 is BenchmarkScaleGroupVsFranz512 on 8
// partitions (PARTITIONS), 2,000,000 records (RECORDS) of 100 bytes
// (RECORD_BYTES), on the Kafka that OKBENCH_KAFKA names (kfake, apache1,
// apache3): what a record costs when partitions are few and blocks are
// large.
//
//	go test -run '^$' -bench 'ScaleCPUPerRecord8$' -benchtime 3x -timeout 60m ./integration/
//	OKBENCH_KAFKA=apache1 go test -run '^$' -bench 'ScaleCPUPerRecord8$' -benchtime 2x -timeout 60m ./integration/
//	go test -short -run '^$' -bench 'ScaleCPUPerRecord8$' -benchtime 1x ./integration/  # 100,000 records
func BenchmarkScaleCPUPerRecord8(b *testing.B) {
	groupVsFranz(b,
		scaleInt(b, "PARTITIONS", 8, 8),
		scaleInt(b, "RECORDS", 2_000_000, 100_000),
		scaleInt(b, "RECORD_BYTES", 100, 100))
}

// franzResult is the line integration/franzconsume prints.
type franzResult struct {
	Records    int64   `json:"records"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

// consumerRuns sums the runs of one consumer: its time, its own CPU and
// the broker's CPU over each run.
type consumerRuns struct {
	took, cpu, broker time.Duration
}

// report reports the consumer's records/s and CPU seconds per million
// records, its own and the broker's (unless noBroker), for n records.
func (c *consumerRuns) report(b *testing.B, name string, n float64, noBroker bool) {
	b.ReportMetric(n/c.took.Seconds(), name+"-records/s")
	b.ReportMetric(c.cpu.Seconds()/n*1e6, name+"-cpu-s/Mrec")
	if !noBroker {
		b.ReportMetric(c.broker.Seconds()/n*1e6, name+"-broker-cpu-s/Mrec")
	}
}

func groupVsFranz(b *testing.B, parts, total, size int) {
	perPart := total / parts
	total = perPart * parts
	franzBin := harness.BuildCommand(b, "github.com/offsetkeeper/offsetkeeper/integration/franzconsume")
	etcd := harness.StartEtcd(b, 1)
	cli := etcd.Client(b)
	k := startBenchKafka(b, parts, "bench")
	produceBacklog(b, k.Kafka, "bench", parts, perPart, size)
	withJava := javaAvailable(b)
	if withJava && !k.real() && kfakeCutsJavaFetch(parts, perPart, size) {
		b.Logf("no Java consumer: on kfake a full fetch of %d partitions of %d records would reach its fetch.max.bytes", parts, perPart)
		withJava = false
	}

	// Warm the broker: a group's first commit makes __consumer_offsets,
	// and the drain has the JIT compile the fetch path.
	if code := harness.StartProcess(b, "franz", franzBin, "-brokers", strings.Join(k.Brokers(), ","),
		"-topic", "bench", "-group", "warm-up", "-records", "1").Wait(5 * time.Minute); code != 0 {
		b.Fatalf("franzconsume exited %d on warming up", code)
	}
	rawDrain(b, k.Brokers()[0], "bench", parts, perPart)
	var idleCores float64
	if k.real() {
		cpu0, t0 := k.brokerCPU(b), time.Now()
		time.Sleep(3 * time.Second)
		idleCores = (k.brokerCPU(b) - cpu0).Seconds() / time.Since(t0).Seconds()
	}

	var franz, java, raw, rep consumerRuns
	var javaStart, repClaim time.Duration
	var repPeak int64 // the replicas' highest VmHWM
	round := 0
	for b.Loop() {
		round++
		group := fmt.Sprintf("gvf-%d", round) // new groups start from the earliest offset

		broker0 := k.brokerCPU(b)
		f := harness.StartProcess(b, "franz", franzBin, "-brokers", strings.Join(k.Brokers(), ","),
			"-topic", "bench", "-group", "franz-"+group, "-records", fmt.Sprint(total))
		if code := f.Wait(30 * time.Minute); code != 0 {
			b.Fatalf("franzconsume exited %d:\n%s", code, f.Output())
		}
		franz.broker += k.brokerCPU(b) - broker0
		var fr franzResult
		out := strings.TrimSpace(f.Output())
		if err := json.Unmarshal([]byte(out[strings.LastIndexByte(out, '\n')+1:]), &fr); err != nil || fr.Records < int64(total) {
			b.Fatalf("franzconsume printed %q (%v), want %d records", out, err, total)
		}
		franz.took += time.Duration(fr.Seconds * float64(time.Second))
		franz.cpu += time.Duration(fr.CPUSeconds * float64(time.Second))

		if withJava {
			took, cpu, start, broker := consumerPerformance(b, k, "bench", "java-"+group, total)
			java.broker += broker
			java.took += took
			java.cpu += cpu
			javaStart += start
		}

		broker0, cpu0, start := k.brokerCPU(b), processCPU(b), time.Now()
		rawDrain(b, k.Brokers()[0], "bench", parts, perPart)
		raw.took += time.Since(start)
		raw.cpu += processCPU(b) - cpu0
		raw.broker += k.brokerCPU(b) - broker0

		w := watchCommitted(b, cli, group, int64(total))
		broker0, start = k.brokerCPU(b), time.Now()
		var claimed time.Time
		p := replicaProcess(b, etcd, k.Kafka, group, "bench", "r")
		pollUntil(b, 30*time.Minute, 50*time.Millisecond, "every partition claimed, or the replica done", func() bool {
			if w.total() < w.want {
				stillRunning(b, "every partition claimed", p)
			}
			if harness.EtcdCount(b, cli, groupKeys(group)+"claims/") == int64(parts) {
				claimed = time.Now()
				return true
			}
			return w.total() >= w.want
		})
		done := w.wait(b, 30*time.Minute, "the replica to commit everything", p)
		w.stop()
		rep.cpu += procCPU(b, p)
		if _, hwm, err := harness.ProcMemory(p.PID()); err != nil {
			b.Fatal(err)
		} else {
			repPeak = max(repPeak, hwm)
		}
		rep.broker += k.brokerCPU(b) - broker0
		rep.took += done.Sub(start)
		if claimed.IsZero() {
			claimed = done
		}
		repClaim += claimed.Sub(start)
		stopProcesses(b, p)
	}
	n := float64(total * round)
	franz.report(b, "franz", n, false)
	rep.report(b, "replica", n, false)
	raw.report(b, "raw", n, !k.real())
	b.ReportMetric(franz.took.Seconds()/rep.took.Seconds(), "ratio")
	b.ReportMetric(rep.cpu.Seconds()/franz.cpu.Seconds(), "cpu-ratio")
	b.ReportMetric(raw.took.Seconds()/rep.took.Seconds(), "ratio-raw")
	b.ReportMetric(rep.cpu.Seconds()/raw.cpu.Seconds(), "cpu-ratio-raw")
	if withJava {
		java.report(b, "java", n, false)
		b.ReportMetric(java.took.Seconds()/rep.took.Seconds(), "ratio-java")
		b.ReportMetric(rep.cpu.Seconds()/java.cpu.Seconds(), "cpu-ratio-java")
		b.ReportMetric(javaStart.Seconds()/float64(round), "java-start-cpu-s")
	}
	if k.real() {
		b.ReportMetric(idleCores, "broker-idle-cores")
	}
	b.ReportMetric(repClaim.Seconds()/float64(round), "replica-claim-s")
	b.ReportMetric(float64(repPeak)/(1<<20), "replica-peak-rss-MiB")
}

// javaAvailable tells whether Apache Kafka's jars and java are there to
// run Kafka's own consumer; on kfake their absence leaves it out, with a
// line in the log (on Apache Kafka the benchmark has skipped already).
func javaAvailable(b *testing.B) bool {
	b.Helper()
	_, err := harness.KafkaLibs()
	if err == nil {
		_, err = exec.LookPath("java")
	}
	if err != nil {
		b.Logf("no Java consumer: %v", err)
		return false
	}
	return true
}

// javaFetchMaxBytes and javaPartitionFetchMaxBytes are the Java
// consumer's defaults of fetch.max.bytes and max.partition.fetch.bytes
// (ConsumerPerformance's --fetch-size).
const javaFetchMaxBytes, javaPartitionFetchMaxBytes = 50 << 20, 1 << 20

// kfakeCutsJavaFetch tells whether the Java consumer's first fetch of a
// backlog of parts partitions of perPart records of size bytes would reach
// its fetch.max.bytes. kfake cuts such a response by leaving the remaining
// partitions out of it, where Kafka lists every partition of a full fetch
// response (empty ones included); the Java client rejects it as an
// invalid full fetch response ("omittedPartitions") and fetches again,
// forever, and reads nothing. franz-go and kafka-go take such responses.
// A record is counted as its value and 32 bytes (key and framing).
func kfakeCutsJavaFetch(parts, perPart, size int) bool {
	return parts*min(perPart*(size+32), javaPartitionFetchMaxBytes) > javaFetchMaxBytes
}

// consumerPerformance runs Kafka's ConsumerPerformance on topic as group,
// from the earliest offset, until it has read total records, and returns
// its time (its own report's: from after the KafkaConsumer is made, the
// group join included, to the last record), its JVM's CPU from the header
// line it prints before making the consumer to its exit, the JVM's CPU
// before that line (its start), and the broker's CPU from that line to
// the exit.
func consumerPerformance(b *testing.B, k *benchKafka, topic, group string, total int) (took, cpu, start, broker time.Duration) {
	b.Helper()
	const dateFormat = "yyyy-MM-dd'T'HH:mm:ss.SSS" // in UTC (harness.RunJavaTimed sets TZ)
	var broker0 time.Duration
	var markErr error
	opts := harness.JavaRunOptions{Flags: harness.KafkaScriptJVMFlags, Mark: "start.time", Timeout: 30 * time.Minute,
		OnMark: func() { broker0, markErr = k.readBrokerCPU() }}
	run := k.RunJavaTimed(b, opts,
		"org.apache.kafka.tools.ConsumerPerformance",
		"--bootstrap-server", strings.Join(k.Brokers(), ","), "--topic", topic, "--group", group,
		"--messages", fmt.Sprint(total), "--timeout", "120000", "--date-format", dateFormat)
	broker = k.brokerCPU(b) - broker0
	if !run.Marked || markErr != nil {
		b.Fatalf("ConsumerPerformance printed no header line (%v):\n%s", markErr, run.Stdout)
	}
	// The last line: start.time, end.time, data.consumed.in.MB, MB.sec,
	// data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms,
	// fetch.MB.sec, fetch.nMsg.sec.
	out := strings.TrimSpace(run.Stdout)
	f := strings.Split(out[strings.LastIndexByte(out, '\n')+1:], ", ")
	if len(f) != 10 || strings.Contains(out, "WARNING") {
		b.Fatalf("ConsumerPerformance printed:\n%s", run.Stdout)
	}
	const layout = "2006-01-02T15:04:05.000"
	from, err1 := time.Parse(layout, f[0])
	to, err2 := time.Parse(layout, f[1])
	n, err3 := strconv.ParseInt(f[4], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil || n < int64(total) {
		b.Fatalf("ConsumerPerformance printed (%v; want %d records):\n%s", err, total, run.Stdout)
	}
	return to.Sub(from), run.CPU - run.MarkCPU, run.MarkCPU, broker
}

// BenchmarkScaleTrickle runs REPLICAS replicas (default 3, in this process,
// sink: discard: wrapped to time every record) on PARTITIONS partitions
// (default 1,000). Once every partition is claimed and the claims balanced,
// and SETTLE (default 2s) later, it produces RATE records per second
// (default 2,000) of RECORD_BYTES bytes (default 100), round robin over the
// partitions and stamped with their send time, for WINDOW (default 10s),
// then one last record. It reports:
//
//   - etcd-txn/s: etcd write transactions per second during the window (the
//     revision's rise over it);
//   - p50-ms, p99-ms, max-ms: produce-to-sink latency of the records (the
//     sink's write returning, minus the record timestamp);
//   - last-ms: the same for the last record produced;
//   - balance-s: from starting the replicas to all partitions claimed and
//     balanced.
//
// Goal: etcd-txn/s <= 100 and last-ms <= 1000.
//
//	go test -run '^$' -bench 'ScaleTrickle$' -benchtime 1x -timeout 30m ./integration/
//	go test -short -run '^$' -bench 'ScaleTrickle$' -benchtime 1x ./integration/  # 200 partitions, 400/s, 3s
func BenchmarkScaleTrickle(b *testing.B) {
	parts := scaleInt(b, "PARTITIONS", 1000, 200)
	replicas := scaleInt(b, "REPLICAS", 3, 3)
	rate := scaleInt(b, "RATE", 2000, 400)
	size := scaleInt(b, "RECORD_BYTES", 100, 100)
	settle := scaleDuration(b, "SETTLE", 2*time.Second, time.Second)
	window := scaleDuration(b, "WINDOW", 10*time.Second, 3*time.Second)

	etcd := harness.StartEtcd(b, 1)
	cli := etcd.Client(b)
	k := harness.StartKafka(b, harness.SeedTopics(parts, "trickle"))
	prod := trickleProducer(b, k)
	sink := newLatencySink("last")

	var txnRate, balance float64
	var p50, p99, worst, last time.Duration
	round := 0
	for b.Loop() {
		round++
		group := fmt.Sprintf("trickle-%d", round)
		sink.reset()
		rs, took := startBalanced(b, etcd, replica.Config{
			Group:  group,
			Topics: []string{"trickle"},
			Kafka:  kafkaconf.Config{Brokers: k.Brokers()},
		}, replicas, "r%d", func() sinks.Sink { return sink }, parts, 10*time.Minute, 10*time.Millisecond)
		balance += took.Seconds()
		time.Sleep(settle) // let every fetch loop start before measuring

		rev0, t0 := harness.EtcdRevision(b, cli), time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), window)
		acked, err := trickle(ctx, prod, "trickle", parts, rate, size)
		cancel()
		rev1, t1 := harness.EtcdRevision(b, cli), time.Now()
		if err != nil {
			b.Fatalf("trickle: %d records acknowledged, then: %v", acked, err)
		}
		txnRate += float64(rev1-rev0) / t1.Sub(t0).Seconds()
		lastRec := &kgo.Record{Topic: "trickle", Partition: int32(acked % int64(parts)), Key: []byte("last"),
			Value: []byte(strings.Repeat("t", size)), Timestamp: time.Now()}
		if err := prod.ProduceSync(context.Background(), lastRec).FirstErr(); err != nil {
			b.Fatalf("produce the last record: %v", err)
		}
		pollUntil(b, time.Minute, 10*time.Millisecond, "every record delivered", func() bool {
			_, ok := sink.last()
			return ok && sink.records.Load() >= acked+1
		})
		l, _ := sink.last()
		last += l
		q := sink.quantiles(0.5, 0.99, 1)
		p50, p99, worst = p50+q[0], p99+q[1], max(worst, q[2])
		for _, r := range rs {
			r.Stop()
		}
	}
	n := float64(round)
	b.ReportMetric(txnRate/n, "etcd-txn/s")
	b.ReportMetric(float64(p50.Milliseconds())/n, "p50-ms")
	b.ReportMetric(float64(p99.Milliseconds())/n, "p99-ms")
	b.ReportMetric(float64(worst.Milliseconds()), "max-ms")
	b.ReportMetric(float64(last.Milliseconds())/n, "last-ms")
	b.ReportMetric(balance/n, "balance-s")
}

// BenchmarkScaleBacklogRSS loads a backlog of RECORDS records (default
// 200,000) of RECORD_BYTES bytes (default 20,480) over PARTITIONS
// partitions (default 64) into kfake, then runs ONE replica as a process
// (`offsetkeeper run --sink discard:`, the command's defaults) until etcd
// holds offsets summing to RECORDS. It reports the replica's peak resident
// memory (VmHWM of /proc/<pid>/status, read before it stops), its
// throughput from process start to everything committed (MB/s of values
// and records/s), and its CPU seconds.
//
// Memory: kfake keeps the whole backlog in the benchmark's process, so the
// full size needs about RECORDS x RECORD_BYTES = 4.1 GB there, plus the
// replica's peak. The replica as it is now buffers up to a block per
// partition (65,536 rows or a flush interval), so its peak grows with the
// backlog (368 MiB for 20,000 records, 400 MB): plan for up to twice the
// backlog, about 9 GB, at full size, and lower RECORDS where that is too
// much.
//
//	go test -run '^$' -bench 'ScaleBacklogRSS$' -benchtime 1x -timeout 60m ./integration/
//	go test -short -run '^$' -bench 'ScaleBacklogRSS$' -benchtime 1x ./integration/  # 5,000 x 20 KiB = 100 MB
func BenchmarkScaleBacklogRSS(b *testing.B) {
	parts := scaleInt(b, "PARTITIONS", 64, 64)
	total := scaleInt(b, "RECORDS", 200_000, 5_000)
	size := scaleInt(b, "RECORD_BYTES", 20<<10, 20<<10)
	perPart := total / parts
	total = perPart * parts

	etcd := harness.StartEtcd(b, 1)
	cli := etcd.Client(b)
	k := harness.StartKafka(b, harness.SeedTopics(parts, "backlog"))
	produceBacklog(b, k, "backlog", parts, perPart, size)

	drainBacklog(b, etcd, cli, k, "backlog", total, size)
}

// drainBacklog runs one replica process per round on topic's backlog of
// total records of size bytes until etcd holds offsets summing to total,
// and reports its peak resident memory, its throughput and its CPU.
func drainBacklog(b *testing.B, etcd *harness.Etcd, cli *clientv3.Client, k *harness.Kafka, topic string, total, size int, extra ...string) {
	b.Helper()
	var took, cpu time.Duration
	var peak int64
	round := 0
	for b.Loop() {
		round++
		group := fmt.Sprintf("%s-%d", topic, round)
		w := watchCommitted(b, cli, group, int64(total))
		start := time.Now()
		p := replicaProcess(b, etcd, k, group, topic, "r", extra...)
		done := w.wait(b, 60*time.Minute, "the replica to commit the backlog", p)
		w.stop()
		took += done.Sub(start)
		cpu += procCPU(b, p)
		_, hwm, err := harness.ProcMemory(p.PID())
		if err != nil {
			b.Fatal(err)
		}
		peak = max(peak, hwm)
		stopProcesses(b, p)
	}
	n := float64(round)
	b.ReportMetric(float64(peak)/(1<<20), "peak-rss-MiB")
	b.ReportMetric(float64(total)*float64(size)*n/1e6/took.Seconds(), "MB/s")
	b.ReportMetric(float64(total)*n/took.Seconds(), "records/s")
	b.ReportMetric(cpu.Seconds()/n, "cpu-s")
	b.ReportMetric(cpu.Seconds()/n/float64(total)*1e6, "cpu-s/Mrec")
}

// BenchmarkScaleIdle runs REPLICAS replicas (default 3) as processes
// (`offsetkeeper run --sink discard:`, the command's defaults) on
// PARTITIONS partitions (default 1,000) that never get a record. Once the
// claims in etcd cover every partition and are balanced, and SETTLE
// (default 2s) later, it measures for WINDOW (default 10s):
//
//   - fetch/s: Fetch requests per second received by the broker (all
//     replicas together), and fetch-request-B/s their bytes (in a fetch
//     session an idle partition is not listed);
//   - cores: CPU cores the replicas use, summed (utime+stime from
//     /proc/<pid>/stat over the window), and cores-max-replica, the busiest
//     one's;
//   - etcd-txn/s: etcd write transactions per second.
//
// Full size, then the small version:
//
//	go test -run '^$' -bench 'ScaleIdle$' -benchtime 1x -timeout 30m ./integration/
//	go test -short -run '^$' -bench 'ScaleIdle$' -benchtime 1x ./integration/  # 200 partitions, 3s
func BenchmarkScaleIdle(b *testing.B) {
	parts := scaleInt(b, "PARTITIONS", 1000, 200)
	replicas := scaleInt(b, "REPLICAS", 3, 3)
	settle := scaleDuration(b, "SETTLE", 2*time.Second, time.Second)
	window := scaleDuration(b, "WINDOW", 10*time.Second, 3*time.Second)

	etcd := harness.StartEtcd(b, 1)
	cli := etcd.Client(b)
	k := harness.StartKafka(b, harness.SeedTopics(parts, "idle"))
	fetches, fetchBytes := k.CountRequestBytes(kmsg.Fetch.Int16())

	var fetchRate, byteRate, cores, coresMax, txnRate float64
	round := 0
	for b.Loop() {
		round++
		group := fmt.Sprintf("idle-%d", round)
		ps := make([]*harness.Process, replicas)
		for i := range ps {
			ps[i] = replicaProcess(b, etcd, k, group, "idle", fmt.Sprintf("r%d", i))
		}
		pollUntil(b, 10*time.Minute, 100*time.Millisecond, "the partitions claimed and balanced", func() bool {
			return balancedCounts(byReplica(claimsByReplica(b, cli, group)), parts, replicas)
		})
		time.Sleep(settle) // let every fetch loop start before measuring

		cpu0 := make([]time.Duration, replicas)
		for i, p := range ps {
			cpu0[i] = procCPU(b, p)
		}
		f0, fb0, rev0, t0 := fetches.Load(), fetchBytes.Load(), harness.EtcdRevision(b, cli), time.Now()
		time.Sleep(window)
		f1, fb1, rev1, t1 := fetches.Load(), fetchBytes.Load(), harness.EtcdRevision(b, cli), time.Now()
		secs := t1.Sub(t0).Seconds()
		var sum, busiest float64
		for i, p := range ps {
			c := (procCPU(b, p) - cpu0[i]).Seconds() / secs
			sum += c
			busiest = max(busiest, c)
		}
		fetchRate += float64(f1-f0) / secs
		byteRate += float64(fb1-fb0) / secs
		txnRate += float64(rev1-rev0) / secs
		cores += sum
		coresMax = max(coresMax, busiest)
		stopProcesses(b, ps...)
	}
	n := float64(round)
	b.ReportMetric(fetchRate/n, "fetch/s")
	b.ReportMetric(byteRate/n, "fetch-request-B/s")
	b.ReportMetric(cores/n, "cores")
	b.ReportMetric(coresMax, "cores-max-replica")
	b.ReportMetric(txnRate/n, "etcd-txn/s")
}

// BenchmarkScaleStartup512 starts one replica (in this process, discard
// sink, default config) on PARTITIONS idle partitions (default 512) and
// measures the time from Run until its Stats().Claims counts every
// partition (claim-all-s), and the etcd write transactions that took
// (etcd-txn). Each round is a new group; the replica is stopped gracefully
// after it.
//
//	go test -run '^$' -bench 'ScaleStartup512$' -benchtime 5x ./integration/
//	go test -short -run '^$' -bench 'ScaleStartup512$' -benchtime 1x ./integration/  # 512 partitions
func BenchmarkScaleStartup512(b *testing.B) {
	parts := scaleInt(b, "PARTITIONS", 512, 512)
	etcd := harness.StartEtcd(b, 1)
	cli := etcd.Client(b)
	k := harness.StartKafka(b, harness.SeedTopics(parts, "startup"))

	var took time.Duration
	var txns int64
	round := 0
	for b.Loop() {
		round++
		group := fmt.Sprintf("startup-%d", round)
		r, err := replica.New(replica.Config{
			Group:     group,
			ReplicaID: "r",
			Topics:    []string{"startup"},
			Kafka:     kafkaconf.Config{Brokers: k.Brokers()},
		}, etcd.Client(b), discard.New(), nil)
		if err != nil {
			b.Fatal(err)
		}
		rev0, start := harness.EtcdRevision(b, cli), time.Now()
		rn := replicarun.Start(b, r)
		at := pollUntil(b, 10*time.Minute, time.Millisecond, "every partition claimed", func() bool {
			return r.Stats().Claims >= int64(parts)
		})
		took += at.Sub(start)
		txns += harness.EtcdRevision(b, cli) - rev0
		if n := harness.EtcdCount(b, cli, groupKeys(group)+"claims/"); n != int64(parts) {
			b.Fatalf("the replica counts %d claims, etcd holds %d", parts, n)
		}
		rn.Stop()
	}
	b.ReportMetric(took.Seconds()/float64(round), "claim-all-s")
	b.ReportMetric(float64(txns)/float64(round), "etcd-txn")
}

// BenchmarkScale10k runs REPLICAS replicas (default 10, in this process,
// discard sink, default config but LeaseTTL = TTL, default 10s) on
// PARTITIONS idle partitions (default 10,000), all started at once. It
// reports:
//
//   - balance-s: from the start until every replica holds
//     PARTITIONS/REPLICAS partitions (rounded down or up) and all are held;
//   - idle-etcd-txn/s and idle-fetch/s: etcd write transactions and broker
//     Fetch requests per second over WINDOW (default 10s), from SETTLE
//     (default 2s) after balance;
//   - recover-s: from replica.Kill of one replica (a crash: nothing released,
//     its lease left to expire) until the others hold every partition again;
//     ttl-s is the lease TTL and goal-s = ttl-s + 1, the goal for recover-s;
//   - rebalance-s: from the kill until the remaining replicas are balanced.
//
// Full size, then the small version:
//
//	go test -run '^$' -bench 'Scale10k$' -benchtime 1x -timeout 60m ./integration/
//	go test -short -run '^$' -bench 'Scale10k$' -benchtime 1x ./integration/  # 500 partitions, 5 replicas, ttl 2s
func BenchmarkScale10k(b *testing.B) {
	parts := scaleInt(b, "PARTITIONS", 10_000, 500)
	replicas := scaleInt(b, "REPLICAS", 10, 5)
	ttl := scaleDuration(b, "TTL", 10*time.Second, 2*time.Second)
	settle := scaleDuration(b, "SETTLE", 2*time.Second, time.Second)
	window := scaleDuration(b, "WINDOW", 10*time.Second, 3*time.Second)
	if replicas < 2 {
		b.Fatalf("%sREPLICAS=%d: want at least 2, one to kill", scaleEnvPrefix, replicas)
	}

	etcd := harness.StartEtcd(b, 1)
	cli := etcd.Client(b)
	k := harness.StartKafka(b, harness.SeedTopics(parts, "wide"))
	fetches, fetchBytes := k.CountRequestBytes(kmsg.Fetch.Int16())

	var balance, txnRate, fetchRate, byteRate, recover, rebalance float64
	round := 0
	for b.Loop() {
		round++
		group := fmt.Sprintf("wide-%d", round)
		rs, took := startBalanced(b, etcd, replica.Config{
			Group:    group,
			Topics:   []string{"wide"},
			Kafka:    kafkaconf.Config{Brokers: k.Brokers()},
			LeaseTTL: ttl,
		}, replicas, "r%02d", func() sinks.Sink { return discard.New() }, parts, 30*time.Minute, 20*time.Millisecond)
		balance += took.Seconds()
		time.Sleep(settle)

		f0, fb0, rev0, t0 := fetches.Load(), fetchBytes.Load(), harness.EtcdRevision(b, cli), time.Now()
		time.Sleep(window)
		f1, fb1, rev1, t1 := fetches.Load(), fetchBytes.Load(), harness.EtcdRevision(b, cli), time.Now()
		txnRate += float64(rev1-rev0) / t1.Sub(t0).Seconds()
		fetchRate += float64(f1-f0) / t1.Sub(t0).Seconds()
		byteRate += float64(fb1-fb0) / t1.Sub(t0).Seconds()

		killed := time.Now()
		rs[0].Kill()
		rest := rs[1:]
		owned := func() bool {
			sum := 0
			for _, n := range inProcessClaims(rest) {
				sum += n
			}
			return sum == parts
		}
		at := pollUntil(b, 30*time.Minute, 10*time.Millisecond, "the killed replica's partitions owned again", owned)
		recover += at.Sub(killed).Seconds()
		at = pollUntil(b, 30*time.Minute, 20*time.Millisecond, "the remaining replicas balanced", func() bool {
			return balancedCounts(inProcessClaims(rest), parts, len(rest))
		})
		rebalance += at.Sub(killed).Seconds()
		for _, r := range rest {
			r.Stop()
		}
	}
	n := float64(round)
	b.ReportMetric(balance/n, "balance-s")
	b.ReportMetric(txnRate/n, "idle-etcd-txn/s")
	b.ReportMetric(fetchRate/n, "idle-fetch/s")
	b.ReportMetric(byteRate/n, "idle-fetch-request-B/s")
	b.ReportMetric(recover/n, "recover-s")
	b.ReportMetric(rebalance/n, "rebalance-s")
	b.ReportMetric(ttl.Seconds(), "ttl-s")
	b.ReportMetric(ttl.Seconds()+1, "goal-s")
}

// BenchmarkScaleGroupVsFranz10k is BenchmarkScaleGroupVsFranz512 at
// 10,000 partitions (PARTITIONS) and 10,000,000 records (RECORDS) of 100
// bytes (RECORD_BYTES): a backlog of 1,000 records a partition, where a
// consumer's cost is per partition (requests, claims, blocks and commits)
// more than per record. kfake holds the full size in about 2 GiB; the Java
// consumer is left out there (see kfakeCutsJavaFetch).
//
//	go test -run '^$' -bench 'ScaleGroupVsFranz10k$' -benchtime 1x -timeout 90m ./integration/
//	go test -short -run '^$' -bench 'ScaleGroupVsFranz10k$' -benchtime 1x ./integration/  # 1,000 partitions, 200,000 records
func BenchmarkScaleGroupVsFranz10k(b *testing.B) {
	groupVsFranz(b,
		scaleInt(b, "PARTITIONS", 10_000, 1_000),
		scaleInt(b, "RECORDS", 10_000_000, 200_000),
		scaleInt(b, "RECORD_BYTES", 100, 100))
}
