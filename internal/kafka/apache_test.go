package kafka

import (
	"context"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// The client against Apache Kafka itself: one 3-node cluster for the
// package, started by the first test that needs it and stopped by TestMain,
// each test on topics of its own and leaving the cluster healthy.

// reauthAfter is the SASL listener's connections.max.reauth.ms.
const reauthAfter = 10 * time.Second

var apache struct {
	once sync.Once
	k    *harness.Kafka
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if apache.k != nil {
		apache.k.Close()
	}
	os.Exit(code)
}

// apacheKafka returns the package's 3-node cluster, made healthy again
// when t ends.
func apacheKafka(t *testing.T) *harness.Kafka {
	t.Helper()
	harness.RequireApacheKafka(t)
	apache.once.Do(func() {
		apache.k, apache.err = harness.NewApacheKafka(harness.Nodes(3),
			harness.SASLSCRAMOverTLS(harness.SCRAMConfig{ReauthAfter: reauthAfter}),
			// Quotas measured over 2 s, not 11: a test of one reads
			// a few times the quota, not eleven.
			harness.BrokerProperties("quota.window.num", "2", "quota.window.size.seconds", "1",
				// The cleaner looks for work every half second, not 15.
				"log.cleaner.backoff.ms", "500"))
	})
	if apache.err != nil {
		t.Fatalf("apache kafka: %v", apache.err)
	}
	t.Cleanup(func() { apache.k.AwaitHealthy(t) })
	return apache.k
}

// apacheConfig is a consumer's configuration for k, counting its requests.
func apacheConfig(k *harness.Kafka) (Config, *harness.RequestCounter) {
	rc := harness.NewRequestCounter(nil)
	return Config{
		Brokers:         k.Brokers(),
		Dial:            rc.Dial,
		FetchMaxWait:    200 * time.Millisecond,
		MetadataTTL:     time.Second,
		RetryBackoffMin: 20 * time.Millisecond,
		RetryBackoffMax: 500 * time.Millisecond,
	}, rc
}

// refOf is a delivered record as the reference consumer prints it.
func refOf(partition int, r sinks.Record) harness.RefRecord {
	rr := harness.RefRecord{Partition: int32(partition), Offset: r.Offset, KeyLen: -1, ValueLen: -1}
	if r.Key != nil {
		rr.KeyLen = len(r.Key)
	}
	if r.Value != nil {
		rr.ValueLen, rr.ValueCRC = len(r.Value), crc32.ChecksumIEEE(r.Value)
	}
	return rr
}

// diffRefs describes how got differs from want, "" when it does not.
func diffRefs(got, want []harness.RefRecord) string {
	if slices.Equal(got, want) {
		return ""
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("%d records, want %d; first difference at %d: %+v, want %+v", len(got), len(want), i, got[i], want[i])
		}
	}
	return fmt.Sprintf("%d records, want %d", len(got), len(want))
}

