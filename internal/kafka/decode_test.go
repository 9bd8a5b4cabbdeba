package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// testRecord is one record of a testBatch; a nil key or value is null.
type testRecord struct {
	offsetDelta    int64
	timestampDelta int64
	key, value     []byte
	headers        []sinks.Header
}

// testBatch describes a v2 record batch for encodeBatch.
type testBatch struct {
	base           int64
	firstTimestamp int64
	codec          compress.Compression
	attributes     int16 // ORed with codec
	producerID     int64
	records        []testRecord
	numRecords     int32 // record count written, len(records) when 0
	lastDelta      int32 // last offset delta, from the records when 0
	badCRC         bool
}

func appendNullable(b, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(b, -1)
	}
	return append(binary.AppendVarint(b, int64(len(v))), v...)
}

func appendTestRecord(dst []byte, r testRecord) []byte {
	body := []byte{0} // attributes
	body = binary.AppendVarint(body, r.timestampDelta)
	body = binary.AppendVarint(body, r.offsetDelta)
	body = appendNullable(body, r.key)
	body = appendNullable(body, r.value)
	body = binary.AppendVarint(body, int64(len(r.headers)))
	for _, h := range r.headers {
		body = appendNullable(body, []byte(h.Key))
		body = appendNullable(body, h.Value)
	}
	return append(binary.AppendVarint(dst, int64(len(body))), body...)
}

func encodeBatch(t testing.TB, b testBatch) []byte {
	t.Helper()
	var recs []byte
	for _, r := range b.records {
		recs = appendTestRecord(recs, r)
	}
	if b.codec != compress.None {
		var buf bytes.Buffer
		w := b.codec.Codec().NewWriter(&buf)
		if _, err := w.Write(recs); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		recs = buf.Bytes()
	}
	n := b.numRecords
	if n == 0 {
		n = int32(len(b.records))
	}
	last := b.lastDelta
	if last == 0 && len(b.records) > 0 {
		last = int32(b.records[len(b.records)-1].offsetDelta)
	}
	out := binary.BigEndian.AppendUint64(nil, uint64(b.base))
	out = binary.BigEndian.AppendUint32(out, uint32(batchHeaderLength-batchLengthEnd+len(recs)))
	out = binary.BigEndian.AppendUint32(out, 0) // leader epoch
	out = append(out, 2)
	out = binary.BigEndian.AppendUint32(out, 0) // crc, below
	out = binary.BigEndian.AppendUint16(out, uint16(b.attributes|int16(b.codec)))
	out = binary.BigEndian.AppendUint32(out, uint32(last))
	out = binary.BigEndian.AppendUint64(out, uint64(b.firstTimestamp))
	out = binary.BigEndian.AppendUint64(out, uint64(b.firstTimestamp)) // max timestamp
	pid := b.producerID
	if pid == 0 {
		pid = -1
	}
	out = binary.BigEndian.AppendUint64(out, uint64(pid))
	out = binary.BigEndian.AppendUint16(out, 0)          // producer epoch
	out = binary.BigEndian.AppendUint32(out, 0xffffffff) // base sequence
	out = binary.BigEndian.AppendUint32(out, uint32(n))
	out = append(out, recs...)
	crc := crc32.Checksum(out[batchAttrOffset:], crc32.MakeTable(crc32.Castagnoli))
	if b.badCRC {
		crc++
	}
	binary.BigEndian.PutUint32(out[batchCRCOffset:], crc)
	return out
}

func values3(prefix string, deltas ...int64) []testRecord {
	out := make([]testRecord, len(deltas))
	for i, d := range deltas {
		out[i] = testRecord{offsetDelta: d, timestampDelta: d, value: []byte(fmt.Sprintf("%s%d", prefix, d))}
	}
	return out
}

// controlBatch is a transaction marker of producer pid at offset.
func controlBatch(offset, pid int64, commit bool) testBatch {
	typ := []byte{0, 0, 0, 0}
	if commit {
		typ[3] = 1
	}
	return testBatch{
		base: offset, attributes: attrControl | attrTransactional, producerID: pid,
		records: []testRecord{{key: typ, value: []byte{0, 0, 0, 0, 0, 0}}},
	}
}

func txBatch(base, pid int64, prefix string, n int) testBatch {
	deltas := make([]int64, n)
	for i := range deltas {
		deltas[i] = int64(i)
	}
	return testBatch{base: base, attributes: attrTransactional, producerID: pid, records: values3(prefix, deltas...)}
}

func concat(t testing.TB, bs ...testBatch) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, encodeBatch(t, b)...)
	}
	return out
}

func recordValues(recs []sinks.Record) string {
	var s []string
	for _, r := range recs {
		s = append(s, fmt.Sprintf("%d:%s", r.Offset, r.Value))
	}
	return strings.Join(s, " ")
}

