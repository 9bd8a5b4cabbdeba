package kafka

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"time"

	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Record batches (message format v2, "magic 2") are parsed here straight
// from the bytes of the fetch response: keys, values and header values of
// the records returned sub-slice that buffer (or, for a compressed batch, the
// batch's decompressed buffer), which is never written again. Messages in
// the older formats, magic 0 and 1, are handed to kafka-go's decoder, but
// for compressed ones, which are unwrapped here.
//
// Nothing the input declares, a length or a count, sizes an allocation
// beyond what the bytes at hand can hold: records are counted against the
// bytes they take at least, and compressed records are decompressed within
// the decoder's limit (inflate.go).
//
// The layout of a v2 batch, offsets from its start:
//
//	 0 base offset      int64
//	 8 batch length     int32   (bytes after this field)
//	12 leader epoch     int32
//	16 magic            int8    (2)
//	17 crc              uint32  (CRC-32C of bytes 21 to the end)
//	21 attributes       int16
//	23 last offset delta int32
//	27 first timestamp  int64
//	35 max timestamp    int64
//	43 producer id      int64
//	51 producer epoch   int16
//	53 base sequence    int32
//	57 record count     int32
//	61 records
const (
	batchLengthEnd    = 12 // the base offset and the batch length
	batchMagicOffset  = 16
	batchCRCOffset    = 17
	batchAttrOffset   = 21
	batchHeaderLength = 61
)

// Batch attribute bits.
const (
	attrCompression   = 0x07
	attrTransactional = 0x10
	attrControl       = 0x20
)

// controlAbort is the type of an abort marker, in the key of a control record.
const controlAbort = 0

// minRecordLength is the fewest bytes a record takes: its length, its
// attributes, its timestamp and offset deltas and its key and value lengths,
// a byte each.
const minRecordLength = 6

// minHeaderLength is the fewest bytes a record header takes: its key and
// value lengths.
const minHeaderLength = 2

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordBatch is the header of one v2 batch and its records, still encoded
// and possibly compressed.
type recordBatch struct {
	baseOffset     int64
	attributes     int16
	firstTimestamp int64
	producerID     int64
	numRecords     int32
	records        []byte
}

// nextBatch splits the first batch off raw. ok is false when raw does not
// hold a whole batch: a broker may end a response with a truncated one,
// which is ignored (it is fetched again). The batch must be of format v2.
func nextBatch(raw []byte) (b recordBatch, rest []byte, ok bool, err error) {
	if len(raw) < batchLengthEnd {
		return b, nil, false, nil
	}
	length := int32(binary.BigEndian.Uint32(raw[8:]))
	if length < 0 || int64(len(raw)-batchLengthEnd) < int64(length) {
		return b, nil, false, nil
	}
	end := batchLengthEnd + int(length)
	b.baseOffset = int64(binary.BigEndian.Uint64(raw))
	if end < batchHeaderLength {
		return b, nil, false, fmt.Errorf("record batch at %d: length %d shorter than its header", b.baseOffset, length)
	}
	if magic := raw[batchMagicOffset]; magic != 2 {
		return b, nil, false, fmt.Errorf("record batch at %d: unexpected message format v%d", b.baseOffset, magic)
	}
	want := binary.BigEndian.Uint32(raw[batchCRCOffset:])
	if got := crc32.Checksum(raw[batchAttrOffset:end], castagnoli); got != want {
		return b, nil, false, fmt.Errorf("record batch at %d: crc32c checksum mismatch (computed %08x, stored %08x)", b.baseOffset, got, want)
	}
	b.attributes = int16(binary.BigEndian.Uint16(raw[21:]))
	b.firstTimestamp = int64(binary.BigEndian.Uint64(raw[27:]))
	b.producerID = int64(binary.BigEndian.Uint64(raw[43:]))
	b.numRecords = int32(binary.BigEndian.Uint32(raw[57:]))
	if b.numRecords < 0 {
		return b, nil, false, fmt.Errorf("record batch at %d: negative record count %d", b.baseOffset, b.numRecords)
	}
	b.records = raw[batchHeaderLength:end:end]
	return b, raw[end:], true, nil
}