// Test 1: read_committed with Kafka's own transactional producer, every
// other transaction aborted, read with small fetches from the start and
// from every abort marker (a response that starts at an abort marker is
// where the producer's next committed transaction used to be dropped): what
// is delivered from each start equals Kafka's Java consumer's
// read_committed output.
func TestApacheReadCommittedFromEveryMarker(t *testing.T) {
	k := apacheKafka(t)
	const topic = "txn-markers"
	k.CreateTopic(t, topic, 1)
	committed := k.JavaProduce(t, harness.JavaProduceOptions{Topic: topic, Records: 300, Transactional: true, TxnSize: 5, AbortEvery: 2})
	want := k.ReferenceConsume(t, topic, "read_committed")
	if len(want) != committed[0] || len(want) == 0 {
		t.Fatalf("the reference delivered %d records, the producer committed %d", len(want), committed[0])
	}
	all := k.ReferenceConsume(t, topic, "read_uncommitted")
	end := k.EndOffsets(t, topic)[0]
	// The offsets of no data record are the markers; those after records
	// read_committed does not deliver end aborted transactions.
	data, kept := map[int64]bool{}, map[int64]bool{}
	for _, r := range all {
		data[r.Offset] = true
	}
	for _, r := range want {
		kept[r.Offset] = true
	}
	var markers []int64
	for o := int64(1); o < end; o++ {
		if !data[o] && data[o-1] && !kept[o-1] {
			markers = append(markers, o)
		}
	}
	if len(markers) < 25 {
		t.Fatalf("%d abort markers in [0, %d), want one per aborted transaction", len(markers), end)
	}
	// Responses of a few batches from every abort marker; of one batch
	// and of all from a few.
	for _, maxBytes := range []int{1500, 1, 1 << 20} {
		cfg, _ := apacheConfig(k)
		cfg.FetchMaxPartitionBytes = maxBytes
		c := openConsumer(t, cfg)
		cur := openCursor(t, c, topic, 0, 0)
		starts := append([]int64{0}, markers...)
		if maxBytes != 1500 {
			starts = starts[:4]
		}
		for _, from := range starts {
			cur.SeekTo(from)
			got, last := drain(t, cur, end)
			if last.Next != end {
				t.Fatalf("from %d, %d bytes a fetch: drained to %d, want %d", from, maxBytes, last.Next, end)
			}
			var refs []harness.RefRecord
			for _, r := range got {
				refs = append(refs, refOf(0, r))
			}
			var w []harness.RefRecord
			for _, r := range want {
				if r.Offset >= from {
					w = append(w, r)
				}
			}
			if d := diffRefs(refs, w); d != "" {
				t.Fatalf("read_committed from %d, %d bytes a fetch: %s", from, maxBytes, d)
			}
		}
		c.Close()
	}
}

