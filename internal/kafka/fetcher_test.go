package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/offsetkeeper/offsetkeeper/guard"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// drainTimeout bounds every wait of these tests.
const drainTimeout = 30 * time.Second

func testFetchConfig(k *harness.Kafka) Config {
	return Config{
		Brokers:         k.Brokers(),
		FetchMaxWait:    100 * time.Millisecond,
		RetryBackoffMin: 10 * time.Millisecond,
		RetryBackoffMax: 100 * time.Millisecond,
	}
}

// openObserved opens a fetcher of partition 0 of topic whose retries the
// test can await: awaitRetries(n) returns once n were logged.
func openObserved(t *testing.T, cfg Config, topic string) (f *Fetcher, awaitRetries func(n int)) {
	t.Helper()
	log, awaitRetries := observed(t)
	f, err := NewFetcher(cfg, topic, 0, log)
	if err != nil {
		t.Fatalf("NewFetcher: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f, awaitRetries
}

func openFetcher(t testing.TB, cfg Config, topic string, partition int) *Fetcher {
	t.Helper()
	f, err := NewFetcher(cfg, topic, partition, zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel)))
	if err != nil {
		t.Fatalf("NewFetcher: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// checkBatch verifies the invariants every batch must hold.
func checkBatch(t testing.TB, b PolledBatch, from int64) {
	t.Helper()
	if b.Reset == nil && b.From != from {
		t.Fatalf("batch From %d, want %d (the previous Next)", b.From, from)
	}
	if b.Next < b.From {
		t.Fatalf("batch Next %d before From %d", b.Next, b.From)
	}
	prev := b.From - 1
	for _, r := range b.Records {
		if r.Offset <= prev || r.Offset >= b.Next {
			t.Fatalf("record at %d out of order or outside [%d, %d) after %d", r.Offset, b.From, b.Next, prev)
		}
		prev = r.Offset
	}
}

// drain fetches until Next reaches end and returns the records read.
func drain(t testing.TB, f reader, end int64) ([]sinks.Record, PolledBatch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	var (
		out  []sinks.Record
		last PolledBatch
	)
	from := f.Offset()
	for first := true; first || last.Next < end; first = false {
		b, err := f.Fetch(ctx)
		if err != nil {
			t.Fatalf("fetch after %d records (next %d, want %d): %v", len(out), last.Next, end, err)
		}
		if from >= 0 {
			checkBatch(t, b, from)
		}
		if b.Reset != nil {
			t.Fatalf("unexpected reset %+v", *b.Reset)
		}
		if b.Truncation != nil {
			t.Fatalf("unexpected truncation %+v", *b.Truncation)
		}
		out = append(out, b.Records...)
		from, last = b.Next, b
	}
	if last.Next != end {
		t.Fatalf("drained to %d, want %d", last.Next, end)
	}
	return out, last
}

func values(recs []sinks.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

// batchInfo describes one record batch as stored by the broker.
type batchInfo struct {
	base        int64
	records     int
	compression string
	control     bool
}

// layout lists the record batches of topic/partition from offset, to check
// that a test sets up the batches it means to.
func layout(t testing.TB, k *harness.Kafka, topic string, partition int, offset int64) []batchInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafkago.Client{Addr: kafkago.TCP(k.Brokers()...), Transport: tr}
	res, err := c.Fetch(ctx, &kafkago.FetchRequest{Topic: topic, Partition: partition, Offset: offset, MaxBytes: 64 << 20, MaxWait: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("layout of %s/%d: %v", topic, partition, err)
	}
	if res.Error != nil {
		t.Fatalf("layout of %s/%d: %v", topic, partition, res.Error)
	}
	s, ok := res.Records.(*protocol.RecordStream)
	if !ok {
		return nil
	}
	var out []batchInfo
	for _, b := range s.Records {
		var bi batchInfo
		var rr protocol.RecordReader
		switch b := b.(type) {
		case *protocol.RecordBatch:
			bi = batchInfo{base: b.BaseOffset, compression: b.Attributes.Compression().String()}
			rr = b.Records
		case *protocol.ControlBatch:
			bi = batchInfo{base: b.BaseOffset, control: true}
			rr = b.Records
		default:
			t.Fatalf("unexpected batch %T", b)
		}
		for {
			if _, err := rr.ReadRecord(); err != nil {
				break
			}
			bi.records++
		}
		out = append(out, bi)
	}
	return out
}

func TestParseStartPolicy(t *testing.T) {
	for in, want := range map[string]StartPolicy{"earliest": StartEarliest, "latest": StartLatest, " Latest ": StartLatest} {
		var got StartPolicy
		err := got.Set(in)
		if err != nil || got != want {
			t.Errorf("ParseStartPolicy(%q) = %v, %v; want %v", in, got, err, want)
		}
		if strings.TrimSpace(strings.ToLower(in)) != got.String() {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
	err := new(StartPolicy).Set("newest")
	if err == nil || !strings.Contains(err.Error(), `"newest"`) || !strings.Contains(err.Error(), "earliest, latest") {
		t.Errorf("ParseStartPolicy(newest) error %v, want it to name the value and the accepted ones", err)
	}
	var p StartPolicy
	if err := p.UnmarshalText([]byte("latest")); err != nil || p != StartLatest {
		t.Errorf("UnmarshalText(latest) = %v, %v", p, err)
	}
	var l IsolationLevel
	if err := l.Set("read_uncommitted"); err != nil || l != ReadUncommitted {
		t.Errorf("ParseIsolationLevel(read_uncommitted) = %v, %v", l, err)
	}
	if err := new(IsolationLevel).Set("serializable"); err == nil || !strings.Contains(err.Error(), "read_committed, read_uncommitted") {
		t.Errorf("ParseIsolationLevel(serializable) error %v", err)
	}
}

func TestNewFetcherValidates(t *testing.T) {
	if _, err := NewFetcher(Config{}, "t", 0, nil); err == nil || !strings.Contains(err.Error(), "no kafka brokers") {
		t.Errorf("no brokers: error %v", err)
	}
	if _, err := NewFetcher(Config{Brokers: []string{"localhost"}}, "t", 0, nil); err == nil {
		t.Errorf("broker without port accepted")
	}
}

// Test 1: every offset exactly once and in order, with values, keys,
// headers and timestamps intact.
func TestFetchDrainsPartitions(t *testing.T) {
	k := harness.StartKafka(t)
	const partitions, perPartition, perCall = 4, 2500, 250
	k.CreateTopic(t, "orders", partitions)
	base := time.UnixMilli(time.Now().UnixMilli()).Add(-time.Hour)
	want := func(p, i int) *kgo.Record {
		r := &kgo.Record{
			Value:     []byte(fmt.Sprintf("p%d-value-%06d-%s", p, i, strings.Repeat("x", i%50))),
			Timestamp: base.Add(time.Duration(p*perPartition+i) * time.Millisecond),
		}
		switch i % 4 {
		case 0: // null key
		case 1:
			r.Key = []byte{} // empty, not null
		default:
			r.Key = []byte(fmt.Sprintf("key-%d", i))
		}
		if i%3 == 0 {
			r.Headers = []kgo.RecordHeader{{Key: "h1", Value: []byte(fmt.Sprint(i))}, {Key: "h2", Value: []byte("two")}}
		}
		if i%10 == 0 {
			r.Value = nil // tombstone
		}
		return r
	}
	for p := range partitions {
		for c := 0; c < perPartition; c += perCall {
			recs := make([]*kgo.Record, perCall)
			for i := range recs {
				recs[i] = want(p, c+i)
			}
			k.Produce(t, "orders", p, recs...)
		}
	}

	for p := range partitions {
		cfg := testFetchConfig(k)
		cfg.FetchMaxPartitionBytes = 16 << 10 // several fetches per partition
		f := openFetcher(t, cfg, "orders", p)
		f.SeekTo(0)
		got, last := drain(t, f, perPartition)
		if last.HighWatermark != perPartition || last.LastStable != perPartition {
			t.Errorf("partition %d: high watermark %d, last stable %d; want %d", p, last.HighWatermark, last.LastStable, perPartition)
		}
		if len(got) != perPartition {
			t.Fatalf("partition %d: %d records, want %d", p, len(got), perPartition)
		}
		for i, r := range got {
			w := want(p, i)
			if r.Offset != int64(i) {
				t.Fatalf("partition %d: record %d at offset %d", p, i, r.Offset)
			}
			if !bytes.Equal(r.Value, w.Value) || (r.Value == nil) != (w.Value == nil) {
				t.Fatalf("partition %d offset %d: value %q, want %q", p, i, r.Value, w.Value)
			}
			if !bytes.Equal(r.Key, w.Key) || (r.Key == nil) != (w.Key == nil) {
				t.Fatalf("partition %d offset %d: key %q (nil %v), want %q (nil %v)", p, i, r.Key, r.Key == nil, w.Key, w.Key == nil)
			}
			if !r.Time.Equal(w.Timestamp) {
				t.Fatalf("partition %d offset %d: time %v, want %v", p, i, r.Time, w.Timestamp)
			}
			if len(r.Headers) != len(w.Headers) {
				t.Fatalf("partition %d offset %d: %d headers, want %d", p, i, len(r.Headers), len(w.Headers))
			}
			for j, h := range r.Headers {
				if h.Key != w.Headers[j].Key || !bytes.Equal(h.Value, w.Headers[j].Value) {
					t.Fatalf("partition %d offset %d: header %d = %s=%q, want %s=%q", p, i, j, h.Key, h.Value, w.Headers[j].Key, w.Headers[j].Value)
				}
			}
		}
		// At the log end, a fetch returns an empty batch after MaxWait.
		b, err := f.Fetch(context.Background())
		if err != nil || len(b.Records) != 0 || b.From != perPartition || b.Next != perPartition {
			t.Fatalf("partition %d: fetch at end = %d records [%d, %d), %v; want empty at %d", p, len(b.Records), b.From, b.Next, err, perPartition)
		}
	}
}

// Test 2: compressed batches of every codec.
func TestFetchCompressed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"gzip", kgo.GzipCompression()},
		{"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()},
		{"zstd", kgo.ZstdCompression()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := harness.StartKafka(t)
			k.CreateTopic(t, "z", 1)
			p := k.NewProducer(t, tc.codec)
			var want []string
			for c := range 5 {
				recs := make([]*kgo.Record, 400)
				for i := range recs {
					v := fmt.Sprintf("%s-%d-%04d-%s", tc.name, c, i, strings.Repeat("abc", 20))
					want = append(want, v)
					recs[i] = &kgo.Record{Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "n", Value: []byte(fmt.Sprint(i))}}}
				}
				p.Produce(t, "z", 0, recs...)
			}
			for _, b := range layout(t, k, "z", 0, 0) {
				if b.compression != tc.name {
					t.Fatalf("batch at %d compressed with %q, want %s", b.base, b.compression, tc.name)
				}
			}
			cfg := testFetchConfig(k)
			cfg.FetchMaxPartitionBytes = 1 // one batch per fetch
			f := openFetcher(t, cfg, "z", 0)
			f.SeekTo(0)
			got, _ := drain(t, f, int64(len(want)))
			if g := values(got); strings.Join(g, "\n") != strings.Join(want, "\n") {
				t.Fatalf("read %d values, want %d; first %q", len(g), len(want), g[:min(3, len(g))])
			}
			for i, r := range got {
				if len(r.Headers) != 1 || string(r.Headers[0].Value) != fmt.Sprint(i%400) {
					t.Fatalf("offset %d: headers %v", i, r.Headers)
				}
			}
		})
	}
}

// Test 3: committed and aborted transactions interleaved, from two producers.
func TestFetchTransactions(t *testing.T) {
	for name, codec := range map[string]kgo.CompressionCodec{"uncompressed": kgo.NoCompression(), "zstd": kgo.ZstdCompression()} {
		t.Run(name, func(t *testing.T) {
			k := harness.StartKafka(t, harness.Compression(codec))
			k.CreateTopic(t, "tx", 1)
			gen := func(prefix string, n int) []*kgo.Record {
				recs := make([]*kgo.Record, n)
				for i := range recs {
					recs[i] = &kgo.Record{Value: []byte(fmt.Sprintf("%s-%03d", prefix, i))}
				}
				return recs
			}
			var committed []string
			add := func(recs []*kgo.Record) {
				for _, r := range recs {
					committed = append(committed, string(r.Value))
				}
			}
			a, b := k.NewTxnProducer(t, "a"), k.NewTxnProducer(t, "b")

			plain := gen("plain", 10)
			k.Produce(t, "tx", 0, plain...)
			add(plain)

			a.Begin(t)
			b.Begin(t)
			a1 := gen("a-commit-1", 50)
			a.Produce(t, "tx", 0, a1...)
			b.Produce(t, "tx", 0, gen("b-abort-1", 50)...)
			a1b := gen("a-commit-1b", 30)
			a.Produce(t, "tx", 0, a1b...)
			plain2 := gen("plain-2", 5)
			k.Produce(t, "tx", 0, plain2...)
			b.End(t, false)
			a.End(t, true)
			add(a1)
			add(a1b)
			add(plain2)

			a.Begin(t)
			a.Produce(t, "tx", 0, gen("a-abort-2", 20)...)
			a.End(t, false)

			b.Begin(t)
			b2 := gen("b-commit-2", 40)
			b.Produce(t, "tx", 0, b2...)
			b.End(t, true)
			add(b2)

			// The log ends with an aborted transaction: only its marker
			// and skipped records lie between the last record and the end.
			a.Begin(t)
			a.Produce(t, "tx", 0, gen("a-abort-3", 15)...)
			a.End(t, false)

			f := openFetcher(t, testFetchConfig(k), "tx", 0)
			earliest, end, err := f.Bounds(context.Background())
			if err != nil || earliest != 0 {
				t.Fatalf("Bounds = %d, %d, %v", earliest, end, err)
			}
			f.SeekTo(0)
			got, last := drain(t, f, end)
			if last.Next != last.HighWatermark || last.Next != last.LastStable {
				t.Errorf("drained to %d; high watermark %d, last stable %d", last.Next, last.HighWatermark, last.LastStable)
			}
			if g := values(got); strings.Join(g, ",") != strings.Join(committed, ",") {
				t.Fatalf("read_committed read %d records, want %d committed:\n got %v\nwant %v", len(g), len(committed), g, committed)
			}

			// The same log read_uncommitted has the aborted records:
			// the test above did filter something.
			cfg := testFetchConfig(k)
			cfg.IsolationLevel = ReadUncommitted
			u := openFetcher(t, cfg, "tx", 0)
			u.SeekTo(0)
			all, _ := drain(t, u, end)
			if len(all) != len(committed)+50+20+15 {
				t.Fatalf("read_uncommitted read %d records, want %d", len(all), len(committed)+85)
			}
			for _, r := range all {
				if strings.Contains(string(r.Value), "abort") {
					return
				}
			}
			t.Fatalf("read_uncommitted read no aborted record")
		})
	}
}

// An open transaction holds read_committed readers at the last stable
// offset until it ends.
func TestFetchOpenTransaction(t *testing.T) {
	k := harness.StartKafka(t)
	k.CreateTopic(t, "tx", 1)
	k.ProduceValues(t, "tx", 0, "before")
	a := k.NewTxnProducer(t, "a")
	a.Begin(t)
	a.Produce(t, "tx", 0, &kgo.Record{Value: []byte("pending")})

	f := openFetcher(t, testFetchConfig(k), "tx", 0)
	f.SeekTo(0)
	got, last := drain(t, f, 1)
	if len(got) != 1 || string(got[0].Value) != "before" || last.LastStable != 1 || last.HighWatermark != 2 {
		t.Fatalf("with an open transaction: %v, last stable %d, high watermark %d", values(got), last.LastStable, last.HighWatermark)
	}
	if _, end, err := f.Bounds(context.Background()); err != nil || end != 1 {
		t.Fatalf("Bounds log end %d, %v; want the last stable offset 1", end, err)
	}
	b, err := f.Fetch(context.Background())
	if err != nil || len(b.Records) != 0 || b.Next != 1 {
		t.Fatalf("fetch at the last stable offset: %d records, next %d, %v", len(b.Records), b.Next, err)
	}
	a.End(t, true)
	got, last = drain(t, f, 3) // the record and its commit marker
	if len(got) != 1 || string(got[0].Value) != "pending" || last.Next != last.HighWatermark {
		t.Fatalf("after commit: %v, next %d, high watermark %d", values(got), last.Next, last.HighWatermark)
	}
}

// Test 4: an out-of-range offset resumes where the log is, whatever the
// start policy: at the log start when retention passed it (nothing still
// in Kafka is skipped), at the log end when it is past the end (the log was
// truncated: nothing is read twice from the start). The start policy only
// places a partition that has no offset.
func TestFetchOffsetOutOfRange(t *testing.T) {
	k := harness.StartKafka(t)
	k.CreateTopic(t, "oor", 1)
	vals := make([]string, 100)
	for i := range vals {
		vals[i] = fmt.Sprintf("v%03d", i)
	}
	k.ProduceValues(t, "oor", 0, vals...)

	fetchReset := func(t *testing.T, policy StartPolicy, seek int64, reason ResetReason) (*Fetcher, PolledBatch) {
		t.Helper()
		cfg := testFetchConfig(k)
		cfg.StartPolicy = policy
		f := openFetcher(t, cfg, "oor", 0)
		f.SeekTo(seek)
		ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		defer cancel()
		b, err := f.Fetch(ctx)
		if err != nil {
			t.Fatalf("fetch at %d: %v", seek, err)
		}
		if b.Reset == nil {
			t.Fatalf("fetch at %d: no reset; batch [%d, %d) of %d records", seek, b.From, b.Next, len(b.Records))
		}
		if b.Reset.From != seek || b.Reset.Reason != reason || b.From != b.Reset.To || b.Next != b.Reset.To || len(b.Records) != 0 {
			t.Fatalf("fetch at %d: reset %+v, batch [%d, %d) of %d records", seek, *b.Reset, b.From, b.Next, len(b.Records))
		}
		return f, b
	}

	for _, policy := range []StartPolicy{StartEarliest, StartLatest} {
		t.Run("past end/"+policy.String(), func(t *testing.T) {
			f, b := fetchReset(t, policy, 1000, ResetTruncated)
			if b.Reset.To != 100 {
				t.Fatalf("reset to %d, want 100", b.Reset.To)
			}
			if b, err := f.Fetch(context.Background()); err != nil || b.From != 100 || len(b.Records) != 0 {
				t.Fatalf("fetch after reset: [%d, %d) %d records, %v", b.From, b.Next, len(b.Records), err)
			}
		})
	}

	k.DeleteRecords(t, "oor", 0, 40)
	for _, policy := range []StartPolicy{StartEarliest, StartLatest} {
		t.Run("before start/"+policy.String(), func(t *testing.T) {
			f, b := fetchReset(t, policy, 10, ResetLogStart)
			if b.Reset.To != 40 {
				t.Fatalf("reset to %d, want 40", b.Reset.To)
			}
			got, _ := drain(t, f, 100)
			if len(got) != 60 || got[0].Offset != 40 || string(got[0].Value) != "v040" {
				t.Fatalf("after reset read %d records from %d", len(got), got[0].Offset)
			}
		})
	}
	t.Run("no offset", func(t *testing.T) {
		for policy, want := range map[StartPolicy]int64{StartEarliest: 40, StartLatest: 100} {
			cfg := testFetchConfig(k)
			cfg.StartPolicy = policy
			f := openFetcher(t, cfg, "oor", 0)
			b, err := f.Fetch(context.Background())
			if err != nil || b.Reset != nil || b.From != want {
				t.Fatalf("%v without offset: batch from %d, reset %v, %v; want from %d", policy, b.From, b.Reset, err, want)
			}
			if lo, hi, err := f.Bounds(context.Background()); err != nil || lo != 40 || hi != 100 {
				t.Fatalf("Bounds = %d, %d, %v; want 40, 100", lo, hi, err)
			}
		}
	})
}

// Test 5: a fetch inside a compressed batch skips the batch's earlier records.
func TestFetchSeekIntoCompressedBatch(t *testing.T) {
	k := harness.StartKafka(t, harness.Compression(kgo.ZstdCompression()))
	k.CreateTopic(t, "z", 1)
	recs := make([]*kgo.Record, 100)
	for i := range recs {
		recs[i] = &kgo.Record{Value: []byte(fmt.Sprintf("value-%03d-%s", i, strings.Repeat("z", 30)))}
	}
	k.Produce(t, "z", 0, recs...)
	if l := layout(t, k, "z", 0, 0); len(l) != 1 || l[0].records != 100 || l[0].compression != "zstd" {
		t.Fatalf("want one zstd batch of 100 records, got %+v", l)
	}
	f := openFetcher(t, testFetchConfig(k), "z", 0)
	f.SeekTo(37)
	got, _ := drain(t, f, 100)
	if len(got) != 63 || got[0].Offset != 37 || string(got[0].Value) != string(recs[37].Value) {
		t.Fatalf("read %d records from %d, want 63 from 37", len(got), got[0].Offset)
	}
}

// Test 6: cancelling the context ends a fetch waiting on the broker at once.
func TestFetchCancel(t *testing.T) {
	k := harness.StartKafka(t)
	k.CreateTopic(t, "idle", 1)
	arrived := make(chan struct{}, 1)
	k.Cluster().ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		return nil, nil, false
	})
	cfg := testFetchConfig(k)
	cfg.FetchMaxWait = 5 * time.Second
	f := openFetcher(t, cfg, "idle", 0)
	f.SeekTo(0)

	ctx, cancel := context.WithCancel(context.Background())
	done := fetchInBackground(ctx, f)
	select {
	case <-arrived:
	case <-time.After(drainTimeout):
		t.Fatal("the fetch request never reached the broker")
	}
	cancelFetch(t, cancel, done, time.Second)

	// An ended context returns at once, without a request.
	if _, err := f.Fetch(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("fetch with a cancelled context: %v", err)
	}
}

