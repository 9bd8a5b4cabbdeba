package replica

import (
	"context"
	"errors"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// kafkaGroupOffsets reads the offsets Kafka holds for group on topic with
// an OffsetFetch, by partition.
func kafkaGroupOffsets(t *testing.T, cl *kgo.Client, group, topic string) map[int]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	rt.Partitions = []int32{0, 1, 2, 3}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("offset fetch of group %s: %v", group, err)
	}
	out := map[int]int64{}
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if p.ErrorCode != 0 {
				t.Fatalf("offset fetch of %s/%d: error code %d", rt.Topic, p.Partition, p.ErrorCode)
			}
			if p.Offset >= 0 {
				out[int(p.Partition)] = p.Offset
			}
		}
	}
	return out
}

// fakeLags is a settable lag source.
type fakeLags struct {
	mu   sync.Mutex
	lags []PartitionLag
}

func (f *fakeLags) set(committed map[int]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lags = nil
	for p, c := range committed {
		f.lags = append(f.lags, PartitionLag{Partition: sinks.Partition{Topic: "t", Partition: p}, Committed: c, LogEnd: -1})
	}
}

func (f *fakeLags) get() []PartitionLag {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]PartitionLag(nil), f.lags...)
}

func noOffsets(context.Context) (map[sinks.Partition]coordinator.Offsets, error) {
	return nil, nil
}

func TestMirrorSyncCommitsOwnedOffsets(t *testing.T) {
	k := harness.StartKafka(t, harness.SeedTopics(4, "t"))
	lags := &fakeLags{}
	m := newMirror("orders", "r1", kafkaconf.Config{Brokers: k.Brokers()}, []string{"t"}, lags.get, noOffsets, nil)
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Partition 1 has not found its resume point yet: 0 is not copied.
	lags.set(map[int]int64{0: 10, 1: 0, 2: 25})
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := kafkaGroupOffsets(t, k.Client(t), "orders", "t"), map[int]int64{0: 10, 2: 25}; !maps.Equal(got, want) {
		t.Fatalf("kafka holds %v, want %v", got, want)
	}
	lags.set(map[int]int64{0: 12, 1: 3})
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := kafkaGroupOffsets(t, k.Client(t), "orders", "t"), map[int]int64{0: 12, 1: 3, 2: 25}; !maps.Equal(got, want) {
		t.Fatalf("kafka holds %v, want %v", got, want)
	}
	if m.Commits() != 2 || m.Failures() != 0 {
		t.Errorf("commits %d failures %d, want 2 and 0", m.Commits(), m.Failures())
	}
	// Nothing owned: no request, no failure.
	lags.set(nil)
	if err := m.Sync(ctx); err != nil || m.Commits() != 2 {
		t.Errorf("sync of nothing: %v, %d commits", err, m.Commits())
	}
}

func TestMirrorRunSyncsEveryInterval(t *testing.T) {
	k := harness.StartKafka(t, harness.SeedTopics(1, "t"))
	lags := &fakeLags{}
	lags.set(map[int]int64{0: 4})
	m := newMirror("orders", "r1", kafkaconf.Config{Brokers: k.Brokers()}, []string{"t"}, lags.get, noOffsets, nil,
		WithMirrorInterval(20*time.Millisecond))
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for m.Commits() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d passes in 20s at a 20ms interval", m.Commits())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := kafkaGroupOffsets(t, k.Client(t), "orders", "t"); got[0] != 4 {
		t.Fatalf("kafka holds %v, want 0:4", got)
	}
}

