package kafka

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// The records of a v2 batch, once decompressed: their fields, varints and
// headers, parsed in place.

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

// next decodes the next record: every field but the headers, which are
// only decoded when the record is delivered. ok is false after the last
// record, and with err.
func (rr *recordReader) next() (rawRecord, bool, error) {
	var r rawRecord
	if rr.left == 0 || len(rr.data) == 0 {
		// A batch holding fewer records than it claims ends with its
		// bytes, as kafka-go's decoder ends it.
		return r, false, nil
	}
	rr.left--
	length, n := varint(rr.data)
	if n <= 0 || length < 0 || length > int64(len(rr.data)-n) {
		return r, false, rr.corrupt("record length")
	}
	rec := rr.data[n : n+int(length) : n+int(length)]
	rr.data = rr.data[n+int(length):]
	if len(rec) == 0 {
		return r, false, rr.corrupt("empty record")
	}
	p := 1 // record attributes, unused
	tsDelta, n := varint(rec[p:])
	if n <= 0 {
		return r, false, rr.corrupt("timestamp delta")
	}
	p += n
	offDelta, n := varint(rec[p:])
	if n <= 0 {
		return r, false, rr.corrupt("offset delta")
	}
	p += n
	r.offset = rr.b.baseOffset + offDelta
	if r.offset == math.MaxInt64 {
		return r, false, rr.corrupt("offset delta") // no offset can follow it
	}
	r.timestamp = rr.b.firstTimestamp + tsDelta
	var ok bool
	if r.key, p, ok = nullableBytes(rec, p); !ok {
		return r, false, rr.corrupt("key")
	}
	if r.value, p, ok = nullableBytes(rec, p); !ok {
		return r, false, rr.corrupt("value")
	}
	r.headers = rec[p:]
	return r, true, nil
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
		r, ok, err := rr.next()
		if !ok {
			return err
		}
		if r.offset > b.lastOffset() {
			// Past where the batch says it ends, and where the next
			// fetch starts: delivered, it would lie outside its block.
			return rr.corrupt("offset delta")
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