// proxied returns a config that reaches every broker of k through a proxy
// of its own, and the proxies.
func proxied(t *testing.T, k *harness.Kafka) (Config, []*harness.Proxy) {
	cfg := testFetchConfig(k)
	route := map[string]string{}
	var proxies []*harness.Proxy
	for _, b := range k.Brokers() {
		p := harness.NewProxy(t, b)
		route[b] = p.Addr()
		proxies = append(proxies, p)
	}
	cfg.Brokers = []string{proxies[0].Addr()}
	d := &net.Dialer{}
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if p, ok := route[addr]; ok {
			addr = p
		}
		return d.DialContext(ctx, network, addr)
	}
	return cfg, proxies
}

// observed returns a logger and a function waiting until the fetcher logged
// n more retries.
func observed(t *testing.T) (*zap.Logger, func(n int)) {
	retries := make(chan struct{}, 1000)
	log := zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel), zaptest.WrapOptions(zap.Hooks(func(e zapcore.Entry) error {
		if e.Message == "kafka request failed, retrying" {
			select {
			case retries <- struct{}{}:
			default:
			}
		}
		return nil
	})))
	return log, func(n int) {
		t.Helper()
		timeout := time.After(drainTimeout)
		for i := range n {
			select {
			case <-retries:
			case <-timeout:
				t.Fatalf("saw %d retries, want %d", i, n)
			}
		}
	}
}

