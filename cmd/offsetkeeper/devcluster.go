//go:build !nodev

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

// devProducer writes JSON records round-robin over a topic's partitions and
// counts what each partition got.
type devProducer struct {
	brokers    []string
	topic      string
	partitions int

	mu       sync.Mutex
	produced map[int]int64
}

func newDevProducer(brokers []string, topic string, partitions int) *devProducer {
	return &devProducer{brokers: brokers, topic: topic, partitions: partitions, produced: map[int]int64{}}
}

// run produces n records, at rate per second when rate > 0.
func (d *devProducer) run(ctx context.Context, n, rate int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer cl.Close()
	chunk := 1000
	var tick *time.Ticker
	if rate > 0 {
		// Ten chunks a second keep the rate smooth.
		chunk = max(1, rate/10)
		tick = time.NewTicker(time.Second * time.Duration(chunk) / time.Duration(rate))
		defer tick.Stop()
	}
	for i := 0; i < n; i += chunk {
		if tick != nil {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		var rs []*kgo.Record
		for j := i; j < min(i+chunk, n); j++ {
			rs = append(rs, &kgo.Record{
				Topic:     d.topic,
				Partition: int32(j % d.partitions),
				Key:       fmt.Appendf(nil, "k-%d", j),
				Value:     fmt.Appendf(nil, `{"n":%d,"at":%q}`, j, time.Now().UTC().Format(time.RFC3339Nano)),
			})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("produce: %w", err)
		}
		d.mu.Lock()
		for _, r := range rs {
			d.produced[int(r.Partition)]++
		}
		d.mu.Unlock()
	}
	return nil
}

func (d *devProducer) counts() map[int]int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[int]int64, len(d.produced))
	for p, n := range d.produced {
		out[p] = n
	}
	return out
}

func (d *devProducer) total() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for _, v := range d.produced {
		n += v
	}
	return n
}

// recorder wraps a sink and remembers which offsets were written, so dev can
// tell lost records from duplicates whatever the sink.
type recorder struct {
	sinks.Sink
	mu        sync.Mutex
	seen      map[int]map[int64]int // partition → offset → writes
	distinctN int64
	writes    int64
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
		if m[rec.Offset] == 0 {
			r.distinctN++
		}
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

// distinct is how many different records were written.
func (r *recorder) distinct() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.distinctN
}

// replayed is how many record writes repeated an earlier one.
func (r *recorder) replayed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes - r.distinctN
}
