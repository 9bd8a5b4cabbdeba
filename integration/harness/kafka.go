package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaOpTimeout bounds every helper call against the cluster.
const kafkaOpTimeout = 30 * time.Second

// kafkaFlushEvery is how many records a producer buffers before it flushes,
// so that huge Produce calls do not hold everything in memory at once.
const kafkaFlushEvery = 50_000

// Kafka is a Kafka cluster of one or more brokers, each on its own
// 127.0.0.1 port, with helpers to create topics and produce records: either
// an in-process fake (franz-go's kfake, StartKafka) or Apache Kafka itself,
// as real processes (StartApacheKafka, NewApacheKafka). The helpers work on
// both. A cluster of StartKafka or StartApacheKafka is closed in t.Cleanup;
// one of NewApacheKafka, shared between tests, by Close. Helpers take a
// testing.TB and fail the test on error, so call them from the test
// goroutine.
type Kafka struct {
	cluster *kfake.Cluster // nil for Apache Kafka
	real    *apacheKafka   // nil for kfake
	brokers []string
	codec   kgo.CompressionCodec
	// shared: the cluster outlives the tests that use it (NewApacheKafka),
	// so a client made for one test is closed at its end too.
	shared bool

	mu      sync.Mutex
	admin   *kgo.Client
	plain   *Producer
	txn     *TxnProducer
	clients []*kgo.Client
	closed  bool
}

type kafkaConfig struct {
	brokers int
	codec   kgo.CompressionCodec
	kfake   []kfake.Opt
}

// KafkaOption configures StartKafka.
type KafkaOption func(*kafkaConfig)

// NumBrokers sets the number of brokers (default 1).
func NumBrokers(n int) KafkaOption { return func(c *kafkaConfig) { c.brokers = n } }

// SeedTopics creates topics of the given number of partitions at start.
func SeedTopics(partitions int, names ...string) KafkaOption {
	return func(c *kafkaConfig) { c.kfake = append(c.kfake, kfake.SeedTopics(int32(partitions), names...)) }
}

// Compression sets the codec Produce uses (default none). Producers made
// with NewProducer choose their own.
func Compression(codec kgo.CompressionCodec) KafkaOption {
	return func(c *kafkaConfig) { c.codec = codec }
}

// KfakeOptions passes options to kfake.NewCluster as they are.
func KfakeOptions(opts ...kfake.Opt) KafkaOption {
	return func(c *kafkaConfig) { c.kfake = append(c.kfake, opts...) }
}