// Test 7: the broker becomes unreachable (connections refused and cut, or
// silent), then comes back: the fetch retries and resumes where it was.
func TestFetchBrokerUnreachable(t *testing.T) {
	for _, mode := range []string{"refused", "blackhole"} {
		t.Run(mode, func(t *testing.T) {
			k := harness.StartKafka(t)
			k.CreateTopic(t, "flaky", 1)
			k.ProduceValues(t, "flaky", 0, "a", "b", "c")
			cfg, proxies := proxied(t, k)
			cfg.RequestTimeout = 300 * time.Millisecond
			cfg.DialTimeout = 300 * time.Millisecond
			f, awaitRetries := openObserved(t, cfg, "flaky")
			f.SeekTo(0)
			drain(t, f, 3)

			p := proxies[0]
			switch mode {
			case "refused":
				p.Refuse(true)
				p.Cut()
			case "blackhole":
				p.Blackhole()
			}
			k.ProduceValues(t, "flaky", 0, "d", "e")
			done := make(chan struct{})
			var got []sinks.Record
			var ferr error
			go func() {
				defer close(done)
				ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
				defer cancel()
				for len(got) < 2 && ferr == nil {
					var b PolledBatch
					b, ferr = f.Fetch(ctx)
					got = append(got, b.Records...)
				}
			}()
			awaitRetries(3)
			p.Refuse(false)
			p.Pass()
			<-done
			if ferr != nil {
				t.Fatalf("fetch after the broker came back: %v", ferr)
			}
			if v := values(got); strings.Join(v, "") != "de" || got[0].Offset != 3 {
				t.Fatalf("after the outage read %v from %d, want d, e from 3", v, got[0].Offset)
			}
		})
	}
}

