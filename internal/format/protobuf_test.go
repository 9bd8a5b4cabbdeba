package format

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

const moneyProto = `syntax = "proto3";
package common;
message Money { string currency = 1; int64 units = 2; }
`

const orderProto = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/empty.proto";
import "common/money.proto";

message Order {
  int64 id = 1;
  string name = 2;
  bool paid = 3;
  double total = 4;
  float ratio = 5;
  int32 i32 = 6;
  sint32 s32 = 7;
  sint64 s64 = 8;
  uint32 u32 = 9;
  uint64 u64 = 10;
  fixed32 f32 = 11;
  fixed64 f64 = 12;
  sfixed32 sf32 = 13;
  sfixed64 sf64 = 14;
  bytes raw = 15;
  google.protobuf.NullValue null = 37;
  Status status = 16;
  optional string note = 17;
  repeated string tags = 18;
  repeated int32 nums = 19;
  map<string, int64> counts = 20;
  map<int32, Line> lines_by_no = 21;
  Line first = 22;
  repeated Line lines = 23;
  oneof pay {
    string card = 24;
    int64 voucher = 25;
  }
  google.protobuf.Timestamp created = 26;
  google.protobuf.Duration ttl = 27;
  google.protobuf.Int64Value maybe_id = 28;
  google.protobuf.StringValue maybe_name = 29;
  google.protobuf.Struct extra = 30;
  google.protobuf.Value any_value = 31;
  google.protobuf.ListValue list = 32;
  google.protobuf.Empty nothing = 33;
  common.Money price = 34;
  google.protobuf.UInt64Value big = 35;
  google.protobuf.BytesValue maybe_raw = 36;

  message Line {
    string sku = 1;
    int32 qty = 2;
  }
  enum Status {
    NEW = 0;
    PAID = 1;
  }
}