// scanBatches walks the whole batches of raw without checking them and
// returns the number of records they claim, to size the records slice: at
// most what the bytes of an uncompressed batch can hold, and one a byte of a
// compressed batch, more than any but the most repetitive records compress
// to (a batch that claims more, and holds them, grows the slice once
// decompressed).
func scanBatches(raw []byte) (records int) {
	for len(raw) >= batchLengthEnd {
		length := int32(binary.BigEndian.Uint32(raw[8:]))
		if length < 0 || int64(len(raw)-batchLengthEnd) < int64(length) {
			break
		}
		end := batchLengthEnd + int(length)
		if end >= batchHeaderLength && raw[batchMagicOffset] == 2 {
			if n := int32(binary.BigEndian.Uint32(raw[57:])); n > 0 {
				room := end - batchHeaderLength
				if raw[batchAttrOffset+1]&attrCompression == 0 {
					room /= minRecordLength
				}
				records += min(int(n), room)
			}
		}
		raw = raw[end:]
	}
	return records
}

// legacyEntry returns the length of the message of format v0 or v1 that
// raw starts with, or 0 when raw starts otherwise. These messages are
// framed like batches: an offset, then the length of the rest.
func legacyEntry(raw []byte) int {
	if len(raw) <= batchMagicOffset || raw[batchMagicOffset] >= 2 {
		return 0
	}
	length := int32(binary.BigEndian.Uint32(raw[8:]))
	if length < 0 || int64(len(raw)-batchLengthEnd) < int64(length) {
		return 0
	}
	if end := batchLengthEnd + int(length); end > batchMagicOffset {
		return end
	}
	return 0
}

func (b *recordBatch) compression() compress.Compression {
	return compress.Compression(b.attributes & attrCompression)
}

// payload returns the encoded records of b, decompressed within the
// decoder's limit, which the bytes decompressed count against.
func (d *decoder) payload(b *recordBatch) ([]byte, error) {
	c := b.compression()
	if c == compress.None {
		return b.records, nil
	}
	if c.Codec() == nil {
		return nil, fmt.Errorf("record batch at %d: unsupported compression codec %d", b.baseOffset, c)
	}
	out, err := d.inflate(b.baseOffset, c, b.records)
	if err != nil {
		return nil, err
	}
	if b.attributes&attrControl == 0 {
		// The records this batch can hold, now that its bytes are known
		// (scanBatches counted at most a byte each).
		d.records = slices.Grow(d.records, min(int(b.numRecords), len(out)/minRecordLength))
	}
	return out, nil
}

// inflate decompresses the records of the batch or message at offset,
// within what is left of the decoder's limit, and counts what it produced.
func (d *decoder) inflate(offset int64, c compress.Compression, src []byte) ([]byte, error) {
	left := d.limit() - d.inflated
	out, err := inflate(c, src, left)
	if err != nil {
		return nil, d.inflateError(offset, c, src, left, err)
	}
	d.inflated += len(out)
	return out, nil
}

func (d *decoder) inflateError(offset int64, c compress.Compression, src []byte, left int, err error) error {
	if o := (*overLimit)(nil); errors.As(err, &o) {
		return &BatchTooLargeError{BaseOffset: offset, Codec: c, Compressed: len(src), Size: o.size, Limit: left}
	}
	return fmt.Errorf("record batch at %d: decompress %s: %w", offset, c, err)
}

// limit returns how many bytes decode may decompress: maxBytes, or
// defaultMaxDecompressed when it is zero.
func (d *decoder) limit() int {
	switch {
	case d.maxBytes == 0:
		return defaultMaxDecompressed
	case d.maxBytes < 0:
		return 0
	}
	return d.maxBytes
}