// A fetch retrying against an unreachable broker still stops at once when
// its context is cancelled.
func TestFetchCancelWhileRetrying(t *testing.T) {
	k := harness.StartKafka(t)
	k.CreateTopic(t, "flaky", 1)
	cfg, proxies := proxied(t, k)
	cfg.RetryBackoffMin, cfg.RetryBackoffMax = 2*time.Second, 2*time.Second
	proxies[0].Refuse(true)
	f, awaitRetries := openObserved(t, cfg, "flaky")
	f.SeekTo(0)
	ctx, cancel := context.WithCancel(context.Background())
	done := fetchInBackground(ctx, f)
	awaitRetries(1)
	cancelFetch(t, cancel, done, 500*time.Millisecond)
}

// Broker error codes are retried; the fetch then continues.
func TestFetchRetriesBrokerErrors(t *testing.T) {
	k := harness.StartKafka(t)
	k.CreateTopic(t, "e", 1)
	k.ProduceValues(t, "e", 0, "a", "b")
	codes := []int16{
		kerr.NotLeaderForPartition.Code, kerr.LeaderNotAvailable.Code, kerr.RequestTimedOut.Code, kerr.UnknownTopicOrPartition.Code,
		kerr.OffsetOutOfRange.Code, // in range after all: retried, not reset
	}
	var injected atomic.Int32
	k.Cluster().ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		n := int(injected.Load())
		if n >= len(codes) {
			return nil, nil, false
		}
		k.Cluster().KeepControl()
		injected.Add(1)
		return partitionErrorAnswer(r.(*kmsg.FetchRequest), codes[n]), nil, true
	})
	f := openFetcher(t, testFetchConfig(k), "e", 0)
	f.SeekTo(0)
	got, _ := drain(t, f, 2)
	if int(injected.Load()) != len(codes) || strings.Join(values(got), "") != "ab" {
		t.Fatalf("after %d injected errors read %v", injected.Load(), values(got))
	}
}

