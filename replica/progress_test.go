package replica_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// slowSink takes a while per record, as a sink catching up does.
type slowSink struct{ per time.Duration }

func (s slowSink) Write(ctx context.Context, b *sinks.Block) error {
	select {
	case <-time.After(s.per * time.Duration(len(b.Records))):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (slowSink) Close() error { return nil }

// TestCatchUpSaysHowItGoes: a replica behind by 40,000 records logs
// "catching up" with the lag, the rate and when it will be done, then
// "caught up" once; before, nothing came between "partition started" and
// the end.
func TestCatchUpSaysHowItGoes(t *testing.T) {
	cli, cluster := etcdAndKfake(t, "behind", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("behind"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(8<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var rs []*kgo.Record
	for i := range 40_000 {
		rs = append(rs, &kgo.Record{Partition: int32(i % 2), Value: fmt.Appendf(nil, "v%d", i)})
	}
	if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	r, err := replica.New(replica.Config{Group: "behind", Topics: []string{"behind"},
		Kafka:    kafkaconf.Config{Brokers: cluster.ListenAddrs(), FetchMaxWait: 50 * time.Millisecond},
		LeaseTTL: 2 * time.Second, RebalanceDelay: 10 * time.Millisecond, MaxBlockRows: 1000,
		LogEndInterval: 100 * time.Millisecond, ProgressInterval: 300 * time.Millisecond}, cli, slowSink{per: 100 * time.Microsecond}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stop := runReplica(ctx, r)
	defer stop()

	for logs.FilterMessage("caught up").Len() == 0 {
		if ctx.Err() != nil {
			t.Fatalf("no \"caught up\" line; delivered %d of 40000", r.Stats().Records)
		}
		time.Sleep(50 * time.Millisecond)
	}
	lines := logs.FilterMessage("catching up").All()
	if len(lines) < 2 {
		t.Fatalf("%d \"catching up\" lines while 40,000 records were read over about 2 s, want several", len(lines))
	}
	last := lines[len(lines)-1].ContextMap()
	for _, k := range []string{"partitions_behind", "lag", "records_per_second", "eta"} {
		if _, ok := last[k]; !ok {
			t.Errorf("the last \"catching up\" line has no %s: %v", k, last)
		}
	}
	if lag, _ := last["lag"].(int64); lag < 10_000 || lag > 40_000 {
		t.Errorf("lag %v, want between 10,000 and 40,000", last["lag"])
	}
	if n := logs.FilterMessage("caught up").Len(); n != 1 {
		t.Errorf("%d \"caught up\" lines, want 1", n)
	}
}
