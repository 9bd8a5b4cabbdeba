package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// BenchmarkClickHouseEngineVsReplicaFaults (issue 44, test 4) runs both
// consumers at once on one topic of OKBENCH_PARTITIONS partitions (8) of
// the Kafka OKBENCH_KAFKA names (apache3 for the broker faults; on kfake
// they are left out, said), OKBENCH_RATE records a second (3,000) for
// OKBENCH_DURATION (60 s; -short 20 s), each with a unique id:
//   - ClickHouse's Kafka engine on ClickHouse A (one consumer, blocks of
//     65,536, flush 1 s, commit after write, its defaults otherwise), and
//     every OKBENCH_FAULT_EVERY (5 s) a second ClickHouse process, B,
//     joining the engine's group with a Kafka table and view of its own
//     (into a table on B) or leaving it (dropping them): a rebalance of
//     the engine's consumers while blocks are in flight;
//   - the engine's newer form, its offsets in Keeper (kafka_keeper_path,
//     kafka_replica_name; experimental), against Apache ZooKeeper from
//     Maven Central: a Kafka table and view on A, and one on B joining and
//     leaving with B's other;
//   - two `offsetkeeper run` processes into a table on A (over HTTP), one
//     of them SIGKILLed and a new one started at the same pace;
//   - on Apache Kafka, every third tick a broker fault: a node SIGKILLed
//     and started again, or SIGSTOPped for a tick and resumed.
//
// Then, once each has committed every record (or after 3 minutes), it
// counts, for each consumer, the ids missing and the duplicate rows
// (each engine's across A's and B's tables), and reads the engines'
// KafkaCommitFailures and rebalance counters on A and B (both engines'
// together). The Keeper engine commits to Keeper, not Kafka: it is
// counted once its tables have held still for 10 s.
//
//	OKBENCH_KAFKA=apache3 go test -run '^$' -bench 'ClickHouseEngineVsReplicaFaults$' -benchtime 1x -timeout 30m ./integration/
func BenchmarkClickHouseEngineVsReplicaFaults(b *testing.B) {
	parts := scaleInt(b, "PARTITIONS", 8, 8)
	rate := scaleInt(b, "RATE", 3000, 3000)
	dur := scaleDuration(b, "DURATION", 60*time.Second, 20*time.Second)
	every := scaleDuration(b, "FAULT_EVERY", 5*time.Second, 3*time.Second)
	chA, chB := harness.StartClickHouse(b), harness.StartClickHouse(b)
	zk := harness.StartZooKeeper(b)
	for _, ch := range []*harness.ClickHouse{chA, chB} {
		ch.SetKafkaClientConfig(b, chEngineSession...)
		ch.SetKeeper(b, zk.Addr())
	}
	etcd := harness.StartEtcd(b, 1)
	k := startBenchKafka(b, parts)
	pollA, pollB := newCHPoller(chA), newCHPoller(chB)
	cl := trickleProducer(b, k.Kafka)
	admin := k.Client(b)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed))
	want := int64(rate) * int64(dur/time.Millisecond) / 1000
	settings := engineSettings{consumers: 1, blockSize: 65536, flushMS: 1000}
	events := []string{"KafkaCommitFailures", "KafkaRebalanceAssignments", "KafkaRebalanceRevocations", "KafkaRebalanceErrors"}

	round := 0
	for b.Loop() {
		round++
		topic := fmt.Sprintf("faults_%d", round)
		k.CreateTopic(b, topic, parts)
		group, engA, engB, okT := "ch_"+topic, "eng_a_"+topic, "eng_b_"+topic, "ok_"+topic
		kpA, kpB, kpPath := "kp_a_"+topic, "kp_b_"+topic, "/clickhouse/kp_"+topic
		chA.Exec(b, chEngineTarget(engA, 0))
		chB.Exec(b, chEngineTarget(engB, 0))
		chA.Exec(b, chEngineTarget(kpA, 0))
		chB.Exec(b, chEngineTarget(kpB, 0))
		chA.Exec(b, chEngineTarget(okT, 10000))
		ev0 := map[string]int64{}
		for _, e := range events {
			ev0[e] = pollA.event(b, e) + pollB.event(b, e)
		}
		createEngine(b, chA, k, topic, group, engA, settings)
		createKeeperEngine(b, chA, k, topic, "kp_"+topic, kpA, kpPath, "a", settings)
		var procs, all []*harness.Process
		startReplica := func() {
			p := chReplicaProcess(b, etcd, k, "g_"+topic, topic, fmt.Sprintf("r%d_%s", len(all)+1, topic),
				chReplicaSink(chA, okT, "http"), "--lease-ttl", chEngineLeaseTTL)
			procs, all = append(procs, p), append(all, p)
		}
		startReplica()
		startReplica()
		done := make(chan error, 1)
		go func() {
			n, err := paceJSON(context.Background(), cl, topic, parts, rate, 0, want)
			if err == nil && n != want {
				err = fmt.Errorf("%d of %d acknowledged", n, want)
			}
			done <- err
		}()
		bJoined, joins, kills, brokerFaults := false, 0, 0, 0
		for running, tick := true, 0; running; tick++ {
			select {
			case err := <-done:
				if err != nil {
					b.Fatalf("produce: %v", err)
				}
				running = false
				continue
			case <-time.After(every):
			}
			if bJoined {
				dropEngine(b, chB, engB)
				dropEngine(b, chB, kpB)
			} else {
				createEngine(b, chB, k, topic, group, engB, settings)
				createKeeperEngine(b, chB, k, topic, "kp_"+topic, kpB, kpPath, "b", settings)
				joins++
			}
			bJoined = !bJoined
			i := rng.IntN(len(procs))
			procs[i].Kill()
			procs = slices.Delete(procs, i, i+1)
			startReplica()
			kills++
			if k.real() && tick%3 == 2 {
				n := k.Node(brokerFaults % k.Nodes())
				if brokerFaults%2 == 0 {
					n.Kill()
					if err := n.Start(); err != nil {
						b.Fatalf("start broker %d again: %v", n.ID(), err)
					}
				} else {
					n.Pause()
					time.Sleep(every)
					n.Resume()
				}
				brokerFaults++
			}
		}
		if bJoined {
			dropEngine(b, chB, engB)
			dropEngine(b, chB, kpB)
		}
		// Each has committed every record: the engine to Kafka, the
		// replicas to etcd.
		deadline := time.Now().Add(3 * time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			engine, err := groupCommitted(ctx, admin, group, topic, parts)
			cancel()
			replica := committedTotal(b, etcd.Client(b), "g_"+topic)
			if err == nil && engine >= want && replica >= want {
				break
			}
			if time.Now().After(deadline) {
				b.Logf("after 3 minutes the engine committed %d (%v) and the replicas %d of %d; counting what is there", engine, err, replica, want)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		pollA.awaitStable(engA, 250*time.Millisecond, 3*time.Second, time.Minute)
		pollA.awaitStable(okT, 250*time.Millisecond, 3*time.Second, time.Minute)
		across := func(a, bt string) string {
			return fmt.Sprintf("(SELECT id FROM %s UNION ALL SELECT id FROM remote('%s', '%s', '%s'))", a, chB.NativeAddr(), chB.Database(), bt)
		}
		pollA.awaitStable(across(kpA, kpB), 250*time.Millisecond, 10*time.Second, 2*time.Minute)
		eng, kp, rep := pollA.tally(b, across(engA, engB), want), pollA.tally(b, across(kpA, kpB), want), pollA.tally(b, okT, want)
		ev := map[string]int64{}
		for _, e := range events {
			ev[e] = pollA.event(b, e) + pollB.event(b, e) - ev0[e]
		}
		dropEngine(b, chA, engA)
		dropEngine(b, chA, kpA)
		for _, p := range procs {
			p.Kill()
		}
		b.Logf("round %d, %d records at %d/s on %s (seed %d): B joined the engine's group %d times; %d replica kills; %d broker faults",
			round, want, rate, k.kind(), seed, joins, kills, brokerFaults)
		b.Logf("  engine (A+B): %v; both engines' counters %s", eng, fmt.Sprint(ev))
		b.Logf("  keeper engine (A+B): %v", kp)
		b.Logf("  replicas:     %v; %d repairs by the sink", rep, sumRepairs(all))
		b.ReportMetric(float64(eng.lost), "engine-missing")
		b.ReportMetric(float64(eng.dup()), "engine-dup-rows")
		b.ReportMetric(float64(ev["KafkaCommitFailures"]), "engine-commit-failures")
		b.ReportMetric(float64(ev["KafkaRebalanceAssignments"]), "engine-rebalance-assignments")
		b.ReportMetric(float64(kp.lost), "keeper-engine-missing")
		b.ReportMetric(float64(kp.dup()), "keeper-engine-dup-rows")
		b.ReportMetric(float64(rep.lost), "replica-missing")
		b.ReportMetric(float64(rep.dup()), "replica-dup-rows")
	}
}

// sumRepairs is sinkRepairs over processes' output.
func sumRepairs(ps []*harness.Process) int {
	n := 0
	for _, p := range ps {
		n += sinkRepairs(p.Output())
	}
	return n
}
