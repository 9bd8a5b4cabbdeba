package format

import (
	"context"
	"strconv"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Files that Confluent's registry and serializers know without a reference,
// as they know google/protobuf/*: schemas import them bare. Their content
// is Confluent's (the message and extension numbers are what matter).
var confluentImports = map[string]string{
	"confluent/meta.proto": `syntax = "proto3";
package confluent;
import "google/protobuf/descriptor.proto";
message Meta {
  string doc = 1;
  map<string, string> params = 2;
  repeated string tags = 3;
}
extend google.protobuf.FileOptions { Meta file_meta = 1088; }
extend google.protobuf.MessageOptions { Meta message_meta = 1088; }
extend google.protobuf.FieldOptions { Meta field_meta = 1088; }
extend google.protobuf.EnumOptions { Meta enum_meta = 1088; }
extend google.protobuf.EnumValueOptions { Meta enum_value_meta = 1088; }
`,
	"confluent/type/decimal.proto": `syntax = "proto3";
package confluent.type;
message Decimal {
  bytes value = 1;
  uint32 precision = 2;
  int32 scale = 3;
}
`,
}

// pbCodec decodes the records of one Protobuf schema: a file whose
// messages the records' message indexes select.
type pbCodec struct {
	id   int
	file protoreflect.FileDescriptor
	// tops has every message of the file, nested ones too, by full name.
	tops  map[protoreflect.FullName]*pbTop
	first *pbTop // the file's first message, which index [0] names; nil if none
}

// pbTop is a message that a record can be: its reader and its schema.
type pbTop struct {
	msg    *pbMsg
	schema *sinks.Schema
}

// wktKind names the well-known types that have a JSON of their own.
type wktKind uint8

const (
	wktNone wktKind = iota
	wktTimestamp
	wktDuration
	// The unwrapped ones: their JSON is the value of their one field set
	// (wrappers, Value), or of their one field (Struct, ListValue).
	wktUnwrap
)

// pbMsg is a compiled message.
type pbMsg struct {
	wkt    wktKind
	fields []pbField // in declaration order
	// byNum maps a field number below len(byNum) to its index in fields,
	// plus 1 (0: unknown); byNumMap those above.
	byNum    []int32
	byNumMap map[protowire.Number]int32
	oneofs   int // the real oneofs, which fields' oneof counts from 1
}

// pbField is a compiled field.
type pbField struct {
	name string
	key  []byte // `"name":`
	num  protowire.Number
	kind protoreflect.Kind
	wire protowire.Type // the wire type of one value
	list bool
	// packable is a repeated scalar number, which may come packed.
	packable bool
	mapKey   *pbField // a map's key and value fields; mapVal's key is unused
	mapVal   *pbField
	presence bool   // absent means omitted (else: zero is written)
	zero     []byte // the JSON of an absent field without presence
	utf8     bool   // a string that must be valid UTF-8 (proto3, editions)
	msg      *pbMsg // a message's or group's
	enum     *pbEnum
	oneof    int // 1 + the index of its real oneof; 0 for none
}

type pbEnum struct {
	null  bool // google.protobuf.NullValue, whose JSON is null
	dense [][]byte
	names map[int32][]byte // the JSON strings of the values past dense
}

func (e *pbEnum) appendValue(dst []byte, v int32) []byte {
	if e.null {
		return append(dst, "null"...)
	}
	if v >= 0 && int(v) < len(e.dense) && e.dense[v] != nil {
		return append(dst, e.dense[v]...)
	}
	if n, ok := e.names[v]; ok {
		return append(dst, n...)
	}
	return strconv.AppendInt(dst, int64(v), 10) // a number the schema has no name for
}

// compileProtobuf compiles s with its references as imports.
func compileProtobuf(s *registry.Schema) (codec, error) {
	files := map[string]string{}
	err := walkReferences(s, registry.Protobuf, func(ref registry.Reference) error {
		if _, ok := files[ref.Name]; !ok {
			files[ref.Name] = ref.Schema.Text
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	main := "schema-" + strconv.Itoa(s.ID) + ".proto"
	for _, taken := files[main]; taken; _, taken = files[main] {
		main = "_" + main
	}
	files[main] = s.Text
	for name, text := range confluentImports {
		if _, ok := files[name]; !ok {
			files[name] = text
		}
	}
	comp := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(files)}),
		MaxParallelism: 1,
	}
	// Compiling is CPU-bound and short, and its errors must be the
	// schema's alone: no caller's ctx.
	res, err := comp.Compile(context.Background(), main)
	if err != nil {
		return nil, err
	}
	c := &pbCodec{id: s.ID, file: res[0], tops: map[protoreflect.FullName]*pbTop{}}
	pc := &pbCompiler{msgs: map[protoreflect.FullName]*pbMsg{}}
	var add func(ms protoreflect.MessageDescriptors)
	add = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			md := ms.Get(i)
			if md.IsMapEntry() {
				continue
			}
			c.tops[md.FullName()] = &pbTop{msg: pc.message(md), schema: pbSinksSchema(s.ID, md)}
			add(md.Messages())
		}
	}
	add(c.file.Messages())
	if c.file.Messages().Len() > 0 {
		c.first = c.tops[c.file.Messages().Get(0).FullName()]
	}
	return c, nil
}