// decoder turns the record batches of one fetch response into records,
// dropping records before from, control records and, under read_committed,
// aborted records; next ends up past every offset it saw.
//
// The records of compressed batches, which the records returned alias, are
// decompressed within maxBytes: decode fails with a *BatchTooLargeError
// (matching ErrBatchTooLarge) at the first batch that would go past it,
// with records and next holding what the batches before it gave (next at
// most that batch's base offset). inflated tells what the decode
// decompressed, to count against the caller's memory budget.
type decoder struct {
	from      int64
	committed bool
	aborted   []fetchapi.ResponseTransaction
	// maxBytes bounds the bytes one decode decompresses, all batches
	// together: when 0, defaultMaxDecompressed (64 MiB); when negative,
	// nothing (a compressed batch with any content fails). Uncompressed
	// batches, which the records alias in the input, do not count.
	maxBytes int

	// inflated is the number of bytes the last decode decompressed, which
	// its records hold on to (a gzip stream whose trailer does not tell
	// its size, of several members, is read into a buffer that may have
	// up to twice that capacity).
	inflated int

	records []sinks.Record
	next    int64
	// stuckBase is the base offset of the last batch seen that started at
	// or before from, or -1: when nothing moves next, that batch has a
	// compacted tail covering from.
	stuckBase int64
	// abortedPIDs are producers whose current transaction is aborted.
	abortedPIDs map[int64]struct{}
	// headerKeys interns header keys, which repeat from record to record.
	headerKeys map[string]string
	// arena holds the keys and values copied out of kafka-go's buffers by
	// the legacy path.
	arena []byte
}

// decode decodes the record sets of one partition, as the fetch response
// holds them.
func (d *decoder) decode(raw []byte) error {
	d.next = d.from
	d.stuckBase = -1
	d.inflated = 0
	if len(raw) == 0 {
		return nil
	}
	if d.committed && len(d.aborted) > 0 {
		d.sortAborted()
	}
	if n := scanBatches(raw); n > 0 {
		d.records = make([]sinks.Record, 0, n)
	}
	for {
		if n := legacyEntry(raw); n > 0 {
			if err := d.decodeLegacy(raw[:n]); err != nil {
				return err
			}
			raw = raw[n:]
			continue
		}
		b, rest, ok, err := nextBatch(raw)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		raw = rest
		d.batchStart(b.baseOffset)
		data, err := d.payload(&b)
		if err != nil {
			return err
		}
		if b.attributes&attrControl != 0 {
			err = d.readControl(&b, data)
		} else {
			deliver := true
			if d.committed && b.attributes&attrTransactional != 0 {
				d.activateAborts(b.baseOffset)
				_, isAborted := d.abortedPIDs[b.producerID]
				deliver = !isAborted
			}
			err = d.readRecords(&b, data, deliver)
		}
		if err != nil {
			return err
		}
	}
}

func (d *decoder) sortAborted() {
	d.aborted = slices.Clone(d.aborted)
	slices.SortFunc(d.aborted, func(a, b fetchapi.ResponseTransaction) int {
		return cmpInt64(a.FirstOffset, b.FirstOffset)
	})
}

// batchStart accounts for a batch beginning at base. Batches are contiguous
// and the broker returns them from the one holding from onward, so offsets
// between from and a later batch's base are absent from the log.
func (d *decoder) batchStart(base int64) {
	if base > d.next {
		d.next = base
	}
	if base <= d.from {
		d.stuckBase = base
	}
}

// activateAborts marks as aborted the producers of the aborted transactions
// that start at or before offset. A transaction starts with a batch of its
// own, so comparing with the base offset of the current batch is enough.
func (d *decoder) activateAborts(offset int64) {
	for len(d.aborted) > 0 && d.aborted[0].FirstOffset <= offset {
		if d.abortedPIDs == nil {
			d.abortedPIDs = make(map[int64]struct{})
		}
		d.abortedPIDs[d.aborted[0].ProducerID] = struct{}{}
		d.aborted = d.aborted[1:]
	}
}

// rawRecord is one v2 record; its byte slices alias the batch payload.
type rawRecord struct {
	offset    int64
	timestamp int64
	key       []byte
	value     []byte
	headers   []byte // the header count and the headers, still encoded
}

// recordReader walks the records of a decompressed v2 batch.
type recordReader struct {
	b    *recordBatch
	data []byte
	left int32
}

var errNoRecord = errors.New("no more records")

