package format

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// The Avro transcoder: it walks the compiled schema and reads the binary
// encoding straight into JSON, with no value in between.

// Limits on what a record's bytes may claim; past them a record is set
// aside rather than read.
const (
	// maxDepth bounds the nesting of records, arrays, maps and messages,
	// which recursive schemas allow without end.
	maxDepth = 1000
	// maxEmptyItems bounds the array items, in one record, of a type that
	// takes no bytes (null, a record of nulls): their count alone, a few
	// bytes, could otherwise claim gigabytes of JSON.
	maxEmptyItems = 1 << 16
)

func (c *avroCodec) decode(dst, b []byte) ([]byte, *sinks.Schema, error) {
	r := avroReader{b: b, pos: headerSize}
	out, err := r.value(dst, c.root, 0)
	if err != nil {
		return dst, nil, &RecordError{Reason: err.(*decodeError).reason("avro"), SchemaID: c.id}
	}
	if r.pos != len(b) {
		return dst, nil, recordErrorf(c.id, "avro: %d trailing bytes after the value at byte %d", len(b)-r.pos, r.pos)
	}
	return out, c.schema, nil
}

// decodeError is a failure within a value. Its path grows, innermost
// first, as it passes out through fields, items and map values.
type decodeError struct {
	path []string
	msg  string
	at   int // the byte of the record where the faulty part starts
}

func (e *decodeError) Error() string { return e.reason("decode") }

func (e *decodeError) reason(prefix string) string {
	if len(e.path) == 0 {
		return fmt.Sprintf("%s: %s at byte %d", prefix, e.msg, e.at)
	}
	// Outermost first; a deep path keeps its ends only, so that the
	// reason stays short.
	var path []byte
	for i := len(e.path) - 1; i >= 0; i-- {
		s := e.path[i]
		if len(e.path) > 2*pathEnds && i == len(e.path)-1-pathEnds {
			s = fmt.Sprintf("(%d more)", len(e.path)-2*pathEnds)
			i = pathEnds
		}
		if len(path) > 0 && s[0] != '[' {
			path = append(path, '.')
		}
		path = append(path, s...)
	}
	return fmt.Sprintf("%s: field %q: %s at byte %d", prefix, path, e.msg, e.at)
}

// pathEnds is how many fields of each end of a long path a reason names.
const pathEnds = 4

// inPath adds seg to the path of err, a *decodeError.
func inPath(err error, seg string) error {
	if e, ok := err.(*decodeError); ok {
		e.path = append(e.path, seg)
	}
	return err
}

func indexSeg(i int) string { return "[" + strconv.Itoa(i) + "]" }

func keySeg(k []byte) string {
	if len(k) > 32 {
		return "[" + string(k[:32]) + "…]"
	}
	return "[" + string(k) + "]"
}

func failAt(at int, format string, args ...any) error {
	return &decodeError{msg: fmt.Sprintf(format, args...), at: at}
}

// avroReader reads one record's value; b is the whole record.
type avroReader struct {
	b          []byte
	pos        int
	emptyItems int
}

func (r *avroReader) eod(at int, what string) error {
	return failAt(at, "unexpected end of data in %s", what)
}

// long reads a zigzag varint of at most 10 bytes.
func (r *avroReader) long() (int64, error) {
	start := r.pos
	if start < len(r.b) && r.b[start] < 0x80 {
		c := r.b[start]
		r.pos++
		return int64(c>>1) ^ -int64(c&1), nil
	}
	var v uint64
	for i := 0; ; i++ {
		if r.pos >= len(r.b) {
			return 0, r.eod(start, "a long")
		}
		c := r.b[r.pos]
		r.pos++
		if i == 9 && c > 1 {
			return 0, failAt(start, "long overflows 64 bits")
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			break
		}
	}
	return int64(v>>1) ^ -int64(v&1), nil
}

// int reads a zigzag varint of at most 5 bytes, within 32 bits.
func (r *avroReader) int() (int32, error) {
	start := r.pos
	if start < len(r.b) && r.b[start] < 0x80 {
		c := r.b[start]
		r.pos++
		return int32(c>>1) ^ -int32(c&1), nil
	}
	var v uint32
	for i := 0; ; i++ {
		if r.pos >= len(r.b) {
			return 0, r.eod(start, "an int")
		}
		c := r.b[r.pos]
		r.pos++
		if i == 4 && c > 0x0f {
			return 0, failAt(start, "int overflows 32 bits")
		}
		v |= uint32(c&0x7f) << (7 * i)
		if c < 0x80 {
			break
		}
	}
	return int32(v>>1) ^ -int32(v&1), nil
}

// next returns the next n bytes.
func (r *avroReader) next(n int, what string) ([]byte, error) {
	if n > len(r.b)-r.pos {
		return nil, r.eod(r.pos, what)
	}
	p := r.b[r.pos : r.pos+n]
	r.pos += n
	return p, nil
}

