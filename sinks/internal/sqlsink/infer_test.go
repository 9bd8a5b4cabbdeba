package sqlsink

import (
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

func TestInferSchema(t *testing.T) {
	sc, ok := InferSchema([]byte(`{"id": 7, "name": "a", "price": 1.5, "ok": true, "tags": ["x"], "gone": null, "big": 1e3}`))
	if !ok {
		t.Fatal("an object: no schema")
	}
	want := []sinks.Field{{Name: "id", Type: sinks.FieldType{Kind: sinks.Long}}, {Name: "name", Type: sinks.FieldType{Kind: sinks.String}},
		{Name: "price", Type: sinks.FieldType{Kind: sinks.Double}}, {Name: "ok", Type: sinks.FieldType{Kind: sinks.Boolean}},
		{Name: "tags", Type: sinks.FieldType{Kind: sinks.JSONValue}}, {Name: "big", Type: sinks.FieldType{Kind: sinks.Double}}}
	if len(sc.Fields) != len(want) {
		t.Fatalf("fields %v, want %v", sc.Fields, want)
	}
	for i := range want {
		if sc.Fields[i] != want[i] {
			t.Errorf("field %d: %v, want %v", i, sc.Fields[i], want[i])
		}
	}
	if sc.ID >= 0 {
		t.Errorf("id %d: want below zero, apart from a registry's", sc.ID)
	}
	again, _ := InferSchema([]byte(`{"id":8,"name":"b","price":2.5,"ok":false,"tags":[],"big":2e3}`))
	other, _ := InferSchema([]byte(`{"id":"8"}`))
	if again.ID != sc.ID || other.ID == sc.ID {
		t.Errorf("ids: %d, %d, %d; want one shape one id", sc.ID, again.ID, other.ID)
	}
	for _, v := range []string{`[1]`, `"x"`, `{"a":null}`, `not json`} {
		if _, ok := InferSchema([]byte(v)); ok {
			t.Errorf("%s: a schema, want none", v)
		}
	}
}