func TestDecodeRecordBatches(t *testing.T) {
	const ts = 1_700_000_000_000
	full := testBatch{base: 10, firstTimestamp: ts, records: []testRecord{
		{offsetDelta: 0, timestampDelta: 0, key: nil, value: []byte("v0")},
		{offsetDelta: 1, timestampDelta: 5, key: []byte{}, value: nil,
			headers: []sinks.Header{{Key: "h1", Value: []byte("x")}, {Key: "h2", Value: nil}, {Key: "", Value: []byte{}}}},
		{offsetDelta: 2, timestampDelta: -3, key: []byte("k2"), value: []byte(strings.Repeat("long", 100))},
	}}
	aborted := []fetchapi.ResponseTransaction{{ProducerID: 7, FirstOffset: 3}}
	for _, tc := range []struct {
		name      string
		raw       []byte
		from      int64
		committed bool
		aborted   []fetchapi.ResponseTransaction
		want      string // offset:value of the records
		next      int64
		err       string
	}{
		{name: "empty", raw: nil, from: 5, next: 5},
		{name: "fields", raw: concat(t, full), from: 10, want: "10:v0 11: 12:" + strings.Repeat("long", 100), next: 13},
		{name: "from inside batch", raw: concat(t, full), from: 12, want: "12:" + strings.Repeat("long", 100), next: 13},
		{name: "from after batch", raw: concat(t, full), from: 20, next: 20},
		{name: "gap between batches", raw: concat(t,
			testBatch{base: 0, records: values3("a", 0, 1)},
			testBatch{base: 10, records: values3("b", 0, 1)}),
			from: 0, want: "0:a0 1:a1 10:b0 11:b1", next: 12},
		// The next offset after a batch is its header's last offset + 1,
		// whatever compaction left of its records (KAFKA-5443).
		{name: "compacted batch", raw: concat(t, testBatch{base: 0, records: values3("a", 0, 4, 9), lastDelta: 12}),
			from: 0, want: "0:a0 4:a4 9:a9", next: 13},
		{name: "compacted tail", raw: concat(t, testBatch{base: 0, records: values3("a", 0, 1), numRecords: 10, lastDelta: 9}),
			from: 5, next: 10},
		{name: "emptied by compaction", raw: concat(t, testBatch{base: 4, lastDelta: 6}),
			from: 5, next: 11},
		{name: "truncated last batch", raw: concat(t, testBatch{base: 0, records: values3("a", 0, 1)}, testBatch{base: 2, records: values3("b", 0, 1)})[:140],
			from: 0, want: "0:a0 1:a1", next: 2},
		{name: "truncated length", raw: concat(t, testBatch{base: 0, records: values3("a", 0)})[:10], from: 0, next: 0},
		{name: "read_committed", committed: true, aborted: aborted, raw: concat(t,
			testBatch{base: 0, records: values3("plain", 0, 1, 2)},
			txBatch(3, 7, "abort", 2), txBatch(5, 8, "commit", 2),
			controlBatch(7, 7, false), txBatch(8, 7, "later", 1), controlBatch(9, 7, true), controlBatch(10, 8, true)),
			from: 0, want: "0:plain0 1:plain1 2:plain2 5:commit0 6:commit1 8:later0", next: 11},
		{name: "read_uncommitted", aborted: aborted, raw: concat(t,
			txBatch(3, 7, "abort", 2), controlBatch(5, 7, false)),
			from: 3, want: "3:abort0 4:abort1", next: 6},
		{name: "aborted at the end", committed: true, aborted: aborted, raw: concat(t,
			txBatch(3, 7, "abort", 2), controlBatch(5, 7, false)),
			from: 3, next: 6},
		// A response that starts at an abort marker: the list names the
		// aborted transaction (its marker is at or after the fetch
		// offset), which the marker itself must consume, or the
		// producer's next, committed, transaction is dropped.
		{name: "starting at an abort marker", committed: true, aborted: []fetchapi.ResponseTransaction{{ProducerID: 7, FirstOffset: 2}},
			raw:  concat(t, controlBatch(5, 7, false), txBatch(6, 7, "commit", 2), controlBatch(8, 7, true)),
			from: 5, want: "6:commit0 7:commit1", next: 9},
		{name: "an abort in the same batch's range", committed: true, aborted: []fetchapi.ResponseTransaction{{ProducerID: 7, FirstOffset: 5}},
			raw:  concat(t, txBatch(2, 7, "commit", 2), controlBatch(4, 8, true), txBatch(5, 7, "abort", 2), controlBatch(7, 7, false), txBatch(8, 7, "later", 1), controlBatch(9, 7, true)),
			from: 2, want: "2:commit0 3:commit1 8:later0", next: 10},
		{name: "control only", committed: true, raw: concat(t, controlBatch(4, 1, true)), from: 4, next: 5},
		{name: "bad crc", raw: concat(t, testBatch{base: 3, records: values3("a", 0), badCRC: true}), err: "record batch at 3: crc32c checksum mismatch"},
		{name: "unknown codec", raw: concat(t, testBatch{base: 3, records: values3("a", 0), attributes: 5}), err: "unsupported compression codec 5"},
		{name: "negative count", raw: concat(t, testBatch{base: 3, records: values3("a", 0), numRecords: -2}), err: "negative record count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decoder{from: tc.from, committed: tc.committed, aborted: tc.aborted}
			err := d.decode(tc.raw)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := recordValues(d.records); got != tc.want || d.next != tc.next {
				t.Fatalf("decoded %q next %d\nwant    %q next %d", got, d.next, tc.want, tc.next)
			}
		})
	}

	// The fields of the records, in detail.
	d := decoder{from: 10}
	if err := d.decode(concat(t, full)); err != nil {
		t.Fatal(err)
	}
	for i, r := range d.records {
		w := full.records[i]
		if (r.Key == nil) != (w.key == nil) || !bytes.Equal(r.Key, w.key) || (r.Value == nil) != (w.value == nil) || !bytes.Equal(r.Value, w.value) {
			t.Errorf("record %d: key %q value %q, want %q %q", i, r.Key, r.Value, w.key, w.value)
		}
		if want := time.UnixMilli(ts + w.timestampDelta); !r.Time.Equal(want) {
			t.Errorf("record %d: time %v, want %v", i, r.Time, want)
		}
		if len(r.Headers) != len(w.headers) {
			t.Fatalf("record %d: headers %v, want %v", i, r.Headers, w.headers)
		}
		for j, h := range r.Headers {
			if h.Key != w.headers[j].Key || !bytes.Equal(h.Value, w.headers[j].Value) || (h.Value == nil) != (w.headers[j].Value == nil) {
				t.Errorf("record %d header %d: %q=%q, want %q=%q", i, j, h.Key, h.Value, w.headers[j].Key, w.headers[j].Value)
			}
		}
		// Appending to a key or value must not overwrite what follows.
		if cap(r.Key) != len(r.Key) || cap(r.Value) != len(r.Value) {
			t.Errorf("record %d: key or value with spare capacity", i)
		}
	}
}

