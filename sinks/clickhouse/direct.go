package clickhouse

import (
	"math"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// direct appends column c's value of record r to bl without a converter,
// when its column and value have a form whose conversion is plain (a
// kafka_* column of its own Go type; a field that is a plain string for a
// String column, or an integer of a few digits for an integer column),
// giving what the converter would. It reports false for the rest, for
// the converter.
func (s *Sink) direct(b *sinks.Block, r *sinks.Record, c tableColumn, bl colBuilder, raw []byte) bool {
	switch c.name {
	case "kafka_topic":
		if bl, ok := bl.(*sliceOf[string]); ok {
			*bl = append(*bl, b.Topic)
			return true
		}
	case "kafka_partition":
		if bl, ok := bl.(*sliceOf[int32]); ok && b.Partition <= math.MaxInt32 {
			*bl = append(*bl, int32(b.Partition))
			return true
		}
	case "kafka_offset":
		if bl, ok := bl.(*sliceOf[int64]); ok {
			*bl = append(*bl, r.Offset)
			return true
		}
	case "kafka_generation":
		if bl, ok := bl.(*sliceOf[int64]); ok {
			*bl = append(*bl, b.Generation)
			return true
		}
	case "kafka_key":
		if bl, ok := bl.(*ptrsOf[string]); ok {
			var k *string
			if r.Key != nil {
				v := view(r.Key)
				k = &v
			}
			*bl = append(*bl, k)
			return true
		}
	case "kafka_timestamp":
		return false
	default:
		return raw != nil && directField(bl, raw)
	}
	return false
}

// directField appends a field's plain value to bl (strings as views of
// the record's bytes: see view).
func directField(bl colBuilder, raw []byte) bool {
	switch bl := bl.(type) {
	case *sliceOf[string]:
		if raw[0] == '"' && plain(raw) {
			*bl = append(*bl, view(raw[1:len(raw)-1]))
			return true
		}
	case *ptrsOf[string]:
		if raw[0] == '"' && plain(raw) {
			v := view(raw[1 : len(raw)-1])
			*bl = append(*bl, &v)
			return true
		}
	case *sliceOf[int64]:
		if n, ok := plainInt(raw); ok {
			*bl = append(*bl, n)
			return true
		}
	case *sliceOf[int32]:
		if n, ok := plainInt(raw); ok && n >= math.MinInt32 && n <= math.MaxInt32 {
			*bl = append(*bl, int32(n))
			return true
		}
	case *sliceOf[uint64]:
		if n, ok := plainInt(raw); ok && n >= 0 {
			*bl = append(*bl, uint64(n))
			return true
		}
	case *sliceOf[uint32]:
		if n, ok := plainInt(raw); ok && n >= 0 && n <= math.MaxUint32 {
			*bl = append(*bl, uint32(n))
			return true
		}
	}
	return false
}

// plainInt reads a JSON integer of at most 18 digits (-?[0-9]+).
func plainInt(raw []byte) (int64, bool) {
	neg := raw[0] == '-'
	d := raw
	if neg {
		d = raw[1:]
	}
	if len(d) == 0 || len(d) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
