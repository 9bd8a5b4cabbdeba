package clickhouse

import (
	"math"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// A directFn appends a column's value of record r to its builder without
// a converter, when the value has a form whose conversion is plain, giving
// what the converter would; it reports false for the rest, for the
// converter. raw is the field's JSON text (nil when missing), and flat says
// scanFlat read it, which takes only plain strings.
type directFn func(b *sinks.Block, r *sinks.Record, raw []byte, flat bool) bool

// directFor is column c's directFn with builder bl, or nil when each of its
// values goes through the converter: a kafka_* column of its own Go type,
// or a field that is a plain string for a String column, or an integer of
// a few digits for an integer column. It is chosen once per block, so that
// a row costs no switch on names or types.
func directFor(c tableColumn, bl colBuilder) directFn {
	switch c.name {
	case "kafka_topic":
		if bl, ok := bl.(*sliceOf[string]); ok {
			return func(b *sinks.Block, _ *sinks.Record, _ []byte, _ bool) bool {
				*bl = append(*bl, b.Topic)
				return true
			}
		}
	case "kafka_partition":
		if bl, ok := bl.(*sliceOf[int32]); ok {
			return func(b *sinks.Block, _ *sinks.Record, _ []byte, _ bool) bool {
				if b.Partition > math.MaxInt32 {
					return false
				}
				*bl = append(*bl, int32(b.Partition))
				return true
			}
		}
	case "kafka_offset":
		if bl, ok := bl.(*sliceOf[int64]); ok {
			return func(_ *sinks.Block, r *sinks.Record, _ []byte, _ bool) bool {
				*bl = append(*bl, r.Offset)
				return true
			}
		}
	case "kafka_generation":
		if bl, ok := bl.(*sliceOf[int64]); ok {
			return func(b *sinks.Block, _ *sinks.Record, _ []byte, _ bool) bool {
				*bl = append(*bl, b.Generation)
				return true
			}
		}
	case "kafka_key":
		if bl, ok := bl.(*ptrsOf[string]); ok {
			return func(_ *sinks.Block, r *sinks.Record, _ []byte, _ bool) bool {
				var k *string
				if r.Key != nil {
					v := view(r.Key)
					k = &v
				}
				*bl = append(*bl, k)
				return true
			}
		}
	case "kafka_timestamp":
	default:
		return fieldDirect(bl)
	}
	return nil
}

// fieldDirect is the directFn of a field's column with builder bl: a
// plain value appended as is (strings as views of the record's bytes: see
// view), or nil when the builder takes none so.
func fieldDirect(bl colBuilder) directFn {
	switch bl := bl.(type) {
	case *sliceOf[string]:
		return func(_ *sinks.Block, _ *sinks.Record, raw []byte, flat bool) bool {
			if len(raw) < 2 || raw[0] != '"' || !flat && !plain(raw) {
				return false
			}
			*bl = append(*bl, view(raw[1:len(raw)-1]))
			return true
		}
	case *ptrsOf[string]:
		return func(_ *sinks.Block, _ *sinks.Record, raw []byte, flat bool) bool {
			if len(raw) < 2 || raw[0] != '"' || !flat && !plain(raw) {
				return false
			}
			v := view(raw[1 : len(raw)-1])
			*bl = append(*bl, &v)
			return true
		}
	case *sliceOf[int64]:
		return func(_ *sinks.Block, _ *sinks.Record, raw []byte, _ bool) bool {
			n, ok := plainInt(raw)
			if ok {
				*bl = append(*bl, n)
			}
			return ok
		}
	case *sliceOf[int32]:
		return func(_ *sinks.Block, _ *sinks.Record, raw []byte, _ bool) bool {
			n, ok := plainInt(raw)
			if ok = ok && n >= math.MinInt32 && n <= math.MaxInt32; ok {
				*bl = append(*bl, int32(n))
			}
			return ok
		}
	case *sliceOf[uint64]:
		return func(_ *sinks.Block, _ *sinks.Record, raw []byte, _ bool) bool {
			n, ok := plainInt(raw)
			if ok = ok && n >= 0; ok {
				*bl = append(*bl, uint64(n))
			}
			return ok
		}
	case *sliceOf[uint32]:
		return func(_ *sinks.Block, _ *sinks.Record, raw []byte, _ bool) bool {
			n, ok := plainInt(raw)
			if ok = ok && n >= 0 && n <= math.MaxUint32; ok {
				*bl = append(*bl, uint32(n))
			}
			return ok
		}
	}
	return nil
}

// plainInt reads a JSON integer of at most 18 digits (-?[0-9]+).
func plainInt(raw []byte) (int64, bool) {
	if len(raw) == 0 {
		return 0, false
	}
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
