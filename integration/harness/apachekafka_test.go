package harness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TestApacheKafkaOneNode runs the helpers of kafka.go on one real node, and
// Kafka's own consumer and tools against it.
func TestApacheKafkaOneNode(t *testing.T) {
	start := time.Now()
	k := StartApacheKafka(t, Codec(kgo.Lz4Compression()))
	t.Logf("one node started in %v", time.Since(start).Round(time.Millisecond))
	if k.Cluster() != nil || k.Nodes() != 1 || len(k.Brokers()) != 1 || k.Node(0).PID() == 0 {
		t.Fatalf("Cluster() %v, Nodes() %d, Brokers() %v, PID %d", k.Cluster(), k.Nodes(), k.Brokers(), k.Node(0).PID())
	}

	k.CreateTopic(t, "one", 2, "cleanup.policy", "delete")
	if got := k.Replicas(t, "one", 1); !slices.Equal(got, []int32{0}) {
		t.Fatalf("replicas of one/1: %v, want [0]", got)
	}
	recs := []*kgo.Record{{Value: []byte("a")}, {Key: []byte("k"), Value: []byte("bb")}, {Value: nil}}
	k.Produce(t, "one", 1, recs...)
	k.ProduceValues(t, "one", 0, "x")
	k.Transact(t, false, "one", 0, &kgo.Record{Value: []byte("aborted")})
	k.Transact(t, true, "one", 0, &kgo.Record{Value: []byte("committed")})

	var want []RefRecord
	for _, r := range recs {
		want = append(want, RefRecordOf(r))
	}
	got := k.ReferenceConsume(t, "one", "read_committed")
	// Partition 0: "x" at 0, the aborted record at 1 and its marker at 2,
	// "committed" at 3 and its marker at 4.
	p0 := []RefRecord{
		RefRecordOf(&kgo.Record{Partition: 0, Offset: 0, Value: []byte("x")}),
		RefRecordOf(&kgo.Record{Partition: 0, Offset: 3, Value: []byte("committed")}),
	}
	if !slices.Equal(got, append(p0, want...)) {
		t.Fatalf("read_committed reference:\n got %v\nwant %v", got, append(p0, want...))
	}
	if n := len(k.ReferenceConsume(t, "one", "read_uncommitted")); n != 6 {
		t.Fatalf("read_uncommitted reference: %d records, want 6", n)
	}
	if end := k.EndOffsets(t, "one"); end[0] != 5 || end[1] != 3 {
		t.Fatalf("end offsets %v, want 0:5 1:3", end)
	}
	k.DeleteRecords(t, "one", 1, 1)
	if got := k.LogStartOffset(t, "one", 1); got != 1 {
		t.Fatalf("log start of one/1 after deleting records before 1: %d", got)
	}
	k.AddPartitions(t, "one", 1)
	k.ProduceValues(t, "one", 2, "new")

	// Kafka's tools run from the same jars.
	k.RunJava(t, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", k.Brokers()[0],
		"--topic", "one", "--messages", "4", "--group", "perf", "--timeout", "30000")
	out := k.RunJava(t, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
		"--bootstrap-server", k.Brokers()[0], "--describe", "--group", "perf")
	if !strings.Contains(out, "perf") || !strings.Contains(out, "one") {
		t.Fatalf("kafka-consumer-groups --describe --group perf:\n%s", out)
	}

	// No JVM outlives Close.
	pid := k.Node(0).PID()
	k.Close()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("process %d of node 0 still exists after Close", pid)
	}
}