// bytes reads a length and that many bytes.
func (r *avroReader) bytes(what string) ([]byte, error) {
	start := r.pos
	l, err := r.long()
	if err != nil {
		return nil, err
	}
	if l < 0 {
		return nil, failAt(start, "%s of negative length %d", what, l)
	}
	if left := len(r.b) - r.pos; l > int64(left) {
		return nil, failAt(start, "%s of length %d exceeds the %d bytes left", what, l, left)
	}
	p := r.b[r.pos : r.pos+int(l)]
	r.pos += int(l)
	return p, nil
}

// blockCount reads an array or map block's item count, bounded by the
// bytes left, and skips the byte size of a block that has one.
func (r *avroReader) blockCount(elem *avroNode, what string) (int64, error) {
	start := r.pos
	count, err := r.long()
	if err != nil || count == 0 {
		return 0, err
	}
	if count < 0 {
		if count == math.MinInt64 {
			return 0, failAt(start, "%s block of %d items", what, count)
		}
		count = -count
		if _, err := r.long(); err != nil { // its size in bytes, for skipping
			return 0, err
		}
	}
	if elem.minSize > 0 {
		if left := len(r.b) - r.pos; count > int64(left/elem.minSize) {
			return 0, failAt(start, "%s block of %d items exceeds the %d bytes left", what, count, left)
		}
	} else {
		if count > int64(maxEmptyItems-r.emptyItems) {
			return 0, failAt(start, "%s block of %d items of no bytes each: more than %d in a record", what, count, maxEmptyItems)
		}
		r.emptyItems += int(count)
	}
	return count, nil
}

// value reads one value of n and writes its JSON.
func (r *avroReader) value(dst []byte, n *avroNode, depth int) ([]byte, error) {
	switch n.kind {
	case avNull:
		return append(dst, "null"...), nil
	case avBoolean:
		if r.pos >= len(r.b) {
			return dst, r.eod(r.pos, "a boolean")
		}
		switch r.b[r.pos] {
		case 0:
			dst = append(dst, "false"...)
		case 1:
			dst = append(dst, "true"...)
		default:
			return dst, failAt(r.pos, "invalid boolean byte 0x%02x", r.b[r.pos])
		}
		r.pos++
		return dst, nil
	case avInt:
		v, err := r.int()
		return strconv.AppendInt(dst, int64(v), 10), err
	case avLong:
		v, err := r.long()
		return strconv.AppendInt(dst, v, 10), err
	case avFloat:
		p, err := r.next(4, "a float")
		if err != nil {
			return dst, err
		}
		return appendFloat(dst, float64(math.Float32frombits(binary.LittleEndian.Uint32(p))), 32), nil
	case avDouble:
		p, err := r.next(8, "a double")
		if err != nil {
			return dst, err
		}
		return appendFloat(dst, math.Float64frombits(binary.LittleEndian.Uint64(p)), 64), nil
	case avString:
		p, err := r.bytes("string")
		return AppendJSONString(dst, p), err
	case avBytes:
		p, err := r.bytes("bytes")
		return appendBase64(dst, p), err
	case avFixed:
		p, err := r.next(n.size, "a fixed")
		return appendBase64(dst, p), err
	case avEnum:
		start := r.pos
		i, err := r.int()
		if err != nil {
			return dst, err
		}
		if i < 0 || int(i) >= len(n.symbols) {
			return dst, failAt(start, "enum index %d not within its %d symbols", i, len(n.symbols))
		}
		return append(dst, n.symbols[i]...), nil
	case avUnion:
		start := r.pos
		i, err := r.long()
		if err != nil {
			return dst, err
		}
		if i < 0 || i >= int64(len(n.branches)) {
			return dst, failAt(start, "union index %d not within its %d types", i, len(n.branches))
		}
		return r.value(dst, n.branches[i], depth)
	case avRecord:
		if depth >= maxDepth {
			return dst, failAt(r.pos, "nested more than %d deep", maxDepth)
		}
		dst = append(dst, '{')
		for i := range n.fields {
			f := &n.fields[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, f.key...)
			var err error
			if dst, err = r.value(dst, f.node, depth+1); err != nil {
				return dst, inPath(err, f.name)
			}
		}
		return append(dst, '}'), nil
	case avArray:
		return r.array(dst, n, depth)
	case avMap:
		return r.mapValue(dst, n, depth)
	}
	return r.logical(dst, n)
}

func (r *avroReader) array(dst []byte, n *avroNode, depth int) ([]byte, error) {
	if depth >= maxDepth {
		return dst, failAt(r.pos, "nested more than %d deep", maxDepth)
	}
	dst = append(dst, '[')
	i := 0
	for {
		count, err := r.blockCount(n.elem, "array")
		if err != nil {
			return dst, inPath(err, indexSeg(i))
		}
		if count == 0 {
			return append(dst, ']'), nil
		}
		for range count {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = r.value(dst, n.elem, depth+1); err != nil {
				return dst, inPath(err, indexSeg(i))
			}
			i++
		}
	}
}

