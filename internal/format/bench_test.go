package format

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// benchAvro is an order as a shop might write it: about 200 bytes.
const benchAvro = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"id","type":"long"},
 {"name":"customer","type":"string"},
 {"name":"email","type":["null","string"]},
 {"name":"created","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID","SHIPPED"]}},
 {"name":"total","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
 {"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
   {"name":"sku","type":"string"},{"name":"qty","type":"int"},{"name":"price","type":"double"}]}}},
 {"name":"attrs","type":{"type":"map","values":"string"}},
 {"name":"note","type":["null","string"]}
]}`

func benchAvroRecord() []byte {
	item := func(sku string, qty int64, price float64) []byte { return cat(avroStr(sku), zz(qty), f64(price)) }
	return wire(1,
		zz(1234567890123),
		avroStr("Kari Nordmann"),
		zz(1), avroStr("kari.nordmann@example.com"),
		zz(1714564800123),
		zz(1),
		avroStr("\x01\xe2\x40"), // 1234.56
		zz(3), item("SKU-000123", 2, 199.5), item("SKU-004567", 1, 49.99), item("SKU-008901", 10, 3.25), zz(0),
		zz(2), avroStr("channel"), avroStr("web"), avroStr("campaign"), avroStr("spring-2024"), zz(0),
		zz(1), avroStr("leave at the door, ring twice"),
	)
}

// BenchmarkAvro: the transcoder against hamba's Unmarshal into a map,
// alone and with encoding/json making the JSON of it.
func BenchmarkAvro(b *testing.B) {
	rec := benchAvroRecord()
	d := newDecoder(b, sinks.Avro, newSource(map[int]*registry.Schema{1: {Text: benchAvro}}))
	schema, err := avro.ParseWithCache(benchAvro, "", &avro.SchemaCache{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("transcoder", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(rec)))
		var dst []byte
		for b.Loop() {
			out, _, err := d.Decode(ctx, dst[:0], rec)
			if err != nil {
				b.Fatal(err)
			}
			dst = out
		}
	})
	b.Run("hamba-map", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(rec)))
		for b.Loop() {
			var v map[string]any
			if err := avro.Unmarshal(schema, rec[headerSize:], &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hamba-map-json", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(rec)))
		for b.Loop() {
			var v map[string]any
			if err := avro.Unmarshal(schema, rec[headerSize:], &v); err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

const benchProto = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  string customer = 2;
  optional string email = 3;
  google.protobuf.Timestamp created = 4;
  Status status = 5;
  int64 total_cents = 6;
  repeated Item items = 7;
  map<string, string> attrs = 8;
  optional string note = 9;
  message Item {
    string sku = 1;
    int32 qty = 2;
    double price = 3;
  }
  enum Status {
    NEW = 0;
    PAID = 1;
    SHIPPED = 2;
  }
}
`

const benchProtoJSON = `{"id":"1234567890123","customer":"Kari Nordmann","email":"kari.nordmann@example.com",
 "created":"2024-05-01T12:00:00.123Z","status":"PAID","total_cents":"123456",
 "items":[{"sku":"SKU-000123","qty":2,"price":199.5},{"sku":"SKU-004567","qty":1,"price":49.99},{"sku":"SKU-008901","qty":10,"price":3.25}],
 "attrs":{"campaign":"spring-2024","channel":"web"},"note":"leave at the door, ring twice"}`

// BenchmarkProtobuf: the transcoder against proto.Unmarshal into a
// dynamicpb message, alone and with protojson making the JSON of it.
func BenchmarkProtobuf(b *testing.B) {
	s := &registry.Schema{Type: registry.Protobuf, Text: benchProto}
	fd := pbFile(b, s)
	payload := pbEncode(b, fd, "Order", benchProtoJSON)
	rec := wire(1, []byte{0}, payload)
	d := newDecoder(b, sinks.Protobuf, newSource(map[int]*registry.Schema{1: s}))
	md := fd.Messages().ByName("Order")
	ctx := context.Background()
	b.Run("transcoder", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(rec)))
		var dst []byte
		for b.Loop() {
			out, _, err := d.Decode(ctx, dst[:0], rec)
			if err != nil {
				b.Fatal(err)
			}
			dst = out
		}
	})
	b.Run("dynamicpb", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(rec)))
		for b.Loop() {
			if err := proto.Unmarshal(payload, dynamicpb.NewMessage(md)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("dynamicpb-protojson", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(rec)))
		opts := protojson.MarshalOptions{UseProtoNames: true}
		for b.Loop() {
			m := dynamicpb.NewMessage(md)
			if err := proto.Unmarshal(payload, m); err != nil {
				b.Fatal(err)
			}
			if _, err := opts.Marshal(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkJSONSchema: validation is the library's; for scale.
func BenchmarkJSONSchema(b *testing.B) {
	d := newDecoder(b, sinks.JSONSchema, orderJSONSchemaSource())
	rec := wire(7, []byte(`{"id":1234567890123,"total":1234.56,"paid":true,"name":"Kari Nordmann","created":"2024-05-01T12:00:00.123Z",
		"tags":["a","b"],"customer":{"name":"Kari","home":{"city":"Oslo"}},"note":"leave at the door, ring twice"}`))
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(rec)))
	var dst []byte
	for b.Loop() {
		out, _, err := d.Decode(ctx, dst[:0], rec)
		if err != nil {
			b.Fatal(err)
		}
		dst = out
	}
}