message Other {
  string x = 1;
  message Inner {
    int32 y = 1;
    Inner next = 2;
  }
}
`

func orderSchema() *registry.Schema {
	return &registry.Schema{Type: registry.Protobuf, Text: orderProto, References: []registry.Reference{
		{Name: "common/money.proto", Subject: "money", Version: 1, Schema: &registry.Schema{Type: registry.Protobuf, Text: moneyProto}}}}
}

// pbFile compiles s as the decoder does, for the tests to build messages.
func pbFile(t testing.TB, s *registry.Schema) protoreflect.FileDescriptor {
	t.Helper()
	c, err := compileProtobuf(s)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*pbCodec).file
}

// pbEncode is the wire encoding of the message name of fd that the JSON
// js stands for, in protojson's terms, with map keys in order.
func pbEncode(t testing.TB, fd protoreflect.FileDescriptor, name, js string) []byte {
	t.Helper()
	md := fd.Messages().ByName(protoreflect.Name(name))
	if md == nil {
		t.Fatalf("no message %s", name)
	}
	m := dynamicpb.NewMessage(md)
	if err := protojson.Unmarshal([]byte(js), m); err != nil {
		t.Fatalf("protojson %s: %v", js, err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// first is the message index [0], as one byte.
var first = []byte{0}

const orderZero = `"id":0,"name":"","paid":false,"total":0,"ratio":0,"i32":0,"s32":0,"s64":0,"u32":0,"u64":0,` +
	`"f32":0,"f64":0,"sf32":0,"sf64":0,"raw":"","null":null,"status":"NEW","tags":[],"nums":[],"counts":{},"lines_by_no":{},"lines":[]`

func TestProtobufValues(t *testing.T) {
	fd := pbFile(t, orderSchema())
	d := newDecoder(t, sinks.Protobuf, newSource(map[int]*registry.Schema{5: orderSchema()}))
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty: proto3 zeros", `{}`, `{` + orderZero + `}`},
		{"scalars", `{"id":"9007199254740993","name":"a\"b\u0001é","paid":true,"total":0.1,"ratio":1.1,"i32":-5,"s32":-6,"s64":"-7",
			"u32":4294967295,"u64":"18446744073709551615","f32":8,"f64":"9","sf32":-10,"sf64":"-11","raw":"AAH+/w==","status":"PAID"}`,
			`{"id":9007199254740993,"name":"a\"b\u0001é","paid":true,"total":0.1,"ratio":1.1,"i32":-5,"s32":-6,"s64":-7,` +
				`"u32":4294967295,"u64":18446744073709551615,"f32":8,"f64":9,"sf32":-10,"sf64":-11,"raw":"AAH+/w==","null":null,"status":"PAID",` +
				`"tags":[],"nums":[],"counts":{},"lines_by_no":{},"lines":[]}`},
		{"extremes", `{"id":"-9223372036854775808","i32":-2147483648,"s32":-2147483648,"s64":"-9223372036854775808","sf64":"-9223372036854775808"}`,
			`{"id":-9223372036854775808,"name":"","paid":false,"total":0,"ratio":0,"i32":-2147483648,"s32":-2147483648,"s64":-9223372036854775808,` +
				`"u32":0,"u64":0,"f32":0,"f64":0,"sf32":0,"sf64":-9223372036854775808,"raw":"","null":null,"status":"NEW","tags":[],"nums":[],"counts":{},"lines_by_no":{},"lines":[]}`},
		{"NaN and infinities", `{"total":"NaN","ratio":"-Infinity"}`, `{` + strings.Replace(strings.Replace(orderZero, `"total":0`, `"total":null`, 1), `"ratio":0`, `"ratio":null`, 1) + `}`},
		{"presence", `{"note":"","first":{},"card":"visa"}`, `{` + orderZero[:strings.Index(orderZero, `"tags"`)] + `"note":"",` +
			orderZero[strings.Index(orderZero, `"tags"`):strings.Index(orderZero, `"lines":`)] + `"first":{"sku":"","qty":0},"lines":[],"card":"visa"}`},
		{"repeated, maps, nested", `{"tags":["a","b"],"nums":[1,-1,300],"counts":{"y":2,"x":"1"},"lines_by_no":{"2":{"sku":"B"},"-1":{"qty":3}},
			"lines":[{"sku":"A","qty":1},{}],"voucher":"12"}`,
			`{` + orderZero[:strings.Index(orderZero, `"tags"`)] + `"tags":["a","b"],"nums":[1,-1,300],"counts":{"x":1,"y":2},` +
				`"lines_by_no":{"-1":{"sku":"","qty":3},"2":{"sku":"B","qty":0}},"lines":[{"sku":"A","qty":1},{"sku":"","qty":0}],"voucher":12}`},
		{"well-known types", `{"created":"2024-05-01T12:00:00.123Z","ttl":"1.5s","maybe_id":"7","maybe_name":"","extra":{"a":1,"b":[true,null],"c":{"d":"e"}},
			"any_value":3.5,"list":[1,"x",{}],"nothing":{},"big":"18446744073709551615","maybe_raw":"AQ==","null":null}`,
			`{` + orderZero + `,"created":"2024-05-01T12:00:00.123Z","ttl":"1.500s","maybe_id":7,"maybe_name":"","extra":{"a":1,"b":[true,null],"c":{"d":"e"}},` +
				`"any_value":3.5,"list":[1,"x",{}],"nothing":{},"big":18446744073709551615,"maybe_raw":"AQ=="}`},
		{"times", `{"created":"1969-12-31T23:59:59.999999999Z","ttl":"-0.000001s"}`,
			`{` + orderZero + `,"created":"1969-12-31T23:59:59.999999999Z","ttl":"-0.000001s"}`},
		{"whole times", `{"created":"0001-01-01T00:00:00Z","ttl":"315576000000s"}`,
			`{` + orderZero + `,"created":"0001-01-01T00:00:00Z","ttl":"315576000000s"}`},
		{"Value kinds", `{"any_value":{"k":["s",false,null,-0.5]}}`, `{` + orderZero + `,"any_value":{"k":["s",false,null,-0.5]}}`},
		{"imported message", `{"price":{"currency":"NOK","units":"100"}}`, `{` + orderZero + `,"price":{"currency":"NOK","units":100}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, s := decodeOK(t, d, wire(5, first, pbEncode(t, fd, "Order", tc.in)))
			if got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
			if s.Subject != "shop.Order" {
				t.Errorf("subject %q", s.Subject)
			}
		})
	}
}

