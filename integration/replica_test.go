package integration_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

func perPartition(parts int, n int64) map[int]int64 {
	m := map[int]int64{}
	for p := 0; p < parts; p++ {
		m[p] = n
	}
	return m
}

func TestOneReplicaDeliversEverything(t *testing.T) {
	e := newEnv(t, "orders", 8)
	e.produce(12500) // 100,000 records
	dir := t.TempDir()
	fs, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	// One replica and no failover: a lease long enough that a loaded machine
	// does not lose the session, whose replayed blocks this test would count.
	cfg := e.config("r1")
	cfg.LeaseTTL = 10 * time.Second
	rn := e.start(cfg, fs)
	want := perPartition(8, 12500)
	await(t, 90*time.Second, "every offset committed", func() bool { return e.allCommitted(want) })
	rn.stop()
	e.checkFileSink(dir, want)
	ends := e.logEnds()
	got := e.committed()
	for p, end := range ends {
		if got[p] != end {
			t.Errorf("partition %d: committed %d, log end %d", p, got[p], end)
		}
	}
	if n := rn.r.Stats().Records; n != 100000 {
		t.Errorf("replica wrote %d records, want 100000", n)
	}
}

func TestCrashBetweenWriteAndCommitReplaysIntent(t *testing.T) {
	e := newEnv(t, "orders", 2)
	e.produce(1000)
	dir := t.TempDir()
	fs, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The first replica crashes right after its first block of partition 0
	// is in the sink, before the commit.
	crashing := &hookSink{inner: fs}
	e.crashAt(e.config("r1"), crashing, 0, true)
	lost := crashing.blocks(0)
	if len(lost) != 1 {
		t.Fatalf("blocks of partition 0 before the crash: %+v", lost)
	}
	if got := e.committed()[0]; got != 0 {
		t.Fatalf("partition 0 committed %d although the replica crashed before its commit", got)
	}

	second := &hookSink{inner: fs}
	e.start(e.config("r2"), second)
	want := perPartition(2, 1000)
	await(t, 30*time.Second, "the next owner to commit everything", func() bool { return e.allCommitted(want) })
	replay := second.blocks(0)
	if len(replay) == 0 || replay[0].From != lost[0].From || replay[0].Next != lost[0].Next {
		t.Fatalf("next owner's first block %+v, want the intent's range [%d, %d)", replay, lost[0].From, lost[0].Next)
	}
	if replay[0].Epoch <= lost[0].Epoch {
		t.Fatalf("replay epoch %d not above the crashed owner's %d", replay[0].Epoch, lost[0].Epoch)
	}
	e.checkFileSink(dir, want)
}

func TestFailingSinkRollsBackAndRetries(t *testing.T) {
	e := newEnv(t, "orders", 4)
	e.produce(500)
	dir := t.TempDir()
	fs, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	failures := map[int]int{}
	flaky := &hookSink{inner: fs, before: func(_ context.Context, b *sinks.Block) error {
		mu.Lock()
		defer mu.Unlock()
		if failures[b.Partition] < 3 {
			failures[b.Partition]++
			return errInjected
		}
		return nil
	}}
	rn := e.start(e.config("r1"), flaky)
	want := perPartition(4, 500)
	await(t, 60*time.Second, "every offset committed despite failures", func() bool { return e.allCommitted(want) })
	rn.stop()
	e.checkFileSink(dir, want)
	if n := rn.r.Stats().Rollbacks; n < 12 {
		t.Errorf("%d rollbacks, want at least 12 (3 per partition)", n)
	}
	for p := 0; p < 4; p++ {
		bs := flaky.blocks(p)
		if len(bs) == 0 || bs[0].From != 0 {
			t.Errorf("partition %d: first written block %+v, want one starting at 0 (nothing skipped)", p, bs)
		}
		for i := 1; i < len(bs); i++ {
			if bs[i].From != bs[i-1].Next {
				t.Errorf("partition %d: block %d starts at %d after one ending at %d", p, i, bs[i].From, bs[i-1].Next)
			}
		}
	}
}