// produceLoop produces to every partition of topic until stop is closed,
// one record a millisecond or so, and returns how many it acknowledged on
// each, once stopped. A test that ends before stops it too.
func produceLoop(t *testing.T, k *harness.Kafka, topic string, parts int, stop <-chan struct{}) func() map[int32]int64 {
	t.Helper()
	ended := make(chan struct{})
	t.Cleanup(func() { close(ended) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.RecordRetries(1000), kgo.RequestTimeoutOverhead(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	acked := make([]int64, parts)
	var mu sync.Mutex
	var failed error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-ended:
				cl.Close()
				return
			default:
			}
			p := i % parts
			cl.Produce(context.Background(), &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte(strconv.Itoa(i))},
				func(r *kgo.Record, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil && failed == nil {
						failed = err
					} else if err == nil {
						acked[r.Partition]++
					}
				})
			if i%parts == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	return func() map[int32]int64 {
		<-done
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cl.Flush(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
		cl.Close()
		mu.Lock()
		defer mu.Unlock()
		if failed != nil {
			t.Fatalf("produce: %v", failed)
		}
		out := map[int32]int64{}
		for p, n := range acked {
			out[int32(p)] = n
		}
		return out
	}
}

// follower reads every partition of topic with one consumer, in the
// background, checking offsets follow each other; it records when each
// partition last moved.
type follower struct {
	mu    sync.Mutex
	next  map[int]int64
	moved map[int]time.Time
	err   error
}

func follow(t *testing.T, ctx context.Context, c *Consumer, topic string, parts int) (*follower, *sync.WaitGroup) {
	f := &follower{next: map[int]int64{}, moved: map[int]time.Time{}}
	wg := eachCursor(t, c, topic, parts, func(p int, cur *Cursor) {
		for ctx.Err() == nil {
			b, err := cur.Fetch(ctx)
			if err != nil {
				if ctx.Err() == nil {
					f.fail(fmt.Errorf("partition %d: %w", p, err))
				}
				return
			}
			f.mu.Lock()
			for _, r := range b.Records {
				if want := f.next[p]; r.Offset != want {
					f.mu.Unlock()
					f.fail(fmt.Errorf("partition %d: record at %d, want %d", p, r.Offset, want))
					return
				}
				f.next[p] = r.Offset + 1
			}
			if len(b.Records) > 0 {
				f.moved[p] = time.Now()
			}
			f.mu.Unlock()
			cur.Free(b.Bytes)
		}
	})
	return f, wg
}

func (f *follower) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

// allMovedSince reports whether every partition delivered a record after t.
func (f *follower) allMovedSince(parts int, t time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p := range parts {
		if !f.moved[p].After(t) {
			return false
		}
	}
	return true
}

func (f *follower) reached(want map[int32]int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p, n := range want {
		if f.next[int(p)] < n {
			return false
		}
	}
	return true
}

// leadersAgree reports whether every cursor is in the loop of the broker
// that leads its partition now, as the cluster tells.
func leadersAgree(t *testing.T, k *harness.Kafka, c *Consumer, topic string, parts int) bool {
	leaders := make([]int32, parts)
	for p := range parts {
		leaders[p] = k.Leader(t, topic, p)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range parts {
		cur := c.cursors[sinks.Partition{Topic: topic, Partition: p}]
		if cur == nil || cur.leader != leaders[p] {
			return false
		}
	}
	return true
}

// Test 2: a preferred-leader election and a reassignment while records
// flow: within a metadata refresh every cursor fetches from its partition's
// new leader, without a burst of requests against the old one, and every
// record arrives once, in order.
func TestApacheElectionAndReassignmentWhileRecordsFlow(t *testing.T) {
	k := apacheKafka(t)
	const topic, parts = "moving", 6
	k.CreateTopic(t, topic, parts)
	cfg, rc := apacheConfig(k)
	c := openConsumer(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	acked := produceLoop(t, k, topic, parts, stop)
	f, wg := follow(t, ctx, c, topic, parts)

	settle := func(what string) {
		t.Helper()
		start := time.Now()
		harness.Await(t, cfg.MetadataTTL+5*time.Second, "the cursors to follow "+what, func() bool {
			return leadersAgree(t, k, c, topic, parts)
		})
		t.Logf("cursors followed %s in %v", what, time.Since(start).Round(time.Millisecond))
		harness.Await(t, 30*time.Second, "every partition to move after "+what, func() bool { return f.allMovedSince(parts, start) })
	}
	// Move partition 0's leadership: its replicas in another order, then
	// the preferred leader elected.
	reps := k.Replicas(t, topic, 0)
	k.ReassignPartition(t, topic, 0, append(reps[1:], reps[0]))
	k.ElectPreferredLeaders(t, topic, 0)
	settle("an election")
	// Move a replica of partition 1 to a broker that had none... all do
	// on three nodes: reassign it to two replicas, its leader dropped.
	reps = k.Replicas(t, topic, 1)
	k.ReassignPartition(t, topic, 1, reps[1:])
	settle("a reassignment")
	k.ReassignPartition(t, topic, 1, reps)

	close(stop)
	want := acked()
	harness.Await(t, time.Minute, "every acknowledged record", func() bool { return f.reached(want) || f.err != nil })
	// Then idle: one long poll per broker per MaxWait, and no loop of
	// ListOffsets or fetches against a broker that does not lead.
	lists, fetches := rc.TotalRequests(kmsg.ListOffsets.Int16()), rc.TotalRequests(kmsg.Fetch.Int16())
	start := time.Now()
	harness.Await(t, 10*time.Second, "two seconds", func() bool { return time.Since(start) >= 2*time.Second })
	if n := rc.TotalRequests(kmsg.ListOffsets.Int16()) - lists; n > 0 {
		t.Errorf("%d ListOffsets requests while nothing was out of range", n)
	}
	perSec := float64(rc.TotalRequests(kmsg.Fetch.Int16())-fetches) / time.Since(start).Seconds()
	if limit := 2 * 3 / cfg.FetchMaxWait.Seconds(); perSec > limit {
		t.Errorf("%.0f fetch requests/s idle for %d partitions on 3 brokers, want under %.0f", perSec, parts, limit)
	}
	cancel()
	wg.Wait()
	if f.err != nil {
		t.Fatal(f.err)
	}
}

// Test 3: a partition leader SIGKILLed and started again, then a broker
// stopped silently (SIGSTOP), while records flow: reading resumes on every
// partition within the broker session timeout and a metadata refresh, no
// connection to a healthy broker is closed (none is dialled again), and
// every record arrives once, in order.
func TestApacheLeaderKilledAndBrokerPaused(t *testing.T) {
	k := apacheKafka(t)
	const topic, parts = "faults", 6
	k.CreateTopic(t, topic, parts)
	cfg, rc := apacheConfig(k)
	log := zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel))
	c, err := NewConsumer(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	acked := produceLoop(t, k, topic, parts, stop)
	f, wg := follow(t, ctx, c, topic, parts)
	harness.Await(t, 30*time.Second, "every partition to move", func() bool { return f.allMovedSince(parts, time.Time{}) })

	fault := func(what string, inject func(n *harness.KafkaNode), heal func(n *harness.KafkaNode)) {
		t.Helper()
		victim := k.Node(int(k.Leader(t, topic, 0)))
		var others []string
		for i := range k.Nodes() {
			if n := k.Node(i); n != victim {
				others = append(others, n.Addr())
			}
		}
		dials, closes := map[string]int64{}, map[string]int64{}
		for _, a := range others {
			dials[a], closes[a] = rc.Dials(a), rc.Closes(a)
		}
		start := time.Now()
		inject(victim)
		// Kafka moves the leaders once the broker's session ends (4 s in
		// the harness); records produced then must reach the consumer
		// within a metadata refresh (1 s) and the overdue check
		// (MaxWait + 2 s) of a request left with the victim.
		harness.Await(t, 30*time.Second, "Kafka to move the leaders off broker "+strconv.Itoa(int(victim.ID())), func() bool {
			for p := range parts {
				if k.Leader(t, topic, p) == victim.ID() {
					return false
				}
			}
			return true
		})
		moved := time.Now()
		fresh := produceOnce(t, others, topic, parts)
		harness.Await(t, 10*time.Second, "the records produced after "+what, func() bool { return f.reached(fresh) || f.err != nil })
		t.Logf("%s: Kafka moved the leaders after %v, the consumer read on after %v more",
			what, moved.Sub(start).Round(time.Millisecond), time.Since(moved).Round(time.Millisecond))
		heal(victim)
		// Kept: no connection to a healthy broker is closed over the
		// fault. Not a storm: the leaders moving to a broker may open the
		// connections it did not need before, one per request in flight at
		// once (the transport takes an idle connection or dials one): the
		// fetches in flight, a metadata lookup moving off the victim, the
		// validation of the moved partitions' positions against their new
		// leader (OffsetForLeaderEpoch), and one more of the kinds that
		// come unplanned (a log end asked, a lookup beside the first).
		const bound = maxInFlight + 3
		for _, a := range others {
			if n := rc.Closes(a) - closes[a]; n > 0 {
				t.Errorf("%d connections to healthy broker %s closed over %s (%d dialled)", n, a, what, rc.Dials(a)-dials[a])
			}
			if open := rc.Open(a); open > bound {
				t.Errorf("%d connections open to healthy broker %s after %s (%d dialled over it), want at most %d",
					open, a, what, rc.Dials(a)-dials[a], bound)
			}
		}
		k.AwaitHealthy(t)
	}
	fault("the leader's SIGKILL", func(n *harness.KafkaNode) { n.Kill() }, func(n *harness.KafkaNode) {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	})
	fault("a broker's SIGSTOP", func(n *harness.KafkaNode) { n.Pause() }, func(n *harness.KafkaNode) { n.Resume() })

	close(stop)
	want := acked()
	harness.Await(t, time.Minute, "every acknowledged record", func() bool { return f.reached(want) || f.err != nil })
	cancel()
	wg.Wait()
	if f.err != nil {
		t.Fatal(f.err)
	}
}

// Test 4: a compacted topic after cleaning, read from the start: what is
// delivered equals Kafka's own consumer's output, and the bytes fetched
// stay near the log's size (no probe fetches of compacted tails).
func TestApacheCompactedTopic(t *testing.T) {
	k := apacheKafka(t)
	const topic = "compacted"
	k.CreateTopic(t, topic, 1, "cleanup.policy", "compact", "segment.ms", "100",
		"min.cleanable.dirty.ratio", "0.01", "delete.retention.ms", "100", "min.compaction.lag.ms", "0")
	recs := make([]*kgo.Record, 0, 6000)
	for i := range 6000 {
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprintf("key-%03d", rand.IntN(500))), Value: []byte(fmt.Sprintf("value-%05d-%s", i, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"))})
	}
	for i := 0; i < len(recs); i += 100 {
		k.Produce(t, topic, 0, recs[i:i+100]...)
	}
	// The cleaner runs on closed segments: produce a little now and then
	// until the log is cleaned (the reference reads fewer records).
	var want []harness.RefRecord
	harness.Await(t, 2*time.Minute, "the cleaner to compact the log", func() bool {
		k.Produce(t, topic, 0, &kgo.Record{Key: []byte("tick"), Value: []byte("tick")})
		want = k.ReferenceConsume(t, topic, "read_uncommitted")
		return len(want) < len(recs)/2
	})
	end := k.EndOffsets(t, topic)[0]
	cfg, rc := apacheConfig(k)
	cfg.FetchMaxPartitionBytes = 4096 // many responses, many batch boundaries
	c := openConsumer(t, cfg)
	cur := openCursor(t, c, topic, 0, 0)
	got, _ := drain(t, cur, end)
	var refs []harness.RefRecord
	for _, r := range got {
		refs = append(refs, refOf(0, r))
	}
	want = slices.DeleteFunc(want, func(r harness.RefRecord) bool { return r.Offset >= end })
	if d := diffRefs(refs, want); d != "" {
		t.Fatalf("compacted read: %s", d)
	}
	logSize := partitionSize(t, k, topic, 0)
	fetched := c.Stats().BytesFetched
	if float64(fetched) > 1.5*float64(logSize)+float64(cfg.FetchMaxPartitionBytes) {
		t.Fatalf("fetched %d bytes of a log of %d (%d fetch requests)", fetched, logSize, rc.TotalRequests(kmsg.Fetch.Int16()))
	}
	t.Logf("%d records of %d produced; fetched %d bytes of a log of %d in %d requests", len(got), len(recs), fetched, logSize,
		rc.TotalRequests(kmsg.Fetch.Int16()))
}

// produceOnce produces a record to every partition of topic with a client of
// its own, seeded with brokers, and returns the offset after each.
func produceOnce(t *testing.T, brokers []string, topic string, parts int) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, parts)
	for p := range recs {
		recs[p] = &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte("fresh")}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce after the fault: %v", err)
	}
	out := map[int32]int64{}
	for _, r := range recs {
		out[r.Partition] = r.Offset + 1
	}
	return out
}

// partitionSize is the size of the partition's log on its leader.
func partitionSize(t *testing.T, k *harness.Kafka, topic string, partition int) int64 {
	t.Helper()
	req := kmsg.NewPtrDescribeLogDirsRequest()
	rt := kmsg.NewDescribeLogDirsRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{int32(partition)}
	req.Topics = append(req.Topics, rt)
	leader := k.Leader(t, topic, partition)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, k.Client(t).Broker(int(leader)))
	if err != nil {
		t.Fatalf("describe log dirs: %v", err)
	}
	for _, d := range resp.Dirs {
		for _, dt := range d.Topics {
			for _, dp := range dt.Partitions {
				if dt.Topic == topic && dp.Partition == int32(partition) {
					return dp.Size
				}
			}
		}
	}
	t.Fatalf("describe log dirs: no size for %s/%d", topic, partition)
	return 0
}

