package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// reader is what drain needs: a Fetcher or a Cursor.
type reader interface {
	Fetch(ctx context.Context) (PolledBatch, error)
	Offset() int64
}

func openConsumer(t testing.TB, cfg Config) *Consumer {
	t.Helper()
	c, err := NewConsumer(cfg, zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel)))
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func openCursor(t testing.TB, c *Consumer, topic string, partition int, at int64) *Cursor {
	t.Helper()
	cur, err := c.Open(topic, partition)
	if err != nil {
		t.Fatalf("Open %s/%d: %v", topic, partition, err)
	}
	cur.SeekTo(at)
	return cur
}

// numbered is the value of record i of partition p that produceNumbered
// writes, but for its padding.
func numbered(p, i int) string { return fmt.Sprintf("p%03d-%04d", p, i) }

// produceNumbered produces perPart records to each of parts partitions of
// topic, batch records a produce call: numbered(p, i) and pad.
func produceNumbered(t testing.TB, k *harness.Kafka, topic string, parts, perPart, batch int, pad string) {
	t.Helper()
	for p := range parts {
		for from := 0; from < perPart; from += batch {
			vals := make([]string, min(batch, perPart-from))
			for i := range vals {
				vals[i] = numbered(p, from+i) + pad
			}
			k.ProduceValues(t, topic, p, vals...)
		}
	}
}

// countFetches counts the fetch requests the cluster receives.
func countFetches(k *harness.Kafka) *atomic.Int64 {
	var n atomic.Int64
	k.Cluster().ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster().KeepControl()
		n.Add(1)
		return nil, nil, false
	})
	return &n
}