type pbCompiler struct {
	msgs map[protoreflect.FullName]*pbMsg
}

func wktOf(name protoreflect.FullName) wktKind {
	switch name {
	case "google.protobuf.Timestamp":
		return wktTimestamp
	case "google.protobuf.Duration":
		return wktDuration
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
		"google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
		"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue",
		"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue":
		return wktUnwrap
	}
	return wktNone
}

// maxDenseNumber bounds the field numbers and enum values looked up in a
// slice rather than a map.
const maxDenseNumber = 1024

func (pc *pbCompiler) message(md protoreflect.MessageDescriptor) *pbMsg {
	if m, ok := pc.msgs[md.FullName()]; ok {
		return m
	}
	m := &pbMsg{wkt: wktOf(md.FullName())}
	pc.msgs[md.FullName()] = m // before the fields: they may name it
	fds := md.Fields()
	m.fields = make([]pbField, fds.Len())
	for i := range fds.Len() {
		fd := fds.Get(i)
		m.fields[i] = pc.field(fd)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			m.fields[i].oneof = od.Index() + 1
			m.oneofs = max(m.oneofs, od.Index()+1)
		}
		if n := fd.Number(); n < maxDenseNumber {
			for len(m.byNum) <= int(n) {
				m.byNum = append(m.byNum, 0)
			}
			m.byNum[n] = int32(i) + 1
		} else {
			if m.byNumMap == nil {
				m.byNumMap = map[protowire.Number]int32{}
			}
			m.byNumMap[n] = int32(i) + 1
		}
	}
	return m
}

func (pc *pbCompiler) field(fd protoreflect.FieldDescriptor) pbField {
	f := pbField{
		name:     string(fd.Name()),
		key:      appendKey(nil, string(fd.Name())),
		num:      fd.Number(),
		kind:     fd.Kind(),
		wire:     wireType(fd.Kind()),
		list:     fd.IsList(),
		presence: fd.HasPresence(),
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if fd.IsMap() {
			k, v := pc.field(fd.MapKey()), pc.field(fd.MapValue())
			f.mapKey, f.mapVal = &k, &v
			f.kind, f.wire = protoreflect.MessageKind, protowire.BytesType
		} else {
			f.msg = pc.message(fd.Message())
		}
	case protoreflect.EnumKind:
		f.enum = compileEnum(fd.Enum())
	case protoreflect.StringKind:
		f.utf8 = enforceUTF8(fd)
	}
	f.packable = f.list && f.wire != protowire.BytesType && f.wire != protowire.StartGroupType
	switch {
	case f.list:
		f.zero = []byte("[]")
	case f.mapKey != nil:
		f.zero = []byte("{}")
	case f.msg != nil || f.presence:
		// Written when present only, or (a map's value) read as an
		// empty message.
	default:
		f.zero = zeroJSON(fd, f.enum)
	}
	return f
}

func compileEnum(ed protoreflect.EnumDescriptor) *pbEnum {
	e := &pbEnum{null: ed.FullName() == "google.protobuf.NullValue"}
	vs := ed.Values()
	for i := range vs.Len() {
		v := vs.Get(i)
		n := int32(v.Number())
		name := AppendJSONString(nil, []byte(v.Name()))
		if n >= 0 && n < maxDenseNumber {
			for len(e.dense) <= int(n) {
				e.dense = append(e.dense, nil)
			}
			if e.dense[n] == nil { // the first name of an alias wins, as protojson
				e.dense[n] = name
			}
			continue
		}
		if e.names == nil {
			e.names = map[int32][]byte{}
		}
		if _, ok := e.names[n]; !ok {
			e.names[n] = name
		}
	}
	return e
}