// StartKafka starts a fake cluster on free loopback ports.
func StartKafka(t testing.TB, opts ...KafkaOption) *Kafka {
	t.Helper()
	cfg := kafkaConfig{brokers: 1, codec: kgo.NoCompression()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.brokers < 1 {
		t.Fatalf("kafka: %d brokers", cfg.brokers)
	}
	kopts := append([]kfake.Opt{kfake.NumBrokers(cfg.brokers)}, cfg.kfake...)
	c, err := kfake.NewCluster(kopts...)
	if err != nil {
		t.Fatalf("kafka: start %d brokers: %v", cfg.brokers, err)
	}
	k := &Kafka{cluster: c, brokers: c.ListenAddrs(), codec: cfg.codec}
	t.Cleanup(k.Close)
	return k
}

// Brokers returns the brokers' host:port addresses (of Apache Kafka: their
// PLAINTEXT listeners, whether the nodes run or not).
func (k *Kafka) Brokers() []string { return append([]string(nil), k.brokers...) }

// Cluster gives access to the fake cluster, e.g. to move partition leaders
// (MoveTopicPartition) or intercept requests (ControlKey); nil for Apache
// Kafka, whose nodes Node controls.
func (k *Kafka) Cluster() *kfake.Cluster { return k.cluster }

// Close closes the clients of the helpers and stops the cluster (Apache
// Kafka's nodes are killed and their data removed). StartKafka and
// StartApacheKafka call it at cleanup; a cluster of NewApacheKafka must be
// closed by its owner, after the tests that share it. Closing again is a
// no-op.
func (k *Kafka) Close() {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.closed = true
	clients := k.clients
	k.clients = nil
	k.mu.Unlock()
	for _, c := range clients {
		c.Close()
	}
	if k.cluster != nil {
		k.cluster.Close()
	}
	if k.real != nil {
		k.real.close()
	}
}

// dial returns a kgo client of the cluster, closed with it.
func (k *Kafka) dial(opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{kgo.SeedBrokers(k.brokers...)}
	if k.real != nil {
		base = append(base, k.real.clientOpts()...)
	}
	c, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("new client: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		c.Close()
		return nil, errors.New("cluster already closed")
	}
	k.clients = append(k.clients, c)
	return c, nil
}

// newClient returns a kgo client closed with the cluster and, when the
// cluster is shared between tests, at the end of t.
func (k *Kafka) newClient(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	c, err := k.dial(opts...)
	if err != nil {
		t.Fatalf("kafka: %v", err)
	}
	if k.shared {
		t.Cleanup(func() { k.forget(c) })
	}
	return c
}

// forget closes c and drops it from the clients closed with the cluster.
func (k *Kafka) forget(c *kgo.Client) {
	k.mu.Lock()
	for i, x := range k.clients {
		if x == c {
			k.clients = append(k.clients[:i], k.clients[i+1:]...)
			break
		}
	}
	k.mu.Unlock()
	c.Close()
}

// Client returns a plain kgo client of the cluster, closed with it, for
// requests the helpers do not cover (kmsg requests via RequestWith).
func (k *Kafka) Client(t testing.TB) *kgo.Client {
	t.Helper()
	return k.adminClient(t)
}

// adminClient is the client of the helpers' requests, made once and
// closed with the cluster. Its seed brokers are the cluster's, in the
// order of Brokers (Apache Kafka's requests to one node go through them).
func (k *Kafka) adminClient(t testing.TB) *kgo.Client {
	t.Helper()
	k.mu.Lock()
	c := k.admin
	k.mu.Unlock()
	if c != nil {
		return c
	}
	c, err := k.dial()
	if err != nil {
		t.Fatalf("kafka: admin client: %v", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.admin == nil {
		k.admin = c
	}
	return k.admin
}

func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), kafkaOpTimeout)
}