func TestDecodeCorruptRecords(t *testing.T) {
	good := encodeBatch(t, testBatch{base: 0, records: values3("a", 0, 1)})
	// Rewrite the records with a key length past the end, keeping the
	// CRC valid: the batch is well framed but its content is not.
	bad := slices.Clone(good)
	bad[batchHeaderLength+4] = 0x7e // the key length varint: 63
	binary.BigEndian.PutUint32(bad[batchCRCOffset:], crc32.Checksum(bad[batchAttrOffset:], castagnoli))
	d := decoder{}
	if err := d.decode(bad); err == nil || !strings.Contains(err.Error(), "corrupt record 0: invalid key") {
		t.Fatalf("error %v", err)
	}
	// Decoded on read, the batch passes its checks where it comes in and
	// the record fails where it is read, leaving what was in hand as it was.
	lazy := decoder{lazy: true}
	if err := lazy.decode(bad); err != nil {
		t.Fatalf("checks of a batch decoded on read: %v", err)
	}
	hand := make([]sinks.Record, 1, 8)
	got, err := PolledBatch{parts: lazy.parts, count: lazy.count}.AppendRecords(hand)
	if err == nil || !strings.Contains(err.Error(), "corrupt record 0: invalid key") || len(got) != 1 || got[:2][1].Value != nil {
		t.Fatalf("decoded on read: %d records, error %v", len(got), err)
	}
	// A record past the batch's last offset would lie outside its block.
	past := slices.Clone(good)
	binary.BigEndian.PutUint32(past[23:], 0) // last offset delta: 0, of records 0 and 1
	binary.BigEndian.PutUint32(past[batchCRCOffset:], crc32.Checksum(past[batchAttrOffset:], castagnoli))
	if err := (&decoder{}).decode(past); err == nil || !strings.Contains(err.Error(), "corrupt record 1: invalid offset delta") {
		t.Fatalf("a record past its batch's end: error %v", err)
	}
	short := slices.Clone(good[:batchHeaderLength-1])
	binary.BigEndian.PutUint32(short[8:], uint32(len(short)-batchLengthEnd))
	if err := (&decoder{}).decode(short); err == nil || !strings.Contains(err.Error(), "shorter than its header") {
		t.Fatalf("error %v", err)
	}
}

func TestDecodeCompressed(t *testing.T) {
	for _, c := range []compress.Compression{compress.Gzip, compress.Snappy, compress.Lz4, compress.Zstd} {
		t.Run(c.String(), func(t *testing.T) {
			recs := make([]testRecord, 500)
			for i := range recs {
				recs[i] = testRecord{offsetDelta: int64(i), key: []byte(fmt.Sprint(i)), value: []byte(strings.Repeat(fmt.Sprint(i), 30))}
			}
			raw := concat(t, testBatch{base: 100, codec: c, records: recs}, testBatch{base: 600, codec: c, records: recs[:3]})
			d := decoder{from: 150}
			if err := d.decode(raw); err != nil {
				t.Fatal(err)
			}
			if len(d.records) != 453 || d.next != 603 || d.records[0].Offset != 150 || string(d.records[0].Value) != strings.Repeat("50", 30) {
				t.Fatalf("%d records, next %d, first %d", len(d.records), d.next, d.records[0].Offset)
			}
		})
	}
}

