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
	"time"

	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Messages of format v0 or v1, written by brokers and clients older than
// Kafka 0.11, are decoded by kafka-go, one message at a time, but for a
// compressed message, a wrapper whose value is the compressed messages it
// holds: those are decompressed and parsed here, within the limit. These
// formats have no transactions and no control records.

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
			// The wrapper's offset is that of the last message it held
			// when written: compaction may have removed that one.
			if m.offset >= d.from && m.offset < math.MaxInt64 {
				d.next = max(d.next, m.offset+1)
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
