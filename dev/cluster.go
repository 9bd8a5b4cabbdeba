package dev

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/offsetkeeper/offsetkeeper/internal/localetcd"
	"github.com/offsetkeeper/offsetkeeper/internal/netproxy"
)

// etcdReadyTimeout bounds the start of dev's etcd.
const etcdReadyTimeout = 30 * time.Second

// etcdCluster is dev's embedded etcd. Its members reach each other through
// proxies, so that a stopped member's peer connections are cut at once, as a
// crash would, and none outlives Close (an embedded member leaves its peers'
// HTTP connections open).
type etcdCluster struct {
	*localetcd.Cluster
	mu    sync.Mutex
	peers map[int]*netproxy.Proxy // in front of member i's peer address
}

// startEtcd starts an etcd of members members (1, or 3 for the leader
// fault) in dir on free loopback ports and returns it with its members'
// client addresses (host:port). Only dev runs an embedded etcd; `run`
// always talks to a real cluster.
func startEtcd(dir string, members int) (*etcdCluster, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), etcdReadyTimeout)
	defer cancel()
	e := &etcdCluster{peers: map[int]*netproxy.Proxy{}}
	c, err := localetcd.Start(ctx, localetcd.Config{
		Dir:       dir,
		Members:   members,
		Name:      "dev",
		Advertise: e.advertise,
		Configure: func(_ string, cfg *embed.Config) {
			cfg.AutoCompactionMode = embed.CompactorModeRevision
			cfg.AutoCompactionRetention = "10000"
			if members > 1 {
				// A lost leader is replaced well within a lease TTL,
				// yet a loaded machine does not make leadership flap.
				cfg.TickMs = 50
				cfg.ElectionMs = 500
				// The data lives only as long as this run.
				cfg.UnsafeNoFsync = true
			}
		},
	})
	if err != nil {
		e.closePeers()
		return nil, nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	e.Cluster = c
	var hosts []string
	for i := range c.Members() {
		u, err := url.Parse(c.ClientURL(i))
		if err != nil {
			e.close()
			return nil, nil, fmt.Errorf("embedded etcd: client URL of member %d: %w", i, err)
		}
		hosts = append(hosts, u.Host)
	}
	return e, hosts, nil
}

// advertise puts a proxy in front of member i's peer address
// (localetcd.Config.Advertise), closing that of an earlier try to start.
func (e *etcdCluster) advertise(i int, client, peer string) (string, string, error) {
	p, err := netproxy.New(peer)
	if err != nil {
		return "", "", fmt.Errorf("peer proxy of member %d: %w", i, err)
	}
	e.mu.Lock()
	old := e.peers[i]
	e.peers[i] = p
	e.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return client, p.Addr(), nil
}

// stop crashes member i: its peers' connections to it are cut with it.
func (e *etcdCluster) stop(i int) {
	e.mu.Lock()
	p := e.peers[i]
	e.mu.Unlock()
	p.Refuse(true)
	_ = p.Cut()
	e.Stop(i)
}

// restart starts member i again and waits until it is ready.
func (e *etcdCluster) restart(ctx context.Context, i int) error {
	if err := e.Restart(ctx, i); err != nil {
		return err
	}
	e.mu.Lock()
	e.peers[i].Refuse(false)
	e.mu.Unlock()
	return e.WaitReady(ctx, i)
}

// close stops every member, then their proxies.
func (e *etcdCluster) close() {
	e.Cluster.Close()
	e.closePeers()
}

func (e *etcdCluster) closePeers() {
	e.mu.Lock()
	peers := e.peers
	e.peers = map[int]*netproxy.Proxy{}
	e.mu.Unlock()
	for _, p := range peers {
		p.Close()
	}
}

// startKafka starts kfake, an in-process broker speaking the Kafka
// protocol, with one topic.
func startKafka(topic string, partitions int) (*kfake.Cluster, []string, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), topic))
	if err != nil {
		return nil, nil, fmt.Errorf("start kafka: %w", err)
	}
	return c, c.ListenAddrs(), nil
}

// producer writes records round-robin over a topic's partitions, their
// values encoded by enc, and counts what each partition got.
type producer struct {
	brokers    []string
	topic      string
	partitions int
	enc        *encoder

	mu       sync.Mutex
	produced map[int]int64
}

func newProducer(brokers []string, topic string, partitions int, enc *encoder) *producer {
	return &producer{brokers: brokers, topic: topic, partitions: partitions, enc: enc, produced: map[int]int64{}}
}

// run produces n records, at rate per second when rate > 0.
func (d *producer) run(ctx context.Context, n, rate int) error {
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
			value, err := d.enc.encode(int64(j), time.Now())
			if err != nil {
				return fmt.Errorf("producer: %w", err)
			}
			rs = append(rs, &kgo.Record{
				Topic:     d.topic,
				Partition: int32(j % d.partitions),
				Key:       fmt.Appendf(nil, "k-%d", j),
				Value:     value,
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

func (d *producer) counts() map[int]int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[int]int64, len(d.produced))
	for p, n := range d.produced {
		out[p] = n
	}
	return out
}

func (d *producer) total() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for _, v := range d.produced {
		n += v
	}
	return n
}