// The fast path decodes like the kafka-go path it replaces.
func TestDecodeMatchesKafkaGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	codecs := []compress.Compression{compress.None, compress.Gzip, compress.Snappy, compress.Lz4, compress.Zstd}
	for iter := range 200 {
		var bs []testBatch
		var aborted []fetchapi.ResponseTransaction
		off := int64(rng.IntN(1000))
		for range 1 + rng.IntN(6) {
			pid := int64(rng.IntN(3))
			switch rng.IntN(4) {
			case 0:
				bs = append(bs, controlBatch(off, pid, rng.IntN(2) == 0))
				off++
				continue
			case 1:
				aborted = append(aborted, fetchapi.ResponseTransaction{ProducerID: pid, FirstOffset: off})
			}
			b := testBatch{base: off, firstTimestamp: rng.Int64N(1 << 42), codec: codecs[rng.IntN(len(codecs))], producerID: pid}
			if pid > 0 {
				b.attributes = attrTransactional
			}
			delta := int64(0)
			for range 1 + rng.IntN(40) {
				r := testRecord{offsetDelta: delta, timestampDelta: rng.Int64N(2000) - 1000}
				if rng.IntN(3) > 0 {
					r.key = []byte(fmt.Sprint("key", rng.IntN(100)))[:rng.IntN(5)]
				}
				if rng.IntN(5) > 0 {
					r.value = bytes.Repeat([]byte{byte(rng.IntN(256))}, rng.IntN(300))
				}
				for range rng.IntN(3) {
					r.headers = append(r.headers, sinks.Header{Key: fmt.Sprint("h", rng.IntN(3)), Value: []byte(fmt.Sprint(rng.IntN(9)))})
				}
				b.records = append(b.records, r)
				delta += 1 + int64(rng.IntN(3)) // compaction leaves holes
			}
			if rng.IntN(4) == 0 {
				// Compaction removed the batch's last records too.
				delta += int64(rng.IntN(5))
				b.lastDelta = int32(delta - 1)
			}
			bs = append(bs, b)
			off += delta + int64(rng.IntN(3))
		}
		raw := concat(t, bs...)
		if rng.IntN(4) == 0 {
			raw = raw[:len(raw)-rng.IntN(len(raw)/2+1)]
		}
		from := bs[0].base + int64(rng.IntN(int(off-bs[0].base)+2))
		committed := rng.IntN(2) == 0
		fast := decoder{from: from, committed: committed, aborted: aborted}
		if err := fast.decode(raw); err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		slow := decoder{from: from, committed: committed, aborted: aborted}
		if err := slow.decodeWithKafkaGo(raw); err != nil {
			t.Fatalf("iteration %d: kafka-go: %v", iter, err)
		}
		if fast.next != slow.next || len(fast.records) != len(slow.records) {
			t.Fatalf("iteration %d: next %d, %d records; kafka-go: next %d, %d records",
				iter, fast.next, len(fast.records), slow.next, len(slow.records))
		}
		for i, a := range fast.records {
			b := slow.records[i]
			if a.Offset != b.Offset || !a.Time.Equal(b.Time) || !bytes.Equal(a.Key, b.Key) || (a.Key == nil) != (b.Key == nil) ||
				!bytes.Equal(a.Value, b.Value) || (a.Value == nil) != (b.Value == nil) || len(a.Headers) != len(b.Headers) {
				t.Fatalf("iteration %d record %d: %+v; kafka-go %+v", iter, i, a, b)
			}
			for j := range a.Headers {
				if a.Headers[j].Key != b.Headers[j].Key || !bytes.Equal(a.Headers[j].Value, b.Headers[j].Value) {
					t.Fatalf("iteration %d record %d header %d: %+v; kafka-go %+v", iter, i, j, a.Headers[j], b.Headers[j])
				}
			}
		}
	}
}

// allocated returns the bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// fixChecksums rewrites the checksum of the batch or message of format v0
// or v1 that raw starts with, when it is whole, to match its content.
func fixChecksums(raw []byte) {
	if len(raw) <= batchMagicOffset {
		return
	}
	n := int(int32(binary.BigEndian.Uint32(raw[8:]))) + batchLengthEnd
	if n > len(raw) {
		return
	}
	switch magic := raw[batchMagicOffset]; {
	case magic == 2 && n >= batchAttrOffset:
		binary.BigEndian.PutUint32(raw[batchCRCOffset:], crc32.Checksum(raw[batchAttrOffset:n], castagnoli))
	case magic < 2 && n > batchMagicOffset:
		binary.BigEndian.PutUint32(raw[12:], crc32.ChecksumIEEE(raw[batchMagicOffset:n]))
	}
}

// craftedSnappy is a snappy batch, found by FuzzDecodeRecordBatches, whose
// xerial chunk claims a length near 4 GiB (its checksum is fixed up by
// fixChecksums): the decoder allocated 4,088 MiB before it failed.
const craftedSnappy = "00000010\x00\x00\x00Y0000\x022\xcf\x1bs0200000000000000000000000000000000000000\x82SNAPPY\x0000000\xc9\xc9\xff\xff\x80\x000\x00\x00\x00\x14\x12D000000000000000000"

func TestDecodeCraftedSnappyChunk(t *testing.T) {
	raw := []byte(craftedSnappy)
	fixChecksums(raw)
	var err error
	n := allocated(func() {
		d := decoder{from: 105}
		err = d.decode(raw)
	})
	if err == nil || !strings.Contains(err.Error(), "xerial chunk at 16: length 4286578736 past the 20 bytes left") {
		t.Fatalf("error %v", err)
	}
	if n > 1<<20 {
		t.Fatalf("decode allocated %d bytes", n)
	}
	t.Logf("%v; %d bytes allocated", err, n)
}

var codecs = []compress.Compression{compress.Gzip, compress.Snappy, compress.Lz4, compress.Zstd}

