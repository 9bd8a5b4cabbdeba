package replica

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// openCursor opens partition 0 of topic t with a consumer of budget bytes,
// closed with the test.
func openCursor(t *testing.T, brokers []string, budget int) (*kafka.Consumer, *kafka.Cursor) {
	t.Helper()
	c, err := kafka.NewConsumer(kafkaconf.Config{Brokers: brokers, MaxBufferBytes: budget}, nil, "t")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cur, err := c.Open("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	return c, cur
}

// A finished block's records slice is kept for the partition's next block
// only while it is within half the partition's share of the budget (what
// a block of that share holds): as partitions join, shares shrink, and
// 10,000 partitions each keeping the slice of a 1,000-record block held
// 1.1 GB that the budget never counted.
func TestSpareRecordsWithinTheShare(t *testing.T) {
	const parts = 10
	cluster, err := kfake.NewCluster(kfake.SeedTopics(parts, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	const budget = 1 << 20
	c, cur := openCursor(t, cluster.ListenAddrs(), budget)
	pt := &partition{f: cur}
	finish := func(rows int) []sinks.Record {
		pt.finish(&block{records: make([]sinks.Record, rows)})
		return pt.spare
	}
	// Alone, the partition's share is the whole budget: a block of 1,000
	// records (112 KB of Record values) is well within half of it.
	if spare := finish(1000); cap(spare) != 1000 || len(spare) != 0 {
		t.Fatalf("alone: spare of len %d cap %d, want the block's slice, emptied (cap 1000)", len(spare), cap(spare))
	}
	if spare := finish(5000); spare != nil {
		t.Fatalf("alone: a block of 5,000 records (%d KB) kept within half a share of %d KB", 5000*recordSize>>10, budget>>10)
	}
	for p := 1; p < parts; p++ {
		if _, err := c.Open("t", p); err != nil {
			t.Fatal(err)
		}
	}
	// One of ten: a share of about 100 KB, half of it less than 1,000
	// records take.
	if spare := finish(1000); spare != nil {
		t.Fatalf("one of %d: a block of 1,000 records kept within half a share of %d KB", parts, cur.Share()>>10)
	}
	if spare := finish(100); cap(spare) != 100 {
		t.Fatalf("one of %d: a block of 100 records not kept (spare cap %d)", parts, cap(spare))
	}
}

// A block's slice is sized to its first batch, here a trickle's that
// reached the log end and ends the block, not to what a block of the
// partition's share holds: 10,000 trickling partitions would each keep one.
// A partition alone with a budget of 64 MiB would size a block's slice for
// 65,536 records.
func TestTrickleBlockSizedToItsBatch(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("a")}, &kgo.Record{Value: []byte("b")}, &kgo.Record{Value: []byte("c")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	_, cur := openCursor(t, cluster.ListenAddrs(), 64<<20)
	cur.DecodeOnRead(true)
	cur.SeekTo(0)
	cfg := Config{}.withDefaults()
	r := &Replica{cfg: cfg}
	pt := &partition{r: r, cfg: &r.cfg, stats: &r.stats, rules: newBlockRules(&cfg, nil), f: cur}
	pt.logEnd.Store(-1)
	b, err := pt.poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.records) != 3 || string(b.records[2].Value) != "c" {
		t.Fatalf("block of %d records, want a, b, c", len(b.records))
	}
	if cap(b.records) > 8 {
		t.Errorf("a trickle's block of 3 records has room for %d", cap(b.records))
	}
}

// A full block's slice is sized once, for the whole block: a block ends
// between batches once past its bound, so its last batch runs past
// MaxBlockRows (or the bytes' bound). Sized to the bound alone, the slice
// of every full block grew at its last batch, and each of its records was
// copied once more (a tenth of the replica's CPU at 8 partitions).
func TestFullBlockSizedOnce(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	_, cur := openCursor(t, cluster.ListenAddrs(), 64<<20)
	for _, c := range []struct {
		name            string
		rows, blockSize int // MaxBlockRows, MaxBlockBytes
		batch, per      int // records a batch, bytes a record
	}{
		{"rows", 250, 16 << 20, 100, 120},
		{"bytes", 65536, 1 << 20, 1000, 1000},
	} {
		cfg := Config{MaxBlockRows: c.rows, MaxBlockBytes: c.blockSize}.withDefaults()
		r := &Replica{cfg: cfg}
		pt := &partition{r: r, cfg: &r.cfg, stats: &r.stats, rules: newBlockRules(&cfg, nil), f: cur}
		batch := kafka.PolledBatch{Records: make([]sinks.Record, c.batch), Bytes: c.batch * c.per}
		// Batches are added until the block reaches a bound: the last
		// one is added below it.
		bound := min(c.rows, c.blockSize/c.per)
		full := (bound + c.batch - 1) / c.batch * c.batch
		if got := pt.likelyRows(batch); got < full {
			t.Errorf("%s: room for %d rows, but a full block of batches of %d holds %d", c.name, got, c.batch, full)
		}
	}
}