// partitionErrorAnswer answers req with code for every partition it asks.
func partitionErrorAnswer(req *kmsg.FetchRequest, code int16) *kmsg.FetchResponse {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// The partition moves to another broker in the middle of the drain.
func TestFetchFollowsLeaderChange(t *testing.T) {
	k := harness.StartKafka(t, harness.NumBrokers(3))
	k.CreateTopic(t, "moving", 1)
	gen := func(from, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("v%04d", from+i)
		}
		return out
	}
	for c := range 10 {
		k.ProduceValues(t, "moving", 0, gen(c*100, 100)...)
	}
	cfg := testFetchConfig(k)
	cfg.FetchMaxPartitionBytes = 1 // one batch of 100 per fetch
	f, awaitRetries := openObserved(t, cfg, "moving")
	f.SeekTo(0)
	got, _ := drain(t, f, 500)

	leader := k.Cluster().LeaderFor("moving", 0)
	if err := k.Cluster().MoveTopicPartition("moving", 0, (leader+1)%3); err != nil {
		t.Fatal(err)
	}
	k.ProduceValues(t, "moving", 0, gen(1000, 100)...)
	more, _ := drain(t, f, 1100)
	awaitRetries(1) // the old leader refused at least one fetch
	got = append(got, more...)
	if v := values(got); strings.Join(v, ",") != strings.Join(gen(0, 1100), ",") {
		t.Fatalf("read %d records across the leader change, want 1100 in order", len(v))
	}
}