// A batch of 64 MiB of zeros, which its codec compresses to 15 KiB (zstd)
// to 3.2 MiB (snappy), inflates past a lower limit with ErrBatchTooLarge,
// allocating at most about the limit, and decodes within a higher one,
// allocating about what it decompressed.
func TestDecodeThousandfold(t *testing.T) {
	const size = 64 << 20
	recs := make([]testRecord, 1024)
	zeros := make([]byte, size/len(recs))
	var encoded int
	for i := range recs {
		recs[i] = testRecord{offsetDelta: int64(i), value: zeros}
		encoded += len(appendTestRecord(nil, recs[i]))
	}
	for _, c := range codecs {
		t.Run(c.String(), func(t *testing.T) {
			raw := encodeBatch(t, testBatch{base: 7, codec: c, records: recs})
			const limit = 32 << 20
			var err error
			n := allocated(func() {
				d := decoder{maxBytes: limit}
				err = d.decode(raw)
			})
			var tooLarge *BatchTooLargeError
			if !errors.Is(err, ErrBatchTooLarge) || !errors.As(err, &tooLarge) {
				t.Fatalf("error %v", err)
			}
			if e := tooLarge; e.BaseOffset != 7 || e.Codec != c || e.Compressed != len(raw)-batchHeaderLength || e.Size <= limit || e.Limit != limit {
				t.Fatalf("error %+v", e)
			}
			if n > limit+1<<20 {
				t.Fatalf("decode over the limit of %d allocated %d bytes", limit, n)
			}
			t.Logf("%d bytes compressed: %v; %d bytes allocated", len(raw)-batchHeaderLength, err, n)

			d := decoder{maxBytes: 2 * size}
			n = allocated(func() { err = d.decode(raw) })
			if err != nil {
				t.Fatal(err)
			}
			if len(d.records) != len(recs) || d.next != 7+int64(len(recs)) || d.inflated != encoded {
				t.Fatalf("%d records, next %d, %d bytes decompressed (want %d)", len(d.records), d.next, d.inflated, encoded)
			}
			for i, r := range d.records {
				if r.Offset != 7+int64(i) || !bytes.Equal(r.Value, zeros) {
					t.Fatalf("record %d at %d: %d bytes", i, r.Offset, len(r.Value))
				}
			}
			if n > uint64(d.inflated)+1<<20 {
				t.Fatalf("decode allocated %d bytes", n)
			}
			t.Logf("within a limit of %d: %d bytes decompressed, %d bytes allocated", d.maxBytes, d.inflated, n)
		})
	}
}

// The limit covers the batches of a decode together; records and next hold
// what the batches before the one past it gave.
func TestDecodeLimit(t *testing.T) {
	big := make([]testRecord, 10)
	for i := range big {
		big[i] = testRecord{offsetDelta: int64(i), value: bytes.Repeat([]byte{byte(i)}, 100<<10)}
	}
	batchBytes := len(encodeBatch(t, testBatch{records: big})) - batchHeaderLength
	for _, tc := range []struct {
		name     string
		maxBytes int
		raw      []byte
		want     string // offset:length of the records
		next     int64
		inflated int
		err      *BatchTooLargeError
	}{
		{name: "within", maxBytes: 2 * batchBytes, raw: concat(t, testBatch{base: 0, codec: compress.Gzip, records: big}, testBatch{base: 10, codec: compress.Zstd, records: big}),
			want: "0:102400 1:102400 2:102400 3:102400 4:102400 5:102400 6:102400 7:102400 8:102400 9:102400 10:102400 11:102400 12:102400 13:102400 14:102400 15:102400 16:102400 17:102400 18:102400 19:102400", next: 20, inflated: 2 * batchBytes},
		{name: "second batch past", maxBytes: 2*batchBytes - 1, raw: concat(t, testBatch{base: 0, codec: compress.Lz4, records: big}, testBatch{base: 12, codec: compress.Snappy, records: big}),
			want: "0:102400 1:102400 2:102400 3:102400 4:102400 5:102400 6:102400 7:102400 8:102400 9:102400", next: 12, inflated: batchBytes,
			err: &BatchTooLargeError{BaseOffset: 12, Codec: compress.Snappy, Size: int64(batchBytes), Limit: batchBytes - 1}},
		{name: "uncompressed is free", maxBytes: -1, raw: concat(t, testBatch{base: 0, records: big[:2]}, testBatch{base: 2, codec: compress.Gzip, records: big[:1]}),
			want: "0:102400 1:102400", next: 2,
			err: &BatchTooLargeError{BaseOffset: 2, Codec: compress.Gzip, Size: 1, Limit: 0}},
		// Nothing to decompress, and the batch still covers its offset.
		{name: "empty compressed batch", maxBytes: -1, raw: concat(t, testBatch{base: 0, codec: compress.Zstd, numRecords: 1, lastDelta: 0}),
			next: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decoder{maxBytes: tc.maxBytes}
			err := d.decode(tc.raw)
			var got []string
			for _, r := range d.records {
				got = append(got, fmt.Sprintf("%d:%d", r.Offset, len(r.Value)))
			}
			if strings.Join(got, " ") != tc.want || d.next != tc.next || d.inflated != tc.inflated {
				t.Errorf("decoded %q next %d, %d bytes decompressed\nwant    %q next %d, %d bytes", got, d.next, d.inflated, tc.want, tc.next, tc.inflated)
			}
			if tc.err == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var e *BatchTooLargeError
			if !errors.As(err, &e) || !errors.Is(err, ErrBatchTooLarge) {
				t.Fatalf("error %v", err)
			}
			tc.err.Compressed = e.Compressed
			if *e != *tc.err {
				t.Fatalf("error %+v, want %+v", e, tc.err)
			}
		})
	}
	if got := (&decoder{}).limit(); got != 64<<20 {
		t.Fatalf("default limit %d", got)
	}
}

