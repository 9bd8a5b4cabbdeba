package kafka

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// The records of a v2 batch, once decompressed: their fields, varints and
// headers, parsed in place.

// varint reads a zigzag varint as binary.Varint does, in a loop the
// compiler inlines: a record holds five, and the call was a tenth of
// decoding it.
func varint(b []byte) (int64, int) {
	var x uint64
	for i, c := range b {
		if i == binary.MaxVarintLen64 {
			return 0, -(i + 1) // overflow
		}
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, -(i + 1) // overflow
			}
			x |= uint64(c) << (7 * i)
			return int64(x>>1) ^ -int64(x&1), i + 1
		}
		x |= uint64(c&0x7f) << (7 * i)
	}
	return 0, 0
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

// readRecords reads the records of a decompressed v2 batch, in one pass:
// each is parsed and, when delivered, written where the decoder keeps its
// records (made into a value and appended, it cost half again as much).
// Records below d.next are skipped. Of a control batch, it reads the
// markers: an abort ends its producer's aborted transaction. A batch
// holding fewer records than it claims ends with its bytes, as kafka-go's
// decoder ends it.
func (d *decoder) readRecords(b *recordBatch, data []byte, deliver bool) error {
	control := b.attributes&attrControl != 0
	deliver = deliver && !control
	recs := d.records
	n := len(recs)
	if room := min(int(b.numRecords), len(data)/minRecordLength); deliver && cap(recs)-n < room {
		recs = slices.Grow(recs, room)
	}
	recs = recs[:cap(recs)]
	last := b.lastOffset()
	next := d.next
	left := b.numRecords
	corrupt := func(what string) error {
		d.records, d.next = recs[:n], next
		return fmt.Errorf("record batch at %d: corrupt record %d: invalid %s", b.baseOffset, b.numRecords-left-1, what)
	}
	for left > 0 && len(data) > 0 {
		left--
		length, w := varint(data)
		if w <= 0 || length < 0 || length > int64(len(data)-w) {
			return corrupt("record length")
		}
		rec := data[w : w+int(length) : w+int(length)]
		data = data[w+int(length):]
		if len(rec) == 0 {
			return corrupt("empty record")
		}
		p := 1 // record attributes, unused
		tsDelta, w := varint(rec[p:])
		if w <= 0 {
			return corrupt("timestamp delta")
		}
		p += w
		offDelta, w := varint(rec[p:])
		if w <= 0 {
			return corrupt("offset delta")
		}
		p += w
		offset := b.baseOffset + offDelta
		if offset == math.MaxInt64 {
			return corrupt("offset delta") // no offset can follow it
		}
		key, p, ok := nullableBytes(rec, p)
		if !ok {
			return corrupt("key")
		}
		value, p, ok := nullableBytes(rec, p)
		if !ok {
			return corrupt("value")
		}
		if control {
			// The key of a control record is its version and its type.
			if d.committed && len(key) >= 4 && int16(binary.BigEndian.Uint16(key[2:])) == controlAbort {
				delete(d.abortedPIDs, b.producerID)
			}
			next = max(next, offset+1)
			continue
		}
		if offset > last {
			// Past where the batch says it ends, and where the next
			// fetch starts: delivered, it would lie outside its block.
			return corrupt("offset delta")
		}
		if offset < next {
			// Before from (next starts there), or out of order,
			// which no broker sends.
			continue
		}
		next = offset + 1
		if !deliver {
			continue
		}
		var headers []sinks.Header
		if h := rec[p:]; len(h) > 0 && h[0] != 0 {
			if headers, ok = d.readHeaders(h); !ok {
				return corrupt("headers")
			}
		}
		if n == len(recs) {
			recs = append(recs, sinks.Record{})
			recs = recs[:cap(recs)]
		}
		recs[n] = sinks.Record{Offset: offset, Key: key, Value: value, Time: time.UnixMilli(b.firstTimestamp + tsDelta), Headers: headers}
		n++
	}
	d.records, d.next = recs[:n], next
	return nil
}