// Test 6: record batches of 1 to 4 MiB (lz4, zstd, incompressible) over
// many partitions on one consumer, larger than each partition's share of
// the budget: each batch comes whole, first in its response, and the bytes
// fetched stay under 1.5 times the bytes of the batches.
func TestApacheLargeBatches(t *testing.T) {
	k := apacheKafka(t)
	const topic, parts = "large", 96
	k.CreateTopic(t, topic, parts, "max.message.bytes", strconv.Itoa(8<<20))
	rng := rand.New(rand.NewPCG(7, 9))
	var total int64
	codecs := []kgo.CompressionCodec{kgo.Lz4Compression(), kgo.ZstdCompression(), kgo.NoCompression()}
	want := map[int32]int64{}
	for i, codec := range codecs {
		// One batch of each partition's records: up to 4 MiB and more.
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerBatchCompression(codec), kgo.ProducerBatchMaxBytes(6<<20), kgo.ManualFlushing(), kgo.ProducerLinger(0))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var failed error
		var mu sync.Mutex
		promise := func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && failed == nil {
				failed = err
			}
		}
		for part := i; part < parts; part += len(codecs) {
			n := (1<<20 + rng.IntN(3<<20)) / (64 << 10)
			for range n {
				v := make([]byte, 64<<10)
				for j := range v {
					v[j] = byte(rng.Uint32())
				}
				cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(part), Value: v}, promise)
				total += int64(len(v))
			}
			want[int32(part)] = int64(n)
		}
		if err := cl.Flush(ctx); err != nil || failed != nil {
			t.Fatalf("produce batches (codec %d): %v, %v", i, err, failed)
		}
		cancel()
		cl.Close()
	}
	cfg, _ := apacheConfig(k)
	c := openConsumer(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f, wg := follow(t, ctx, c, topic, parts)
	harness.Await(t, 3*time.Minute, "every batch", func() bool { return f.reached(want) || f.err != nil })
	cancel()
	wg.Wait()
	if f.err != nil {
		t.Fatal(f.err)
	}
	st := c.Stats()
	ratio := float64(st.BytesFetched) / float64(st.BytesFetched-st.BytesWasted)
	t.Logf("%d MiB of values in %d partitions: fetched %d MiB, %d MiB of it cut short; fetched/delivered %.2f, %d fetch requests",
		total>>20, parts, st.BytesFetched>>20, st.BytesWasted>>20, ratio, st.FetchRequests)
	if ratio >= 1.5 {
		t.Fatalf("bytes fetched / bytes delivered = %.2f, want under 1.5", ratio)
	}
}

