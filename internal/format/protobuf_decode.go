package format

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// The Protobuf transcoder reads the wire format over the compiled
// descriptors straight into JSON. A message's fields may come in any order
// and more than once, so each message is read twice: once to find where
// each field's values are, then in the schema's order to write them.

// maxMessageIndexes bounds a record's message-index array: messages are
// not nested that deep.
const maxMessageIndexes = 100

func (c *pbCodec) decode(dst, b []byte) ([]byte, *sinks.Schema, error) {
	top, pos, err := c.messageAt(b)
	if err != nil {
		return dst, nil, err
	}
	s := pbStates.Get().(*pbState)
	s.b = b
	out, err := s.message(dst, top.msg, pos, len(b), 0)
	s.release()
	if err != nil {
		return dst, nil, &RecordError{Reason: err.(*decodeError).reason("protobuf"), SchemaID: c.id}
	}
	return out, top.schema, nil
}

// messageAt reads the message indexes after the header: the message of
// the file that the record is, and where its bytes start.
func (c *pbCodec) messageAt(b []byte) (*pbTop, int, error) {
	pos := headerSize
	v, n := protowire.ConsumeVarint(b[pos:])
	if n < 0 {
		return nil, 0, recordErrorf(c.id, "protobuf: invalid message index count at byte %d: %s", pos, wireError(n))
	}
	pos += n
	count := protowire.DecodeZigZag(v)
	if count == 0 { // the single byte 0: [0], the first message
		if c.first == nil {
			return nil, 0, recordErrorf(c.id, "protobuf: message index [0] at byte %d, but schema %d has no message", headerSize, c.id)
		}
		return c.first, pos, nil
	}
	if count < 0 || count > maxMessageIndexes {
		return nil, 0, recordErrorf(c.id, "protobuf: invalid message index count %d at byte %d", count, headerSize)
	}
	var md protoreflect.MessageDescriptor
	ms := c.file.Messages()
	var path []string
	for range count {
		v, n := protowire.ConsumeVarint(b[pos:])
		if n < 0 {
			return nil, 0, recordErrorf(c.id, "protobuf: invalid message index at byte %d: %s", pos, wireError(n))
		}
		i := protowire.DecodeZigZag(v)
		path = append(path, strconv.FormatInt(i, 10))
		if i < 0 || i >= int64(ms.Len()) {
			return nil, 0, recordErrorf(c.id, "protobuf: message index [%s] at byte %d names no message: that level has %d", strings.Join(path, " "), headerSize, ms.Len())
		}
		md = ms.Get(int(i))
		ms = md.Messages()
		pos += n
	}
	top := c.tops[md.FullName()]
	if top == nil {
		return nil, 0, recordErrorf(c.id, "protobuf: message index [%s] at byte %d names a map entry, not a message", strings.Join(path, " "), headerSize)
	}
	return top, pos, nil
}

// pbOcc is where one value of a field is in the record.
type pbOcc struct {
	field      int32 // index in its message's fields
	wt         protowire.Type
	start, end int // the value's bytes (a length-delimited one's contents)
}

// pbState is one record's reading. Its slices are stacks shared by the
// messages being read, each reading above its parent's part.
type pbState struct {
	b     []byte
	off   int // added to the positions in reasons (a merged message)
	occ   []pbOcc
	oneof []int32 // each oneof's member set last, -1 for none
}

var pbStates = sync.Pool{New: func() any { return new(pbState) }}

// release returns s to the pool, unless one odd record grew it large.
func (s *pbState) release() {
	if cap(s.occ) > 1<<16 {
		return
	}
	s.b, s.off, s.occ, s.oneof = nil, 0, s.occ[:0], s.oneof[:0]
	pbStates.Put(s)
}

func (s *pbState) fail(pos int, format string, args ...any) error {
	return failAt(s.off+pos, format, args...)
}