// Bytes that encoders do not write but the wire format allows.
func TestProtobufWire(t *testing.T) {
	const text = `syntax = "proto3";
message M {
  int32 a = 1;
  string b = 2;
  repeated int32 c = 3;
  N n = 4;
  oneof o { int32 x = 5; N y = 6; }
  repeated fixed32 f = 7;
  map<string, int32> m = 8;
}
message N { int32 p = 1; int32 q = 2; }
`
	d := newDecoder(t, sinks.Protobuf, newSource(map[int]*registry.Schema{1: {Type: registry.Protobuf, Text: text}}))
	const rest = `"c":[],"f":[],"m":{}`
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"out of order", cat(pbBytes(2, []byte("s")), pbVarint(1, 3)), `{"a":3,"b":"s",` + rest + `}`},
		{"set twice: the last wins", cat(pbVarint(1, 3), pbVarint(1, 4)), `{"a":4,"b":"",` + rest + `}`},
		{"packed and not", cat(pbVarint(3, 1), pbBytes(3, cat(protowire.AppendVarint(nil, 2), protowire.AppendVarint(nil, 3))), pbVarint(3, 4)),
			`{"a":0,"b":"","c":[1,2,3,4],"f":[],"m":{}}`},
		{"packed fixed32", cat(pbBytes(7, []byte{1, 0, 0, 0, 2, 0, 0, 0}), pbFixed32(7, 3)), `{"a":0,"b":"","c":[],"f":[1,2,3],"m":{}}`},
		{"message set twice merges", cat(pbBytes(4, pbVarint(1, 1)), pbVarint(1, 9), pbBytes(4, pbVarint(2, 2))), `{"a":9,"b":"","c":[],"n":{"p":1,"q":2},"f":[],"m":{}}`},
		{"oneof: the last set wins", cat(pbVarint(5, 1), pbBytes(6, pbVarint(1, 2))), `{"a":0,"b":"","c":[],"y":{"p":2,"q":0},"f":[],"m":{}}`},
		{"oneof: back again", cat(pbBytes(6, pbVarint(1, 2)), pbVarint(5, 1)), `{"a":0,"b":"","c":[],"x":1,"f":[],"m":{}}`},
		{"unknown fields", cat(pbVarint(99, 1), pbBytes(100, []byte("zz")), pbFixed32(101, 1), pbVarint(1, 1)), `{"a":1,"b":"",` + rest + `}`},
		{"wrong wire type: unknown", cat(pbFixed32(1, 5), pbVarint(2, 1)), `{"a":0,"b":"",` + rest + `}`},
		{"int32 as 10 bytes", pbVarint(1, math.MaxUint64), `{"a":-1,"b":"",` + rest + `}`},
		{"map entry missing parts", cat(pbBytes(8, nil), pbBytes(8, pbBytes(1, []byte("k")))), `{"a":0,"b":"","c":[],"f":[],"m":{"":0,"k":0}}`},
		{"map entry key twice", pbBytes(8, cat(pbBytes(1, []byte("k")), pbVarint(2, 1), pbBytes(1, []byte("j")))), `{"a":0,"b":"","c":[],"f":[],"m":{"j":1}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := decodeOK(t, d, wire(1, first, tc.in)); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestProtobufProto2(t *testing.T) {
	const text = `syntax = "proto2";
message P {
  optional int32 a = 1 [default = 7];
  required string b = 2;
  optional group G = 3 { optional int32 c = 4; }
  repeated int32 r = 5 [packed = true];
}
`
	d := newDecoder(t, sinks.Protobuf, newSource(map[int]*registry.Schema{1: {Type: registry.Protobuf, Text: text}}))
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"absent: omitted", nil, `{"r":[]}`},
		{"group", cat(protowire.AppendTag(nil, 3, protowire.StartGroupType), protowire.AppendTag(nil, 4, protowire.VarintType), []byte{5},
			protowire.AppendTag(nil, 3, protowire.EndGroupType)), `{"g":{"c":5},"r":[]}`},
		{"proto2 strings are not checked", cat(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{2, 'a', 0xff}), `{"b":"a\ufffd","r":[]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := decodeOK(t, d, wire(1, first, tc.in)); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestProtobufMessageIndex(t *testing.T) {
	fd := pbFile(t, orderSchema())
	d := newDecoder(t, sinks.Protobuf, newSource(map[int]*registry.Schema{5: orderSchema()}))
	// [1,0]: the first nested message of the second message.
	innerBytes := cat(protowire.AppendTag(nil, 1, protowire.VarintType), []byte{9})
	got, s := decodeOK(t, d, wire(5, []byte{4, 2, 0}, innerBytes))
	if got != `{"y":9}` || s.Subject != "shop.Other.Inner" {
		t.Errorf("got %s, %s", got, s.Subject)
	}
	// [1] spelled out, and [0] spelled out.
	if got, s := decodeOK(t, d, wire(5, []byte{2, 2}, pbEncode(t, fd, "Other", `{"x":"q"}`))); got != `{"x":"q"}` || s.Subject != "shop.Other" {
		t.Errorf("got %s, %s", got, s.Subject)
	}
	if got, _ := decodeOK(t, d, wire(5, []byte{2, 0})); got != `{`+orderZero+`}` {
		t.Errorf("got %s", got)
	}
	// Each message has its own schema, shared by its records.
	_, s1 := decodeOK(t, d, wire(5, []byte{4, 2, 0}))
	if s1 != s {
		t.Error("two records of one message got two schemas")
	}
}

func TestProtobufRecordErrors(t *testing.T) {
	const text = `syntax = "proto3";
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
message M {
  int32 a = 1;
  string s = 2;
  M next = 3;
  google.protobuf.Timestamp ts = 4;
  google.protobuf.Duration d = 5;
  repeated sint64 r = 6;
  map<string, string> m = 7;
  oneof o { string x = 8; M y = 9; }
}
`
	d := newDecoder(t, sinks.Protobuf, newSource(map[int]*registry.Schema{1: {Type: registry.Protobuf, Text: text}}))
	deep := pbVarint(1, 1)
	for range 1000 {
		deep = pbBytes(3, deep)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"no index", nil, `protobuf: invalid message index count at byte 5: unexpected end of data`},
		{"negative index count", []byte{1}, `protobuf: invalid message index count -1 at byte 5`},
		{"index out of range", []byte{2, 2}, `protobuf: message index [1] at byte 5 names no message: that level has 1`},
		{"nested index out of range", []byte{4, 0, 0}, `protobuf: message index [0 0] at byte 5 names a map entry, not a message`},
		{"nested index past", []byte{4, 0, 2}, `protobuf: message index [0 1] at byte 5 names no message: that level has 1`},
		{"truncated index", []byte{4, 0}, `protobuf: invalid message index at byte 7: unexpected end of data`},
		{"truncated varint", cat(first, pbTag(1, protowire.VarintType), []byte{0x80}), `protobuf: field 1: unexpected end of data at byte 6`},
		{"field number 0", cat(first, []byte{0x00, 0x01}), `protobuf: invalid field: invalid field number at byte 6`},
		{"length past the end", cat(first, pbTag(2, protowire.BytesType), []byte{5, 'a'}), `protobuf: field 2: unexpected end of data at byte 6`},
		{"reserved wire type", cat(first, []byte{0x0e}), `protobuf: field 1: reserved wire type at byte 6`},
		{"stray end group", cat(first, pbTag(1, protowire.EndGroupType)), `protobuf: field 1: mismatched end of group at byte 6`},
		{"invalid UTF-8", cat(first, pbBytes(2, []byte{'a', 0xff})), `protobuf: field "s": invalid UTF-8 in a string at byte 8`},
		{"invalid UTF-8 overridden", cat(first, pbBytes(2, []byte{0xff}), pbBytes(2, []byte("ok"))), `protobuf: field "s": invalid UTF-8 in a string at byte 8`},
		{"invalid UTF-8 in a map key", cat(first, pbBytes(7, pbBytes(1, []byte{0xc3}))), `protobuf: field "m": invalid UTF-8 in a string at byte 10`},
		{"invalid UTF-8 in a oneof loser", cat(first, pbBytes(8, []byte{0xc3}), pbBytes(9, nil)), `protobuf: field "x": invalid UTF-8 in a string at byte 8`},
		{"nested", cat(first, pbBytes(3, pbBytes(3, []byte{0x08}))), `protobuf: field "next.next": field 1: unexpected end of data at byte 10`},
		{"packed", cat(first, pbBytes(6, []byte{2, 0x80})), `protobuf: field "r[1]": packed value: unexpected end of data at byte 9`},
		{"timestamp nanos", cat(first, pbBytes(4, pbVarint(2, 1e9))), `protobuf: field "ts": timestamp nanos 1000000000 not within a second at byte 8`},
		{"timestamp range", cat(first, pbBytes(4, pbVarint(1, uint64(253402300800)))), `protobuf: field "ts": timestamp of 253402300800 seconds is outside years 1 to 9999 at byte 8`},
		{"duration signs", cat(first, pbBytes(5, cat(pbVarint(1, 1), pbVarint(2, math.MaxUint64)))), `protobuf: field "d": duration of 1 seconds and -1 nanos is out of range at byte 8`},
		{"too deep", cat(first, deep), `protobuf: field "next.next.next.next.(992 more).next.next.next.next": nested more than 1000 deep at byte 2943`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decodeReason(t, d, wire(1, tc.in)); got != tc.want {
				t.Errorf("reason\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestProtobufFields(t *testing.T) {
	d := newDecoder(t, sinks.Protobuf, newSource(map[int]*registry.Schema{5: orderSchema()}))
	_, s := decodeOK(t, d, wire(5, first))
	want := []sinks.Field{
		fld("id", sinks.Long), fld("name", sinks.String), fld("paid", sinks.Boolean), fld("total", sinks.Double),
		fld("ratio", sinks.Float), fld("i32", sinks.Int), fld("s32", sinks.Int), fld("s64", sinks.Long), fld("u32", sinks.Long),
		{Name: "u64", Type: sinks.FieldType{Kind: sinks.Decimal, Precision: 20}}, fld("f32", sinks.Long),
		{Name: "f64", Type: sinks.FieldType{Kind: sinks.Decimal, Precision: 20}}, fld("sf32", sinks.Int), fld("sf64", sinks.Long),
		fld("raw", sinks.BytesKind), fld("null", sinks.JSONValue), fld("status", sinks.Enum), fld("note", sinks.String), fld("tags", sinks.JSONValue),
		fld("nums", sinks.JSONValue), fld("counts", sinks.JSONValue), fld("lines_by_no", sinks.JSONValue), fld("first", sinks.JSONValue),
		fld("lines", sinks.JSONValue), fld("card", sinks.String), fld("voucher", sinks.Long), fld("created", sinks.Timestamp),
		fld("ttl", sinks.Duration), fld("maybe_id", sinks.Long), fld("maybe_name", sinks.String), fld("extra", sinks.JSONValue),
		fld("any_value", sinks.JSONValue), fld("list", sinks.JSONValue), fld("nothing", sinks.JSONValue), fld("price", sinks.JSONValue),
		{Name: "big", Type: sinks.FieldType{Kind: sinks.Decimal, Precision: 20}}, fld("maybe_raw", sinks.BytesKind),
	}
	if s.ID != 5 || s.Format != sinks.Protobuf || !reflect.DeepEqual(s.Fields, want) {
		t.Errorf("schema %+v\nwant fields %+v", s, want)
	}
}

// TestProtobufEvolution: two ids of one subject, each record read with its own.
func TestProtobufEvolution(t *testing.T) {
	v1 := &registry.Schema{Type: registry.Protobuf, Text: `syntax = "proto3"; message U { int64 id = 1; }`}
	v2 := &registry.Schema{Type: registry.Protobuf, Text: `syntax = "proto3"; message U { int64 id = 1; string email = 2; }`}
	d := newDecoder(t, sinks.Protobuf, newSource(map[int]*registry.Schema{1: v1, 2: v2}))
	rec := cat(first, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5))
	got1, s1 := decodeOK(t, d, wire(1, rec))
	got2, s2 := decodeOK(t, d, wire(2, rec))
	if got1 != `{"id":5}` || got2 != `{"id":5,"email":""}` || len(s1.Fields) != 1 || len(s2.Fields) != 2 {
		t.Errorf("got %s %+v and %s %+v", got1, s1, got2, s2)
	}
}

func TestProtobufConfluentImports(t *testing.T) {
	text := `syntax = "proto3";
import "confluent/meta.proto";
import "confluent/type/decimal.proto";
message M {
  confluent.type.Decimal amount = 1 [(confluent.field_meta) = { params: [{ key: "precision", value: "8" }] }];
}
`
	d := newDecoder(t, sinks.Protobuf, newSource(map[int]*registry.Schema{1: {Type: registry.Protobuf, Text: text}}))
	if got, _ := decodeOK(t, d, wire(1, first)); got != `{}` {
		t.Errorf("got %s", got)
	}
}

// An enum value the schema has no name for is written as its number.
func TestProtobufUnknownEnum(t *testing.T) {
	d := newDecoder(t, sinks.Protobuf, newSource(map[int]*registry.Schema{5: orderSchema()}))
	got, _ := decodeOK(t, d, wire(5, first, pbVarint(16, 7)))
	if want := `{` + strings.Replace(orderZero, `"status":"NEW"`, `"status":7`, 1) + `}`; got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
