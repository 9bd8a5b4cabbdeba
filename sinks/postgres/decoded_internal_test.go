package postgres

import (
	"strings"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

func TestHexBytes(t *testing.T) {
	names := []string{"b", "c"}
	for _, tc := range []struct{ in, want, why string }{
		{`{"b":"AAEC/w=="}`, `{"b":"\\x000102ff"}`, ""},
		{` { "a" : "AAEC" , "b" : "AAEC" , "c":null } `, ` { "a" : "AAEC" , "b" : "\\x000102" , "c":null } `, ""},
		{`{"b":"AAEC_w","x":{"b":"nested, left"}}`, `{"b":"\\x000102ff","x":{"b":"nested, left"}}`, ""}, // URL-safe, unpadded
		{`{"\u0062":"AQ==","c":""}`, `{"\u0062":"\\x01","c":"\\x"}`, ""},
		{`{"a":1}`, `{"a":1}`, ""},
		{`{"b":"no!"}`, "", `field "b" (bytes) is not base64`},
		{`{"c":[1]}`, "", `field "c" (bytes) is an array, want a base64 string`},
		{`{"b":true}`, "", `field "b" (bytes) is a boolean`},
	} {
		got, why := hexBytes([]byte(tc.in), names)
		if tc.why != "" {
			if !strings.Contains(why, tc.why) {
				t.Errorf("hexBytes(%s): %q, want a reason saying %q", tc.in, why, tc.why)
			}
			continue
		}
		if why != "" || string(got) != tc.want {
			t.Errorf("hexBytes(%s) = %s, %q; want %s", tc.in, got, why, tc.want)
		}
	}
}

func TestCountPresent(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{`{}`, 0},
		{`{"a":1,"b":null,"c":{"a":2}}`, 1},
		{`{"a":[],"\u0062":"","z":1}`, 2},
	} {
		if got := countPresent([]byte(tc.in), []string{"a", "b"}); got != tc.want {
			t.Errorf("countPresent(%s) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestColumnType(t *testing.T) {
	for _, tc := range []struct {
		t    sinks.FieldType
		want string
	}{
		{sinks.FieldType{Kind: sinks.Boolean}, "boolean"},
		{sinks.FieldType{Kind: sinks.Int}, "integer"},
		{sinks.FieldType{Kind: sinks.Long}, "bigint"},
		{sinks.FieldType{Kind: sinks.Float}, "real"},
		{sinks.FieldType{Kind: sinks.Double}, "double precision"},
		{sinks.FieldType{Kind: sinks.String}, "text"},
		{sinks.FieldType{Kind: sinks.Enum}, "text"},
		{sinks.FieldType{Kind: sinks.UUID}, "uuid"},
		{sinks.FieldType{Kind: sinks.BytesKind}, "bytea"},
		{sinks.FieldType{Kind: sinks.Timestamp}, "timestamptz"},
		{sinks.FieldType{Kind: sinks.LocalTimestamp}, "timestamp"},
		{sinks.FieldType{Kind: sinks.Date}, "date"},
		{sinks.FieldType{Kind: sinks.Time}, "time"},
		{sinks.FieldType{Kind: sinks.Decimal, Precision: 10, Scale: 2}, "numeric(10,2)"},
		{sinks.FieldType{Kind: sinks.Decimal, Precision: 0}, "numeric"},
		{sinks.FieldType{Kind: sinks.Decimal, Precision: 5, Scale: 7}, "numeric"},
		{sinks.FieldType{Kind: sinks.Decimal, Precision: 2000}, "numeric"},
		{sinks.FieldType{Kind: sinks.Duration}, "interval"},
		{sinks.FieldType{Kind: sinks.JSONValue}, "jsonb"},
		{sinks.FieldType{Kind: "geometry"}, "jsonb"},
	} {
		if got := columnType(tc.t); got != tc.want {
			t.Errorf("columnType(%+v) = %s, want %s", tc.t, got, tc.want)
		}
	}
}

func TestMissingColumns(t *testing.T) {
	tab := &table{names: map[string]bool{"id": true, "twice": true}}
	a := &sinks.Schema{ID: 1, Fields: []sinks.Field{
		{Name: "id", Type: sinks.FieldType{Kind: sinks.Long}},
		{Name: "twice", Type: sinks.FieldType{Kind: sinks.Long}}, // a generated column: there
		{Name: "email", Type: sinks.FieldType{Kind: sinks.String}},
		{Name: "kafka_offset", Type: sinks.FieldType{Kind: sinks.Long}},
		{Name: "kafka_anything", Type: sinks.FieldType{Kind: sinks.Long}},
		{Name: strings.Repeat("x", 64), Type: sinks.FieldType{Kind: sinks.Long}},
	}}
	b := &sinks.Schema{ID: 2, Fields: []sinks.Field{
		{Name: "email", Type: sinks.FieldType{Kind: sinks.JSONValue}}, // the first schema's type wins
		{Name: "at", Type: sinks.FieldType{Kind: sinks.Timestamp}},
	}}
	got := missingColumns([]*sinks.Schema{a, b}, tab)
	want := []newColumn{{"email", "text"}, {"at", "timestamptz"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("missingColumns = %v, want %v", got, want)
	}
}