// field reads the field at pos of b: its number and wire type, its value's
// bytes and where the next field starts.
func (s *pbState) field(b []byte, pos int) (num protowire.Number, wt protowire.Type, vstart, vend, next int, err error) {
	num, wt, n := protowire.ConsumeTag(b[pos:])
	if n < 0 {
		return 0, 0, 0, 0, 0, s.fail(pos, "invalid field: %s", wireError(n))
	}
	if num > protowire.MaxValidNumber { // ConsumeTag lets these by; the runtimes do not
		return 0, 0, 0, 0, 0, s.fail(pos, "invalid field: %s", wireError(-2))
	}
	vstart = pos + n
	if wt == protowire.StartGroupType {
		g, gn := protowire.ConsumeGroup(num, b[vstart:])
		if gn < 0 {
			return 0, 0, 0, 0, 0, s.fail(pos, "field %d: %s", num, wireError(gn))
		}
		return num, wt, vstart, vstart + len(g), vstart + gn, nil
	}
	vn := protowire.ConsumeFieldValue(num, wt, b[vstart:])
	if vn < 0 {
		return 0, 0, 0, 0, 0, s.fail(pos, "field %d: %s", num, wireError(vn))
	}
	next = vstart + vn
	if wt == protowire.BytesType {
		_, ln := protowire.ConsumeVarint(b[vstart:])
		vstart += ln
	}
	return num, wt, vstart, next, next, nil
}

func (m *pbMsg) lookup(num protowire.Number) int32 {
	if int(num) < len(m.byNum) {
		return m.byNum[num] - 1
	}
	if i, ok := m.byNumMap[num]; ok {
		return i - 1
	}
	return -1
}

// message reads the message m in b[start:end] and writes its JSON.
func (s *pbState) message(dst []byte, m *pbMsg, start, end, depth int) ([]byte, error) {
	if depth >= maxDepth {
		return dst, s.fail(start, "nested more than %d deep", maxDepth)
	}
	if m.wkt == wktTimestamp || m.wkt == wktDuration {
		return s.timeValue(dst, m, start, end)
	}
	base, oneofBase := len(s.occ), len(s.oneof)
	sorted, err := s.scan(m, start, end)
	if err == nil {
		occs := s.occ[base:]
		if !sorted {
			slices.SortStableFunc(occs, func(a, b pbOcc) int { return cmp.Compare(a.field, b.field) })
		}
		// Reading nested messages appends above occs; a grown s.occ
		// leaves occs valid in the array it had.
		if m.wkt == wktUnwrap {
			dst, err = s.unwrapped(dst, m, occs, oneofBase, depth)
		} else {
			dst, err = s.object(dst, m, occs, oneofBase, depth)
		}
	}
	s.occ, s.oneof = s.occ[:base], s.oneof[:oneofBase]
	return dst, err
}

// scan finds the values of m's fields in b[start:end], in the order they
// come, and each oneof's member set last. It reports whether they came in
// the schema's order, as encoders write them.
func (s *pbState) scan(m *pbMsg, start, end int) (bool, error) {
	oneofBase := len(s.oneof)
	for range m.oneofs {
		s.oneof = append(s.oneof, -1)
	}
	sorted, last := true, int32(-1)
	b := s.b[:end]
	for pos := start; pos < end; {
		num, wt, vstart, vend, next, err := s.field(b, pos)
		if err != nil {
			return false, err
		}
		pos = next
		fi := m.lookup(num)
		if fi < 0 {
			continue
		}
		f := &m.fields[fi]
		if wt != f.wire && (!f.packable || wt != protowire.BytesType) {
			continue // read as an unknown field, as the protobuf runtimes do
		}
		s.occ = append(s.occ, pbOcc{field: fi, wt: wt, start: vstart, end: vend})
		if fi < last {
			sorted = false
		}
		last = fi
		if f.oneof > 0 {
			s.oneof[oneofBase+f.oneof-1] = fi
		}
	}
	return sorted, nil
}

// object writes m's fields in the schema's order; occs are sorted by field.
func (s *pbState) object(dst []byte, m *pbMsg, occs []pbOcc, oneofBase, depth int) ([]byte, error) {
	dst = append(dst, '{')
	written, j := 0, 0
	for fi := range m.fields {
		f := &m.fields[fi]
		var these []pbOcc
		these, j = fieldRun(occs, j, fi)
		if f.oneof > 0 && s.oneof[oneofBase+f.oneof-1] != int32(fi) {
			if err := s.check(f, these, depth); err != nil {
				return dst, inPath(err, f.name)
			}
			continue
		}
		if len(these) == 0 && f.zero == nil {
			continue
		}
		if written > 0 {
			dst = append(dst, ',')
		}
		written++
		dst = append(dst, f.key...)
		if len(these) == 0 {
			dst = append(dst, f.zero...)
			continue
		}
		var err error
		if dst, err = s.fieldValue(dst, f, these, depth); err != nil {
			return dst, inPath(err, f.name)
		}
	}
	return append(dst, '}'), nil
}