// Compaction can leave a batch whose last offsets have no record; the
// broker keeps returning that batch for offsets in its tail. kfake's own
// compaction drops such tails, so the batch is crafted: it claims 10 offsets
// and holds records for the first 3 only. The batch header's last offset
// tells where the next batch starts (KAFKA-5443): each drain costs the
// fetches of its batches and no probe of the gap.
func TestFetchCompactedBatchTail(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxBytes int
		after    int // records produced after the crafted batch
		fetches  int64
	}{
		{"at log end", 0, 0, 1},
		{"mid log one batch per fetch", 1, 5, 2},
		{"mid log", 0, 5, 1}, // the next batch comes in the same response
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := harness.StartKafka(t)
			k.CreateTopic(t, "compacted", 1)
			produceGappedBatch(t, k, "compacted", 0, 3, 10)
			var after []string
			for i := range tc.after {
				after = append(after, fmt.Sprintf("after-%d", i))
			}
			if len(after) > 0 {
				k.ProduceValues(t, "compacted", 0, after...)
			}
			cfg := testFetchConfig(k)
			cfg.FetchMaxPartitionBytes = tc.maxBytes
			f := openFetcher(t, cfg, "compacted", 0)
			f.SeekTo(0)
			end := int64(10 + tc.after)
			fetches := countFetches(k)
			got, _ := drain(t, f, end)
			want := append([]string{"kept-0", "kept-1", "kept-2"}, after...)
			if v := values(got); strings.Join(v, ",") != strings.Join(want, ",") {
				t.Fatalf("read %v, want %v", v, want)
			}
			if n := fetches.Swap(0); n != tc.fetches {
				t.Fatalf("drained with %d fetches, want %d", n, tc.fetches)
			}
			// Starting inside the tail works too.
			f.SeekTo(5)
			got, _ = drain(t, f, end)
			if v := values(got); strings.Join(v, ",") != strings.Join(after, ",") {
				t.Fatalf("from 5 read %v, want %v", v, after)
			}
			if n := fetches.Load(); n != tc.fetches {
				t.Fatalf("drained from 5 with %d fetches, want %d", n, tc.fetches)
			}
		})
	}
}