// next decodes the next record: every field but the headers, which are
// only decoded when the record is delivered.
func (rr *recordReader) next() (rawRecord, error) {
	var r rawRecord
	if rr.left == 0 || len(rr.data) == 0 {
		// A batch holding fewer records than it claims ends with its
		// bytes, as kafka-go's decoder ends it.
		return r, errNoRecord
	}
	rr.left--
	length, n := varint(rr.data)
	if n <= 0 || length < 0 || length > int64(len(rr.data)-n) {
		return r, rr.corrupt("record length")
	}
	rec := rr.data[n : n+int(length) : n+int(length)]
	rr.data = rr.data[n+int(length):]
	if len(rec) == 0 {
		return r, rr.corrupt("empty record")
	}
	p := 1 // record attributes, unused
	tsDelta, n := varint(rec[p:])
	if n <= 0 {
		return r, rr.corrupt("timestamp delta")
	}
	p += n
	offDelta, n := varint(rec[p:])
	if n <= 0 {
		return r, rr.corrupt("offset delta")
	}
	p += n
	r.offset = rr.b.baseOffset + offDelta
	if r.offset == math.MaxInt64 {
		return r, rr.corrupt("offset delta") // no offset can follow it
	}
	r.timestamp = rr.b.firstTimestamp + tsDelta
	var ok bool
	if r.key, p, ok = nullableBytes(rec, p); !ok {
		return r, rr.corrupt("key")
	}
	if r.value, p, ok = nullableBytes(rec, p); !ok {
		return r, rr.corrupt("value")
	}
	r.headers = rec[p:]
	return r, nil
}

func (rr *recordReader) corrupt(what string) error {
	return fmt.Errorf("record batch at %d: corrupt record %d: invalid %s", rr.b.baseOffset, rr.b.numRecords-rr.left-1, what)
}

// varint reads a zigzag varint, as binary.Varint, fast for one byte.
func varint(b []byte) (int64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return int64(b[0]>>1) ^ -int64(b[0]&1), 1
	}
	return binary.Varint(b)
}

// nullableBytes reads varint-length bytes at b[p:]: nil for length -1, else
// a sub-slice capped at its length. It returns the position after them.
func nullableBytes(b []byte, p int) ([]byte, int, bool) {
	n, w := varint(b[p:])
	if w <= 0 || n < -1 {
		return nil, p, false
	}
	p += w
	if n == -1 {
		return nil, p, true
	}
	if n > int64(len(b)-p) {
		return nil, p, false
	}
	end := p + int(n)
	return b[p:end:end], end, true
}

// readHeaders decodes the encoded headers of a record.
func (d *decoder) readHeaders(b []byte) ([]sinks.Header, bool) {
	count, p := varint(b)
	if p <= 0 || count < 0 || count > int64((len(b)-p)/minHeaderLength) {
		return nil, false
	}
	if count == 0 {
		return nil, true
	}
	hs := make([]sinks.Header, count)
	for i := range hs {
		var key, value []byte
		var ok bool
		if key, p, ok = nullableBytes(b, p); !ok || key == nil {
			return nil, false
		}
		if value, p, ok = nullableBytes(b, p); !ok {
			return nil, false
		}
		hs[i] = sinks.Header{Key: d.headerKey(key), Value: value}
	}
	return hs, true
}

func (d *decoder) headerKey(b []byte) string {
	if s, ok := d.headerKeys[string(b)]; ok {
		return s
	}
	s := string(b)
	if d.headerKeys == nil {
		d.headerKeys = make(map[string]string)
	}
	if len(d.headerKeys) < 64 {
		d.headerKeys[s] = s
	}
	return s
}

func (d *decoder) readRecords(b *recordBatch, data []byte, deliver bool) error {
	rr := recordReader{b: b, data: data, left: b.numRecords}
	for {
		r, err := rr.next()
		if err == errNoRecord {
			return nil
		}
		if err != nil {
			return err
		}
		if r.offset < d.next {
			// Before from (next starts there), or out of order,
			// which no broker sends.
			continue
		}
		if deliver {
			rec := sinks.Record{Offset: r.offset, Key: r.key, Value: r.value, Time: time.UnixMilli(r.timestamp)}
			if len(r.headers) > 0 && r.headers[0] != 0 {
				var ok bool
				if rec.Headers, ok = d.readHeaders(r.headers); !ok {
					return rr.corrupt("headers")
				}
			}
			d.records = append(d.records, rec)
		}
		d.next = max(d.next, r.offset+1)
	}
}