// CreateTopic creates topic with the given number of partitions. Configs
// are topic configs such as "cleanup.policy", "compact". On Apache Kafka
// its replication factor is the number of nodes up to 3, and CreateTopic
// returns once every running node knows a leader for every partition
// (creation is asynchronous there); on kfake it is 1.
func (k *Kafka) CreateTopic(t testing.TB, name string, partitions int, configs ...string) {
	t.Helper()
	if len(configs)%2 != 0 {
		t.Fatalf("kafka: create topic %s: configs must be key, value pairs", name)
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = name
	rt.NumPartitions = int32(partitions)
	rt.ReplicationFactor = 1
	if k.real != nil {
		rt.ReplicationFactor = int16(min(3, len(k.real.nodes)))
	}
	for i := 0; i < len(configs); i += 2 {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = configs[i], kmsg.StringPtr(configs[i+1])
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = int32(kafkaOpTimeout / time.Millisecond)
	admin(t, k, "create topic "+name, req, func(resp *kmsg.CreateTopicsResponse) []int16 {
		return errorCodes(resp.Topics, func(rt kmsg.CreateTopicsResponseTopic) int16 { return rt.ErrorCode })
	})
	if k.real != nil {
		k.awaitLeaders(t, "create topic "+name, name, partitions)
	}
}

// AddPartitions adds n partitions to topic.
func (k *Kafka) AddPartitions(t testing.TB, topic string, n int) {
	t.Helper()
	cur := k.NumPartitions(t, topic)
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic = topic
	rt.Count = int32(cur + n)
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = int32(kafkaOpTimeout / time.Millisecond)
	admin(t, k, fmt.Sprintf("add %d partitions to %s", n, topic), req, func(resp *kmsg.CreatePartitionsResponse) []int16 {
		return errorCodes(resp.Topics, func(rt kmsg.CreatePartitionsResponseTopic) int16 { return rt.ErrorCode })
	})
	if k.real != nil {
		k.awaitLeaders(t, fmt.Sprintf("add %d partitions to %s", n, topic), topic, cur+n)
	}
	// Producers that know the topic must learn of the new partitions
	// before records can be produced to them.
	k.mu.Lock()
	clients := append([]*kgo.Client(nil), k.clients...)
	k.mu.Unlock()
	last := int32(cur + n - 1)
	ctx, cancel := opCtx()
	defer cancel()
	for _, c := range clients {
		if l, _, _ := c.PartitionLeader(topic, 0); l < 0 {
			continue
		}
		c.ForceMetadataRefresh()
		for {
			if l, _, _ := c.PartitionLeader(topic, last); l >= 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("kafka: add %d partitions to %s: producers did not see them: %v", n, topic, ctx.Err())
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// NumPartitions returns the number of partitions of topic.
func (k *Kafka) NumPartitions(t testing.TB, topic string) int {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, mt)
	resp := admin(t, k, "metadata of "+topic, req, func(resp *kmsg.MetadataResponse) (codes []int16) {
		for _, mt := range resp.Topics {
			if mt.Topic != nil && *mt.Topic == topic {
				codes = append(codes, mt.ErrorCode)
			}
		}
		return codes
	})
	for _, mt := range resp.Topics {
		if mt.Topic != nil && *mt.Topic == topic {
			return len(mt.Partitions)
		}
	}
	t.Fatalf("kafka: metadata of %s: topic missing from the response", topic)
	return 0
}

// DeleteRecords deletes the records of topic/partition before offset, which
// becomes the log start offset.
func (k *Kafka) DeleteRecords(t testing.TB, topic string, partition int, before int64) {
	t.Helper()
	req := kmsg.NewPtrDeleteRecordsRequest()
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition = int32(partition)
	rp.Offset = before
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = int32(kafkaOpTimeout / time.Millisecond)
	// DeleteRecords goes to the partition leader: kgo routes it.
	what := fmt.Sprintf("delete records of %s/%d before %d", topic, partition, before)
	admin(t, k, what, req, func(resp *kmsg.DeleteRecordsResponse) (codes []int16) {
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				codes = append(codes, rp.ErrorCode)
			}
		}
		return codes
	})
}

// admin sends req with the admin client within kafkaOpTimeout and returns
// its response. It fails the test, naming what, if the request fails or if
// one of the error codes that codes picks from the response is an error.
// On Apache Kafka a request that any broker serves goes to a running node
// (see apacheKafka.request), and one that fails with a retriable error
// code (a leader moving, a node starting) is sent again until
// kafkaOpTimeout.
func admin[Resp kmsg.Response](t testing.TB, k *Kafka, what string, req kmsg.Request, codes func(Resp) []int16) Resp {
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	for {
		kresp, err := k.request(ctx, t, req)
		if err != nil {
			t.Fatalf("kafka: %s: %v", what, err)
		}
		resp, ok := kresp.(Resp)
		if !ok {
			t.Fatalf("kafka: %s: unexpected response %T", what, kresp)
		}
		var failed error
		for _, code := range codes(resp) {
			if err := kerr.ErrorForCode(code); err != nil {
				failed = err
				break
			}
		}
		if failed == nil {
			return resp
		}
		if k.real == nil || !kerr.IsRetriable(failed) || ctx.Err() != nil {
			t.Fatalf("kafka: %s: %v", what, failed)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// errorCodes is the error code of each item of a response, for admin.
func errorCodes[T any](items []T, code func(T) int16) []int16 {
	codes := make([]int16, len(items))
	for i, it := range items {
		codes[i] = code(it)
	}
	return codes
}

// request sends req with the admin client: on Apache Kafka, one that any
// broker serves to a running node, others (routed by partition leader) as
// kgo routes them.
func (k *Kafka) request(ctx context.Context, t testing.TB, req kmsg.Request) (kmsg.Response, error) {
	t.Helper()
	cl := k.adminClient(t)
	if k.real != nil && anyBroker(req) {
		return k.real.request(ctx, cl, req)
	}
	return cl.Request(ctx, req)
}
