package format

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// richAvro has every type and every logical type that hamba reads, nested,
// in unions and recursive.
const richAvro = `{"type":"record","name":"Rich","namespace":"t","fields":[
 {"name":"b","type":"boolean"},
 {"name":"i","type":"int"},
 {"name":"l","type":"long"},
 {"name":"f","type":"float"},
 {"name":"d","type":"double"},
 {"name":"s","type":"string"},
 {"name":"by","type":"bytes"},
 {"name":"fx","type":{"type":"fixed","name":"F4","size":4}},
 {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B","C"]}},
 {"name":"arr","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
   {"name":"k","type":"string"},{"name":"v","type":["null","double"]}]}}},
 {"name":"m","type":{"type":"map","values":["null","long","string","Item"]}},
 {"name":"u","type":["null","string","E","F4",{"type":"array","items":"int"}]},
 {"name":"opt","type":["null","Item"]},
 {"name":"date","type":{"type":"int","logicalType":"date"}},
 {"name":"tms","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"tus","type":{"type":"long","logicalType":"time-micros"}},
 {"name":"tsm","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"tsu","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"ltsm","type":{"type":"long","logicalType":"local-timestamp-millis"}},
 {"name":"ltsu","type":{"type":"long","logicalType":"local-timestamp-micros"}},
 {"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":20,"scale":4}},
 {"name":"decf","type":{"type":"fixed","name":"DF","size":10,"logicalType":"decimal","precision":22,"scale":3}},
 {"name":"uuid","type":{"type":"string","logicalType":"uuid"}},
 {"name":"dur","type":{"type":"fixed","name":"Dur","size":12,"logicalType":"duration"}},
 {"name":"next","type":["null","Rich"]}
]}`

// avroGen writes random values of a schema in Avro's binary encoding.
type avroGen struct {
	r *rand.Rand
}

func deref(s avro.Schema) avro.Schema {
	if ref, ok := s.(*avro.RefSchema); ok {
		return ref.Schema()
	}
	return s
}

func (g *avroGen) value(w []byte, s avro.Schema, depth int) []byte {
	r := g.r
	switch s := deref(s).(type) {
	case *avro.NullSchema:
		return w
	case *avro.RecordSchema:
		for _, f := range s.Fields() {
			w = g.value(w, f.Type(), depth+1)
		}
		return w
	case *avro.EnumSchema:
		return append(w, zz(int64(r.IntN(len(s.Symbols()))))...)
	case *avro.ArraySchema, *avro.MapSchema:
		n := r.IntN(4)
		if depth > 3 {
			n = 0
		}
		if n > 0 {
			if r.IntN(2) == 0 {
				w = append(w, zz(int64(n))...)
			} else {
				// A block with its byte size, as some writers do.
				var items []byte
				for range n {
					items = g.item(items, s, depth)
				}
				w = append(w, zz(int64(-n))...)
				w = append(w, zz(int64(len(items)))...)
				w = append(w, items...)
				return append(w, 0)
			}
			for range n {
				w = g.item(w, s, depth)
			}
		}
		return append(w, 0)
	case *avro.UnionSchema:
		i := r.IntN(len(s.Types()))
		if depth > 3 {
			i, _ = s.Indices() // the null branch, where there is one
			if !s.Nullable() {
				i = 0
			}
		}
		w = append(w, zz(int64(i))...)
		return g.value(w, s.Types()[i], depth+1)
	case *avro.FixedSchema:
		if l := s.Logical(); l != nil && l.Type() == avro.Decimal {
			return append(w, g.twos(l.(*avro.DecimalLogicalSchema).Precision(), s.Size())...)
		}
		p := make([]byte, s.Size())
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		return append(w, p...)
	case *avro.PrimitiveSchema:
		return g.primitive(w, s)
	}
	panic(fmt.Sprintf("no generator for %T", s))
}

func (g *avroGen) item(w []byte, s avro.Schema, depth int) []byte {
	if m, ok := s.(*avro.MapSchema); ok {
		w = append(w, avroStr(g.str())...)
		return g.value(w, m.Values(), depth+1)
	}
	return g.value(w, s.(*avro.ArraySchema).Items(), depth+1)
}