func (d *decoder) readControl(b *recordBatch, data []byte) error {
	rr := recordReader{b: b, data: data, left: b.numRecords}
	for {
		r, err := rr.next()
		if err == errNoRecord {
			return nil
		}
		if err != nil {
			return err
		}
		if r.offset >= d.next {
			d.next = r.offset + 1
		}
		// The key of a control record is its version and its type.
		if d.committed && len(r.key) >= 4 && int16(binary.BigEndian.Uint16(r.key[2:])) == controlAbort {
			delete(d.abortedPIDs, b.producerID)
		}
	}
}

// firstBatchBase returns the base offset of the first whole batch of raw.
func firstBatchBase(raw []byte) (int64, bool, error) {
	if n := legacyEntry(raw); n > 0 {
		if m, ok := parseLegacy(raw[:n]); ok {
			if _, compressed := m.compression(); compressed {
				recs, err := (&decoder{}).unwrapLegacy(nil, m)
				if err != nil || len(recs) == 0 {
					return 0, false, err
				}
				return recs[0].Offset, true, nil
			}
		}
		rr, err := readLegacy(raw[:n])
		if err != nil || rr == nil {
			return 0, false, err
		}
		r, err := rr.ReadRecord()
		if errors.Is(err, io.EOF) {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, fmt.Errorf("read record: %w", err)
		}
		return r.Offset, true, nil
	}
	b, _, ok, err := nextBatch(raw)
	return b.baseOffset, ok, err
}

// Messages of format v0 or v1, written by brokers and clients older than
// Kafka 0.11, are decoded by kafka-go, one message at a time, but for a
// compressed message, a wrapper whose value is the compressed messages it
// holds: those are decompressed and parsed here, within the limit. These
// formats have no transactions and no control records.

// readLegacy decodes one message of format v0 or v1 with kafka-go.
func readLegacy(raw []byte) (protocol.RecordReader, error) {
	framed := make([]byte, 4+len(raw))
	binary.BigEndian.PutUint32(framed, uint32(len(raw)))
	copy(framed[4:], raw)
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(bufio.NewReader(bytes.NewReader(framed))); err != nil {
		return nil, fmt.Errorf("read message of format v%d: %w", raw[batchMagicOffset], err)
	}
	return rs.Records, nil
}

// legacyMessage is a message of format v0 or v1.
type legacyMessage struct {
	offset     int64
	attributes byte
	timestamp  int64  // 0 in format v0
	key, value []byte // nil when null
}

// compression returns the codec of m when it is compressed with one.
func (m *legacyMessage) compression() (compress.Compression, bool) {
	c := compress.Compression(m.attributes & attrCompression)
	return c, c != compress.None && c.Codec() != nil
}

// parseLegacy parses the message of format v0 or v1 that raw holds, framed
// as legacyEntry frames it; ok is false when its checksum is wrong or it is
// malformed.
func parseLegacy(raw []byte) (m legacyMessage, ok bool) {
	const crcOffset = 12
	p := batchMagicOffset + 1
	if len(raw) <= p || raw[batchMagicOffset] > 1 ||
		crc32.ChecksumIEEE(raw[batchMagicOffset:]) != binary.BigEndian.Uint32(raw[crcOffset:]) {
		return m, false
	}
	m.offset = int64(binary.BigEndian.Uint64(raw))
	m.attributes = raw[p]
	p++
	if raw[batchMagicOffset] == 1 {
		if len(raw)-p < 8 {
			return m, false
		}
		m.timestamp = int64(binary.BigEndian.Uint64(raw[p:]))
		p += 8
	}
	for _, b := range []*[]byte{&m.key, &m.value} {
		if len(raw)-p < 4 {
			return m, false
		}
		n := int32(binary.BigEndian.Uint32(raw[p:]))
		p += 4
		if n >= 0 {
			if int64(n) > int64(len(raw)-p) {
				return m, false
			}
			*b = raw[p : p+int(n) : p+int(n)]
			p += int(n)
		}
	}
	return m, true
}

