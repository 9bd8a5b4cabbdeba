package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

func BenchmarkTmp512(b *testing.B) {
	const parts, perPart = 512, 4000
	etcd := harness.StartEtcd(b, 1)
	k := harness.StartKafka(b, harness.SeedTopics(parts, "bench"))
	produceBacklog(b, k, "bench", parts, perPart, 100)
	round := 0
	for b.Loop() {
		round++
		sink := discard.New()
		cfg := replica.Config{Group: fmt.Sprintf("b-%d", round), ReplicaID: "r", Topics: []string{"bench"},
			Fetch: kafka.Config{Brokers: k.Brokers()}, LeaseTTL: 10 * time.Second}
		r, err := replica.New(cfg, etcd.Client(b), sink, nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		start := time.Now()
		go func() { defer close(done); _ = r.Run(ctx) }()
		for r.Stats().Records.Load() < parts*perPart {
			time.Sleep(time.Millisecond)
		}
		b.ReportMetric(float64(parts*perPart)/time.Since(start).Seconds(), "rec/s")
		n, _, _ := r.Fetching()
		b.ReportMetric(float64(n), "fetches")
		b.ReportMetric(float64(r.Stats().SinkCalls.Load()), "sinkcalls")
		b.ReportMetric(float64(r.Stats().Blocks.Load()), "blocks")
		cancel()
		<-done
	}
}

func TestTmpTrickle3(t *testing.T) {
	const parts = 200
	e := newEnv(t, "tr", parts)
	sink := newCountingSink()
	var rs []*running
	for i := 0; i < 3; i++ {
		cfg := replica.Config{Group: e.group, ReplicaID: fmt.Sprintf("r%d", i), Topics: []string{e.topic}, Fetch: kafka.Config{Brokers: e.kafka.Brokers()}}
		rs = append(rs, e.start(cfg, sink))
	}
	await(t, 30*time.Second, "balanced", func() bool {
		n := 0
		for _, r := range rs {
			n += len(r.r.Owned())
		}
		return n == parts && len(e.snapshot().Claims) == parts
	})
	produced := map[int]int64{}
	time.Sleep(2 * time.Second)
	prod := trickleProducer(t, e.kafka)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	acked, err := trickle(ctx, prod, e.topic, parts, 400, 100)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < acked; i++ {
		produced[int(i%parts)]++
	}
	lastRec := &kgo.Record{Topic: e.topic, Partition: int32(acked % int64(parts)), Key: []byte("last"), Value: []byte("t"), Timestamp: time.Now()}
	if err := prod.ProduceSync(context.Background(), lastRec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	produced[int(acked%parts)]++
	deadline := time.Now().Add(20 * time.Second)
	for !e.allCommitted(produced) {
		if time.Now().After(deadline) {
			c := e.committed()
			snap := e.snapshot()
			for p := 0; p < parts; p++ {
				if c[p] < produced[p] {
					t.Logf("partition %d committed %d want %d owner %s", p, c[p], produced[p], snap.Claims[coordinator.Partition{Topic: e.topic, Partition: p}].Replica)
				}
			}
			for _, r := range rs {
				n, held, _ := r.r.Fetching()
				t.Logf("%s owns %d fetches %d held %d", r.r.ID(), len(r.r.Owned()), n, held)
			}
			t.Fatal("not all committed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("sink total %d, acked %d", sink.total.Load(), acked)
	sink.exactlyOnce(t, produced)
}