// produceGappedBatch writes one uncompressed batch claiming span offsets,
// of which only the first kept have a record, as compaction leaves them.
func produceGappedBatch(t *testing.T, k *harness.Kafka, topic string, partition, kept, span int) {
	t.Helper()
	var raw []byte
	now := time.Now().UnixMilli()
	for i := range kept {
		r := kmsg.NewRecord()
		r.OffsetDelta = int32(i)
		r.Value = []byte(fmt.Sprintf("kept-%d", i))
		r.Length = int32(len(r.AppendTo(nil)) - 1) // the length varint of a short record is one byte
		raw = r.AppendTo(raw)
	}
	b := kmsg.RecordBatch{
		Magic:           2,
		LastOffsetDelta: int32(span - 1),
		FirstTimestamp:  now,
		MaxTimestamp:    now,
		ProducerID:      -1,
		ProducerEpoch:   -1,
		FirstSequence:   -1,
		NumRecords:      int32(span),
		Records:         raw,
	}
	b.Length = int32(len(b.AppendTo(nil)) - 12)
	enc := b.AppendTo(nil)
	b.CRC = int32(crc32.Checksum(enc[21:], crc32.MakeTable(crc32.Castagnoli)))
	enc = b.AppendTo(nil)

	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = int32(partition)
	rp.Records = enc
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	// Produce v13+ names topics by id: stay below it to name this one.
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.MaxVersions(kversion.V3_6_0()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("produce crafted batch: %v", err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); err != nil {
		t.Fatalf("produce crafted batch: %v", err)
	}
}

func TestPartitions(t *testing.T) {
	k := harness.StartKafka(t, harness.NumBrokers(3), harness.SeedTopics(3, "a"))
	k.CreateTopic(t, "b", 2)
	cfg := testFetchConfig(k)
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	got, err := listPartitions(ctx, cfg, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "map[a:[0 1 2] b:[0 1]]" {
		t.Fatalf("Partitions = %v", got)
	}
	_, err = listPartitions(ctx, cfg, "a", "nope")
	if err == nil || !strings.Contains(err.Error(), `"nope"`) || !errors.Is(err, kafkago.UnknownTopicOrPartition) {
		t.Fatalf("unknown topic: error %v", err)
	}

	// A partition added later can be listed and read.
	k.AddPartitions(t, "b", 1)
	got, err = listPartitions(ctx, cfg, "b")
	if err != nil || fmt.Sprint(got["b"]) != "[0 1 2]" {
		t.Fatalf("after adding a partition: %v, %v", got, err)
	}
	k.ProduceValues(t, "b", 2, "new")
	f := openFetcher(t, cfg, "b", 2)
	f.SeekTo(0)
	if recs, _ := drain(t, f, 1); string(recs[0].Value) != "new" {
		t.Fatalf("read %v from the new partition", values(recs))
	}
}

func TestFetchUnknownTopic(t *testing.T) {
	k := harness.StartKafka(t)
	cfg := testFetchConfig(k)
	cfg.UnknownTopicTimeout = 200 * time.Millisecond
	for _, seek := range []int64{-1, 0} {
		f := openFetcher(t, cfg, "nope", 3)
		f.SeekTo(seek)
		ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		_, err := f.Fetch(ctx)
		cancel()
		if err == nil || !strings.HasPrefix(err.Error(), "fetch nope/3") || !errors.Is(err, kafkago.UnknownTopicOrPartition) {
			t.Fatalf("seek %d: fetch of an unknown topic: %v", seek, err)
		}
	}
}

func TestFetchAfterClose(t *testing.T) {
	k := harness.StartKafka(t)
	k.CreateTopic(t, "c", 1)
	f := openFetcher(t, testFetchConfig(k), "c", 0)
	f.SeekTo(0)
	f.Close()
	if _, err := f.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("fetch after close: %v", err)
	}
}

// BenchmarkFetch drains 200k records of one partition with the Fetcher and,
// for comparison, with kafka-go's plain connection API (DialLeader and
// ReadBatch, which cannot filter aborted transactions) and with
// kafkago.Client.Fetch. Each reports records/s.
func BenchmarkFetch(b *testing.B) {
	const n = 200_000
	for _, codec := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{{"uncompressed", kgo.NoCompression()}, {"snappy", kgo.SnappyCompression()}} {
		k := harness.StartKafka(b, harness.Compression(codec.codec))
		k.CreateTopic(b, "bench", 1)
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{
				Key:   []byte(fmt.Sprintf("key-%07d", i)),
				Value: []byte(fmt.Sprintf("value-%07d-%s", i, strings.Repeat("v", 86))), // 100 bytes
			}
		}
		k.Produce(b, "bench", 0, recs...)

		report := func(b *testing.B, total int) {
			b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "records/s")
		}
		for _, maxBytes := range []int{256 << 10, DefaultFetchMaxPartitionBytes, 16 << 20} {
			b.Run(fmt.Sprintf("%s/fetcher/maxbytes=%dKiB", codec.name, maxBytes>>10), func(b *testing.B) {
				cfg := Config{Brokers: k.Brokers(), FetchMaxPartitionBytes: maxBytes}
				f, err := NewFetcher(cfg, "bench", 0, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				ctx := context.Background()
				total := 0
				for b.Loop() {
					f.SeekTo(0)
					for got := 0; got < n; {
						pb, err := f.Fetch(ctx)
						if err != nil {
							b.Fatal(err)
						}
						got += len(pb.Records)
					}
					total += n
				}
				report(b, total)
			})
		}
		b.Run(codec.name+"/kafka-go-conn-readbatch", func(b *testing.B) {
			ctx := context.Background()
			conn, err := kafkago.DialLeader(ctx, "tcp", k.Brokers()[0], "bench", 0)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			total := 0
			for b.Loop() {
				if _, err := conn.Seek(0, kafkago.SeekAbsolute); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < n; {
					batch := conn.ReadBatchWith(kafkago.ReadBatchConfig{MinBytes: 1, MaxBytes: DefaultFetchMaxPartitionBytes, MaxWait: DefaultFetchMaxWait, IsolationLevel: kafkago.ReadCommitted})
					for {
						if _, err := batch.ReadMessage(); err != nil {
							break
						}
						got++
					}
					if err := batch.Close(); err != nil {
						b.Fatal(err)
					}
				}
				total += n
			}
			report(b, total)
		})
		b.Run(codec.name+"/kafka-go-client-fetch", func(b *testing.B) {
			ctx := context.Background()
			tr := &kafkago.Transport{}
			defer tr.CloseIdleConnections()
			c := &kafkago.Client{Addr: kafkago.TCP(k.Brokers()...), Transport: tr}
			total := 0
			for b.Loop() {
				for off := int64(0); off < n; {
					res, err := c.Fetch(ctx, &kafkago.FetchRequest{Topic: "bench", Offset: off, MaxBytes: DefaultFetchMaxPartitionBytes, MaxWait: DefaultFetchMaxWait, IsolationLevel: kafkago.ReadCommitted})
					if err != nil {
						b.Fatal(err)
					}
					for {
						r, err := res.Records.ReadRecord()
						if err != nil {
							break
						}
						if r.Offset >= off {
							if _, err := protocol.ReadAll(r.Key); err != nil {
								b.Fatal(err)
							}
							if _, err := protocol.ReadAll(r.Value); err != nil {
								b.Fatal(err)
							}
							off = r.Offset + 1
						}
					}
				}
				total += n
			}
			report(b, total)
		})
	}
}

// A Fetcher rewinds the blocks a guard releases.
var _ guard.Rewinder = (*Fetcher)(nil)

// fetchInBackground runs f.Fetch(ctx) in a goroutine of its own; its error
// comes on the channel.
func fetchInBackground(ctx context.Context, f *Fetcher) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := f.Fetch(ctx)
		done <- err
	}()
	return done
}

// cancelFetch cancels the fetch of done and fails unless it returns
// context.Canceled within d.
func cancelFetch(t *testing.T, cancel context.CancelFunc, done <-chan error, d time.Duration) {
	t.Helper()
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled fetch returned %v, want context.Canceled", err)
		}
		if took := time.Since(start); took > d {
			t.Fatalf("cancelled fetch took %v to return, want at most %v", took, d)
		}
	case <-time.After(d + 5*time.Second):
		t.Fatalf("cancelled fetch did not return within %v", d+5*time.Second)
	}
}