// unwrapLegacy appends to recs the records of the messages that the
// compressed message m wraps, decompressed within the decoder's limit (and
// counted): their keys and values alias the decompressed buffer. As with
// kafka-go, which decoded them before, a last message cut short is
// ignored, and the offsets of the messages, relative in format v1, are
// reckoned back from the wrapper's, that of the last message.
func (d *decoder) unwrapLegacy(recs []sinks.Record, m legacyMessage) ([]sinks.Record, error) {
	c, _ := m.compression()
	if c == compress.Zstd {
		// As brokers have it.
		return recs, fmt.Errorf("message at %d: zstd compression needs message format v2", m.offset)
	}
	data, err := d.inflate(m.offset, c, m.value)
	if err != nil {
		return recs, err
	}
	start := len(recs)
	for len(data) >= batchLengthEnd {
		length := int32(binary.BigEndian.Uint32(data[8:]))
		if length < 0 || int64(len(data)-batchLengthEnd) < int64(length) {
			break
		}
		end := batchLengthEnd + int(length)
		in, ok := parseLegacy(data[:end])
		if !ok {
			return recs, fmt.Errorf("message at %d: corrupt message %d inside", m.offset, len(recs)-start)
		}
		data = data[end:]
		recs = append(recs, sinks.Record{Offset: in.offset, Key: in.key, Value: in.value, Time: time.UnixMilli(in.timestamp)})
	}
	if m.offset != 0 {
		last := int64(len(recs)-start) - 1
		for i := start; i < len(recs); i++ {
			recs[i].Offset = m.offset - (last - recs[i].Offset)
		}
	}
	for _, r := range recs[start:] {
		if r.Offset == math.MaxInt64 {
			return recs, fmt.Errorf("message at %d: inner offset out of range", m.offset)
		}
	}
	return recs, nil
}

func (d *decoder) decodeLegacy(raw []byte) error {
	if m, ok := parseLegacy(raw); ok {
		if _, compressed := m.compression(); compressed {
			// Decompressed here, within the limit, rather than by
			// kafka-go, which knows none.
			start := len(d.records)
			recs, err := d.unwrapLegacy(d.records, m)
			if err != nil {
				return err
			}
			d.records = recs[:start]
			for _, r := range recs[start:] {
				if r.Offset >= d.next {
					d.records = append(d.records, r)
					d.next = max(d.next, r.Offset+1)
				}
			}
			return nil
		}
	}
	rr, err := readLegacy(raw)
	if err != nil || rr == nil {
		return err
	}
	for {
		r, err := rr.ReadRecord()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read record: %w", err)
		}
		if r.Offset == math.MaxInt64 {
			return fmt.Errorf("read record: offset %d out of range", r.Offset)
		}
		if r.Offset >= d.next {
			rec := sinks.Record{Offset: r.Offset, Time: r.Time}
			if rec.Key, err = d.copyBytes(r.Key); err != nil {
				return fmt.Errorf("read key at %d: %w", r.Offset, err)
			}
			if rec.Value, err = d.copyBytes(r.Value); err != nil {
				return fmt.Errorf("read value at %d: %w", r.Offset, err)
			}
			d.records = append(d.records, rec)
			d.next = max(d.next, r.Offset+1)
		}
		closeBytes(r.Key)
		closeBytes(r.Value)
	}
}

// copyBytes copies b into the decoder's arena: the records of one fetch share
// a few large allocations instead of two each. A nil b (a null key or value)
// stays nil.
func (d *decoder) copyBytes(b protocol.Bytes) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	n := b.Len()
	if n == 0 {
		return []byte{}, nil
	}
	if n > cap(d.arena)-len(d.arena) {
		d.arena = make([]byte, 0, max(n, 256<<10))
	}
	start := len(d.arena)
	d.arena = d.arena[:start+n]
	s := d.arena[start : start+n : start+n]
	if _, err := io.ReadFull(b, s); err != nil {
		return nil, err
	}
	return s, nil
}

func closeBytes(b protocol.Bytes) {
	if b != nil {
		b.Close()
	}
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