// Test 7: a fetch byte-rate quota for the consumer's client id: the
// consumer honours the broker's throttles (no timeouts, no reconnects, no
// failed fetch) and reads near the quota's rate.
func TestApacheFetchQuota(t *testing.T) {
	k := apacheKafka(t)
	// One partition: a quota is enforced by each broker on its own.
	const topic, parts, quota = "quota", 1, 4 << 20
	k.CreateTopic(t, topic, parts)
	const clientID = "quota-test"
	k.SetFetchQuota(t, clientID, quota)
	defer k.SetFetchQuota(t, clientID, 0)
	want := map[int32]int64{}
	var total int64
	for p := range parts {
		recs := make([]*kgo.Record, 4800)
		for i := range recs {
			recs[i] = &kgo.Record{Value: make([]byte, 8<<10)}
			total += 8 << 10
		}
		k.Produce(t, topic, p, recs...)
		want[int32(p)] = int64(len(recs))
	}
	cfg, rc := apacheConfig(k)
	cfg.ClientID = clientID
	var warnings sync.Map
	log := zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel), zaptest.WrapOptions(zap.Hooks(func(e zapcore.Entry) error {
		if e.Level >= zapcore.WarnLevel {
			warnings.Store(e.Message, true)
		}
		return nil
	})))
	c, err := NewConsumer(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	f, wg := follow(t, ctx, c, topic, parts)
	harness.Await(t, time.Minute, "the backlog", func() bool { return f.reached(want) || f.err != nil })
	took := time.Since(start)
	cancel()
	wg.Wait()
	if f.err != nil {
		t.Fatal(f.err)
	}
	rate := float64(total) / took.Seconds()
	st := c.Stats()
	t.Logf("%d MiB in %v: %.2f MiB/s against a quota of %.2f MiB/s; throttled %v", total>>20, took.Round(time.Millisecond),
		rate/(1<<20), float64(quota)/(1<<20), st.Throttled.Round(time.Millisecond))
	warnings.Range(func(msg, _ any) bool {
		t.Errorf("logged at warn: %s", msg)
		return true
	})
	// A connection for each fetch in flight, one for metadata and
	// ListOffsets: more would be reconnections.
	for _, b := range k.Brokers() {
		if n := rc.Dials(b); n > maxInFlight+2 {
			t.Errorf("broker %s dialled %d times", b, n)
		}
	}
	if st.Throttled == 0 {
		t.Errorf("no throttle from the brokers: the quota did not bite")
	}
	if rate > 1.5*quota || rate < quota/3 {
		t.Errorf("read at %.2f MiB/s, want near the quota %.2f MiB/s", rate/(1<<20), float64(quota)/(1<<20))
	}
}

