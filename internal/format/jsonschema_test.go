package format

import (
	"reflect"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

const orderJSONSchema = `{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "title": "Order",
  "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "total": {"type": "number", "minimum": 0},
    "paid": {"type": "boolean"},
    "name": {"type": "string"},
    "created": {"type": "string", "format": "date-time"},
    "day": {"type": "string", "format": "date"},
    "at": {"type": "string", "format": "time"},
    "ref": {"type": "string", "format": "uuid"},
    "note": {"type": ["null", "string"]},
    "either": {"type": ["integer", "string"]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "customer": {"$ref": "customer.json"},
    "shipping": {"$ref": "https://example.com/schemas/address.json"},
    "any": {},
    "never": false,
    "strict": {"type": "object", "additionalProperties": false}
  },
  "required": ["id"]
}`

func orderJSONSchemaSource() *memSource {
	address := &registry.Schema{Type: registry.JSON, Text: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`}
	customer := &registry.Schema{Type: registry.JSON, Text: `{"type":"object","properties":{"name":{"type":"string"},"home":{"$ref":"https://example.com/schemas/address.json"}},"required":["name"]}`,
		References: []registry.Reference{{Name: "https://example.com/schemas/address.json", Subject: "address", Version: 1, Schema: address}}}
	return newSource(map[int]*registry.Schema{7: {Type: registry.JSON, Text: orderJSONSchema, References: []registry.Reference{
		{Name: "customer.json", Subject: "customer", Version: 3, Schema: customer},
		{Name: "https://example.com/schemas/address.json", Subject: "address", Version: 1, Schema: address},
	}}})
}

func TestJSONSchemaValues(t *testing.T) {
	d := newDecoder(t, sinks.JSONSchema, orderJSONSchemaSource())
	for _, tc := range []struct{ name, in, want string }{
		{"compacted", "{ \"id\" : 1,\n \"name\": \"x y\" }", `{"id":1,"name":"x y"}`},
		{"numbers as written", `{"id":12345678901234567890,"total":1.000000000000000000001}`, `{"id":12345678901234567890,"total":1.000000000000000000001}`},
		{"nested and nulls", `{"id":1,"note":null,"tags":["a"],"customer":{"name":"n","home":{"city":"Oslo"}},"any":[{"x":null}]}`,
			`{"id":1,"note":null,"tags":["a"],"customer":{"name":"n","home":{"city":"Oslo"}},"any":[{"x":null}]}`},
		{"formats", `{"id":1,"created":"2024-05-01T12:00:00.123Z","day":"2024-05-01","at":"12:00:00Z","ref":"0f8fad5b-d9cb-469f-a165-70867728950e"}`,
			`{"id":1,"created":"2024-05-01T12:00:00.123Z","day":"2024-05-01","at":"12:00:00Z","ref":"0f8fad5b-d9cb-469f-a165-70867728950e"}`},
		{"escapes kept", `{"id":1,"name":"\u00e9\n\"é"}`, `{"id":1,"name":"\u00e9\n\"é"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, s := decodeOK(t, d, wire(7, []byte(tc.in)))
			if got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
			if s.Subject != "Order" {
				t.Errorf("subject %q", s.Subject)
			}
		})
	}
}