// Partitions spread over three brokers, each drained by its own cursor
// while a leader moves: everything arrives, in order, and the requests go
// one per broker round trip, not one per partition.
func TestConsumerDrainsAcrossBrokers(t *testing.T) {
	const parts, perPart = 12, 300
	k := harness.StartKafka(t, harness.NumBrokers(3))
	k.CreateTopic(t, "spread", parts)
	produceNumbered(t, k, "spread", parts, perPart, 100, "")
	cfg := testFetchConfig(k)
	c := openConsumer(t, cfg)
	var wg sync.WaitGroup
	for p := range parts {
		cur := openCursor(t, c, "spread", p, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, _ := drain(t, cur, perPart)
			for i, r := range got {
				if want := numbered(p, i); string(r.Value) != want {
					t.Errorf("partition %d record %d: %q, want %q", p, i, r.Value, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := c.Stats().FetchRequests; n == 0 || n > 40 {
		t.Errorf("%d fetch requests for %d partitions on 3 brokers", n, parts)
	}
}

// At idle the consumer sends about one fetch per broker per MaxWait,
// whatever the number of partitions.
func TestConsumerIdleCost(t *testing.T) {
	k := harness.StartKafka(t, harness.NumBrokers(2))
	k.CreateTopic(t, "idle", 200)
	cfg := testFetchConfig(k)
	cfg.FetchMaxWait = 100 * time.Millisecond
	c := openConsumer(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var empties atomic.Int64
	for p := range 200 {
		cur := openCursor(t, c, "idle", p, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				b, err := cur.Fetch(ctx)
				if err != nil {
					return
				}
				if b.Next == b.From {
					empties.Add(1)
				}
			}
		}()
	}
	harness.Await(t, 10*time.Second, "every cursor polled once", func() bool { return empties.Load() >= 200 })
	before, start := c.Stats().FetchRequests, time.Now()
	harness.Await(t, 10*time.Second, "a second of idling", func() bool { return time.Since(start) >= time.Second })
	n := c.Stats().FetchRequests - before
	perSec := float64(n) / time.Since(start).Seconds()
	cancel()
	wg.Wait()
	// Two brokers, a long poll of 100ms each: about 20 a second.
	if perSec > 40 {
		t.Fatalf("%.0f fetch requests/s for 200 idle partitions on 2 brokers (MaxWait 100ms): want about 20", perSec)
	}
	t.Logf("%.1f fetch requests/s idle", perSec)
}

// Leaders move while the cursors read: each follows its partition to the
// new leader and nothing is lost or repeated.
func TestConsumerFollowsLeaderMoves(t *testing.T) {
	const parts = 6
	k := harness.StartKafka(t, harness.NumBrokers(3))
	k.CreateTopic(t, "moving", parts)
	produce := func(round int) {
		for p := range parts {
			vals := make([]string, 50)
			for i := range vals {
				vals[i] = fmt.Sprintf("%d-%02d", round, i)
			}
			k.ProduceValues(t, "moving", p, vals...)
		}
	}
	c := openConsumer(t, testFetchConfig(k))
	curs := make([]*Cursor, parts)
	for p := range parts {
		curs[p] = openCursor(t, c, "moving", p, 0)
	}
	for round := range 4 {
		produce(round)
		for p, cur := range curs {
			got, _ := drain(t, cur, int64(50*(round+1)))
			if len(got) != 50 || string(got[0].Value) != fmt.Sprintf("%d-00", round) {
				t.Fatalf("round %d partition %d: %d records from %q", round, p, len(got), got[0].Value)
			}
		}
		for p := range parts {
			leader := k.Cluster().LeaderFor("moving", int32(p))
			if err := k.Cluster().MoveTopicPartition("moving", int32(p), (leader+1)%3); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Start offsets of many partitions on several brokers: one ListOffsets
// request per broker, each partition's log start or log end by the policy.
func TestStartOffsetsOneRequestPerBroker(t *testing.T) {
	const parts = 30
	k := harness.StartKafka(t, harness.NumBrokers(3))
	k.CreateTopic(t, "starts", parts)
	for p := range parts {
		vals := make([]string, p+1)
		for i := range vals {
			vals[i] = "v"
		}
		k.ProduceValues(t, "starts", p, vals...)
		k.DeleteRecords(t, "starts", p, int64(p/2))
	}
	var lists atomic.Int64
	k.Cluster().ControlKey(kmsg.ListOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster().KeepControl()
		lists.Add(1)
		return nil, nil, false
	})
	tps := make([]sinks.Partition, parts)
	for p := range tps {
		tps[p] = sinks.Partition{Topic: "starts", Partition: p}
	}
	for _, policy := range []StartPolicy{StartEarliest, StartLatest} {
		cfg := testFetchConfig(k)
		cfg.StartPolicy = policy
		c := openConsumer(t, cfg)
		before := lists.Load()
		got, err := c.StartOffsets(context.Background(), tps)
		if err != nil {
			t.Fatal(err)
		}
		for p := range parts {
			want := int64(p / 2) // the log start
			if policy == StartLatest {
				want = int64(p + 1)
			}
			if got[tps[p]] != want {
				t.Fatalf("%s start of partition %d: %d, want %d", policy, p, got[tps[p]], want)
			}
		}
		if n := lists.Load() - before; n != 3 {
			t.Fatalf("%d ListOffsets requests for %d partitions on 3 brokers, want 3", n, parts)
		}
	}
}

// Next waits past MaxWait for records, and returns at once on Wake.
func TestCursorNextWaitsForRecordsOrWake(t *testing.T) {
	k := harness.StartKafka(t, harness.SeedTopics(1, "quiet"))
	cfg := testFetchConfig(k) // MaxWait 100ms
	c := openConsumer(t, cfg)
	cur := openCursor(t, c, "quiet", 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan PolledBatch, 1)
	go func() {
		b, err := cur.Next(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	start := time.Now()
	harness.Await(t, 5*time.Second, "three MaxWaits", func() bool { return time.Since(start) > 3*cfg.FetchMaxWait })
	select {
	case b := <-got:
		t.Fatalf("Next returned %+v on an idle partition before records or Wake", b)
	default:
	}
	cur.Wake()
	if b := <-got; b.Next != b.From {
		t.Fatalf("Next after Wake returned records [%d, %d)", b.From, b.Next)
	}
	go func() {
		b, err := cur.Next(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	k.ProduceValues(t, "quiet", 0, "a", "b")
	if b := <-got; len(b.Records) != 2 {
		t.Fatalf("Next returned %d records, want the 2 produced", len(b.Records))
	}
}

// Bytes freed by one broker's partitions wake another broker's loop that
// found the budget used up.
func TestBudgetFreedWakesOtherBrokers(t *testing.T) {
	k := harness.StartKafka(t, harness.NumBrokers(2))
	k.CreateTopic(t, "two", 2)
	if a, b := k.Cluster().LeaderFor("two", 0), k.Cluster().LeaderFor("two", 1); a == b {
		if err := k.Cluster().MoveTopicPartition("two", 1, (a+1)%2); err != nil {
			t.Fatal(err)
		}
	}
	k.ProduceValues(t, "two", 0, strings.Repeat("x", 100<<10)) // larger than the budget
	cfg := testFetchConfig(k)
	cfg.MaxBufferBytes = 64 << 10
	c := openConsumer(t, cfg)
	big := openCursor(t, c, "two", 0, 0)
	other := openCursor(t, c, "two", 1, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := big.Next(ctx)
	if err != nil || len(b.Records) != 1 {
		t.Fatalf("the large record: %d records, %v", len(b.Records), err)
	}
	harness.Await(t, 5*time.Second, "the budget used up", func() bool { return c.Stats().BytesHeld >= int64(cfg.MaxBufferBytes) })
	// Partition 1's long poll, sent before, ends empty; its loop then
	// finds no budget to fetch with.
	used := time.Now()
	harness.Await(t, 5*time.Second, "partition 1's poll over", func() bool { return time.Since(used) > 2*cfg.FetchMaxWait })
	k.ProduceValues(t, "two", 1, "small")
	got := make(chan PolledBatch, 1)
	go func() {
		b, err := other.Next(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	select {
	case b := <-got:
		t.Fatalf("partition 1 fetched %d records while the budget was used up", len(b.Records))
	case <-time.After(3 * cfg.FetchMaxWait):
	}
	big.Free(b.Bytes)
	select {
	case b := <-got:
		if len(b.Records) != 1 {
			t.Fatalf("partition 1 got %d records, want 1", len(b.Records))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("partition 1 was not fetched after the budget was freed")
	}
}

// Idle partitions are all in the long poll, whatever their count against
// the request's bound (16 partitions of 1 MiB in 16 MiB by default): a
// record produced to any of them comes within a long poll or two, not
// when a window of 16 comes round to its partition.
func TestConsumerIdlePartitionsShareOneLongPoll(t *testing.T) {
	const parts = 200
	k := harness.StartKafka(t)
	k.CreateTopic(t, "many", parts)
	cfg := testFetchConfig(k)
	cfg.FetchMaxPartitionBytes, cfg.FetchMaxBytes = DefaultFetchMaxPartitionBytes, DefaultFetchMaxBytes
	cfg.FetchMaxWait = 200 * time.Millisecond
	c := openConsumer(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var empties atomic.Int64
	got := make([]atomic.Int64, parts) // when a record came, in unix nanoseconds
	for p := range parts {
		cur := openCursor(t, c, "many", p, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				b, err := cur.Fetch(ctx)
				if err != nil {
					return
				}
				if b.Next == b.From {
					empties.Add(1)
				} else {
					got[p].CompareAndSwap(0, time.Now().UnixNano())
				}
				cur.Free(b.Bytes + b.Reserved)
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	harness.Await(t, 20*time.Second, "every cursor polled once", func() bool { return empties.Load() >= parts })
	for _, p := range []int{37, 99, 150, 181, 199} {
		start := time.Now()
		k.ProduceValues(t, "many", p, "one")
		harness.Await(t, 20*time.Second, fmt.Sprintf("the record of partition %d", p), func() bool { return got[p].Load() != 0 })
		// Two long polls and a loaded machine's slack; the window of 16
		// took up to (200-16) x 200ms = 37s.
		if took := time.Unix(0, got[p].Load()).Sub(start); took > 3*time.Second {
			t.Errorf("partition %d: a record came %v after it was produced, want within a long poll or two (%v each)", p, took, cfg.FetchMaxWait)
		}
	}
}

// Many partitions whose batches are each larger than a partition's share of
// the budget: such batches go several to a request, their limits raised to
// their sizes (kfake sends nothing of a batch past a partition's limit, so
// their sizes are found by asking for twice as much), rather than one a
// request, first in it. Every record arrives once, in order.
func TestConsumerManyPartitionsOfLargeBatches(t *testing.T) {
	const parts, perPart, size = 400, 300, 100
	k := harness.StartKafka(t)
	k.CreateTopic(t, "large", parts)
	pad := strings.Repeat("x", size)
	produceNumbered(t, k, "large", parts, perPart, perPart, pad) // a batch of some 35 KB each
	cfg := testFetchConfig(k)
	cfg.MaxBufferBytes = parts * 8 << 10 // a share of 8 KiB
	c := openConsumer(t, cfg)
	drainAllNumbered(t, c, "large", parts, perPart, pad)
	st := c.Stats()
	t.Logf("%d partitions of one large batch each: %d fetch requests, %d bytes of requests", parts, st.FetchRequests, st.FetchRequestBytes)
	if st.FetchRequests > parts/4 {
		t.Errorf("%d fetch requests for %d partitions of one large batch each, want at most %d", st.FetchRequests, parts, parts/4)
	}
}

// A backlog over more partitions than a request holds: a cursor that read
// up to its log end has nothing more to fetch, and rides the long poll
// with the quiet ones. Counted as busy, such cursors made the request
// beside the long poll a long poll too, and the partitions whose records
// had not been read yet waited for one of the two to end: MaxWait a round.
// With a long MaxWait, the whole backlog comes well within one.
func TestConsumerBacklogNotHeldBehindLongPolls(t *testing.T) {
	const parts, perPart = 64, 500
	k := harness.StartKafka(t)
	k.CreateTopic(t, "backlog", parts)
	pad := strings.Repeat("x", 100)
	produceNumbered(t, k, "backlog", parts, perPart, perPart, pad) // some 60 KB a partition
	cfg := testFetchConfig(k)
	cfg.FetchMaxWait = 5 * time.Second
	cfg.FetchMaxPartitionBytes, cfg.FetchMaxBytes = 128<<10, 1<<20 // each partition whole in an answer, 8 a request
	c := openConsumer(t, cfg)
	start := time.Now()
	drainAllNumbered(t, c, "backlog", parts, perPart, pad)
	if took := time.Since(start); took >= cfg.FetchMaxWait/2 {
		t.Fatalf("the backlog of %d partitions took %v, want well within one long poll (%v): partitions with records waited on long polls",
			parts, took.Round(time.Millisecond), cfg.FetchMaxWait)
	}
}

// Only the long poll waits for records. Partitions never asked, or with
// records at their last answer, go in requests that return at once: one
// found with nothing is quiet from then on and joins the long poll. When
// such requests waited too, partitions opened on an idle topic were asked
// a request's worth per long poll (10,000 partitions, 625 a request: 16
// long polls before the last was asked, and a fetch session listed them
// all anew each time).
func TestConsumerNewPartitionsAskedWithinALongPoll(t *testing.T) {
	const parts = 200
	k := harness.StartKafka(t)
	k.CreateTopic(t, "idle", parts)
	cfg := testFetchConfig(k)
	cfg.FetchMaxWait = 5 * time.Second
	cfg.FetchMaxPartitionBytes, cfg.FetchMaxBytes = 64<<10, 1<<20 // 16 partitions a request, but for quiet ones
	c := openConsumer(t, cfg)
	curs := make([]*Cursor, parts)
	for p := range parts {
		curs[p] = openCursor(t, c, "idle", p, 0)
	}
	// Asked: found quiet, or in the long poll (which carries a few never
	// asked along with the quiet ones: their answer comes with it).
	quiet := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := 0
		for _, cur := range curs {
			if cur.quiet || (cur.flight != nil && cur.flight.quiet) {
				n++
			}
		}
		return n
	}
	start := time.Now()
	harness.Await(t, 30*time.Second, "every partition asked once and quiet, or riding the long poll", func() bool { return quiet() == parts })
	if took := time.Since(start); took >= cfg.FetchMaxWait/2 {
		t.Fatalf("%d new partitions took %v to be asked once, want well within one long poll (%v)", parts, took.Round(time.Millisecond), cfg.FetchMaxWait)
	}
}

// drainAllNumbered opens a cursor at offset 0 on each of parts partitions
// of topic and drains them side by side (drainNumbered), within
// drainTimeout.
func drainAllNumbered(t *testing.T, c *Consumer, topic string, parts, perPart int, pad string) {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	eachCursor(t, c, topic, parts, func(p int, cur *Cursor) { drainNumbered(t, ctx, cur, p, perPart, pad) }).Wait()
}

// eachCursor opens a cursor at offset 0 on each of parts partitions of
// topic and runs read with it on a goroutine of its own; the WaitGroup ends
// when every read returned.
func eachCursor(t *testing.T, c *Consumer, topic string, parts int, read func(p int, cur *Cursor)) *sync.WaitGroup {
	var wg sync.WaitGroup
	for p := range parts {
		cur := openCursor(t, c, topic, p, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			read(p, cur)
		}()
	}
	return &wg
}

// drainNumbered reads perPart records of partition p (produceNumbered's,
// with pad) from cur, each in order, once and with its exact value,
// freeing each batch as a committed block would; a failure is reported on
// t.
func drainNumbered(t *testing.T, ctx context.Context, cur *Cursor, p, perPart int, pad string) {
	for next := 0; next < perPart; {
		b, err := cur.Fetch(ctx)
		if err != nil {
			t.Errorf("partition %d after %d records: %v", p, next, err)
			return
		}
		for _, r := range b.Records {
			if want := numbered(p, next) + pad; string(r.Value) != want {
				t.Errorf("partition %d record %d: %.20q… (%d bytes), want %.20q… (%d bytes)", p, next, r.Value, len(r.Value), want, len(want))
				return
			}
			next++
		}
		cur.Free(b.Bytes + b.Reserved)
	}
}

// EndOffsets answers a partition whose cursor fetches from the fetch
// answers, without a ListOffsets, and keeps up as the log grows; a
// partition without a cursor, or whose answer is older than maxAge, is
// asked of the broker.
func TestEndOffsetsFromFetchAnswers(t *testing.T) {
	k := harness.StartKafka(t, harness.SeedTopics(2, "ends"))
	var lists atomic.Int64
	k.Cluster().ControlKey(kmsg.ListOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster().KeepControl()
		lists.Add(1)
		return nil, nil, false
	})
	k.ProduceValues(t, "ends", 0, "a", "b", "c")
	k.ProduceValues(t, "ends", 1, "x", "y")
	c := openConsumer(t, testFetchConfig(k))
	cur := openCursor(t, c, "ends", 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for cur.Offset() < 3 {
		if _, err := cur.Fetch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	p0, p1 := sinks.Partition{Topic: "ends", Partition: 0}, sinks.Partition{Topic: "ends", Partition: 1}
	before := lists.Load()
	ends, err := c.EndOffsets(ctx, []sinks.Partition{p0}, time.Minute)
	if err != nil || ends[0] != 3 {
		t.Fatalf("EndOffsets = %v, %v; want p0 at 3", ends, err)
	}
	if n := lists.Load() - before; n != 0 {
		t.Fatalf("%d ListOffsets for a partition whose cursor fetches: want its fetch answers used", n)
	}
	k.ProduceValues(t, "ends", 0, "d", "e", "f", "g")
	harness.Await(t, 10*time.Second, "the fetch answers to tell the new log end", func() bool {
		ends, err := c.EndOffsets(ctx, []sinks.Partition{p0}, time.Minute)
		return err == nil && ends[0] == 7
	})
	if n := lists.Load() - before; n != 0 {
		t.Fatalf("%d ListOffsets while the cursor fetches", n)
	}
	ends, err = c.EndOffsets(ctx, []sinks.Partition{p0, p1}, time.Minute)
	if err != nil || ends[0] != 7 || ends[1] != 2 {
		t.Fatalf("EndOffsets = %v, %v; want p0 at 7, p1 at 2", ends, err)
	}
	if lists.Load() == before {
		t.Fatal("no ListOffsets for a partition without a cursor")
	}
	before = lists.Load()
	ends, err = c.EndOffsets(ctx, []sinks.Partition{p0}, 0)
	if err != nil || ends[0] != 7 || lists.Load() == before {
		t.Fatalf("EndOffsets(maxAge 0) = %v, %v after %d ListOffsets; want p0 at 7, asked of the broker", ends, err, lists.Load()-before)
	}
}

// Cursors opened soon after a lookup are placed from its answer, without
// another: 10,000 partitions claimed in waves opened their cursors in a
// dozen lookups of the whole topic. Once a leader was found wrong, the next
// cursor opened is looked up again.
func TestOpenSoonAfterALookupAsksNoMore(t *testing.T) {
	const parts, perPart = 40, 3
	k := harness.StartKafka(t, harness.SeedTopics(parts, "waves"))
	produceNumbered(t, k, "waves", parts, perPart, perPart, "")
	c := openConsumer(t, testFetchConfig(k))
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	start := time.Now()
	drainNumbered(t, ctx, openCursor(t, c, "waves", 0, 0), 0, perPart, "")
	before := c.Stats().Lookups
	for p := 1; p < parts-1; p++ {
		drainNumbered(t, ctx, openCursor(t, c, "waves", p, 0), p, perPart, "")
	}
	if took := time.Since(start); took >= leadersReuse {
		t.Skipf("the first %d partitions took %v, past the reuse of a lookup (%v): too slow a machine to tell", parts-1, took, leadersReuse)
	}
	if n := c.Stats().Lookups - before; n != 0 {
		t.Errorf("%d lookups for %d cursors opened within %v of one, want none", n, parts-2, leadersReuse)
	}

	// As between an answer that a leader moved and the lookup it asks
	// for (which would clear it): the last answer is not to be trusted.
	c.metaStale.Store(true)
	before = c.Stats().Lookups
	drainNumbered(t, ctx, openCursor(t, c, "waves", parts-1, 0), parts-1, perPart, "")
	if c.Stats().Lookups == before {
		t.Error("a cursor opened after a leader was found wrong was placed without a lookup")
	}
}

// A cursor placed from a lookup that its partition's leader has moved away
// from since still reads every record: the old leader refuses the fetch
// (NOT_LEADER), and the cursor is looked up again.
func TestOpenPlacedOnAMovedLeaderReadsOn(t *testing.T) {
	const perPart = 20
	k := harness.StartKafka(t, harness.NumBrokers(3), harness.SeedTopics(2, "moved"))
	produceNumbered(t, k, "moved", 2, perPart, perPart, "")
	c := openConsumer(t, testFetchConfig(k))
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	drainNumbered(t, ctx, openCursor(t, c, "moved", 0, 0), 0, perPart, "")
	leader := k.Cluster().LeaderFor("moved", 1)
	if err := k.Cluster().MoveTopicPartition("moved", 1, (leader+1)%3); err != nil {
		t.Fatal(err)
	}
	before := c.Stats().Lookups
	cur := openCursor(t, c, "moved", 1, 0)
	c.mu.Lock()
	placed := cur.leader
	c.mu.Unlock()
	if placed != leader {
		t.Skipf("the cursor was not placed from the earlier lookup (leader %d, placed on %d): too slow a machine to tell", leader, placed)
	}
	drainNumbered(t, ctx, cur, 1, perPart, "")
	if c.Stats().Lookups == before {
		t.Error("the cursor read on without a lookup after its leader moved")
	}
}

// A backlog of batches each near a partition's limit (1 MiB): every
// partition a request carries gets its batch. kfake counts a batch it
// skips for a partition's limit toward the request's MaxBytes, so with
// MaxBytes the sum of the limits an answer carried half of them, and the
// other half were asked again: 16 requests where 8 do.
func TestAnswersCarryEveryPartitionOfABacklog(t *testing.T) {
	const parts, batches, perBatch = 8, 4, 800
	k := harness.StartKafka(t)
	k.CreateTopic(t, "near", parts)
	pad := strings.Repeat("x", 1100) // about 900 KB a batch
	produceNumbered(t, k, "near", parts, batches*perBatch, perBatch, pad)
	cfg := testFetchConfig(k)
	cfg.FetchMaxPartitionBytes, cfg.FetchMaxBytes, cfg.MaxBufferBytes = 1<<20, 16<<20, 256<<20
	c := openConsumer(t, cfg)
	drainAllNumbered(t, c, "near", parts, batches*perBatch, pad)
	// 32 batches, four a request (two requests of half the partitions in
	// flight at once), and an answer or two at the log end.
	if n := c.Stats().FetchRequests; n > 12 {
		t.Errorf("%d fetch requests for %d batches of %d partitions, want at most 12 (8 carry them all)", n, parts*batches, parts)
	}
}

// A cursor that failed (an error the broker loop does not retry) is
// skipped by its loop until its reader has the error; then it is fetchable
// again, and its loop must fetch it. The loop had gone idle meanwhile, with
// nothing else to fetch: before the reader's Fetch woke it, the reader's
// next Next waited for ever (a dev --chaos run under load stalled so, with
// a partition whose every record was left unread).
func TestCursorFetchedAgainAfterItsError(t *testing.T) {
	k := harness.StartKafka(t)
	k.CreateTopic(t, "failing", 1)
	k.ProduceValues(t, "failing", 0, "a", "b", "c")
	var injected atomic.Bool
	k.Cluster().ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if !injected.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		// TOPIC_AUTHORIZATION_FAILED: not retried.
		return partitionErrorAnswer(r.(*kmsg.FetchRequest), kerr.TopicAuthorizationFailed.Code), nil, true
	})
	c := openConsumer(t, Config{Brokers: k.Brokers()})
	cur := openCursor(t, c, "failing", 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cur.Next(ctx); !errors.Is(err, kafkago.TopicAuthorizationFailed) {
		t.Fatalf("first Next: %v, want the injected TOPIC_AUTHORIZATION_FAILED", err)
	}
	var got []string
	for len(got) < 3 {
		b, err := cur.Next(ctx)
		if err != nil {
			t.Fatalf("after the error, with %q read: %v (the loop never fetched the cursor again)", got, err)
		}
		for _, r := range b.Records {
			got = append(got, string(r.Value))
		}
		cur.Free(b.Bytes + b.Reserved)
	}
	if strings.Join(got, "") != "abc" {
		t.Fatalf("read %q after the error, want a, b, c", got)
	}
}

// A pick looks at every partition of its broker, so the loop picks when a
// cursor may be fetched, not at each batch a reader takes or each cursor
// closed: a backlog of many partitions is gathered in about one pick per
// request, and closing every cursor picks (almost) nothing.
func TestPicksFollowFetchableCursors(t *testing.T) {
	const parts, perPart = 2000, 40
	k := harness.StartKafka(t)
	k.CreateTopic(t, "picks", parts)
	produceRounds(t, k, "picks", parts, perPart, 10)
	cfg := testFetchConfig(k)
	cfg.FetchMaxWait = time.Second // no long poll answered while the cursors close
	c := openConsumer(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	curs := make([]*Cursor, parts) // each set before its drain, read after Wait
	eachCursor(t, c, "picks", parts, func(p int, cur *Cursor) {
		curs[p] = cur
		drainNumbered(t, ctx, cur, p, perPart, "")
	}).Wait()
	st := c.Stats()
	t.Logf("%d picks for %d fetch requests", st.Picks, st.FetchRequests)
	// Before the loop picked only for a cursor that may be fetched, 24 to
	// 139 picks went to 18 requests here; since, one more than them.
	if st.Picks > st.FetchRequests+st.FetchRequests/8+2 {
		t.Errorf("%d picks for %d fetch requests: want about one a request", st.Picks, st.FetchRequests)
	}
	// More records, fetched ahead and held when the cursors close.
	produceRounds(t, k, "picks", parts, perPart, 10)
	harness.Await(t, 10*time.Second, "records fetched ahead for every partition", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, cur := range curs {
			if len(cur.queue) == 0 {
				return false
			}
		}
		return true
	})
	before := c.Stats()
	for _, cur := range curs {
		cur.Close()
	}
	// A long poll that ends meanwhile (closing is slow under the race
	// detector) is picked again: those picks send requests. The closes
	// themselves pick nothing.
	after := c.Stats()
	n, sent := after.Picks-before.Picks, after.FetchRequests-before.FetchRequests
	t.Logf("closing %d cursors: %d picks, %d requests", parts, n, sent)
	if n > sent+3 {
		t.Errorf("closing %d cursors made %d picks for %d requests, want at most the long polls'", parts, n, sent)
	}
}

// produceRounds writes produceNumbered's records without its round trip a
// batch (16,000 of them took a minute under the race detector): a round
// of one produce call gives each of parts partitions its next batch of
// batch records.
func produceRounds(t *testing.T, k *harness.Kafka, topic string, parts, perPart, batch int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(parts*batch+1))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for from := 0; from < perPart; from += batch {
		var recs []*kgo.Record
		for p := range parts {
			for i := from; i < min(from+batch, perPart); i++ {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte(numbered(p, i))})
			}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce records %d to %d of %d partitions: %v", from, from+batch, parts, err)
		}
	}
}