func TestMirrorFlushCopiesEtcdOffsets(t *testing.T) {
	k := harness.StartKafka(t, harness.SeedTopics(4, "t"))
	lags := &fakeLags{}
	now := time.Now().UTC()
	etcd := map[sinks.Partition]coordinator.Offsets{}
	offsets := func(context.Context) (map[sinks.Partition]coordinator.Offsets, error) { return etcd, nil }
	m := newMirror("orders", "r1", kafkaconf.Config{Brokers: k.Brokers()}, []string{"t"}, lags.get, offsets, nil)
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	lags.set(map[int]int64{0: 10})
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	p := func(n int) sinks.Partition { return sinks.Partition{Topic: "t", Partition: n} }
	etcd[p(0)] = coordinator.Offsets{Next: 40, Replica: "other", At: now.Add(time.Second)} // copied before: etcd's value
	etcd[p(1)] = coordinator.Offsets{Next: 5, Replica: "r1", At: now.Add(time.Second)}     // committed by r1 since the start
	etcd[p(2)] = coordinator.Offsets{Next: 7, Replica: "r1", At: now.Add(-time.Hour)}      // by r1, before this run
	etcd[p(3)] = coordinator.Offsets{Next: 9, Replica: "other", At: now.Add(time.Second)}  // never ours
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := kafkaGroupOffsets(t, k.Client(t), "orders", "t"), map[int]int64{0: 40, 1: 5}; !maps.Equal(got, want) {
		t.Fatalf("kafka holds %v after the flush, want %v", got, want)
	}
}

func TestMirrorFailureIsCountedAndLoggedOnce(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	lags := &fakeLags{}
	lags.set(map[int]int64{0: 10})
	readErr := errors.New("etcd unreachable")
	offsets := func(context.Context) (map[sinks.Partition]coordinator.Offsets, error) { return nil, readErr }
	// Port 1 on loopback: nothing listens, connecting is refused at once.
	m := newMirror("orders", "r1", kafkaconf.Config{Brokers: []string{"127.0.0.1:1"}, RetryBackoffMax: 10 * time.Millisecond},
		[]string{"t"}, lags.get, offsets, zap.New(core))
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for i := 0; i < 2; i++ {
		if err := m.Sync(ctx); err == nil {
			t.Fatal("sync to an unreachable kafka succeeded")
		}
	}
	if err := m.Flush(ctx); !errors.Is(err, readErr) {
		t.Fatalf("flush with etcd unreadable: %v, want %v", err, readErr)
	}
	if m.Failures() != 3 || m.Commits() != 0 {
		t.Errorf("failures %d commits %d, want 3 and 0", m.Failures(), m.Commits())
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
		t.Errorf("%d warnings for one run of failures, want 1: %v", n, logs.All())
	}
	if n := logs.FilterLevelExact(zapcore.DebugLevel).Len(); n != 2 {
		t.Errorf("%d debug lines for the repeated failures, want 2", n)
	}
}

// silentBroker accepts connections and reads them, never answering: a
// request to it stays in flight until its context ends.
func silentBroker(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case got <- struct{}{}:
			default:
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), got
}

// A pass cut short because its run stopped is not a failure; one that ran
// out of time is. Alerts read the failures counter, so a clean shutdown
// must leave it at 0.
func TestMirrorPassStoppedByItsRunIsNotAFailure(t *testing.T) {
	addr, accepted := silentBroker(t)
	lags := &fakeLags{}
	lags.set(map[int]int64{0: 10})
	m := newMirror("orders", "r1", kafkaconf.Config{Brokers: []string{addr}, RetryBackoffMax: 10 * time.Millisecond},
		[]string{"t"}, lags.get, noOffsets, zap.NewNop(), WithMirrorInterval(10*time.Millisecond))
	defer m.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	select {
	case <-accepted: // a pass is in flight, waiting on the broker
	case <-time.After(10 * time.Second):
		t.Fatal("the mirror never connected to the broker")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if m.Failures() != 0 || m.Commits() != 0 {
		t.Errorf("after a stop in flight: failures %d commits %d, want 0 and 0", m.Failures(), m.Commits())
	}

	tctx, tcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer tcancel()
	if err := m.Sync(tctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("sync to a silent broker: %v, want the deadline", err)
	}
	if m.Failures() != 1 {
		t.Errorf("a pass out of time counted %d failures, want 1", m.Failures())
	}
}