func TestJSONSchemaRecordErrors(t *testing.T) {
	d := newDecoder(t, sinks.JSONSchema, orderJSONSchemaSource())
	for _, tc := range []struct{ name, in, want string }{
		{"not JSON", `{"id":`, `json-schema: payload is not JSON: unexpected end of JSON input at byte 11`},
		{"empty", ``, `json-schema: payload is not JSON: unexpected end of JSON input at byte 5`},
		{"trailing", `{"id":1} x`, `json-schema: payload is not JSON: invalid character 'x' after top-level value at byte 15`},
		{"invalid UTF-8", "{\"id\":1,\"name\":\"\xff\"}", `json-schema: invalid UTF-8 at byte 21`},
		{"type", `{"id":"7"}`, `json-schema: at "/id": got string, want integer`},
		{"required", `{"name":"x"}`, `json-schema: missing property 'id'`},
		{"minimum", `{"id":1,"total":-1}`, `json-schema: at "/total": minimum: got -1, want 0`},
		{"format", `{"id":1,"created":"yesterday"}`, `json-schema: at "/created": 'yesterday' is not valid date-time: less than 20 characters long`},
		{"false schema", `{"id":1,"never":1}`, `json-schema: at "/never": false schema`},
		{"in a reference", `{"id":1,"customer":{"home":{}}}`, `json-schema: at "/customer": missing property 'name' (and 1 more)`},
		{"in a reference by URL", `{"id":1,"shipping":{"city":5}}`, `json-schema: at "/shipping/city": got number, want string`},
		{"additional properties", `{"id":1,"strict":{"e":1,"d":1,"c":1,"b":1,"a":1}}`, `json-schema: at "/strict": additional properties 'a', 'b', 'c', 'd', 'e' not allowed`},
		{"several, the first by place", `{"tags":[1],"total":"x","paid":0}`, `json-schema: missing property 'id' (and 3 more)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decodeReason(t, d, wire(7, []byte(tc.in)))
			if got != tc.want {
				t.Errorf("reason\n%s\nwant\n%s", got, tc.want)
			}
			// The validator visits properties in no fixed order: the
			// reason must not depend on it.
			for range 20 {
				if again := decodeReason(t, d, wire(7, []byte(tc.in))); again != got {
					t.Fatalf("reason %q, then %q", got, again)
				}
			}
		})
	}
}

func TestJSONSchemaFields(t *testing.T) {
	d := newDecoder(t, sinks.JSONSchema, orderJSONSchemaSource())
	_, s := decodeOK(t, d, wire(7, []byte(`{"id":1}`)))
	want := &sinks.Schema{ID: 7, Format: sinks.JSONSchema, Subject: "Order", Fields: []sinks.Field{
		fld("id", sinks.Long), fld("total", sinks.Double), fld("paid", sinks.Boolean), fld("name", sinks.String),
		fld("created", sinks.Timestamp), fld("day", sinks.Date), fld("at", sinks.Time), fld("ref", sinks.UUID),
		fld("note", sinks.String), fld("either", sinks.JSONValue), fld("tags", sinks.JSONValue), fld("customer", sinks.JSONValue),
		fld("shipping", sinks.JSONValue), fld("any", sinks.JSONValue), fld("never", sinks.JSONValue),
		fld("strict", sinks.JSONValue),
	}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("schema\n%+v\nwant\n%+v", s, want)
	}
	for _, tc := range []struct{ name, text string }{
		{"not an object", `{"type":"array"}`},
		{"true", `true`},
		{"no type", `{"properties":{"a":{}}}`},
	} {
		d := newDecoder(t, sinks.JSONSchema, newSource(map[int]*registry.Schema{1: {Type: registry.JSON, Text: tc.text}}))
		if _, s := decodeOK(t, d, wire(1, []byte(`[]`))); s.Fields != nil {
			t.Errorf("%s: fields %+v", tc.name, s.Fields)
		}
	}
}

// TestJSONSchemaEvolution: two ids of one subject, each record checked by its own.
func TestJSONSchemaEvolution(t *testing.T) {
	v1 := &registry.Schema{Type: registry.JSON, Text: `{"type":"object","properties":{"id":{"type":"integer"}}}`}
	v2 := &registry.Schema{Type: registry.JSON, Text: `{"type":"object","properties":{"id":{"type":"integer"},"email":{"type":"string"}},"required":["email"]}`}
	d := newDecoder(t, sinks.JSONSchema, newSource(map[int]*registry.Schema{1: v1, 2: v2}))
	_, s1 := decodeOK(t, d, wire(1, []byte(`{"id":1}`)))
	_, s2 := decodeOK(t, d, wire(2, []byte(`{"id":1,"email":"a@b"}`)))
	if len(s1.Fields) != 1 || len(s2.Fields) != 2 {
		t.Errorf("fields %+v and %+v", s1.Fields, s2.Fields)
	}
	if got := decodeReason(t, d, wire(2, []byte(`{"id":1}`))); got != `json-schema: missing property 'email'` {
		t.Errorf("reason %s", got)
	}
}
