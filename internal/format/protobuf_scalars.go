package format

import (
	"math"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The JSON of scalar values and of the well-known time types, as protojson
// writes them, and the reasons of wire errors.

// timeValue writes a Timestamp or Duration as protojson does.
func (s *pbState) timeValue(dst []byte, m *pbMsg, start, end int) ([]byte, error) {
	var sec int64
	var nsec int32
	b := s.b[:end]
	for pos := start; pos < end; {
		num, wt, vstart, _, next, err := s.field(b, pos)
		if err != nil {
			return dst, err
		}
		pos = next
		if wt == protowire.VarintType && (num == 1 || num == 2) {
			v, _ := protowire.ConsumeVarint(b[vstart:])
			if num == 1 {
				sec = int64(v)
			} else {
				nsec = int32(v)
			}
		}
	}
	var ok bool
	if m.wkt == wktTimestamp {
		if nsec < 0 || nsec >= 1e9 {
			return dst, s.fail(start, "timestamp nanos %d not within a second", nsec)
		}
		if dst, ok = appendTimestamp(append(dst, '"'), sec, nsec, true); !ok {
			return dst, s.fail(start, "timestamp of %d seconds is outside years 1 to 9999", sec)
		}
	} else if dst, ok = appendDuration(append(dst, '"'), sec, nsec); !ok {
		return dst, s.fail(start, "duration of %d seconds and %d nanos is out of range", sec, nsec)
	}
	return append(dst, '"'), nil
}

func appendVarint(dst []byte, f *pbField, v uint64) []byte {
	switch f.kind {
	case protoreflect.Int32Kind:
		return strconv.AppendInt(dst, int64(int32(v)), 10)
	case protoreflect.Int64Kind:
		return strconv.AppendInt(dst, int64(v), 10)
	case protoreflect.Uint32Kind:
		return strconv.AppendUint(dst, uint64(uint32(v)), 10)
	case protoreflect.Sint32Kind:
		return strconv.AppendInt(dst, int64(int32(protowire.DecodeZigZag(v&math.MaxUint32))), 10)
	case protoreflect.Sint64Kind:
		return strconv.AppendInt(dst, protowire.DecodeZigZag(v), 10)
	case protoreflect.BoolKind:
		return strconv.AppendBool(dst, v != 0)
	case protoreflect.EnumKind:
		return f.enum.appendValue(dst, int32(v))
	}
	return strconv.AppendUint(dst, v, 10) // uint64
}

func appendFixed32(dst []byte, f *pbField, v uint32) []byte {
	switch f.kind {
	case protoreflect.Sfixed32Kind:
		return strconv.AppendInt(dst, int64(int32(v)), 10)
	case protoreflect.FloatKind:
		return appendFloat(dst, float64(math.Float32frombits(v)), 32)
	}
	return strconv.AppendUint(dst, uint64(v), 10)
}

func appendFixed64(dst []byte, f *pbField, v uint64) []byte {
	switch f.kind {
	case protoreflect.Sfixed64Kind:
		return strconv.AppendInt(dst, int64(v), 10)
	case protoreflect.DoubleKind:
		return appendFloat(dst, math.Float64frombits(v), 64)
	}
	return strconv.AppendUint(dst, v, 10)
}

// wireError says what protowire's error code n means. protowire's own
// texts vary between builds (a space or not after "proto:"), and a reason
// must not.
func wireError(n int) string {
	switch n {
	case -1:
		return "unexpected end of data"
	case -2:
		return "invalid field number"
	case -3:
		return "varint overflows 64 bits"
	case -4:
		return "reserved wire type"
	case -5:
		return "mismatched end of group"
	case -6:
		return "groups nested too deep"
	}
	return "invalid wire data"
}