// heapAllocs returns the bytes allocated on the heap so far, by the count
// of runtime/metrics (cheap enough for every fuzzing input, and exact to a
// span of each size class).
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// fuzzMaxBytes is the limit FuzzDecodeRecordBatches decodes with.
const fuzzMaxBytes = 1 << 20

// decodeAllocBound is what decoding raw within a limit may allocate, having
// decompressed inflated bytes: the records and headers those bytes can
// hold (a record takes 6 bytes, a sinks.Record 104, a header 2 and a
// sinks.Header 40, in slices that may have grown twice over), the records
// compressed batches claim, a sinks.Record a byte at most; for a batch that
// failed at the limit, buffers that grew to it (gzip) or that were tried
// short of it, then at it (zstd); and the first use of the codecs' pooled
// state and of kafka-go's buffers for messages of format v0 and v1.
func decodeAllocBound(raw []byte, inflated, limit int) uint64 {
	return 160*uint64(len(raw)) + 48*uint64(inflated) + 3*uint64(limit) + 2<<20
}

func FuzzDecodeRecordBatches(f *testing.F) {
	f.Add(concat(f, testBatch{base: 3, records: values3("a", 0, 1, 5)}), int64(0), false)
	f.Add(concat(f, txBatch(3, 7, "x", 3), controlBatch(6, 7, false)), int64(4), true)
	f.Add(concat(f, testBatch{base: 0, codec: compress.Snappy, records: values3("s", 0, 1)}), int64(1), true)
	f.Add(concat(f, testBatch{base: 0, records: []testRecord{{key: []byte("k"), headers: []sinks.Header{{Key: "a", Value: []byte("b")}}}}}), int64(0), false)
	// A v2 batch claiming a huge record count followed by a v1 message:
	// kafka-go allocated the count before checking anything.
	f.Add([]byte("00000000\x00\x00\x00L0000\x02\x14\x1d\f\xc70000000000000000000000000000000000000000\"000\x01\x04000000000000\x10000\x01\x0400000000000\x00\x00\x000\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\a\x00\x00\xff\xff\xff\xff\x00\x00\x00\x01 \x00\x00\x00\b\x00\x00\x00\x00\f\x00\x00\x00\x00\x00\x00\x00"), int64(-9), true)
	f.Add([]byte(craftedSnappy), int64(105), false)
	// A message of format v1 compressed with lz4 in 4 MiB blocks: kafka-go's
	// reader took two such buffers to decompress its 73 bytes.
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00g\x99U\xcaU\x01\x03\x00\x00\x01\xa27mt\x12\xff\xff\xff\xff\x00\x00\x00Q\x04\"M\x18dp\xb9>\x00\x00\x00\x16\x00\x01\x00\xf3\n\x18\xbcAp\x00\x01\x00\x00\x00\x01\xa27mt\x12\xff\xff\xff\xff\x00\x00\x00\x02v0#\x00\x90\x01\x00\x00\x00\x19\r\xd1\x18\xd1$\x00\x00$\x00\xd0t\x12\x00\x00\x00\x01k\x00\x00\x00\x02v1\x00\x00\x00\x00W:\xe2\xef"), int64(0), true)
	for _, c := range codecs {
		recs := values3(c.String(), 0, 1, 2)
		recs[1].headers = []sinks.Header{{Key: "h", Value: []byte("v")}}
		f.Add(concat(f, testBatch{base: 5, codec: c, records: recs}), int64(6), false)
		var buf bytes.Buffer
		rs := protocol.RecordSet{Version: 1, Attributes: protocol.Attributes(c), Records: protocol.NewRecordReader(
			protocol.Record{Value: protocol.NewBytes([]byte("v0"))}, protocol.Record{Key: protocol.NewBytes([]byte("k")), Value: protocol.NewBytes([]byte("v1"))})}
		if _, err := rs.WriteTo(&buf); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes()[4:], int64(0), false)
	}
	// A message of format v1 whose inner offsets, reckoned back from the
	// wrapper's, came to the largest offset, which next cannot pass.
	f.Add([]byte("\x80\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00gO\x9dk9\x01C00000000\xff000\x00\x00\x00Q\x04\"M\x18dp\xb9>\x00\x00\x00\x16\x00\x01\x00\xf3\n\x18\xbcAp\x00\x01\x00\x00\x00\x01\xa27mt\x12\xff\xff\xff\xff\x00\x00\x00\x02v0 \x00\x90\x01\x00\x00\x00\x19\r\xd1\x18\xd1$\x00\x00$\x00\xd0t\x12\x00\x00\x00\x01k\x00\x00\x00\x02v1\x00\x00\x00\x00W:\xe2\xef"), int64(0), true)
	f.Fuzz(func(t *testing.T, raw []byte, from int64, committed bool) {
		// Let the fuzzer's batches and messages pass their checksum.
		fixChecksums(raw)
		newDecoder := func(lazy bool) decoder {
			return decoder{from: from, committed: committed, aborted: []fetchapi.ResponseTransaction{{ProducerID: 7, FirstOffset: 3}},
				maxBytes: fuzzMaxBytes, lazy: lazy}
		}
		d := newDecoder(false)
		before := heapAllocs()
		err := d.decode(raw)
		if n, bound := heapAllocs()-before, decodeAllocBound(raw, d.inflated, fuzzMaxBytes); n > bound {
			t.Fatalf("decoding %d bytes (%d decompressed) allocated %d bytes, over %d: %v", len(raw), d.inflated, n, bound, err)
		}
		if d.inflated > fuzzMaxBytes {
			t.Fatalf("decompressed %d bytes, over the limit of %d", d.inflated, fuzzMaxBytes)
		}
		if err != nil {
			return
		}
		if d.next < from {
			t.Fatalf("next %d before from %d", d.next, from)
		}
		prev := from - 1
		for _, r := range d.records {
			if r.Offset <= prev || r.Offset >= d.next {
				t.Fatalf("record at %d after %d, next %d", r.Offset, prev, d.next)
			}
			prev = r.Offset
		}
		checkDecodeOnRead(t, raw, d, newDecoder(true))
	})
}

