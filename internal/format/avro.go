package format

import (
	"fmt"

	"github.com/hamba/avro/v2"

	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// avroKind is what an avroNode reads: an Avro type, or a logical type
// over one.
type avroKind uint8

const (
	avNull avroKind = iota
	avBoolean
	avInt
	avLong
	avFloat
	avDouble
	avString
	avBytes
	avFixed
	avEnum
	avArray
	avMap
	avUnion
	avRecord
	avDate                 // int
	avTimeMillis           // int
	avTimeMicros           // long
	avTimestampMillis      // long
	avTimestampMicros      // long
	avTimestampNanos       // long
	avLocalTimestampMillis // long
	avLocalTimestampMicros // long
	avLocalTimestampNanos  // long
	avDecimalBytes         // bytes
	avDecimalFixed         // fixed
	avUUIDFixed            // fixed(16)
	avDurationFixed        // fixed(12)
)

// avroNode is a compiled Avro schema: what to read and how to write it.
// Named types are compiled once, so a recursive schema is a cyclic graph.
type avroNode struct {
	kind avroKind
	// size of a fixed; precision and scale of a decimal.
	size, precision, scale int
	symbols                [][]byte    // an enum's symbols, as JSON strings
	elem                   *avroNode   // an array's items, a map's values
	branches               []*avroNode // a union's
	fields                 []avroField // a record's, in the schema's order
	// minSize is a lower bound of the bytes a value takes, which bounds
	// the items an array block may claim.
	minSize int
}

type avroField struct {
	name string
	key  []byte // `"name":`
	node *avroNode
}

// avroCodec decodes the records of one Avro schema.
type avroCodec struct {
	id     int
	root   *avroNode
	schema *sinks.Schema
}

// compileAvro parses s, its references first so that the names they define
// resolve, and compiles it.
func compileAvro(s *registry.Schema) (codec, error) {
	cache := &avro.SchemaCache{}
	err := walkReferences(s, registry.Avro, func(ref registry.Reference) error {
		if _, err := avro.ParseWithCache(ref.Schema.Text, "", cache); err != nil {
			return fmt.Errorf("reference %q: %w", ref.Name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	parsed, err := avro.ParseWithCache(s.Text, "", cache)
	if err != nil {
		return nil, err
	}
	c := &avroCompiler{named: map[string]*avroNode{}}
	root := c.node(parsed)
	return &avroCodec{id: s.ID, root: root, schema: avroSinksSchema(s.ID, parsed)}, nil
}

type avroCompiler struct {
	named map[string]*avroNode // by full name
}

// logicalProp is a logical type that hamba does not know (it keeps those
// as a property): timestamp-nanos, local-timestamp-nanos, uuid on fixed.
func logicalProp(s avro.Schema) string {
	p, ok := s.(avro.PropertySchema)
	if !ok {
		return ""
	}
	lt, _ := p.Prop("logicalType").(string)
	return lt
}

func (c *avroCompiler) node(s avro.Schema) *avroNode {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if n, ok := s.(avro.NamedSchema); ok {
		if done, ok := c.named[n.FullName()]; ok {
			return done
		}
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		return &avroNode{kind: avNull}
	case *avro.PrimitiveSchema:
		return primitiveNode(s)
	case *avro.RecordSchema:
		n := &avroNode{kind: avRecord}
		c.named[s.FullName()] = n // before the fields: they may name it
		for _, f := range s.Fields() {
			fn := c.node(f.Type())
			n.fields = append(n.fields, avroField{name: f.Name(), key: appendKey(nil, f.Name()), node: fn})
			// A record still being compiled counts 0 here: a lower bound.
			n.minSize += fn.minSize
		}
		return n
	case *avro.EnumSchema:
		n := &avroNode{kind: avEnum, minSize: 1}
		for _, sym := range s.Symbols() {
			n.symbols = append(n.symbols, AppendJSONString(nil, []byte(sym)))
		}
		c.named[s.FullName()] = n
		return n
	case *avro.FixedSchema:
		n := &avroNode{kind: avFixed, size: s.Size(), minSize: s.Size()}
		if l := s.Logical(); l != nil {
			switch l.Type() {
			case avro.Decimal:
				d := l.(*avro.DecimalLogicalSchema)
				n.kind, n.precision, n.scale = avDecimalFixed, d.Precision(), d.Scale()
			case avro.Duration:
				n.kind = avDurationFixed
			}
		} else if logicalProp(s) == "uuid" && s.Size() == 16 {
			n.kind = avUUIDFixed
		}
		c.named[s.FullName()] = n
		return n
	case *avro.ArraySchema:
		n := &avroNode{kind: avArray, minSize: 1}
		n.elem = c.node(s.Items())
		return n
	case *avro.MapSchema:
		n := &avroNode{kind: avMap, minSize: 1}
		n.elem = c.node(s.Values())
		return n
	case *avro.UnionSchema:
		n := &avroNode{kind: avUnion, minSize: 1}
		for _, t := range s.Types() {
			n.branches = append(n.branches, c.node(t))
		}
		return n
	}
	// hamba has no other schema types; a null reads nothing, harmlessly.
	return &avroNode{kind: avNull}
}

// avroPrimitives are the kinds of Avro's primitive types, with the least
// bytes a value of each takes.
var avroPrimitives = map[avro.Type]struct {
	kind    avroKind
	minSize int
}{
	avro.Boolean: {avBoolean, 1},
	avro.Int:     {avInt, 1},
	avro.Long:    {avLong, 1},
	avro.Float:   {avFloat, 4},
	avro.Double:  {avDouble, 8},
	avro.String:  {avString, 1}, // uuid reads as the string it is
	avro.Bytes:   {avBytes, 1},
}

// avroLogicalKinds are the kinds of the logical types over an int or a
// long; one the table does not name reads as its primitive. (A decimal
// over bytes is hamba's DecimalLogicalSchema.)
var avroLogicalKinds = map[avro.Type]map[avro.LogicalType]avroKind{
	avro.Int: {
		avro.Date:       avDate,
		avro.TimeMillis: avTimeMillis,
	},
	avro.Long: {
		avro.TimeMicros:           avTimeMicros,
		avro.TimestampMillis:      avTimestampMillis,
		avro.TimestampMicros:      avTimestampMicros,
		"timestamp-nanos":         avTimestampNanos, // a logicalProp
		avro.LocalTimestampMillis: avLocalTimestampMillis,
		avro.LocalTimestampMicros: avLocalTimestampMicros,
		"local-timestamp-nanos":   avLocalTimestampNanos, // a logicalProp
	},
}

func primitiveNode(s *avro.PrimitiveSchema) *avroNode {
	p := avroPrimitives[s.Type()] // avNull for any other
	n := &avroNode{kind: p.kind, minSize: p.minSize}
	lt := avro.LogicalType(logicalProp(s))
	if l := s.Logical(); l != nil {
		lt = l.Type()
	}
	if k, ok := avroLogicalKinds[s.Type()][lt]; ok {
		n.kind = k
	}
	if d, ok := s.Logical().(*avro.DecimalLogicalSchema); ok { // over bytes
		n.kind, n.precision, n.scale = avDecimalBytes, d.Precision(), d.Scale()
	}
	return n
}

// avroSinksSchema describes the records of s for sinks.
func avroSinksSchema(id int, s avro.Schema) *sinks.Schema {
	out := &sinks.Schema{ID: id, Format: sinks.Avro, Subject: string(s.Type())}
	if n, ok := s.(avro.NamedSchema); ok {
		out.Subject = n.FullName()
	}
	if r, ok := s.(*avro.RecordSchema); ok {
		out.Fields = make([]sinks.Field, 0, len(r.Fields()))
		for _, f := range r.Fields() {
			out.Fields = append(out.Fields, sinks.Field{Name: f.Name(), Type: avroFieldType(f.Type())})
		}
	}
	return out
}

// avroFieldType is the kind of a field's JSON values; a union of null and
// one type is that type's.
func avroFieldType(s avro.Schema) sinks.FieldType {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	switch s := s.(type) {
	case *avro.UnionSchema:
		if t := s.Types(); len(t) == 2 && s.Nullable() {
			_, i := s.Indices()
			return avroFieldType(t[i])
		}
	case *avro.EnumSchema:
		return sinks.FieldType{Kind: sinks.Enum}
	case *avro.FixedSchema:
		if l := s.Logical(); l != nil {
			switch l.Type() {
			case avro.Decimal:
				d := l.(*avro.DecimalLogicalSchema)
				return sinks.FieldType{Kind: sinks.Decimal, Precision: d.Precision(), Scale: d.Scale()}
			case avro.Duration:
				return sinks.FieldType{Kind: sinks.JSONValue}
			}
		}
		if logicalProp(s) == "uuid" && s.Size() == 16 {
			return sinks.FieldType{Kind: sinks.UUID}
		}
		return sinks.FieldType{Kind: sinks.BytesKind}
	case *avro.PrimitiveSchema:
		n := primitiveNode(s)
		switch n.kind {
		case avBoolean:
			return sinks.FieldType{Kind: sinks.Boolean}
		case avInt:
			return sinks.FieldType{Kind: sinks.Int}
		case avLong:
			return sinks.FieldType{Kind: sinks.Long}
		case avFloat:
			return sinks.FieldType{Kind: sinks.Float}
		case avDouble:
			return sinks.FieldType{Kind: sinks.Double}
		case avString:
			if l := s.Logical(); l != nil && l.Type() == avro.UUID {
				return sinks.FieldType{Kind: sinks.UUID}
			}
			return sinks.FieldType{Kind: sinks.String}
		case avBytes:
			return sinks.FieldType{Kind: sinks.BytesKind}
		case avDate:
			return sinks.FieldType{Kind: sinks.Date}
		case avTimeMillis, avTimeMicros:
			return sinks.FieldType{Kind: sinks.Time}
		case avTimestampMillis, avTimestampMicros, avTimestampNanos:
			return sinks.FieldType{Kind: sinks.Timestamp}
		case avLocalTimestampMillis, avLocalTimestampMicros, avLocalTimestampNanos:
			return sinks.FieldType{Kind: sinks.LocalTimestamp}
		case avDecimalBytes:
			return sinks.FieldType{Kind: sinks.Decimal, Precision: n.precision, Scale: n.scale}
		}
	}
	return sinks.FieldType{Kind: sinks.JSONValue}
}