func (g *avroGen) primitive(w []byte, s *avro.PrimitiveSchema) []byte {
	r := g.r
	var lt avro.LogicalType
	if l := s.Logical(); l != nil {
		lt = l.Type()
	}
	between := func(lo, hi int64) int64 { return lo + r.Int64N(hi-lo+1) }
	switch lt {
	case avro.Date:
		return append(w, zz(between(-719162, 2932896))...)
	case avro.TimeMillis:
		return append(w, zz(between(0, 86399999))...)
	case avro.TimeMicros:
		return append(w, zz(between(0, 86399999999))...)
	case avro.TimestampMillis, avro.LocalTimestampMillis:
		return append(w, zz(between(minUnixSeconds*1e3, maxUnixSeconds*1e3+999))...)
	case avro.TimestampMicros, avro.LocalTimestampMicros:
		return append(w, zz(between(minUnixSeconds*1e6, maxUnixSeconds*1e6+999999))...)
	case avro.Decimal:
		return append(w, avroStr(string(g.twos(s.Logical().(*avro.DecimalLogicalSchema).Precision(), 0)))...)
	case avro.UUID:
		u := make([]byte, 16)
		for i := range u {
			u[i] = byte(r.Uint32())
		}
		return append(w, avroStr(strings.Trim(string(appendUUID(nil, u)), `"`))...)
	}
	switch s.Type() {
	case avro.Boolean:
		return append(w, byte(r.IntN(2)))
	case avro.Int:
		return append(w, zz(int64(int32(r.Uint32())>>r.IntN(32)))...)
	case avro.Long:
		return append(w, zz(int64(r.Uint64())>>r.IntN(64))...)
	case avro.Float:
		for {
			if f := float32(g.float()); !math.IsInf(float64(f), 0) {
				return append(w, f32(f)...)
			}
		}
	case avro.Double:
		return append(w, f64(g.float())...)
	case avro.String:
		return append(w, avroStr(g.str())...)
	case avro.Bytes:
		p := make([]byte, r.IntN(6))
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		return append(w, avroStr(string(p))...)
	}
	panic("no generator for " + s.String())
}

// float is a finite double, of any magnitude now and then.
func (g *avroGen) float() float64 {
	switch g.r.IntN(4) {
	case 0:
		return float64(g.r.IntN(2000) - 1000)
	case 1:
		return g.r.NormFloat64()
	case 2:
		return g.r.NormFloat64() * math.Pow(10, float64(g.r.IntN(60)-30))
	}
	for {
		if f := math.Float64frombits(g.r.Uint64()); !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f
		}
	}
}

// str is a random string with the characters JSON escapes.
func (g *avroGen) str() string {
	const pieces = "ab\"\\\n\t\x00\x1f\x7fé€😀</> "
	runes := []rune(pieces)
	var sb strings.Builder
	for range g.r.IntN(8) {
		sb.WriteRune(runes[g.r.IntN(len(runes))])
	}
	return sb.String()
}

// twos is a random unscaled decimal of at most precision digits, in two's
// complement: minimal, or of size bytes when size > 0.
func (g *avroGen) twos(precision, size int) []byte {
	digits := g.r.IntN(precision + 1)
	v := new(big.Int)
	for range digits {
		v.Mul(v, big.NewInt(10))
		v.Add(v, big.NewInt(int64(g.r.IntN(10))))
	}
	if g.r.IntN(2) == 0 {
		v.Neg(v)
	}
	n := size
	if n == 0 {
		n = (v.BitLen() + 8) / 8
	}
	// v mod 2^(8n), big-endian.
	m := new(big.Int).Lsh(big.NewInt(1), uint(8*n))
	u := new(big.Int).Mod(v, m)
	return u.FillBytes(make([]byte, n))
}

