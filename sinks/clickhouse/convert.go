package clickhouse

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
)

// A converter turns a field of a record's JSON value (as encoding/json
// decodes it with UseNumber: nil, bool, json.Number, string, []any,
// map[string]any) into the Go value clickhouse-go appends to a column of
// one ClickHouse type, or says why the value does not fit. It is a pure
// function of the value and the type, so the same record always becomes
// the same row or the same dead letter: what keeps a replayed block's
// insert, and its deduplication token, the same.
type converter func(v any) (any, error)

// typeArgs splits "Name(a, b(c, d), 'e')" into Name and its top-level
// arguments; a type without parentheses has none.
func typeArgs(t string) (name string, args []string) {
	t = strings.TrimSpace(t)
	i := strings.IndexByte(t, '(')
	if i < 0 || !strings.HasSuffix(t, ")") {
		return t, nil
	}
	name, inner := t[:i], t[i+1:len(t)-1]
	depth, quoted, start := 0, false, 0
	for j := 0; j < len(inner); j++ {
		switch c := inner[j]; {
		case quoted && c == '\\':
			j++
		case c == '\'':
			quoted = !quoted
		case quoted:
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			args = append(args, strings.TrimSpace(inner[start:j]))
			start = j + 1
		}
	}
	return name, append(args, strings.TrimSpace(inner[start:]))
}

// columnConverter is the converter of a column of type t for a field of
// the record's value: a missing field or a null is the column's NULL, or
// for a column that is not Nullable its type's zero (an empty array or
// map), as ClickHouse reads a null for such a column from JSON.
func columnConverter(t string) converter {
	conv := newConverter(t)
	name, _ := typeArgs(t)
	return func(v any) (any, error) {
		if v != nil {
			return conv(v)
		}
		switch name {
		case "Array":
			return []any{}, nil
		case "Map":
			return &orderedMap{}, nil
		}
		return nil, nil
	}
}