// Test 8: SASL/SCRAM over TLS with connections.max.reauth.ms: the consumer
// logs in again before each session ends and no fetch fails. The session is
// reauthAfter (10 s) and the test runs a minute; OKTEST_REAUTH_RUN (a
// duration) runs it longer.
func TestApacheSASLLoginAgain(t *testing.T) {
	k := apacheKafka(t)
	run := time.Minute
	if s := os.Getenv("OKTEST_REAUTH_RUN"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("OKTEST_REAUTH_RUN=%q: %v", s, err)
		}
		run = d
	}
	const topic, parts = "reauth", 3
	k.CreateTopic(t, topic, parts)
	cfg, _ := apacheConfig(k)
	cfg.Brokers, cfg.Dial = k.SASLAddrs(), nil
	cfg.TLS = k.TLSConfig()
	cfg.SASL = &SASL{Mechanism: SASLSCRAMSHA512, Username: harness.KafkaSCRAMUser, Password: harness.KafkaSCRAMPassword}
	var warnings sync.Map
	log := zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel), zaptest.WrapOptions(zap.Hooks(func(e zapcore.Entry) error {
		if e.Level >= zapcore.WarnLevel {
			warnings.Store(e.Message, true)
		}
		return nil
	})))
	c, err := NewConsumer(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), run+time.Minute)
	defer cancel()
	stop := make(chan struct{})
	acked := produceLoop(t, k, topic, parts, stop)
	f, wg := follow(t, ctx, c, topic, parts)
	start := time.Now()
	harness.Await(t, run+30*time.Second, fmt.Sprintf("%v of reading", run), func() bool { return time.Since(start) >= run || f.err != nil })
	close(stop)
	want := acked()
	harness.Await(t, time.Minute, "every acknowledged record", func() bool { return f.reached(want) || f.err != nil })
	cancel()
	wg.Wait()
	if f.err != nil {
		t.Fatal(f.err)
	}
	st := c.Stats()
	t.Logf("%v: %d connections, %d logins again", run, st.Logins, st.Relogins)
	warnings.Range(func(msg, _ any) bool {
		t.Errorf("logged at warn: %s", msg)
		return true
	})
	if min := int64(run/reauthAfter) - 1; st.Relogins < min {
		t.Errorf("%d logins again in %v with sessions of %v, want at least %d", st.Relogins, run, reauthAfter, min)
	}
	// Sessions are renewed on their connections: the pool opens a
	// connection now and then (one idle too long is closed), but far fewer
	// than the sessions that ended.
	if st.Logins > st.Relogins/3 {
		t.Errorf("%d connections logged in and %d logins again over %v: the consumer reconnected rather than log in again",
			st.Logins, st.Relogins, run)
	}
}

