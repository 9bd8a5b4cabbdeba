package integration_test

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

// BenchmarkReplicaVsRawDrain loads the same records into the Kafka that
// OKBENCH_KAFKA names (kfake, the default, in this process; apache1 or
// apache3: Apache Kafka of 1 or 3 nodes, see BenchmarkScaleGroupVsFranz512)
// once, then measures in the same run a raw kafka-go drain of them (one
// connection per partition, DialLeader and ReadBatch, nothing else) and a
// replica delivering them to discard: with a guard, an intent and an etcd
// commit per block, both in this process. It reports records/s for both
// and replica/raw; on Apache Kafka also the brokers' CPU seconds per
// million records over each side's runs (the nodes' JVMs summed).
//
//	go test -run '^$' -bench ReplicaVsRawDrain -benchtime 5x ./integration/
//	OKBENCH_KAFKA=apache3 go test -run '^$' -bench ReplicaVsRawDrain -benchtime 5x ./integration/
func BenchmarkReplicaVsRawDrain(b *testing.B) {
	const parts, perPart = 8, 250_000
	etcd := harness.StartEtcd(b, 1)
	k := startBenchKafka(b, parts, "bench")
	for p := 0; p < parts; p++ {
		recs := make([]*kgo.Record, perPart)
		for i := range recs {
			recs[i] = &kgo.Record{
				Key:   fmt.Appendf(nil, "key-%07d", i),
				Value: fmt.Appendf(nil, "value-%07d-%s", i, strings.Repeat("v", 86)), // 100 bytes
			}
		}
		k.Produce(b, "bench", p, recs...)
	}
	total := float64(parts * perPart)

	var rawTime, replicaTime, rawBroker, replicaBroker time.Duration
	round := 0
	for b.Loop() {
		round++
		broker0, start := k.brokerCPU(b), time.Now()
		rawDrain(b, k.Brokers()[0], "bench", parts, perPart)
		rawTime += time.Since(start)
		rawBroker += k.brokerCPU(b) - broker0

		sink := discard.New()
		// A new group starts from the earliest offset.
		broker0 = k.brokerCPU(b)
		replicaTime += drainTimed(b, etcd.Client(b), k.Brokers(), fmt.Sprintf("bench-%d", round), sink, func(s replica.Stats) bool {
			return s.Records >= int64(parts*perPart) && s.Claims >= parts
		})
		replicaBroker += k.brokerCPU(b) - broker0
		if sink.Records() != int64(parts*perPart) {
			b.Fatalf("discard got %d records, want %d", sink.Records(), parts*perPart)
		}
	}
	n := total * float64(round)
	raw := n / rawTime.Seconds()
	rep := n / replicaTime.Seconds()
	b.ReportMetric(raw, "raw-records/s")
	b.ReportMetric(rep, "replica-records/s")
	b.ReportMetric(rep/raw, "ratio")
	if k.real() {
		b.ReportMetric(rawBroker.Seconds()/n*1e6, "raw-broker-cpu-s/Mrec")
		b.ReportMetric(replicaBroker.Seconds()/n*1e6, "replica-broker-cpu-s/Mrec")
	}
}

// rawDrainConns bounds the raw drain's connections open at once: with one
// a partition, 10,000 partitions would take 20,000 descriptors of this
// process on kfake (both ends), past its limit.
const rawDrainConns = 512

// rawDrain reads every partition to n records with kafka-go's connection
// API, one goroutine and connection per partition, at most rawDrainConns
// at once.
func rawDrain(b *testing.B, broker, topic string, parts, n int) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, rawDrainConns)
	for p := 0; p < parts; p++ {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			conn, err := kafkago.DialLeader(context.Background(), "tcp", broker, topic, p)
			if err != nil {
				b.Error(err)
				return
			}
			defer conn.Close()
			for got := 0; got < n; {
				batch := conn.ReadBatchWith(kafkago.ReadBatchConfig{MinBytes: 1, MaxBytes: kafkaconf.DefaultFetchMaxPartitionBytes, MaxWait: kafkaconf.DefaultFetchMaxWait})
				for {
					if _, err := batch.ReadMessage(); err != nil {
						break
					}
					got++
				}
				if err := batch.Close(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// drainTimed runs one replica of group over the topic "bench" into sink
// until drained holds of its stats, stops it, and returns how long it ran.
// Each of opts changes the replica's config first.
func drainTimed(b *testing.B, cli *clientv3.Client, brokers []string, group string, sink sinks.Sink, drained func(replica.Stats) bool,
	opts ...func(*replica.Config)) time.Duration {
	cfg := replica.Config{
		Group:     group,
		ReplicaID: "r",
		Topics:    []string{"bench"},
		Kafka:     kafkaconf.Config{Brokers: brokers},
		LeaseTTL:  10 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	r, err := replica.New(cfg, cli, sink, nil)
	if err != nil {
		b.Fatal(err)
	}
	// The collector as offsetkeeper run sets it under GOMEMLIMIT: under
	// its own limit run turns it off, which here would need a limit on a
	// process that holds kfake's logs and etcd too. The anchors' sides
	// keep Go's default, as a program of their own would.
	defer debug.SetGCPercent(debug.SetGCPercent(replica.GCPercent))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); _ = r.Run(ctx) }()
	for !drained(r.Stats()) {
		time.Sleep(time.Millisecond)
	}
	took := time.Since(start)
	cancel()
	<-done
	return took
}