// newConverter returns the converter for a value of type t.
func newConverter(t string) converter {
	name, args := typeArgs(t)
	switch name {
	case "Nullable":
		inner := newConverter(args[0])
		return func(v any) (any, error) {
			if v == nil {
				return nil, nil
			}
			return inner(v)
		}
	case "LowCardinality":
		return newConverter(args[0])
	case "Int8":
		return intConverter(8, func(n int64) any { return int8(n) })
	case "Int16":
		return intConverter(16, func(n int64) any { return int16(n) })
	case "Int32":
		return intConverter(32, func(n int64) any { return int32(n) })
	case "Int64":
		return intConverter(64, func(n int64) any { return n })
	case "UInt8":
		return uintConverter(8, func(n uint64) any { return uint8(n) })
	case "UInt16":
		return uintConverter(16, func(n uint64) any { return uint16(n) })
	case "UInt32":
		return uintConverter(32, func(n uint64) any { return uint32(n) })
	case "UInt64":
		return uintConverter(64, func(n uint64) any { return n })
	case "Int128", "Int256", "UInt128", "UInt256":
		return bigConverter(name)
	case "Float32":
		return floatConverter(32)
	case "Float64":
		return floatConverter(64)
	case "Bool", "Boolean":
		return func(v any) (any, error) {
			if b, ok := v.(bool); ok {
				return b, nil
			}
			return nil, fmt.Errorf("want true or false for %s, got %s", t, describe(v))
		}
	case "String":
		return func(v any) (any, error) { return text(v) }
	case "FixedString":
		n, _ := strconv.Atoi(args[0])
		return func(v any) (any, error) {
			s, err := text(v)
			if err == nil && len(s) > n {
				err = fmt.Errorf("%d bytes do not fit %s", len(s), t)
			}
			return s, err
		}
	case "Date", "Date32", "DateTime", "DateTime64":
		return timeConverter(t)
	case "Decimal", "Decimal32", "Decimal64", "Decimal128", "Decimal256":
		return func(v any) (any, error) {
			switch v := v.(type) {
			case json.Number:
				return v.String(), nil
			case string:
				return v, nil
			}
			return nil, fmt.Errorf("want a number for %s, got %s", t, describe(v))
		}
	case "Enum8", "Enum16":
		return func(v any) (any, error) {
			switch v := v.(type) {
			case string:
				return v, nil
			case json.Number:
				n, err := strconv.ParseInt(v.String(), 10, 16)
				if err != nil {
					return nil, fmt.Errorf("want a name or value of %s, got %s", t, v)
				}
				if name == "Enum8" {
					return int8(n), nil
				}
				return int16(n), nil
			}
			return nil, fmt.Errorf("want a name or value of %s, got %s", t, describe(v))
		}
	case "Array":
		elem := newConverter(args[0])
		return func(v any) (any, error) {
			arr, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("want a JSON array for %s, got %s", t, describe(v))
			}
			out := make([]any, len(arr))
			for i, e := range arr {
				var err error
				if out[i], err = elem(e); err != nil {
					return nil, fmt.Errorf("element %d: %w", i, err)
				}
			}
			return out, nil
		}
	case "Map":
		key, val := newConverter(args[0]), newConverter(args[1])
		return func(v any) (any, error) {
			obj, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("want a JSON object for %s, got %s", t, describe(v))
			}
			m := &orderedMap{}
			for _, k := range slices.Sorted(mapKeys(obj)) {
				ck, err := key(k)
				if err != nil {
					// A key of a numeric type is written as a string in JSON.
					if ck, err = key(json.Number(k)); err != nil {
						return nil, fmt.Errorf("key %q: %w", k, err)
					}
				}
				cv, err := val(obj[k])
				if err != nil {
					return nil, fmt.Errorf("key %q: %w", k, err)
				}
				m.Put(ck, cv)
			}
			return m, nil
		}
	case "Tuple":
		elems := make([]converter, len(args))
		names := make([]string, len(args))
		for i, a := range args {
			// A named element is "name Type".
			if sp := strings.IndexByte(a, ' '); sp > 0 && !strings.ContainsAny(a[:sp], "(") {
				names[i], a = strings.Trim(a[:sp], "`"), a[sp+1:]
			}
			elems[i] = newConverter(a)
		}
		return func(v any) (any, error) {
			out := make([]any, len(elems))
			switch v := v.(type) {
			case []any:
				if len(v) != len(elems) {
					return nil, fmt.Errorf("want %d elements for %s, got %d", len(elems), t, len(v))
				}
				for i, e := range v {
					var err error
					if out[i], err = elems[i](e); err != nil {
						return nil, fmt.Errorf("element %d: %w", i, err)
					}
				}
			case map[string]any:
				for i, n := range names {
					var err error
					if out[i], err = elems[i](v[n]); n == "" || err != nil {
						return nil, fmt.Errorf("want a JSON array (or an object of the named elements) for %s: %w", t, errOr(err))
					}
				}
			default:
				return nil, fmt.Errorf("want a JSON array for %s, got %s", t, describe(v))
			}
			return out, nil
		}
	case "UUID", "IPv4", "IPv6":
		return func(v any) (any, error) {
			if s, ok := v.(string); ok {
				return s, nil
			}
			return nil, fmt.Errorf("want a string for %s, got %s", t, describe(v))
		}
	}
	// JSON, Object, Dynamic, Variant and the rest: the value's JSON text,
	// as ClickHouse reads such types from a string.
	return func(v any) (any, error) {
		if s, ok := v.(string); ok {
			return s, nil
		}
		return jsonText(v)
	}
}