// A client of the wrong kind for a listener, TLS to PLAINTEXT or plain to
// SASL_SSL, sees Apache Kafka close the connection at once, as a stopped
// broker would (cause closed, not timeout); the other kind's request then
// tells it why (SpeaksOtherwise), and the right kind gets no such answer.
func TestApacheListenerOfTheOtherKind(t *testing.T) {
	k := apacheKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain, sasl := k.Brokers()[0], k.SASLAddrs()[0]
	for _, tc := range []struct {
		name   string
		addr   string
		tlsOn  bool
		client Config
	}{
		{"TLS client, PLAINTEXT listener", plain, true, Config{Brokers: []string{plain}, TLS: k.TLSConfig(), DialTimeout: 2 * time.Second}},
		{"plain client, SASL_SSL listener", sasl, false, Config{Brokers: []string{sasl}, DialTimeout: 2 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewClient(tc.client)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			err = c.CheckAccess(ctx, Refused)
			if err == nil {
				t.Fatal("a client of the wrong kind read metadata")
			}
			if cause := Cause(err); cause != CauseClosed {
				t.Errorf("cause %s after %s, want %s: %v", cause, time.Since(start), CauseClosed, err)
			}
			if !SpeaksOtherwise(ctx, tc.addr, tc.tlsOn, 2*time.Second) {
				t.Errorf("%s answers no client of the other kind", tc.addr)
			}
			if SpeaksOtherwise(ctx, tc.addr, !tc.tlsOn, 2*time.Second) {
				t.Errorf("%s answers a client of its own kind as one of the other", tc.addr)
			}
		})
	}
}