// fieldRun returns the occurrences of field fi that start occs[j:] (occs
// are sorted by field), and the index after them.
func fieldRun(occs []pbOcc, j, fi int) ([]pbOcc, int) {
	k := j
	for k < len(occs) && occs[k].field == int32(fi) {
		k++
	}
	return occs[j:k], k
}

// unwrapped writes the JSON of a wrapper, Struct, ListValue or Value: that
// of its one field set (or of its zero), or null when none is.
func (s *pbState) unwrapped(dst []byte, m *pbMsg, occs []pbOcc, oneofBase, depth int) ([]byte, error) {
	written, j := false, 0
	for fi := range m.fields {
		f := &m.fields[fi]
		var these []pbOcc
		these, j = fieldRun(occs, j, fi)
		if f.oneof > 0 && s.oneof[oneofBase+f.oneof-1] != int32(fi) || written {
			if err := s.check(f, these, depth); err != nil {
				return dst, err
			}
			continue
		}
		if len(these) == 0 {
			if f.zero != nil {
				dst, written = append(dst, f.zero...), true
			}
			continue
		}
		var err error
		if dst, err = s.fieldValue(dst, f, these, depth); err != nil {
			return dst, err
		}
		written = true
	}
	if !written {
		dst = append(dst, "null"...)
	}
	return dst, nil
}

// check reads values that are not written (a oneof member another one
// overrode), for the errors that the protobuf runtimes would find in them.
func (s *pbState) check(f *pbField, these []pbOcc, depth int) error {
	if len(these) == 0 {
		return nil
	}
	_, err := s.fieldValue(nil, f, these, depth)
	return err
}