func TestEveryBatchCrashAfterCommitLosesTheBatch(t *testing.T) {
	e := newEnv(t, "orders", 1)
	for range 3 {
		e.produce(100) // three record batches of 100
	}
	dir := t.TempDir()
	fs, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	// every-batch commits a batch before writing it: crash in between.
	cfg := e.config("r1")
	cfg.CommitMode = replica.EveryBatch
	cfg.Kafka.FetchMaxPartitionBytes = 1 // one record batch per poll
	lostBatch := e.crashAt(cfg, &hookSink{inner: fs}, -1, false)
	if got := e.committed()[0]; got != lostBatch.Next {
		t.Fatalf("committed %d, want the crashed batch's end %d (every-batch commits first)", got, lostBatch.Next)
	}

	cfg2 := e.config("r2")
	cfg2.CommitMode = replica.EveryBatch
	e.start(cfg2, fs)
	// every-batch commits before it writes: wait for the sink, not etcd.
	var recs []sinks.Record
	await(t, 30*time.Second, "the rest written", func() bool {
		var err error
		recs, err = file.ReadAll(dir, "orders", 0)
		return err == nil && len(recs) > 0 && recs[len(recs)-1].Offset == 299
	})
	if got := e.committed()[0]; got != 300 {
		t.Fatalf("committed %d, want 300", got)
	}
	from, next := lostBatch.From, lostBatch.Next
	if next-from != 100 {
		t.Fatalf("the crashed batch is [%d, %d), want one record batch of 100", from, next)
	}
	if want := 300 - int(next-from); len(recs) != want {
		t.Fatalf("%d records in the sink, want %d: all but the batch [%d, %d) lost by the crash", len(recs), want, from, next)
	}
	for _, r := range recs {
		if r.Offset >= from && r.Offset < next {
			t.Fatalf("offset %d of the lost batch is in the sink", r.Offset)
		}
	}
	t.Logf("every-batch: the crash lost [%d, %d), as documented (at-most-once)", from, next)
}

func TestTransactionalTopicReachesLogEnd(t *testing.T) {
	e := newEnv(t, "txn", 1)
	var committedVals []string
	for i := 0; i < 20; i++ {
		commit := i%3 != 1
		var recs []*kgo.Record
		for j := 0; j < 25; j++ {
			v := fmt.Sprintf("t%d-%d", i, j)
			recs = append(recs, &kgo.Record{Value: []byte(v)})
			if commit {
				committedVals = append(committedVals, v)
			}
		}
		e.kafka.Transact(t, commit, "txn", 0, recs...)
	}
	end := e.logEnds()[0]
	dir := t.TempDir()
	fs, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	rn := e.start(e.config("r1"), fs)
	await(t, 30*time.Second, fmt.Sprintf("committed offset at the log end %d", end), func() bool { return e.committed()[0] == end })
	rn.stop()
	recs, err := file.ReadAll(dir, "txn", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(committedVals) {
		t.Fatalf("%d records delivered, want the %d committed ones", len(recs), len(committedVals))
	}
	for i, r := range recs {
		if string(r.Value) != committedVals[i] {
			t.Fatalf("record %d is %q, want %q (aborted records must not be delivered)", i, r.Value, committedVals[i])
		}
	}
}

func TestKafkaCutOffRetriesWithoutLoss(t *testing.T) {
	e := newEnv(t, "orders", 4)
	proxy := harness.NewProxy(t, e.kafka.Brokers()[0])
	e.produce(200)
	dir := t.TempDir()
	fs, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.config("r1")
	// Every connection to Kafka goes through the proxy, whatever address
	// the broker advertises (one broker here).
	var d netDialer
	cfg.Kafka.Dial = func(ctx context.Context, network, _ string) (netConn, error) {
		return d.DialContext(ctx, network, proxy.Addr())
	}
	rn := e.start(cfg, fs)
	await(t, 30*time.Second, "first records committed", func() bool { return e.allCommitted(perPartition(4, 200)) })

	proxy.Blackhole()
	proxy.Cut()
	e.produce(300)              // while Kafka is unreachable for the replica
	time.Sleep(3 * time.Second) // the outage itself: the replica must ride it out
	proxy.Pass()
	want := perPartition(4, 500)
	await(t, 60*time.Second, "everything committed after the outage", func() bool { return e.allCommitted(want) })
	rn.stop()
	e.checkFileSink(dir, want)
	_ = zap.NewNop
}