func (r *avroReader) mapValue(dst []byte, n *avroNode, depth int) ([]byte, error) {
	if depth >= maxDepth {
		return dst, failAt(r.pos, "nested more than %d deep", maxDepth)
	}
	dst = append(dst, '{')
	first := true
	for {
		count, err := r.blockCount(n.elem, "map")
		if err != nil {
			return dst, err
		}
		if count == 0 {
			return append(dst, '}'), nil
		}
		for range count {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			k, err := r.bytes("map key")
			if err != nil {
				return dst, err
			}
			dst = append(AppendJSONString(dst, k), ':')
			if dst, err = r.value(dst, n.elem, depth+1); err != nil {
				return dst, inPath(err, keySeg(k))
			}
		}
	}
}

// logical reads the logical types.
func (r *avroReader) logical(dst []byte, n *avroNode) ([]byte, error) {
	start := r.pos
	switch n.kind {
	case avDate:
		v, err := r.int()
		if err != nil {
			return dst, err
		}
		var ok bool
		if dst, ok = appendDate(append(dst, '"'), int64(v)); !ok {
			return dst, failAt(start, "date %d days from 1970-01-01 is outside years 1 to 9999", v)
		}
		return append(dst, '"'), nil
	case avTimeMillis:
		v, err := r.int()
		if err != nil {
			return dst, err
		}
		return r.timeOfDay(dst, int64(v), 1e6, "time-millis", start)
	case avTimeMicros:
		v, err := r.long()
		if err != nil {
			return dst, err
		}
		return r.timeOfDay(dst, v, 1e3, "time-micros", start)
	case avTimestampMillis, avLocalTimestampMillis:
		return r.timestamp(dst, 1e3, n.kind == avTimestampMillis)
	case avTimestampMicros, avLocalTimestampMicros:
		return r.timestamp(dst, 1e6, n.kind == avTimestampMicros)
	case avTimestampNanos, avLocalTimestampNanos:
		return r.timestamp(dst, 1e9, n.kind == avTimestampNanos)
	case avDecimalBytes:
		p, err := r.bytes("decimal")
		if err != nil {
			return dst, err
		}
		// Far more bytes than the precision needs would be a slow
		// conversion of a value that does not fit anyway.
		if max := decimalBytes(n.precision) + 8; len(p) > max {
			return dst, failAt(start, "decimal of %d bytes: precision %d needs at most %d", len(p), n.precision, decimalBytes(n.precision))
		}
		return r.decimal(dst, p, n, start)
	case avDecimalFixed:
		p, err := r.next(n.size, "a decimal")
		if err != nil {
			return dst, err
		}
		return r.decimal(dst, p, n, start)
	case avUUIDFixed:
		p, err := r.next(16, "a uuid")
		if err != nil {
			return dst, err
		}
		return appendUUID(dst, p), nil
	case avDurationFixed:
		p, err := r.next(12, "a duration")
		if err != nil {
			return dst, err
		}
		dst = append(dst, `{"months":`...)
		dst = strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint32(p)), 10)
		dst = append(dst, `,"days":`...)
		dst = strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint32(p[4:])), 10)
		dst = append(dst, `,"milliseconds":`...)
		dst = strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint32(p[8:])), 10)
		return append(dst, '}'), nil
	}
	return dst, failAt(start, "no reader for kind %d", n.kind) // not reached: node covers every kind
}

func (r *avroReader) timeOfDay(dst []byte, v, nsPerUnit int64, what string, start int) ([]byte, error) {
	if v < 0 || v >= secondsPerDay*1e9/nsPerUnit {
		return dst, failAt(start, "%s %d is not within a day", what, v)
	}
	dst = append(dst, '"')
	dst, _ = appendTimeOfDay(dst, v*nsPerUnit)
	return append(dst, '"'), nil
}

// timestamp reads a long of units per second since the epoch.
func (r *avroReader) timestamp(dst []byte, perSecond int64, utc bool) ([]byte, error) {
	start := r.pos
	v, err := r.long()
	if err != nil {
		return dst, err
	}
	sec, frac := floorDiv(v, perSecond)
	var ok bool
	if dst, ok = appendTimestamp(append(dst, '"'), sec, int32(frac*(1e9/perSecond)), utc); !ok {
		return dst, failAt(start, "timestamp %d is outside years 1 to 9999", v)
	}
	return append(dst, '"'), nil
}

func (r *avroReader) decimal(dst, p []byte, n *avroNode, start int) ([]byte, error) {
	out, ok := appendDecimal(dst, p, n.precision, n.scale)
	if !ok {
		return dst, failAt(start, "decimal has more digits than its precision %d", n.precision)
	}
	return out, nil
}

// decimalBytes is how many bytes of two's complement hold every unscaled
// value of precision digits: 10^p needs p·log2(10) bits, and a sign bit.
func decimalBytes(precision int) int {
	return int(math.Ceil((float64(precision)*math.Log2(10) + 1) / 8))
}

// appendUUID writes 16 bytes as "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
func appendUUID(dst, p []byte) []byte {
	dst = append(dst, '"')
	for i, c := range p {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return append(dst, '"')
}