func errOr(err error) error {
	if err == nil {
		return errors.New("an element has no name")
	}
	return err
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// orderedMap is a Map column's value with its keys in sorted order, so that
// the same object is always the same row.
type orderedMap struct{ keys, vals []any }

// Put appends a pair.
func (m *orderedMap) Put(k, v any) { m.keys, m.vals = append(m.keys, k), append(m.vals, v) }

// Iterator walks the pairs in order.
func (m *orderedMap) Iterator() column.MapIterator { return &mapIter{m: m, i: -1} }

type mapIter struct {
	m *orderedMap
	i int
}

func (it *mapIter) Next() bool { it.i++; return it.i < len(it.m.keys) }
func (it *mapIter) Key() any   { return it.m.keys[it.i] }
func (it *mapIter) Value() any { return it.m.vals[it.i] }

// number is the text of a JSON number, or of a string holding one (JSON
// writers quote 64-bit integers).
func number(v any) (string, bool) {
	switch v := v.(type) {
	case json.Number:
		return v.String(), true
	case string:
		return strings.TrimSpace(v), true
	}
	return "", false
}

func intConverter(bits int, to func(int64) any) converter {
	return func(v any) (any, error) {
		s, ok := number(v)
		if !ok {
			return nil, fmt.Errorf("want an integer for Int%d, got %s", bits, describe(v))
		}
		n, err := strconv.ParseInt(s, 10, bits)
		if err != nil {
			// 1.0 and 1e3 are integers too.
			f, ferr := strconv.ParseFloat(s, 64)
			if ferr != nil || f != math.Trunc(f) || f < -math.Ldexp(1, bits-1) || f >= math.Ldexp(1, bits-1) {
				return nil, fmt.Errorf("%s does not fit Int%d", s, bits)
			}
			n = int64(f)
		}
		return to(n), nil
	}
}

func uintConverter(bits int, to func(uint64) any) converter {
	return func(v any) (any, error) {
		s, ok := number(v)
		if !ok {
			return nil, fmt.Errorf("want an integer for UInt%d, got %s", bits, describe(v))
		}
		n, err := strconv.ParseUint(s, 10, bits)
		if err != nil {
			f, ferr := strconv.ParseFloat(s, 64)
			if ferr != nil || f != math.Trunc(f) || f < 0 || f >= math.Ldexp(1, bits) {
				return nil, fmt.Errorf("%s does not fit UInt%d", s, bits)
			}
			n = uint64(f)
		}
		return to(n), nil
	}
}

func bigConverter(t string) converter {
	return func(v any) (any, error) {
		s, ok := number(v)
		n, okb := new(big.Int).SetString(s, 10)
		if !ok || !okb {
			return nil, fmt.Errorf("want an integer for %s, got %s", t, describe(v))
		}
		if strings.HasPrefix(t, "U") && n.Sign() < 0 {
			return nil, fmt.Errorf("%s does not fit %s", s, t)
		}
		return n, nil
	}
}

func floatConverter(bits int) converter {
	return func(v any) (any, error) {
		s, ok := number(v)
		if !ok {
			return nil, fmt.Errorf("want a number for Float%d, got %s", bits, describe(v))
		}
		f, err := strconv.ParseFloat(s, bits)
		if err != nil {
			return nil, fmt.Errorf("%s does not fit Float%d", s, bits)
		}
		if bits == 32 {
			return float32(f), nil
		}
		return f, nil
	}
}

// timeLayouts are the forms a JSON string gives a date or time in.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999", "2006-01-02"}

// timeConverter reads a string in one of timeLayouts (without a zone: in
// UTC, or the column's own) or a number of seconds since the Unix epoch.
func timeConverter(t string) converter {
	name, args := typeArgs(t)
	loc := time.UTC
	if tz := ""; name == "DateTime" && len(args) == 1 || name == "DateTime64" && len(args) == 2 {
		tz = strings.Trim(args[len(args)-1], "'")
		if l, err := time.LoadLocation(tz); err == nil {
			loc = l
		}
	}
	return func(v any) (any, error) {
		switch v := v.(type) {
		case time.Time:
			return v, nil
		case string:
			for _, l := range timeLayouts {
				if at, err := time.ParseInLocation(l, strings.TrimSpace(v), loc); err == nil {
					return at, nil
				}
			}
			return nil, fmt.Errorf("%q is not a time for %s: want RFC 3339, YYYY-MM-DD hh:mm:ss[.fff] or YYYY-MM-DD", v, t)
		case json.Number:
			f, err := strconv.ParseFloat(v.String(), 64)
			if err != nil || math.IsInf(f, 0) || math.Abs(f) > 1e13 {
				return nil, fmt.Errorf("%s is not a time for %s: want seconds since 1970", v, t)
			}
			sec, frac := math.Modf(f)
			return time.Unix(int64(sec), int64(frac*1e9)).UTC(), nil
		}
		return nil, fmt.Errorf("want a time for %s, got %s", t, describe(v))
	}
}

// text is a String column's value: a JSON string's contents, any other
// value's JSON text.
func text(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	if v == nil {
		return "", errors.New("null for a column that is not Nullable")
	}
	return jsonText(v)
}

// jsonText writes v back as JSON, objects with sorted keys.
func jsonText(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimRight(buf.String(), "\n"), nil
}

// describe names a JSON value's kind for a message.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case json.Number:
		return "the number " + v.String()
	case string:
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return strconv.Quote(v)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
