package integration_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// kafkaBackend is a Kafka the guarantees of the failure table are tested
// against: kfake, in-process and new for each test, or Apache Kafka
// itself, three nodes shared by the package (realKafka).
type kafkaBackend struct {
	name string
	real bool
}

var (
	kfakeBackend  = kafkaBackend{name: "kfake"}
	apacheBackend = kafkaBackend{name: "apache-3", real: true}
)

// eachBackend runs f as a subtest on each backend, so that one test's
// assertions hold on both. The subtest of Apache Kafka skips without its
// jars (and fails in CI), as harness.RequireApacheKafka does.
func eachBackend(t *testing.T, f func(t *testing.T, b kafkaBackend)) {
	t.Helper()
	for _, b := range []kafkaBackend{kfakeBackend, apacheBackend} {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// sharedKafka is the package's cluster of Apache Kafka: three nodes,
// started by the first test that asks for it and closed by TestMain after
// every test ran.
var sharedKafka struct {
	once sync.Once
	k    *harness.Kafka
	err  error
}

// realKafka returns the package's 3-node Apache Kafka, starting it on
// first use; it skips t without the jars, as harness.RequireApacheKafka
// does. The cluster is whole when it returns, and is made whole again
// (paused nodes resumed, stopped ones started, every partition fully in
// sync) when t ends, so that a test that kills or pauses a broker leaves
// the next one a healthy cluster. Tests share it: each uses topics of its
// own (uniqueTopic).
func realKafka(t *testing.T) *harness.Kafka {
	t.Helper()
	harness.RequireApacheKafka(t)
	sharedKafka.once.Do(func() {
		start := time.Now()
		sharedKafka.k, sharedKafka.err = harness.NewApacheKafka(harness.Nodes(3))
		if sharedKafka.err == nil {
			t.Logf("apache kafka: 3 nodes of %s started in %v", harness.KafkaVersion, time.Since(start).Round(time.Millisecond))
		}
	})
	if sharedKafka.err != nil {
		t.Fatalf("apache kafka: the package's cluster did not start: %v", sharedKafka.err)
	}
	k := sharedKafka.k
	k.AwaitHealthy(t)
	t.Cleanup(func() { k.AwaitHealthy(t) })
	return k
}

// closeSharedKafka stops the package's cluster, if a test started it.
func closeSharedKafka() {
	if sharedKafka.k != nil {
		sharedKafka.k.Close()
	}
}

var topicSeq atomic.Int64

// uniqueTopic is a topic name of the shared cluster that no other test
// uses: base and a number.
func uniqueTopic(base string) string {
	return fmt.Sprintf("%s-%d", base, topicSeq.Add(1))
}

// newEnvOn is newEnv on backend b: on Apache Kafka the topic, of a name
// of its own (e.topic), is created on the shared cluster with replication
// factor 3.
func newEnvOn(t *testing.T, b kafkaBackend, topic string, partitions int) *env {
	t.Helper()
	if !b.real {
		return newEnv(t, topic, partitions)
	}
	k := realKafka(t)
	name := uniqueTopic(topic)
	k.CreateTopic(t, name, partitions)
	t.Logf("topic %s: %d partitions on Apache Kafka's 3 nodes", name, partitions)
	return newEnvWith(t, harness.StartEtcd(t, 1), k, name, partitions)
}

// producerOpts are the options a test's own producers add on Apache
// Kafka: a moved leader is looked up again at once, and a request to a
// paused broker is given up after some 7 s (not kgo's 20), so that a
// produce outlives the faults the tests inject; kgo's producer is
// idempotent, so a retry never doubles a record.
func (e *env) producerOpts() []kgo.Opt {
	if e.kafka.Cluster() != nil {
		return nil
	}
	return []kgo.Opt{
		kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.ProduceRequestTimeout(5 * time.Second),
		kgo.RequestTimeoutOverhead(2 * time.Second),
	}
}

// produceTimeout bounds one produce of a test's load: on Apache Kafka it
// must outlast a broker fault (a leader fenced some 4 s after it stopped
// answering, then kgo's retry).
func (e *env) produceTimeout() time.Duration {
	if e.kafka.Cluster() != nil {
		return 10 * time.Second
	}
	return 30 * time.Second
}

// brokerFault is a fault of Apache Kafka's brokers, injected by a test
// while records flow: it returns once the fault has had its effect (a
// partition led by another broker), leaving the cluster to heal (the
// test's cleanup waits for it, realKafka).
type brokerFault struct {
	name   string
	inject func(t *testing.T, k *harness.Kafka, topic string)
}

// leaderStopFault is the fault named name that stops the leader of topic/p
// with stop (verb names it in the failure when the partition has no
// leader), waits up to 30 s until another broker leads the partition
// (awaiting, a format of topic, p and the stopped leader, tells what is
// awaited), then calls after with the stopped node, its id, when it was
// stopped and how long another broker took to lead.
func leaderStopFault(p int, name, verb string, stop func(*harness.KafkaNode), awaiting string,
	after func(t *testing.T, k *harness.Kafka, topic string, n *harness.KafkaNode, leader int32, began time.Time, moved time.Duration)) *brokerFault {
	return &brokerFault{
		name: name,
		inject: func(t *testing.T, k *harness.Kafka, topic string) {
			t.Helper()
			leader := k.Leader(t, topic, p)
			if leader < 0 {
				t.Fatalf("%s/%d has no leader to %s", topic, p, verb)
			}
			n := k.Node(int(leader))
			began := time.Now()
			stop(n)
			await(t, 30*time.Second, fmt.Sprintf(awaiting, topic, p, leader), func() bool {
				l := k.Leader(t, topic, p)
				return l >= 0 && l != leader
			})
			after(t, k, topic, n, leader, began, time.Since(began))
		},
	}
}

// killLeaderFault SIGKILLs the leader of topic/p, waits until another
// broker leads it, starts the node again and elects the preferred leaders
// of the topic: the killed broker, a replica again, leads again the
// partitions it was the preferred leader of.
func killLeaderFault(p int) *brokerFault {
	return leaderStopFault(p, fmt.Sprintf("leader of partition %d SIGKILLed, started again, preferred leaders elected", p),
		"kill", (*harness.KafkaNode).Kill, "a leader of %[1]s/%[2]d other than the killed broker %[3]d",
		func(t *testing.T, k *harness.Kafka, topic string, n *harness.KafkaNode, leader int32, began time.Time, moved time.Duration) {
			if err := n.Start(); err != nil {
				t.Fatal(err)
			}
			k.ElectPreferredLeaders(t, topic)
			t.Logf("broker fault: leader %d of %s/%d SIGKILLed; led by another broker after %v; started again, preferred leaders elected after %v",
				leader, topic, p, moved.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
		})
}

// pauseLeaderFault SIGSTOPs the leader of topic/p until the controllers
// have fenced it (its session, broker.session.timeout.ms, is 4 s) and
// another broker leads the partition, then SIGCONTs it.
func pauseLeaderFault(p int) *brokerFault {
	return leaderStopFault(p, fmt.Sprintf("leader of partition %d SIGSTOPped past its session, then resumed", p),
		"pause", (*harness.KafkaNode).Pause, "the paused broker %[3]d fenced: another leader of %[1]s/%[2]d",
		func(t *testing.T, _ *harness.Kafka, topic string, n *harness.KafkaNode, leader int32, _ time.Time, paused time.Duration) {
			n.Resume()
			t.Logf("broker fault: leader %d of %s/%d paused for %v, until another broker led it; resumed",
				leader, topic, p, paused.Round(time.Millisecond))
		})
}

// reassignFault reassigns topic/p away from its leader (to the two other
// brokers), then back to all three with the old leader first, which copies
// the log to it again, and elects it the leader: a reassignment that
// moves data and a preferred-leader election.
func reassignFault(p int) *brokerFault {
	return &brokerFault{
		name: fmt.Sprintf("partition %d reassigned off its leader and back, preferred leader elected", p),
		inject: func(t *testing.T, k *harness.Kafka, topic string) {
			t.Helper()
			leader := k.Leader(t, topic, p)
			replicas := k.Replicas(t, topic, p)
			if leader < 0 || !slices.Contains(replicas, leader) {
				t.Fatalf("%s/%d: leader %d, replicas %v", topic, p, leader, replicas)
			}
			others := slices.DeleteFunc(slices.Clone(replicas), func(r int32) bool { return r == leader })
			began := time.Now()
			k.ReassignPartition(t, topic, p, others)
			if l := k.Leader(t, topic, p); l == leader || l < 0 {
				t.Fatalf("%s/%d: leader %d after reassigning it to %v", topic, p, l, others)
			}
			k.ReassignPartition(t, topic, p, append([]int32{leader}, others...))
			k.ElectPreferredLeaders(t, topic, p)
			if l := k.Leader(t, topic, p); l != leader {
				t.Fatalf("%s/%d: leader %d after the election, want the preferred %d", topic, p, l, leader)
			}
			t.Logf("broker fault: %s/%d reassigned from %v to %v and back to %v (broker %d copied it again), broker %d elected; %v",
				topic, p, replicas, others, append([]int32{leader}, others...), leader, leader, time.Since(began).Round(time.Millisecond))
		},
	}
}

// electFault moves the leadership of topic/p to another replica by a
// preferred-leader election (the replicas reordered so that it is the
// preferred one, then elected).
func electFault(p int) *brokerFault {
	return &brokerFault{
		name: fmt.Sprintf("leader of partition %d moved by a preferred-leader election", p),
		inject: func(t *testing.T, k *harness.Kafka, topic string) {
			t.Helper()
			leader := k.Leader(t, topic, p)
			if leader < 0 {
				t.Fatalf("%s/%d has no leader to move", topic, p)
			}
			to := (leader + 1) % int32(k.Nodes())
			began := time.Now()
			k.MoveLeader(t, topic, p, to)
			t.Logf("broker fault: %s/%d led by %d, then by %d after a preferred-leader election (%v)",
				topic, p, leader, to, time.Since(began).Round(time.Millisecond))
		},
	}
}

// faultOnce injects a fault once, while records flow, from the test's
// goroutine.
type faultOnce struct {
	f    *brokerFault
	e    *env
	done bool
}

// inject injects the fault if it has not been yet; producing tells that
// records still flow, which it must.
func (o *faultOnce) inject(producing bool) {
	o.e.t.Helper()
	if o.f == nil || o.done {
		return
	}
	if !producing {
		o.e.t.Fatalf("broker fault %q: the records stopped flowing before it was injected", o.f.name)
	}
	o.done = true
	o.f.inject(o.e.t, o.e.kafka, o.e.topic)
}

// check fails the test if the fault was never injected.
func (o *faultOnce) check() {
	o.e.t.Helper()
	if o.f != nil && !o.done {
		o.e.t.Fatalf("broker fault %q never injected", o.f.name)
	}
}

// outputCount counts the lines of out that hold s.
func outputCount(out, s string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}