// checkDecodeOnRead decodes raw again with lazy, a decoder like eager's
// that leaves the records to its reader (then AppendRecords after a record
// already in hand), and checks that it gets what eager, which succeeded,
// got: the same records, field for field, and the same next.
func checkDecodeOnRead(t *testing.T, raw []byte, eager, lazy decoder) {
	t.Helper()
	if err := lazy.decode(raw); err != nil {
		t.Fatalf("decoded on read: %v; decoded at once: no error", err)
	}
	if lazy.next != eager.next || lazy.inflated != eager.inflated {
		t.Fatalf("decoded on read: next %d, inflated %d; at once: %d, %d", lazy.next, lazy.inflated, eager.next, eager.inflated)
	}
	b := PolledBatch{parts: lazy.parts, count: lazy.count}
	if lazy.parts == nil {
		b = PolledBatch{Records: lazy.records}
	}
	if b.Len() < len(eager.records) {
		t.Fatalf("decoded on read: Len %d, below the %d records decoded at once", b.Len(), len(eager.records))
	}
	head := sinks.Record{Offset: -7, Value: []byte("in hand")}
	got, err := b.AppendRecords([]sinks.Record{head})
	if err != nil {
		t.Fatalf("decoded on read: %v; decoded at once: no error", err)
	}
	if len(got) != 1+len(eager.records) || got[0].Offset != head.Offset || !bytes.Equal(got[0].Value, head.Value) {
		t.Fatalf("decoded on read: %d records after the one in hand (%+v), want %d", len(got)-1, got[0], len(eager.records))
	}
	for i, w := range eager.records {
		r := got[1+i]
		if r.Offset != w.Offset || !r.Time.Equal(w.Time) || !bytes.Equal(r.Key, w.Key) || (r.Key == nil) != (w.Key == nil) ||
			!bytes.Equal(r.Value, w.Value) || (r.Value == nil) != (w.Value == nil) || !slices.EqualFunc(r.Headers, w.Headers, func(a, b sinks.Header) bool {
			return a.Key == b.Key && bytes.Equal(a.Value, b.Value) && (a.Value == nil) == (b.Value == nil)
		}) {
			t.Fatalf("record %d decoded on read %+v, at once %+v", i, r, w)
		}
	}
}

// decodeWithKafkaGo is how the fetcher decoded record sets before it parsed
// them itself: with kafka-go's decoder, and the rules of Kafka's Java
// consumer for transactions (aborted transactions consumed up to each
// batch's last offset, for every batch of a producer, markers included) and
// for where a batch ends (its header's last offset, KAFKA-5443), which it
// reads from the header itself since kafka-go does not expose it.
func (d *decoder) decodeWithKafkaGo(raw []byte) error {
	d.next = d.from
	var lasts []int64
	for rest := raw; len(rest) >= batchHeaderLength; {
		n := int(binary.BigEndian.Uint32(rest[8:])) + batchLengthEnd
		if n > len(rest) {
			break
		}
		lasts = append(lasts, int64(binary.BigEndian.Uint64(rest))+int64(int32(binary.BigEndian.Uint32(rest[23:]))))
		rest = rest[n:]
	}
	rr, err := readLegacy(raw)
	if err != nil || rr == nil {
		return err
	}
	if d.committed && len(d.aborted) > 0 {
		d.sortAborted()
	}
	readAll := func(rr protocol.RecordReader, deliver bool, control bool, pid int64) error {
		for {
			r, err := rr.ReadRecord()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if control {
				if r.Offset >= d.next {
					d.next = r.Offset + 1
				}
				if k, _ := protocol.ReadAll(r.Key); d.committed && len(k) == 4 && k[3] == controlAbort {
					delete(d.abortedPIDs, pid)
				}
				continue
			}
			if r.Offset >= d.from {
				if deliver {
					rec := sinks.Record{Offset: r.Offset, Time: r.Time}
					rec.Key, _ = d.copyBytes(r.Key)
					rec.Value, _ = d.copyBytes(r.Value)
					for _, h := range r.Headers {
						rec.Headers = append(rec.Headers, sinks.Header{Key: h.Key, Value: h.Value})
					}
					d.records = append(d.records, rec)
				}
				d.next = max(d.next, r.Offset+1)
			}
		}
	}
	for i, batch := range rr.(*protocol.RecordStream).Records {
		switch b := batch.(type) {
		case *protocol.RecordBatch:
			d.batchStart(b.BaseOffset)
			if d.committed && b.ProducerID >= 0 {
				d.activateAborts(lasts[i])
			}
			deliver := true
			if d.committed && b.Attributes.Transactional() {
				_, isAborted := d.abortedPIDs[b.ProducerID]
				deliver = !isAborted
			}
			err = readAll(b.Records, deliver, false, 0)
		case *protocol.ControlBatch:
			d.batchStart(b.BaseOffset)
			if d.committed && b.ProducerID >= 0 {
				d.activateAborts(lasts[i])
			}
			err = readAll(b.Records, false, true, b.ProducerID)
		default:
			err = fmt.Errorf("unexpected batch %T", batch)
		}
		if err != nil {
			return err
		}
		d.next = max(d.next, lasts[i]+1)
	}
	return nil
}