// hambaJSON turns what hamba's Unmarshal gives for s into the JSON our
// conventions give, with the time package and math/big rather than our
// code.
func hambaJSON(s avro.Schema, v any) any {
	switch s := deref(s).(type) {
	case *avro.NullSchema:
		return nil
	case *avro.RecordSchema:
		m := v.(map[string]any)
		out := map[string]any{}
		for _, f := range s.Fields() {
			out[f.Name()] = hambaJSON(f.Type(), m[f.Name()])
		}
		return out
	case *avro.ArraySchema:
		var out []any
		for _, e := range v.([]any) {
			out = append(out, hambaJSON(s.Items(), e))
		}
		if out == nil {
			out = []any{}
		}
		return out
	case *avro.MapSchema:
		out := map[string]any{}
		for k, e := range v.(map[string]any) {
			out[k] = hambaJSON(s.Values(), e)
		}
		return out
	case *avro.UnionSchema:
		if v == nil {
			return nil
		}
		// hamba gives {"type name": value}, but [null, T] of a T that is
		// not a record or map unwrapped.
		if m, ok := v.(map[string]any); ok && len(m) == 1 {
			for name, e := range m {
				for _, t := range s.Types() {
					if typeName(t) == name {
						return hambaJSON(t, e)
					}
				}
			}
		}
		_, i := s.Indices()
		return hambaJSON(s.Types()[i], v)
	case *avro.FixedSchema:
		if l := s.Logical(); l != nil {
			switch l.Type() {
			case avro.Decimal:
				return json.Number(v.(*big.Rat).FloatString(l.(*avro.DecimalLogicalSchema).Scale()))
			case avro.Duration:
				d := v.(avro.LogicalDuration)
				return map[string]any{"months": d.Months, "days": d.Days, "milliseconds": d.Milliseconds}
			}
		}
		a := reflect.ValueOf(v)
		p := make([]byte, a.Len())
		reflect.Copy(reflect.ValueOf(p), a)
		return p
	case *avro.PrimitiveSchema:
		if l := s.Logical(); l != nil {
			switch l.Type() {
			case avro.Date:
				return v.(time.Time).UTC().Format(time.DateOnly)
			case avro.TimeMillis, avro.TimeMicros:
				d := v.(time.Duration)
				return time.Unix(0, 0).UTC().Add(d).Format(time.TimeOnly) + fraction(int(d%time.Second))
			case avro.TimestampMillis, avro.TimestampMicros:
				t := v.(time.Time).UTC()
				return t.Format("2006-01-02T15:04:05") + fraction(t.Nanosecond()) + "Z"
			case avro.LocalTimestampMillis, avro.LocalTimestampMicros:
				t := v.(time.Time) // the wall clock, whatever zone it is in
				return t.Format("2006-01-02T15:04:05") + fraction(t.Nanosecond())
			case avro.Decimal:
				return json.Number(v.(*big.Rat).FloatString(l.(*avro.DecimalLogicalSchema).Scale()))
			}
		}
	}
	return v
}

// typeName is the key hamba gives a union's branch.
func typeName(s avro.Schema) string {
	s = deref(s)
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	name := string(s.Type())
	if l, ok := s.(avro.LogicalTypeSchema); ok && l.Logical() != nil {
		name += "." + string(l.Logical().Type())
	}
	return name
}

func fraction(nsec int) string {
	switch {
	case nsec == 0:
		return ""
	case nsec%1e6 == 0:
		return fmt.Sprintf(".%03d", nsec/1e6)
	case nsec%1e3 == 0:
		return fmt.Sprintf(".%06d", nsec/1e3)
	}
	return fmt.Sprintf(".%09d", nsec)
}

// jsonValue decodes JSON keeping numbers as written.
func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return v
}

// TestAvroAgreesWithHamba decodes random records of a rich schema with the
// transcoder and with hamba's Unmarshal (its values made JSON by the
// conventions, with the standard library), and compares the values.
func TestAvroAgreesWithHamba(t *testing.T) {
	schema, err := avro.ParseWithCache(richAvro, "", &avro.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	d := newDecoder(t, sinks.Avro, newSource(map[int]*registry.Schema{1: {Text: richAvro}}))
	g := &avroGen{r: rand.New(rand.NewPCG(1, 2))}
	n := 2000
	if testing.Short() {
		n = 200
	}
	for i := range n {
		payload := g.value(nil, schema, 0)
		var v any
		if err := avro.Unmarshal(schema, payload, &v); err != nil {
			t.Fatalf("record %d: hamba: %v", i, err)
		}
		want, err := json.Marshal(hambaJSON(schema, v))
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		got, _ := decodeOK(t, d, wire(1, payload))
		if !reflect.DeepEqual(jsonValue(t, []byte(got)), jsonValue(t, want)) {
			t.Fatalf("record %d (% x):\ngot  %s\nwant %s", i, payload, got, want)
		}
	}
}

// avroSeeds are records of richAvro for the fuzz test to start from.
func avroSeeds(n int) [][]byte {
	schema, err := avro.ParseWithCache(richAvro, "", &avro.SchemaCache{})
	if err != nil {
		panic(err)
	}
	g := &avroGen{r: rand.New(rand.NewPCG(3, 4))}
	var seeds [][]byte
	for range n {
		seeds = append(seeds, g.value(nil, schema, 0))
	}
	return seeds
}
