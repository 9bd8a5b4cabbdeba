//go:build !nodev

package main

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
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// devEtcdReadyTimeout bounds the start of dev's etcd.
const devEtcdReadyTimeout = 30 * time.Second

// devEtcd is dev's embedded etcd. Its members reach each other through
// proxies, so that a stopped member's peer connections are cut at once, as a
// crash would, and none outlives Close (an embedded member leaves its peers'
// HTTP connections open).
type devEtcd struct {
	*localetcd.Cluster
	mu    sync.Mutex
	peers map[int]*devProxy // in front of member i's peer address
}

// startDevEtcd starts an etcd of members members (1, or 3 for the leader
// fault) in dir on free loopback ports and returns it with its members'
// client addresses (host:port). Only `dev` runs an embedded etcd; `run`
// always talks to a real cluster.
func startDevEtcd(dir string, members int) (*devEtcd, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), devEtcdReadyTimeout)
	defer cancel()
	e := &devEtcd{peers: map[int]*devProxy{}}
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
func (e *devEtcd) advertise(i int, client, peer string) (string, string, error) {
	p, err := newDevProxy(peer)
	if err != nil {
		return "", "", fmt.Errorf("peer proxy of member %d: %w", i, err)
	}
	e.mu.Lock()
	old := e.peers[i]
	e.peers[i] = p
	e.mu.Unlock()
	if old != nil {
		old.close()
	}
	return client, p.addr(), nil
}

// stop crashes member i: its peers' connections to it are cut with it.
func (e *devEtcd) stop(i int) {
	e.mu.Lock()
	p := e.peers[i]
	e.mu.Unlock()
	p.cut(true)
	e.Stop(i)
}

// restart starts member i again and waits until it is ready.
func (e *devEtcd) restart(ctx context.Context, i int) error {
	if err := e.Restart(ctx, i); err != nil {
		return err
	}
	e.mu.Lock()
	e.peers[i].restore()
	e.mu.Unlock()
	return e.WaitReady(ctx, i)
}

// close stops every member, then their proxies.
func (e *devEtcd) close() {
	e.Cluster.Close()
	e.closePeers()
}

func (e *devEtcd) closePeers() {
	e.mu.Lock()
	peers := e.peers
	e.peers = map[int]*devProxy{}
	e.mu.Unlock()
	for _, p := range peers {
		p.close()
	}
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
// tell lost records from duplicates whatever the sink. It is a sinks.Wrapper:
// the inner sink's side upgrades (Resumer, Pinger, DeadLetterCounter) stay
// visible through sinks.As, and its WriteBlocks keeps the inner sink's
// batching.
type recorder struct {
	inner     sinks.Sink
	mu        sync.Mutex
	seen      map[int]map[int64]int // partition → offset → writes
	distinctN int64
	writes    int64
}

func newRecorder(s sinks.Sink) *recorder { return &recorder{inner: s, seen: map[int]map[int64]int{}} }

// Unwrap returns the recorded sink (sinks.Wrapper).
func (r *recorder) Unwrap() sinks.Sink { return r.inner }

// Write writes b to the inner sink and records it once it is durable.
func (r *recorder) Write(ctx context.Context, b *sinks.Block) error {
	if err := r.inner.Write(ctx, b); err != nil {
		return err
	}
	r.record(b)
	return nil
}

// WriteBlocks (sinks.BatchWriter) writes blocks through the inner sink's own
// WriteBlocks if it has one, and records those that became durable.
func (r *recorder) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	errs := sinks.WriteBlocks(ctx, r.inner, blocks)
	for i, err := range errs {
		if err == nil {
			r.record(blocks[i])
		}
	}
	return errs
}

// Close closes the inner sink.
func (r *recorder) Close() error { return r.inner.Close() }

func (r *recorder) record(b *sinks.Block) {
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
}

// tally compares what was written with what was produced: distinct offsets
// delivered, offsets never delivered, and extra copies.
func (r *recorder) tally(topic string, produced map[int]int64) verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	var v verdict
	for _, p := range sortedKeys(produced) {
		for off := int64(0); off < produced[p]; off++ {
			v.note(topic, p, off, r.seen[p][off])
		}
	}
	return v
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