// TestApacheKafkaThreeNodes runs the fault and admin helpers on one cluster
// of three nodes, shared by its subtests as a package would share one.
func TestApacheKafkaThreeNodes(t *testing.T) {
	RequireApacheKafka(t)
	start := time.Now()
	k, err := NewApacheKafka(Nodes(3), SASLSCRAMOverTLS(SCRAMConfig{
		Users:       map[string]string{"carol": "carol-secret"},
		ReauthAfter: time.Minute,
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("three nodes started in %v", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", k.real.logs())
		}
		k.Close()
	})
	pids := map[int]bool{}
	for i := range k.Nodes() {
		n := k.Node(i)
		if n.ID() != int32(i) || n.Addr() != k.Brokers()[i] || n.PID() == 0 || pids[n.PID()] {
			t.Fatalf("node %d: id %d, addr %s, pid %d", i, n.ID(), n.Addr(), n.PID())
		}
		pids[n.PID()] = true
	}

	t.Run("failover", func(t *testing.T) {
		defer k.AwaitHealthy(t)
		k.CreateTopic(t, "failover", 3)
		if got := k.Replicas(t, "failover", 0); len(got) != 3 {
			t.Fatalf("replicas of failover/0: %v, want 3", got)
		}
		k.ProduceValues(t, "failover", 0, "before")
		leader := k.Leader(t, "failover", 0)
		victim := k.Node(int(leader))
		victim.Kill()
		if victim.PID() != 0 || victim.Running() {
			t.Fatalf("node %d still running after Kill", leader)
		}
		Await(t, 30*time.Second, "a new leader of failover/0", func() bool {
			l := k.Leader(t, "failover", 0)
			return l >= 0 && l != leader
		})
		// Two replicas of three are in sync: acks=all still succeeds.
		k.ProduceValues(t, "failover", 0, "during")
		if err := victim.Start(); err != nil {
			t.Fatal(err)
		}
		k.AwaitHealthy(t)
		if got := k.ISR(t, "failover", 0); len(got) != 3 {
			t.Fatalf("ISR of failover/0 after the restart: %v", got)
		}
		k.ElectPreferredLeaders(t, "failover")
		if got, want := k.Leader(t, "failover", 0), k.Replicas(t, "failover", 0)[0]; got != want {
			t.Fatalf("leader of failover/0 after the election: %d, want %d", got, want)
		}
		got := k.ReferenceConsume(t, "failover", "read_uncommitted")
		if len(got) != 2 {
			t.Fatalf("read back %v, want the 2 records", got)
		}
	})

	t.Run("terminate and pause", func(t *testing.T) {
		defer k.AwaitHealthy(t)
		n := k.Node(1)
		if err := n.Terminate(); err != nil {
			t.Fatal(err)
		}
		if n.Running() {
			t.Fatal("node 1 runs after Terminate")
		}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		m := k.Node(2)
		m.Pause()
		if !m.Paused() {
			t.Fatal("node 2 not paused")
		}
		// Helpers go to the nodes that answer.
		k.CreateTopic(t, "paused", 1)
		m.Resume()
	})

	t.Run("move leader", func(t *testing.T) {
		k.CreateTopic(t, "moving", 2)
		for _, to := range []int32{0, 1, 2} {
			k.MoveLeader(t, "moving", 1, to)
			if got := k.Leader(t, "moving", 1); got != to {
				t.Fatalf("leader of moving/1: %d, want %d", got, to)
			}
		}
		k.ReassignPartition(t, "moving", 0, []int32{2, 0, 1})
		if got := k.Replicas(t, "moving", 0); !slices.Equal(got, []int32{2, 0, 1}) {
			t.Fatalf("replicas of moving/0: %v", got)
		}
		k.ElectPreferredLeaders(t, "moving", 0)
		if got := k.Leader(t, "moving", 0); got != 2 {
			t.Fatalf("leader of moving/0: %d, want 2", got)
		}
		k.AlterTopicConfig(t, "moving", "retention.ms", "3600000", "max.message.bytes", "200000")
		k.AlterTopicConfig(t, "moving", "max.message.bytes", "")
		k.DeleteTopic(t, "moving")
		k.CreateTopic(t, "moving", 1)
	})

	t.Run("fetch quota", func(t *testing.T) {
		k.CreateTopic(t, "quota", 1)
		// One batch per record: a broker never serves a batch larger
		// than a quota lets through in its window (it answers a fetch
		// that would exceed the quota with an empty response).
		value := []byte(strings.Repeat("q", 10_000))
		for range 30 {
			k.Produce(t, "quota", 0, &kgo.Record{Value: value})
		}
		k.SetFetchQuota(t, "slow-consumer", 10_000)
		var throttled atomic.Int64
		cl := k.newClient(t,
			kgo.ClientID("slow-consumer"),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"quota": {0: kgo.NewOffset().AtStart()}}),
			kgo.FetchMaxPartitionBytes(50_000),
			kgo.WithHooks(throttleHook(func(d time.Duration) { throttled.Add(int64(d)) })),
		)
		// At 10 kB/s over Kafka's quota window of some 10 s, about
		// 100 kB pass before the broker throttles.
		ctx := Context(t, time.Minute)
		n := 0
		for throttled.Load() == 0 {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				t.Fatalf("consumed %d of 30 records of 10 kB at a quota of 10 kB/s, and no fetch was throttled: %v", n, err)
			}
			n += len(fs.Records())
		}
		t.Logf("throttled for %v after %d records of 10 kB", time.Duration(throttled.Load()), n)
		k.SetFetchQuota(t, "slow-consumer", 0)
	})

	t.Run("scram over tls", func(t *testing.T) {
		if len(k.SASLAddrs()) != 3 || k.CACertFile() == "" || k.TLSConfig() == nil {
			t.Fatalf("SASLAddrs %v, CACertFile %q", k.SASLAddrs(), k.CACertFile())
		}
		k.CreateTopic(t, "secure", 1)
		k.CreateSCRAMUser(t, "SCRAM-SHA-512", "bob", "bob-secret")
		for _, c := range []struct {
			mech, user, pass string
			ok               bool
		}{
			{"SCRAM-SHA-256", KafkaSCRAMUser, KafkaSCRAMPassword, true},
			{"SCRAM-SHA-512", KafkaSCRAMUser, KafkaSCRAMPassword, true},
			{"SCRAM-SHA-256", "carol", "carol-secret", true},
			{"SCRAM-SHA-512", "bob", "bob-secret", true},
			{"SCRAM-SHA-256", "bob", "bob-secret", false}, // bob has no SHA-256 credential
			{"SCRAM-SHA-256", KafkaSCRAMUser, "wrong", false},
		} {
			auth := scram.Auth{User: c.user, Pass: c.pass}
			mech := auth.AsSha256Mechanism()
			if c.mech == "SCRAM-SHA-512" {
				mech = auth.AsSha512Mechanism()
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(k.SASLAddrs()...), kgo.DialTLSConfig(k.TLSConfig()), kgo.SASL(mech),
				kgo.RequestRetries(0), kgo.DefaultProduceTopic("secure"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			_, err = cl.Request(ctx, kmsg.NewPtrMetadataRequest())
			if err == nil {
				err = cl.ProduceSync(ctx, &kgo.Record{Value: []byte(c.user)}).FirstErr()
			}
			cancel()
			cl.Close()
			if (err == nil) != c.ok {
				t.Errorf("%s as %s/%s: error %v, want success %v", c.mech, c.user, c.pass, err, c.ok)
			}
		}
	})

	t.Run("java transactions", func(t *testing.T) {
		k.CreateTopic(t, "javatxn", 3)
		committed := k.JavaProduce(t, JavaProduceOptions{
			Topic: "javatxn", Records: 600, Partitions: 3,
			Transactional: true, TxnSize: 25, AbortEvery: 3,
			Compression: "zstd", BatchSize: 4096,
		})
		total := 0
		for p := range int32(3) {
			total += committed[p]
		}
		if total != 600-600/75*25 {
			t.Fatalf("committed %v (%d in all), want %d", committed, total, 600-600/75*25)
		}
		// Exactly the committed records, in order: record i went to
		// partition i%3 in transaction i/25, every third aborted.
		want := map[int32][]RefRecord{}
		for i := range 600 {
			if (i/25+1)%3 == 0 {
				continue
			}
			p := int32(i % 3)
			value := []byte(fmt.Sprintf("v%09d-", i) + strings.Repeat("x", 100-11))
			want[p] = append(want[p], RefRecordOf(&kgo.Record{Partition: p, Key: []byte(fmt.Sprint("k", i)), Value: value}))
		}
		got := map[int32][]RefRecord{}
		for _, r := range k.ReferenceConsume(t, "javatxn", "read_committed") {
			if prev := got[r.Partition]; len(prev) > 0 && prev[len(prev)-1].Offset >= r.Offset {
				t.Fatalf("partition %d: offset %d after %d", r.Partition, r.Offset, prev[len(prev)-1].Offset)
			}
			got[r.Partition] = append(got[r.Partition], r)
		}
		for p := range int32(3) {
			if len(got[p]) != committed[p] || len(want[p]) != committed[p] {
				t.Fatalf("partition %d: the reference read_committed consumer read %d records, the producer committed %d, want %d",
					p, len(got[p]), committed[p], len(want[p]))
			}
			for i, r := range got[p] {
				r.Offset = 0
				if r != want[p][i] {
					t.Fatalf("partition %d: record %d read %+v, want %+v", p, i, r, want[p][i])
				}
			}
		}
		if n := len(k.ReferenceConsume(t, "javatxn", "read_uncommitted")); n != 600 {
			t.Errorf("read_uncommitted: %d records, want 600", n)
		}
	})
}

// throttleHook calls f with each throttle a broker imposes.
type throttleHook func(time.Duration)

func (h throttleHook) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) { h(d) }

// TestApacheKafkaReferenceOnKfake runs the reference consumer against
// kfake's cluster: the Java programs are clients of either.
func TestApacheKafkaReferenceOnKfake(t *testing.T) {
	RequireApacheKafka(t)
	k := StartKafka(t)
	k.CreateTopic(t, "fake", 1)
	k.Transact(t, false, "fake", 0, &kgo.Record{Value: []byte("aborted")})
	k.ProduceValues(t, "fake", 0, "a", "b")
	got := k.ReferenceConsume(t, "fake", "read_committed")
	want := []RefRecord{
		RefRecordOf(&kgo.Record{Offset: 2, Value: []byte("a")}),
		RefRecordOf(&kgo.Record{Offset: 3, Value: []byte("b")}),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("reference read_committed on kfake:\n got %v\nwant %v", got, want)
	}
}
