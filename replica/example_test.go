package replica_test

import (
	"context"
	"fmt"
	"log"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// sumSink is a sink of the embedder's own: it adds up the values of the
// records, which are numbers, and counts them. A replica writes to it from
// one goroutine per partition, so it locks.
type sumSink struct {
	mu      sync.Mutex
	records int
	sum     int
	done    chan struct{} // closed when want records have come
	want    int
}

func (s *sumSink) Write(ctx context.Context, b *sinks.Block) error {
	if err := b.Check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range b.Records {
		n, err := strconv.Atoi(string(r.Value))
		if err != nil {
			return fmt.Errorf("record %s/%d@%d: %w", b.Topic, b.Partition, r.Offset, err)
		}
		s.sum += n
		s.records++
	}
	if s.records == s.want {
		close(s.done)
	}
	return nil
}

func (s *sumSink) Close() error { return nil }

// Example runs a replica with a sink of its own against an in-process etcd
// and Kafka (kfake): it reads the 100 records of a two-partition topic,
// commits their offsets to etcd, and stops gracefully. A second replica of
// the same group, in another process, would share the partitions.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli, brokers, stop := startEtcdAndKafka("orders", 100)
	defer stop()

	sink := &sumSink{want: 100, done: make(chan struct{})}
	r, err := replica.New(replica.Config{
		Group:  "orders-sum",
		Topics: []string{"orders"},
		Kafka: kafkaconf.Config{
			Brokers:      brokers,
			FetchMaxWait: 100 * time.Millisecond,
		},
		LeaseTTL:       2 * time.Second,
		RebalanceDelay: 10 * time.Millisecond,
	}, cli, sink, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close() // after Run: what New opened

	rctx, stopReplica := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	select {
	case <-sink.done:
	case <-ctx.Done():
		log.Fatal("the records did not reach the sink")
	}
	stopReplica() // graceful: the blocks in flight commit, the claims are released
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	st := r.Stats()
	fmt.Printf("the sink got %d records, sum %d; the replica wrote %d\n", sink.records, sink.sum, st.Records)
	// Output: the sink got 100 records, sum 4950; the replica wrote 100
}

// startEtcdAndKafka starts a single-member etcd on free loopback ports,
// with its data in a temporary directory, and a kfake cluster holding topic
// with two partitions and n records valued 0 to n-1. stop ends both.
func startEtcdAndKafka(topic string, n int) (cli *clientv3.Client, brokers []string, stop func()) {
	dir, err := os.MkdirTemp("", "replica-example-")
	if err != nil {
		log.Fatal(err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	local := []url.URL{{Scheme: "http", Host: "127.0.0.1:0"}}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = local, local
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = local, local
	cfg.InitialCluster = cfg.Name + "=" + local[0].String()
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatal(err)
	}
	select {
	case <-etcd.Server.ReadyNotify():
	case <-time.After(10 * time.Second):
		log.Fatal("etcd did not start")
	}
	cli, err = clientv3.New(clientv3.Config{Endpoints: []string{etcd.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	kafka, err := kfake.NewCluster(kfake.SeedTopics(2, topic))
	if err != nil {
		log.Fatal(err)
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(kafka.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Partition: int32(i % 2), Value: []byte(strconv.Itoa(i))})
	}
	if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		log.Fatal(err)
	}
	return cli, kafka.ListenAddrs(), func() {
		_ = cli.Close()
		kafka.Close()
		etcd.Close()
		_ = os.RemoveAll(dir)
	}
}
