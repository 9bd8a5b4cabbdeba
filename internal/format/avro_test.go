package format

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

func f32(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }
func f64(v float64) []byte { return binary.LittleEndian.AppendUint64(nil, math.Float64bits(v)) }

// decodeAvro decodes payload under a one-schema source of text.
func decodeAvro(t *testing.T, text string, payload []byte) string {
	t.Helper()
	d := newDecoder(t, sinks.Avro, newSource(map[int]*registry.Schema{1: {Type: registry.Avro, Text: text}}))
	out, _ := decodeOK(t, d, wire(1, payload))
	return out
}

func TestAvroValues(t *testing.T) {
	const addr = `{"type":"record","name":"Addr","fields":[{"name":"city","type":"string"},{"name":"zip","type":["null","int"]}]}`
	for _, tc := range []struct {
		name, schema string
		payload      []byte
		want         string
	}{
		{"null", `"null"`, nil, `null`},
		{"true", `"boolean"`, []byte{1}, `true`},
		{"false", `"boolean"`, []byte{0}, `false`},
		{"int", `"int"`, zz(-3), `-3`},
		{"int min", `"int"`, zz(math.MinInt32), `-2147483648`},
		{"long max", `"long"`, zz(math.MaxInt64), `9223372036854775807`},
		{"long min", `"long"`, zz(math.MinInt64), `-9223372036854775808`},
		{"float", `"float"`, f32(1.1), `1.1`},
		{"float tiny", `"float"`, f32(1e-7), `1e-7`},
		{"double", `"double"`, f64(0.1), `0.1`},
		{"double big", `"double"`, f64(1e21), `1e+21`},
		{"double -0", `"double"`, f64(math.Copysign(0, -1)), `-0`},
		{"double NaN", `"double"`, f64(math.NaN()), `null`},
		{"double +Inf", `"double"`, f64(math.Inf(1)), `null`},
		{"float -Inf", `"float"`, f32(float32(math.Inf(-1))), `null`},
		{"string", `"string"`, avroStr("a\"b\\c\n\t\x01é€"), `"a\"b\\c\n\t\u0001é€"`},
		{"string invalid UTF-8", `"string"`, avroStr("a\xffb\xc3"), `"a\ufffdb\ufffd"`},
		{"empty string", `"string"`, avroStr(""), `""`},
		{"bytes", `"bytes"`, avroStr("\x00\x01\xfe\xff"), `"AAH+/w=="`},
		{"fixed", `{"type":"fixed","name":"F","size":3}`, []byte("abc"), `"YWJj"`},
		{"enum", `{"type":"enum","name":"S","symbols":["NEW","PAID"]}`, zz(1), `"PAID"`},
		{"array", `{"type":"array","items":"int"}`, cat(zz(2), zz(1), zz(2), zz(0)), `[1,2]`},
		{"array of blocks with sizes", `{"type":"array","items":"int"}`,
			cat(zz(-2), zz(2), zz(1), zz(2), zz(1), zz(3), zz(0)), `[1,2,3]`},
		{"empty array", `{"type":"array","items":"int"}`, zz(0), `[]`},
		{"array of nulls", `{"type":"array","items":"null"}`, cat(zz(3), zz(0)), `[null,null,null]`},
		{"map", `{"type":"map","values":"long"}`, cat(zz(2), avroStr("a"), zz(1), avroStr("b\""), zz(-2), zz(0)), `{"a":1,"b\"":-2}`},
		{"empty map", `{"type":"map","values":"long"}`, zz(0), `{}`},
		{"union null", `["null","string"]`, zz(0), `null`},
		{"union string", `["null","string"]`, cat(zz(1), avroStr("x")), `"x"`},
		{"union record", `["null","long",` + addr + `]`, cat(zz(2), avroStr("Oslo"), zz(1), zz(150)), `{"city":"Oslo","zip":150}`},
		{"nested", `{"type":"record","name":"Order","namespace":"shop","fields":[
			{"name":"id","type":"long"},
			{"name":"addr","type":` + addr + `},
			{"name":"lines","type":{"type":"array","items":{"type":"record","name":"Line","fields":[
				{"name":"sku","type":"string"},{"name":"attrs","type":{"type":"map","values":["null","string"]}}]}}},
			{"name":"ship","type":["null","Addr"]}]}`,
			cat(zz(7), avroStr("Bergen"), zz(0),
				zz(2), avroStr("A1"), zz(1), avroStr("c"), zz(1), avroStr("red"), zz(0), avroStr("B2"), zz(0),
				zz(0),
				zz(1), avroStr("Oslo"), zz(1), zz(5)),
			`{"id":7,"addr":{"city":"Bergen","zip":null},"lines":[{"sku":"A1","attrs":{"c":"red"}},{"sku":"B2","attrs":{}}],"ship":{"city":"Oslo","zip":5}}`},
		{"recursive", `{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","Node"]}]}`,
			cat(zz(1), zz(1), zz(2), zz(1), zz(3), zz(0)), `{"v":1,"next":{"v":2,"next":{"v":3,"next":null}}}`},

		// Logical types.
		{"date", `{"type":"int","logicalType":"date"}`, zz(19844), `"2024-05-01"`},
		{"date before the epoch", `{"type":"int","logicalType":"date"}`, zz(-1), `"1969-12-31"`},
		{"time-millis", `{"type":"int","logicalType":"time-millis"}`, zz(43200123), `"12:00:00.123"`},
		{"time-millis whole", `{"type":"int","logicalType":"time-millis"}`, zz(0), `"00:00:00"`},
		{"time-micros", `{"type":"long","logicalType":"time-micros"}`, zz(86399999999), `"23:59:59.999999"`},
		{"timestamp-millis", `{"type":"long","logicalType":"timestamp-millis"}`, zz(1714564800123), `"2024-05-01T12:00:00.123Z"`},
		{"timestamp-millis whole", `{"type":"long","logicalType":"timestamp-millis"}`, zz(1714564800000), `"2024-05-01T12:00:00Z"`},
		{"timestamp-millis before the epoch", `{"type":"long","logicalType":"timestamp-millis"}`, zz(-1), `"1969-12-31T23:59:59.999Z"`},
		{"timestamp-millis 0001", `{"type":"long","logicalType":"timestamp-millis"}`, zz(-62135596800000), `"0001-01-01T00:00:00Z"`},
		{"timestamp-micros", `{"type":"long","logicalType":"timestamp-micros"}`, zz(1714564800123456), `"2024-05-01T12:00:00.123456Z"`},
		{"timestamp-micros as millis", `{"type":"long","logicalType":"timestamp-micros"}`, zz(1714564800120000), `"2024-05-01T12:00:00.120Z"`},
		{"timestamp-nanos", `{"type":"long","logicalType":"timestamp-nanos"}`, zz(1714564800123456789), `"2024-05-01T12:00:00.123456789Z"`},
		{"local-timestamp-millis", `{"type":"long","logicalType":"local-timestamp-millis"}`, zz(1714564800123), `"2024-05-01T12:00:00.123"`},
		{"local-timestamp-micros", `{"type":"long","logicalType":"local-timestamp-micros"}`, zz(1714564800000001), `"2024-05-01T12:00:00.000001"`},
		{"local-timestamp-nanos", `{"type":"long","logicalType":"local-timestamp-nanos"}`, zz(-1), `"1969-12-31T23:59:59.999999999"`},
		{"decimal", `{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}`, avroStr("\x04\xd2"), `12.34`},
		{"decimal negative", `{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}`, avroStr("\xfb"), `-0.05`},
		{"decimal zero", `{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}`, avroStr("\x00"), `0.00`},
		{"decimal empty", `{"type":"bytes","logicalType":"decimal","precision":4,"scale":0}`, avroStr(""), `0`},
		{"decimal scale 0", `{"type":"bytes","logicalType":"decimal","precision":4}`, avroStr("\xfc\x18"), `-1000`},
		{"decimal -2^63", `{"type":"bytes","logicalType":"decimal","precision":19,"scale":3}`, avroStr("\x80\x00\x00\x00\x00\x00\x00\x00"), `-9223372036854775.808`},
		{"decimal big", `{"type":"bytes","logicalType":"decimal","precision":38,"scale":10}`,
			avroStr("\xff\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01"), `-120892581961462.9174706175`},
		{"decimal fixed", `{"type":"fixed","name":"D","size":4,"logicalType":"decimal","precision":8,"scale":3}`, []byte{0, 0, 0x30, 0x39}, `12.345`},
		{"decimal fixed negative", `{"type":"fixed","name":"D","size":12,"logicalType":"decimal","precision":20,"scale":1}`,
			bytes.Repeat([]byte{0xff}, 12), `-0.1`},
		{"uuid", `{"type":"string","logicalType":"uuid"}`, avroStr("0f8fad5b-d9cb-469f-a165-70867728950e"), `"0f8fad5b-d9cb-469f-a165-70867728950e"`},
		{"uuid fixed", `{"type":"fixed","name":"U","size":16,"logicalType":"uuid"}`,
			[]byte{0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f, 0xa1, 0x65, 0x70, 0x86, 0x77, 0x28, 0x95, 0x0e}, `"0f8fad5b-d9cb-469f-a165-70867728950e"`},
		{"duration", `{"type":"fixed","name":"Dur","size":12,"logicalType":"duration"}`,
			[]byte{1, 0, 0, 0, 2, 0, 0, 0, 0xe8, 3, 0, 0}, `{"months":1,"days":2,"milliseconds":1000}`},
		{"unknown logical type", `{"type":"long","logicalType":"money"}`, zz(5), `5`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decodeAvro(t, tc.schema, tc.payload); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestAvroRecordErrors(t *testing.T) {
	const price = `{"type":"record","name":"R","fields":[{"name":"id","type":"int"},{"name":"price","type":%s}]}`
	rec := func(typ string) string { return strings.Replace(price, "%s", typ, 1) }
	deepList := cat(bytes.Repeat(cat(zz(1), zz(1)), 1000), zz(1), zz(0))
	for _, tc := range []struct {
		name, schema string
		payload      []byte
		want         string
	}{
		{"end of data", rec(`"long"`), zz(1), `avro: field "price": unexpected end of data in a long at byte 6`},
		{"string too long", rec(`"string"`), cat(zz(1), zz(10), []byte("abc")), `avro: field "price": string of length 10 exceeds the 3 bytes left at byte 6`},
		{"negative length", rec(`"bytes"`), cat(zz(1), zz(-1)), `avro: field "price": bytes of negative length -1 at byte 6`},
		{"huge length", rec(`"string"`), cat(zz(1), zz(math.MaxInt64)), `avro: field "price": string of length 9223372036854775807 exceeds the 0 bytes left at byte 6`},
		{"long overflow", rec(`"long"`), cat(zz(1), bytes.Repeat([]byte{0xff}, 9), []byte{0x7f}), `avro: field "price": long overflows 64 bits at byte 6`},
		{"int overflow", rec(`"int"`), cat(zz(1), []byte{0xff, 0xff, 0xff, 0xff, 0x1f}), `avro: field "price": int overflows 32 bits at byte 6`},
		{"boolean", rec(`"boolean"`), cat(zz(1), []byte{2}), `avro: field "price": invalid boolean byte 0x02 at byte 6`},
		{"float short", rec(`"float"`), cat(zz(1), []byte{1, 2}), `avro: field "price": unexpected end of data in a float at byte 6`},
		{"enum index", rec(`{"type":"enum","name":"E","symbols":["A"]}`), cat(zz(1), zz(1)), `avro: field "price": enum index 1 not within its 1 symbols at byte 6`},
		{"union index", rec(`["null","long"]`), cat(zz(1), zz(2)), `avro: field "price": union index 2 not within its 2 types at byte 6`},
		{"negative union index", rec(`["null","long"]`), cat(zz(1), zz(-1)), `avro: field "price": union index -1 not within its 2 types at byte 6`},
		{"array count", rec(`{"type":"array","items":"long"}`), cat(zz(1), zz(1e12)), `avro: field "price[0]": array block of 1000000000000 items exceeds the 0 bytes left at byte 6`},
		{"array count past items", rec(`{"type":"array","items":"float"}`), cat(zz(1), zz(3), f32(1), f32(2)), `avro: field "price[0]": array block of 3 items exceeds the 8 bytes left at byte 6`},
		{"array item", rec(`{"type":"array","items":"string"}`), cat(zz(1), zz(2), avroStr("a"), zz(5)), `avro: field "price[1]": string of length 5 exceeds the 0 bytes left at byte 9`},
		{"array min count", rec(`{"type":"array","items":"long"}`), cat(zz(1), zz(math.MinInt64)), `avro: field "price[0]": array block of -9223372036854775808 items at byte 6`},
		{"empty items", rec(`{"type":"array","items":"null"}`), cat(zz(1), zz(1<<16+1)), `avro: field "price[0]": array block of 65537 items of no bytes each: more than 65536 in a record at byte 6`},
		{"map value", rec(`{"type":"map","values":"int"}`), cat(zz(1), zz(1), avroStr("k"), []byte{0x80}), `avro: field "price[k]": unexpected end of data in an int at byte 9`},
		{"map count", rec(`{"type":"map","values":"int"}`), cat(zz(1), zz(3), avroStr("k")), `avro: field "price": map block of 3 items exceeds the 2 bytes left at byte 6`},
		{"trailing bytes", rec(`"int"`), cat(zz(1), zz(2), []byte{9, 9}), `avro: 2 trailing bytes after the value at byte 7`},
		{"date range", rec(`{"type":"int","logicalType":"date"}`), cat(zz(1), zz(3000000)), `avro: field "price": date 3000000 days from 1970-01-01 is outside years 1 to 9999 at byte 6`},
		{"timestamp range", rec(`{"type":"long","logicalType":"timestamp-millis"}`), cat(zz(1), zz(-62135596800001)), `avro: field "price": timestamp -62135596800001 is outside years 1 to 9999 at byte 6`},
		{"time range", rec(`{"type":"int","logicalType":"time-millis"}`), cat(zz(1), zz(86400000)), `avro: field "price": time-millis 86400000 is not within a day at byte 6`},
		{"negative time", rec(`{"type":"long","logicalType":"time-micros"}`), cat(zz(1), zz(-1)), `avro: field "price": time-micros -1 is not within a day at byte 6`},
		{"decimal precision", rec(`{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}`), cat(zz(1), avroStr("\x27\x10")), `avro: field "price": decimal has more digits than its precision 4 at byte 6`},
		{"decimal length", rec(`{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}`), cat(zz(1), avroStr(strings.Repeat("\x00", 11))), `avro: field "price": decimal of 11 bytes: precision 4 needs at most 2 at byte 6`},
		{"too deep", `{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","Node"]}]}`, deepList,
			`avro: field "next.next.next.next.(992 more).next.next.next.next": nested more than 1000 deep at byte 2005`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDecoder(t, sinks.Avro, newSource(map[int]*registry.Schema{1: {Text: tc.schema}}))
			if got := decodeReason(t, d, wire(1, tc.payload)); got != tc.want {
				t.Errorf("reason\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestAvroFields(t *testing.T) {
	text := `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"b","type":"boolean"},
		{"name":"i","type":"int"},
		{"name":"l","type":"long"},
		{"name":"f","type":"float"},
		{"name":"d","type":"double"},
		{"name":"s","type":"string"},
		{"name":"by","type":"bytes"},
		{"name":"fx","type":{"type":"fixed","name":"F","size":2}},
		{"name":"e","type":{"type":"enum","name":"E","symbols":["A"]}},
		{"name":"u","type":{"type":"string","logicalType":"uuid"}},
		{"name":"uf","type":{"type":"fixed","name":"U","size":16,"logicalType":"uuid"}},
		{"name":"dt","type":{"type":"int","logicalType":"date"}},
		{"name":"tm","type":{"type":"int","logicalType":"time-millis"}},
		{"name":"tu","type":{"type":"long","logicalType":"time-micros"}},
		{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"tsu","type":{"type":"long","logicalType":"timestamp-micros"}},
		{"name":"tsn","type":{"type":"long","logicalType":"timestamp-nanos"}},
		{"name":"lts","type":{"type":"long","logicalType":"local-timestamp-millis"}},
		{"name":"ltsu","type":{"type":"long","logicalType":"local-timestamp-micros"}},
		{"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
		{"name":"decf","type":{"type":"fixed","name":"DF","size":8,"logicalType":"decimal","precision":18,"scale":4}},
		{"name":"opt","type":["null","long"]},
		{"name":"opt2","type":["string","null"]},
		{"name":"optts","type":["null",{"type":"long","logicalType":"timestamp-micros"}]},
		{"name":"multi","type":["null","long","string"]},
		{"name":"rec","type":{"type":"record","name":"In","fields":[]}},
		{"name":"ref","type":"In"},
		{"name":"arr","type":{"type":"array","items":"int"}},
		{"name":"m","type":{"type":"map","values":"int"}},
		{"name":"dur","type":{"type":"fixed","name":"Dur","size":12,"logicalType":"duration"}},
		{"name":"n","type":"null"}]}`
	d := newDecoder(t, sinks.Avro, newSource(map[int]*registry.Schema{3: {Text: text}}))
	// One record of zero values, to get the schema.
	payload := cat([]byte{0}, zz(0), zz(0), f32(0), f64(0), zz(0), zz(0), []byte{0, 0}, zz(0), avroStr(""), make([]byte, 16),
		zz(0), zz(0), zz(0), zz(0), zz(0), zz(0), zz(0), zz(0), avroStr(""), make([]byte, 8),
		zz(0), zz(1), zz(0), zz(0), zz(0), zz(0), make([]byte, 12))
	_, s := decodeOK(t, d, wire(3, payload))
	want := &sinks.Schema{ID: 3, Format: sinks.Avro, Subject: "shop.Order", Fields: []sinks.Field{
		fld("b", sinks.Boolean), fld("i", sinks.Int), fld("l", sinks.Long), fld("f", sinks.Float), fld("d", sinks.Double),
		fld("s", sinks.String), fld("by", sinks.BytesKind), fld("fx", sinks.BytesKind), fld("e", sinks.Enum),
		fld("u", sinks.UUID), fld("uf", sinks.UUID), fld("dt", sinks.Date), fld("tm", sinks.Time), fld("tu", sinks.Time),
		fld("ts", sinks.Timestamp), fld("tsu", sinks.Timestamp), fld("tsn", sinks.Timestamp),
		fld("lts", sinks.LocalTimestamp), fld("ltsu", sinks.LocalTimestamp),
		{Name: "dec", Type: sinks.FieldType{Kind: sinks.Decimal, Precision: 10, Scale: 2}},
		{Name: "decf", Type: sinks.FieldType{Kind: sinks.Decimal, Precision: 18, Scale: 4}},
		fld("opt", sinks.Long), fld("opt2", sinks.String), fld("optts", sinks.Timestamp), fld("multi", sinks.JSONValue),
		fld("rec", sinks.JSONValue), fld("ref", sinks.JSONValue), fld("arr", sinks.JSONValue), fld("m", sinks.JSONValue),
		fld("dur", sinks.JSONValue), fld("n", sinks.JSONValue),
	}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("schema\n%+v\nwant\n%+v", s, want)
	}
	// One schema per id, shared by its records.
	if _, s2 := decodeOK(t, d, wire(3, payload)); s2 != s {
		t.Error("two records of one id got two schemas")
	}
}

func TestAvroReferences(t *testing.T) {
	money := &registry.Schema{Text: `{"type":"record","name":"Money","namespace":"common","fields":[
		{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
		{"name":"currency","type":"Currency"}]}`,
		References: []registry.Reference{{Name: "common.Currency", Subject: "currency", Version: 1,
			Schema: &registry.Schema{Text: `{"type":"enum","name":"Currency","namespace":"common","symbols":["EUR","NOK"]}`}}}}
	order := &registry.Schema{Type: registry.Avro, Text: `{"type":"record","name":"Order","fields":[
		{"name":"total","type":"common.Money"},{"name":"cur","type":"common.Currency"}]}`,
		References: []registry.Reference{{Name: "common.Money", Subject: "money", Version: 2, Schema: money}}}
	d := newDecoder(t, sinks.Avro, newSource(map[int]*registry.Schema{9: order}))
	got, s := decodeOK(t, d, wire(9, avroStr("\x30\x39"), zz(1), zz(0)))
	if want := `{"total":{"amount":123.45,"currency":"NOK"},"cur":"EUR"}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if s.Subject != "Order" || len(s.Fields) != 2 || s.Fields[1].Type.Kind != sinks.Enum {
		t.Errorf("schema %+v", s)
	}
}

// TestAvroEvolution: two ids of one subject, each record read with its own.
func TestAvroEvolution(t *testing.T) {
	v1 := `{"type":"record","name":"User","fields":[{"name":"id","type":"long"}]}`
	v2 := `{"type":"record","name":"User","fields":[{"name":"id","type":"long"},{"name":"email","type":["null","string"],"default":null}]}`
	d := newDecoder(t, sinks.Avro, newSource(map[int]*registry.Schema{1: {Text: v1}, 2: {Text: v2}}))
	got1, s1 := decodeOK(t, d, wire(1, zz(5)))
	got2, s2 := decodeOK(t, d, wire(2, zz(6), zz(1), avroStr("a@b")))
	if got1 != `{"id":5}` || got2 != `{"id":6,"email":"a@b"}` {
		t.Errorf("got %s and %s", got1, got2)
	}
	if len(s1.Fields) != 1 || len(s2.Fields) != 2 || s1.ID != 1 || s2.ID != 2 || s2.Fields[1] != (sinks.Field{Name: "email", Type: sinks.FieldType{Kind: sinks.String}}) {
		t.Errorf("schemas %+v and %+v", s1, s2)
	}
}

func fld(name string, kind sinks.FieldKind) sinks.Field {
	return sinks.Field{Name: name, Type: sinks.FieldType{Kind: kind}}
}
