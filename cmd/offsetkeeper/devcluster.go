package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// startDevEtcd starts a single-member etcd in dir on free loopback ports.
// Only `dev` runs an embedded etcd; `run` always talks to a real cluster.
func startDevEtcd(dir string) (*embed.Etcd, string, error) {
	ports, err := freeLoopbackPorts(2)
	if err != nil {
		return nil, "", err
	}
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	cfg := embed.NewConfig()
	cfg.Name = "dev"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = "dev=" + peer.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.AutoCompactionMode = embed.CompactorModeRevision
	cfg.AutoCompactionRetention = "10000"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, "", errors.New("embedded etcd not ready after 30s")
	}
	return e, client.Host, nil
}

func freeLoopbackPorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startDevKafka starts kfake, an in-process broker speaking the Kafka
// protocol, with one topic.
func startDevKafka(topic string, partitions int) (*kfake.Cluster, []string, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), topic))
	if err != nil {
		return nil, nil, fmt.Errorf("start kafka: %w", err)
	}
	return c, c.ListenAddrs(), nil
}

// produceDev writes n JSON records round-robin over the topic's partitions,
// in chunks, spread over spread, and returns how many each partition got.
func produceDev(ctx context.Context, brokers []string, topic string, partitions, n int, spread time.Duration) (map[int]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	defer cl.Close()
	counts := map[int]int64{}
	const chunk = 1000
	chunks := (n + chunk - 1) / chunk
	pause := time.Duration(0)
	if chunks > 1 {
		pause = spread / time.Duration(chunks)
	}
	for i := 0; i < n; i += chunk {
		var rs []*kgo.Record
		for j := i; j < min(i+chunk, n); j++ {
			p := j % partitions
			rs = append(rs, &kgo.Record{
				Topic:     topic,
				Partition: int32(p),
				Key:       fmt.Appendf(nil, "k-%d", j),
				Value:     fmt.Appendf(nil, `{"n":%d,"at":%q}`, j, time.Now().UTC().Format(time.RFC3339Nano)),
			})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			return counts, fmt.Errorf("produce: %w", err)
		}
		for _, r := range rs {
			counts[int(r.Partition)]++
		}
		select {
		case <-ctx.Done():
			return counts, ctx.Err()
		case <-time.After(pause):
		}
	}
	return counts, nil
}

// recorder wraps a sink and remembers which offsets were written, so dev can
// tell lost records from duplicates whatever the sink.
type recorder struct {
	sinks.Sink
	mu     sync.Mutex
	seen   map[int]map[int64]int // partition → offset → writes
	writes int64
}

func newRecorder(s sinks.Sink) *recorder { return &recorder{Sink: s, seen: map[int]map[int64]int{}} }

func (r *recorder) Write(ctx context.Context, b *sinks.Block) error {
	if err := r.Sink.Write(ctx, b); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.seen[b.Partition]
	if m == nil {
		m = map[int64]int{}
		r.seen[b.Partition] = m
	}
	for _, rec := range b.Records {
		m[rec.Offset]++
		r.writes++
	}
	return nil
}

// tally compares what was written with what was produced: distinct offsets
// delivered, offsets never delivered, and extra copies.
func (r *recorder) tally(produced map[int]int64) (delivered, lost, duplicates int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, n := range produced {
		for off := int64(0); off < n; off++ {
			if c := r.seen[p][off]; c > 0 {
				delivered++
				duplicates += int64(c - 1)
			} else {
				lost++
			}
		}
	}
	return delivered, lost, duplicates
}

// Resume passes the wrapped sink's own offsets through, so wrapping does not
// turn a Resumer sink into a plain one.
func (r *recorder) Resume(ctx context.Context, topic string, partition int) (int64, int64, bool, error) {
	if rs, ok := r.Sink.(sinks.Resumer); ok {
		return rs.Resume(ctx, topic, partition)
	}
	return 0, 0, false, nil
}
