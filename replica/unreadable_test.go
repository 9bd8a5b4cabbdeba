package replica_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/netproxy"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// countSink counts how often each record (partition, offset) was written.
type countSink struct {
	mu      sync.Mutex
	written map[[2]int64]int
}

func (s *countSink) Write(_ context.Context, b *sinks.Block) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rec := range b.Records {
		s.written[[2]int64{int64(b.Partition), rec.Offset}]++
	}
	return nil
}

func (s *countSink) Close() error { return nil }

// have reports whether every offset below next[p] of every partition p was
// written.
func (s *countSink) have(next map[int]int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, n := range next {
		for o := range n {
			if s.written[[2]int64{int64(p), o}] == 0 {
				return false
			}
		}
	}
	return true
}

// TestOnlyReplicasThatReadHoldPartitions: a replica that cannot reach Kafka
// holds no partitions and is not ready, beside one that reads them all;
// one whose path to Kafka is cut mid-run gives its partitions to the one
// that reads within KafkaDownAfter + MetadataInterval, and takes its share
// again when the path is back; with every replica cut, nothing moves and
// each says why. Every record produced meanwhile reaches the sink.
// Without the member key's verdict, the plan gave the unreachable replica
// half the partitions, which nobody read.
func TestOnlyReplicasThatReadHoldPartitions(t *testing.T) {
	const parts, topic, group = 8, "reach", "reach"
	cli, cluster := etcdAndKfake(t, topic, parts)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	next := map[int]int64{}
	produce := func(n int) {
		t.Helper()
		var rs []*kgo.Record
		for p := range parts {
			for range n {
				rs = append(rs, &kgo.Record{Partition: int32(p), Value: fmt.Appendf(nil, "%d-%d", p, next[p])})
				next[p]++
			}
		}
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	sink := &countSink{written: map[[2]int64]int{}}
	const down = 2 * time.Second
	start := func(id string, brokers []string, dial *netproxy.Dialer) *replica.Replica {
		t.Helper()
		k := kafkaconf.Config{Brokers: brokers, FetchMaxWait: 100 * time.Millisecond, RetryBackoffMax: 200 * time.Millisecond,
			RequestTimeout: 2 * time.Second, DialTimeout: time.Second}
		if dial != nil {
			k.Dial = dial.DialContext
		}
		r, err := replica.New(replica.Config{Group: group, ReplicaID: id, Topics: []string{topic}, Kafka: k,
			LeaseTTL: 2 * time.Second, RebalanceDelay: 10 * time.Millisecond, MetadataInterval: 300 * time.Millisecond,
			KafkaDownAfter: down, ShutdownTimeout: 5 * time.Second}, cli, sink, nil)
		if err != nil {
			t.Fatal(err)
		}
		stop := runReplica(ctx, r)
		t.Cleanup(func() { _ = stop(); _ = r.Close() })
		return r
	}
	coord, err := coordinator.New(cli, group)
	if err != nil {
		t.Fatal(err)
	}
	owners := func() map[sinks.Partition]string {
		snap, err := coord.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[sinks.Partition]string{}
		for p, c := range snap.Claims {
			out[p] = c.Replica
		}
		return out
	}
	member := func(id string) coordinator.Member {
		ms, err := coord.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.ID == id {
				return m
			}
		}
		t.Fatalf("member %s not registered", id)
		return coordinator.Member{}
	}
	// await polls cond until it holds, for at most within.
	await := func(what string, within time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for !cond() {
			if time.Now().After(deadline) || ctx.Err() != nil {
				t.Fatalf("%s: not within %s; claims %v", what, within, owners())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	holds := func(r *replica.Replica, n int) func() bool {
		return func() bool { return len(r.Owned()) == n }
	}
	// The bound documented on Config.KafkaDownAfter, with room for a
	// block in flight and for the plan to settle.
	bound := down + 300*time.Millisecond + 5*time.Second

	produce(20)
	aDial := netproxy.NewDialer()
	a := start("a", cluster.ListenAddrs(), aDial)
	await("a holds every partition", 10*time.Second, holds(a, parts))

	// 1. A replica whose --brokers names nothing: it joins saying it
	// cannot read, and the plan gives it nothing.
	bad := start("bad", []string{"127.0.0.1:1"}, nil)
	await("the bad replica says it cannot read", 10*time.Second, func() bool { return !bad.Kafka().Reads })
	if why := member("bad").Unreadable; !strings.Contains(why, "127.0.0.1:1") {
		t.Errorf("member key of bad says %q: want why, naming its brokers", why)
	}
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if n := len(bad.Owned()); n != 0 {
			t.Fatalf("a replica that cannot reach Kafka holds %d partitions", n)
		}
		if n := len(a.Owned()); n != parts {
			t.Fatalf("the replica that reads holds %d of %d partitions beside one that cannot read", n, parts)
		}
	}
	if err := bad.Ready(ctx); err == nil || !strings.Contains(err.Error(), "cannot read Kafka") {
		t.Errorf("Ready of a replica that cannot reach Kafka: %v", err)
	}
	if err := a.Ready(ctx); err != nil {
		t.Errorf("Ready of the replica that reads: %v", err)
	}

	// 2. A replica that reads takes its share; cut off, it gives it to
	// the one that reads; back, it takes its share again.
	cDial := netproxy.NewDialer()
	c := start("c", cluster.ListenAddrs(), cDial)
	await("c takes its share", 15*time.Second, func() bool { return len(c.Owned()) == parts/2 && len(a.Owned()) == parts/2 })
	produce(20)
	await("records reach the sink", 20*time.Second, func() bool { return sink.have(next) })
	cDial.Cut()
	cutAt := time.Now()
	await("a holds every partition once c is cut off", bound, holds(a, parts))
	await("c releases what it held", bound-time.Since(cutAt)+time.Second, holds(c, 0))
	t.Logf("partitions handed over %s after the cut", time.Since(cutAt).Round(100*time.Millisecond))
	if k := c.Kafka(); k.Reads || !strings.Contains(k.Why, "answered") {
		t.Errorf("c cut off: Kafka() = %+v", k)
	}
	if err := c.Ready(ctx); err == nil {
		t.Error("c cut off from Kafka is ready")
	}
	produce(20)
	await("a reads c's partitions", 20*time.Second, func() bool { return sink.have(next) })
	cDial.Restore()
	await("c takes its share again", bound, func() bool { return len(c.Owned()) == parts/2 && len(a.Owned()) == parts/2 })
	if err := c.Ready(ctx); err != nil {
		t.Errorf("c back: %v", err)
	}

	// 3. Every replica cut off: nothing moves, and each says why.
	before := owners()
	aDial.Cut()
	cDial.Cut()
	await("both say they cannot read", 3*bound, func() bool { return !a.Kafka().Reads && !c.Kafka().Reads })
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if now := owners(); !maps.Equal(now, before) {
			t.Fatalf("with every replica cut off the claims moved: %v, were %v", now, before)
		}
	}
	for _, r := range []*replica.Replica{a, c} {
		if err := r.Ready(ctx); err == nil || !strings.Contains(err.Error(), "cannot read Kafka") {
			t.Errorf("%s cut off: Ready %v", r.ID(), err)
		}
	}
	aDial.Restore()
	cDial.Restore()
	await("both read again", 3*bound, func() bool { return a.Kafka().Reads && c.Kafka().Reads })
	produce(20)
	await("every record reaches the sink", 30*time.Second, func() bool { return sink.have(next) })
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for rec, n := range sink.written {
		if n != 1 {
			t.Errorf("partition %d offset %d written %d times: every hand-over is at a block boundary", rec[0], rec[1], n)
		}
	}
}