// BenchmarkDecode decodes one partition's worth of a fetch response, 1 MiB of
// 100-byte records in batches of 16 KiB (before compression), as a broker
// returns them to a consumer of a producer with the default linger.
func BenchmarkDecode(b *testing.B) {
	for _, c := range []compress.Compression{compress.None, compress.Gzip, compress.Snappy, compress.Lz4, compress.Zstd} {
		var raw []byte
		var n int
		for base := int64(0); len(raw) < 1<<20 || (c != compress.None && n < 10_000); base += 160 {
			recs := make([]testRecord, 160)
			for i := range recs {
				recs[i] = testRecord{offsetDelta: int64(i), key: []byte(fmt.Sprintf("key-%07d", int(base)+i)),
					value: []byte(fmt.Sprintf("value-%07d-%s", int(base)+i, strings.Repeat("v", 76)))}
			}
			raw = append(raw, encodeBatch(b, testBatch{base: base, codec: c, records: recs})...)
			n += len(recs)
		}
		b.Run(c.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d := decoder{}
				if err := d.decode(raw); err != nil || len(d.records) != n {
					b.Fatalf("%d records, %v", len(d.records), err)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkAppendRecords decodes on read (DecodeOnRead) 8 MiB of 100-byte
// records, uncompressed, in batches of 160, into one reused slice of a
// block's size, as a partition reading a backlog does.
func BenchmarkAppendRecords(b *testing.B) {
	var raw []byte
	n := 0
	for base := int64(0); len(raw) < 8<<20; base += 160 {
		recs := make([]testRecord, 160)
		for i := range recs {
			recs[i] = testRecord{offsetDelta: int64(i), timestampDelta: int64(i),
				value: []byte(fmt.Sprintf("value-%07d-%s", int(base)+i, strings.Repeat("v", 82)))}
		}
		raw = append(raw, encodeBatch(b, testBatch{base: base, codec: compress.None, records: recs})...)
		n += len(recs)
	}
	d := decoder{lazy: true}
	if err := d.decode(raw); err != nil {
		b.Fatal(err)
	}
	batch := PolledBatch{parts: d.parts, count: d.count}
	block := make([]sinks.Record, 0, n)
	b.ReportAllocs()
	for b.Loop() {
		got, err := batch.AppendRecords(block[:0])
		if err != nil || len(got) != n {
			b.Fatalf("%d records, %v", len(got), err)
		}
		clear(got)
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
}

// TestVarint checks the decoder's own varint against encoding/binary's, on
// every value's edges, on overlong and truncated encodings, and on random
// bytes: a record's lengths and deltas are read with it.
func TestVarint(t *testing.T) {
	var inputs [][]byte
	for _, v := range []int64{0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, 1 << 20, -(1 << 40), math.MaxInt64, math.MinInt64} {
		enc := binary.AppendVarint(nil, v)
		inputs = append(inputs, enc, enc[:len(enc)-1], append(enc, 0x7f))
	}
	inputs = append(inputs, nil,
		bytes.Repeat([]byte{0xff}, 9), append(bytes.Repeat([]byte{0xff}, 9), 0x01), append(bytes.Repeat([]byte{0xff}, 9), 0x02),
		append(bytes.Repeat([]byte{0x80}, 9), 0x00), bytes.Repeat([]byte{0x80}, 10), append(bytes.Repeat([]byte{0x80}, 10), 0x00))
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.Uint32())
			if rng.IntN(2) == 0 {
				b[i] |= 0x80
			}
		}
		inputs = append(inputs, b)
	}
	for _, in := range inputs {
		got, gn := varint(in)
		want, wn := binary.Varint(in)
		if got != want || gn != wn {
			t.Fatalf("varint(% x) = %d, %d; binary.Varint: %d, %d", in, got, gn, want, wn)
		}
	}
}