// fieldValue writes the JSON of field f from its values, these.
func (s *pbState) fieldValue(dst []byte, f *pbField, these []pbOcc, depth int) ([]byte, error) {
	var err error
	switch {
	case f.mapKey != nil:
		dst = append(dst, '{')
		for i := range these {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = s.mapEntry(dst, f, &these[i], depth); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	case f.list:
		dst = append(dst, '[')
		n := 0
		for i := range these {
			o := &these[i]
			if o.wt == protowire.BytesType && f.packable {
				dst, n, err = s.packed(dst, f, o, n)
			} else {
				if n > 0 {
					dst = append(dst, ',')
				}
				n++
				dst, err = s.single(dst, f, o, depth)
			}
			if err != nil {
				return dst, inPath(err, indexSeg(n-1))
			}
		}
		return append(dst, ']'), nil
	case f.msg != nil:
		if len(these) == 1 {
			return s.message(dst, f.msg, these[0].start, these[0].end, depth+1)
		}
		return s.merged(dst, f.msg, these, depth+1)
	}
	// A scalar set more than once: the last value wins, but the runtimes
	// refuse a string of bad UTF-8 in any of them.
	for i := range len(these) - 1 {
		if o := &these[i]; f.utf8 && !utf8.Valid(s.b[o.start:o.end]) {
			return dst, s.fail(o.start, "invalid UTF-8 in a string")
		}
	}
	return s.single(dst, f, &these[len(these)-1], depth)
}

// merged reads a message field set more than once: the messages merge,
// which for their bytes is one after the other. Positions in its reasons
// count as if the pieces were contiguous from the first.
func (s *pbState) merged(dst []byte, m *pbMsg, these []pbOcc, depth int) ([]byte, error) {
	var buf []byte
	for _, o := range these {
		// Each piece must parse alone: a truncated one would take bytes
		// of the next.
		for pos := o.start; pos < o.end; {
			_, _, _, _, next, err := s.field(s.b[:o.end], pos)
			if err != nil {
				return dst, err
			}
			pos = next
		}
		buf = append(buf, s.b[o.start:o.end]...)
	}
	sub := &pbState{b: buf, off: s.off + these[0].start}
	return sub.message(dst, m, 0, len(buf), depth)
}

// single writes one value of f.
func (s *pbState) single(dst []byte, f *pbField, o *pbOcc, depth int) ([]byte, error) {
	switch f.wire {
	case protowire.VarintType:
		v, _ := protowire.ConsumeVarint(s.b[o.start:o.end])
		return appendVarint(dst, f, v), nil
	case protowire.Fixed32Type:
		return appendFixed32(dst, f, binary.LittleEndian.Uint32(s.b[o.start:])), nil
	case protowire.Fixed64Type:
		return appendFixed64(dst, f, binary.LittleEndian.Uint64(s.b[o.start:])), nil
	}
	p := s.b[o.start:o.end]
	switch f.kind {
	case protoreflect.StringKind:
		if f.utf8 && !utf8.Valid(p) {
			return dst, s.fail(o.start, "invalid UTF-8 in a string")
		}
		return AppendJSONString(dst, p), nil
	case protoreflect.BytesKind:
		return appendBase64(dst, p), nil
	}
	return s.message(dst, f.msg, o.start, o.end, depth+1)
}

// packed writes the values of a packed repeated field; n counts the
// field's values written before.
func (s *pbState) packed(dst []byte, f *pbField, o *pbOcc, n int) ([]byte, int, error) {
	p := s.b[o.start:o.end]
	for pos := 0; pos < len(p); n++ {
		if n > 0 {
			dst = append(dst, ',')
		}
		switch f.wire {
		case protowire.VarintType:
			v, vn := protowire.ConsumeVarint(p[pos:])
			if vn < 0 {
				return dst, n + 1, s.fail(o.start+pos, "packed value: %s", wireError(vn))
			}
			dst = appendVarint(dst, f, v)
			pos += vn
		case protowire.Fixed32Type:
			if len(p)-pos < 4 {
				return dst, n + 1, s.fail(o.start+pos, "packed value: %s", wireError(-1))
			}
			dst = appendFixed32(dst, f, binary.LittleEndian.Uint32(p[pos:]))
			pos += 4
		default:
			if len(p)-pos < 8 {
				return dst, n + 1, s.fail(o.start+pos, "packed value: %s", wireError(-1))
			}
			dst = appendFixed64(dst, f, binary.LittleEndian.Uint64(p[pos:]))
			pos += 8
		}
	}
	return dst, n, nil
}

// mapEntry writes one entry of a map: "key":value. Its key and value
// fields may be absent (their zero) or set twice (the last wins).
func (s *pbState) mapEntry(dst []byte, f *pbField, o *pbOcc, depth int) ([]byte, error) {
	var key, val pbOcc
	hasKey, hasVal := false, false
	b := s.b[:o.end]
	for pos := o.start; pos < o.end; {
		num, wt, vstart, vend, next, err := s.field(b, pos)
		if err != nil {
			return dst, err
		}
		pos = next
		// The last key and value win, but the runtimes refuse bad UTF-8
		// or a bad message in any.
		switch {
		case num == 1 && wt == f.mapKey.wire:
			key, hasKey = pbOcc{wt: wt, start: vstart, end: vend}, true
			if f.mapKey.utf8 && !utf8.Valid(b[vstart:vend]) {
				return dst, s.fail(vstart, "invalid UTF-8 in a string")
			}
		case num == 2 && wt == f.mapVal.wire:
			if hasVal && f.mapVal.msg != nil {
				if _, err := s.single(nil, f.mapVal, &val, depth); err != nil {
					return dst, err
				}
			}
			val, hasVal = pbOcc{wt: wt, start: vstart, end: vend}, true
			if f.mapVal.utf8 && !utf8.Valid(b[vstart:vend]) {
				return dst, s.fail(vstart, "invalid UTF-8 in a string")
			}
		}
	}
	k := f.mapKey
	quote := k.kind != protoreflect.StringKind // JSON keys are strings
	if quote {
		dst = append(dst, '"')
	}
	if hasKey {
		var err error
		if dst, err = s.single(dst, k, &key, depth); err != nil {
			return dst, err
		}
	} else {
		dst = append(dst, k.zero...)
	}
	if quote {
		dst = append(dst, '"')
	}
	dst = append(dst, ':')
	v := f.mapVal
	switch {
	case hasVal:
		return s.single(dst, v, &val, depth)
	case v.msg != nil:
		return s.message(dst, v.msg, o.end, o.end, depth+1) // an empty message
	}
	return append(dst, v.zero...), nil
}