// zeroJSON is the JSON of a scalar field's default, written when the
// field (without presence) is absent: a column gets 0, not NULL.
func zeroJSON(fd protoreflect.FieldDescriptor, e *pbEnum) []byte {
	def := fd.Default()
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(nil, def.Bool())
	case protoreflect.EnumKind:
		return e.appendValue(nil, int32(def.Enum()))
	case protoreflect.StringKind:
		return AppendJSONString(nil, []byte(def.String()))
	case protoreflect.BytesKind:
		return appendBase64(nil, def.Bytes())
	case protoreflect.FloatKind:
		return appendFloat(nil, def.Float(), 32)
	case protoreflect.DoubleKind:
		return appendFloat(nil, def.Float(), 64)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(nil, def.Uint(), 10)
	default:
		return strconv.AppendInt(nil, def.Int(), 10)
	}
}

func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	default:
		return protowire.VarintType
	}
}

// enforceUTF8 says whether a string field must hold valid UTF-8, as the
// protobuf runtimes check: proto3 always, proto2 never, editions unless a
// feature says NONE.
func enforceUTF8(fd protoreflect.FieldDescriptor) bool {
	switch fd.ParentFile().Syntax() {
	case protoreflect.Proto3:
		return true
	case protoreflect.Proto2:
		return false
	}
	for d := protoreflect.Descriptor(fd); d != nil; d = d.Parent() {
		var fs *descriptorpb.FeatureSet
		switch o := d.Options().(type) {
		case *descriptorpb.FieldOptions:
			fs = o.GetFeatures()
		case *descriptorpb.MessageOptions:
			fs = o.GetFeatures()
		case *descriptorpb.FileOptions:
			fs = o.GetFeatures()
		}
		switch fs.GetUtf8Validation() {
		case descriptorpb.FeatureSet_VERIFY:
			return true
		case descriptorpb.FeatureSet_NONE:
			return false
		}
	}
	return true
}

// pbSinksSchema describes the records of md for sinks.
func pbSinksSchema(id int, md protoreflect.MessageDescriptor) *sinks.Schema {
	s := &sinks.Schema{ID: id, Format: sinks.Protobuf, Subject: string(md.FullName())}
	fds := md.Fields()
	s.Fields = make([]sinks.Field, 0, fds.Len())
	for i := range fds.Len() {
		fd := fds.Get(i)
		s.Fields = append(s.Fields, sinks.Field{Name: string(fd.Name()), Type: pbFieldType(fd)})
	}
	return s
}

// pbFieldType is the kind of a field's JSON values.
func pbFieldType(fd protoreflect.FieldDescriptor) sinks.FieldType {
	if fd.IsList() || fd.IsMap() {
		return sinks.FieldType{Kind: sinks.JSONValue}
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Timestamp":
			return sinks.FieldType{Kind: sinks.Timestamp}
		case "google.protobuf.Duration":
			return sinks.FieldType{Kind: sinks.Duration}
		case "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
			"google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
			"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue":
			return pbScalarType(fd.Message().Fields().ByNumber(1).Kind())
		}
		return sinks.FieldType{Kind: sinks.JSONValue}
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			return sinks.FieldType{Kind: sinks.JSONValue}
		}
		return sinks.FieldType{Kind: sinks.Enum}
	}
	return pbScalarType(fd.Kind())
}

func pbScalarType(k protoreflect.Kind) sinks.FieldType {
	switch k {
	case protoreflect.BoolKind:
		return sinks.FieldType{Kind: sinks.Boolean}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return sinks.FieldType{Kind: sinks.Int}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return sinks.FieldType{Kind: sinks.Long}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		// Past a signed 64-bit column: an exact number of up to 20 digits.
		return sinks.FieldType{Kind: sinks.Decimal, Precision: 20}
	case protoreflect.FloatKind:
		return sinks.FieldType{Kind: sinks.Float}
	case protoreflect.DoubleKind:
		return sinks.FieldType{Kind: sinks.Double}
	case protoreflect.StringKind:
		return sinks.FieldType{Kind: sinks.String}
	case protoreflect.BytesKind:
		return sinks.FieldType{Kind: sinks.BytesKind}
	}
	return sinks.FieldType{Kind: sinks.JSONValue}
}
