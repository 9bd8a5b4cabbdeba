package postgres

import (
	"bytes"
	"strings"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

func TestJSONBValue(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{"a":1}`, true},
		{` [1, "x", null] `, true},
		{`"\u00e9\n\\"`, true},
		{`"\ud83d\ude00"`, true},
		{`"\uD83D\uDE00"`, true},
		{`"\\u0000"`, true},       // a backslash, then text
		{`"\\\u0041"`, true},      // a backslash, then A
		{`"\u0000"`, false},       // NUL
		{`"a\\\u0000"`, false},    // a backslash, then NUL
		{`"\ud83d"`, false},       // a high half alone
		{`"\ud83d\u0041"`, false}, // a high half then no low half
		{`"\ude00"`, false},       // a low half alone
		{`"\ud83d`, false},        // not JSON
		{"\"\xff\"", false},       // not UTF-8
		{``, false},
		{`{`, false},
		{`null`, true},
	} {
		got := jsonbValue([]byte(tc.in)) != nil
		if got != tc.ok {
			t.Errorf("jsonbValue(%q) kept: %v, want %v", tc.in, got, tc.ok)
		}
	}
	if jsonbValue(nil) != nil {
		t.Error("jsonbValue(nil) != nil")
	}
}

func TestObjectReason(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		says string
	}{
		{[]byte(`{"a": 1}`), ""},
		{[]byte(" \n{}"), ""},
		{nil, "tombstone"},
		{[]byte(``), "not JSON"},
		{[]byte(`{"a": }`), "not JSON"},
		{[]byte("\xff"), "UTF-8"},
		{[]byte(`[1]`), "array"},
		{[]byte(`"s"`), "scalar"},
		{[]byte(`12`), "scalar"},
	} {
		got := sqlsink.RowReason(tc.in)
		if (tc.says == "") != (got == "") || !strings.Contains(got, tc.says) {
			t.Errorf("sqlsink.RowReason(%q) = %q, want %q", tc.in, got, tc.says)
		}
	}
}

func TestHeadersRoundTrip(t *testing.T) {
	for _, hs := range [][]sinks.Header{
		nil,
		{{Key: "a", Value: []byte("1")}, {Key: "a", Value: []byte("2")}},
		{{Key: "", Value: []byte{}}, {Key: "null", Value: nil}},
		{{Key: "bin", Value: []byte{0xc3, 0x28, 0x00}}, {Key: "nul", Value: []byte("a\x00b")}},
		{{Key: "k\xff", Value: []byte("v")}, {Key: "k\x00", Value: []byte("<&>")}},
		{{Key: "ключ ✓", Value: []byte(`{"json": true}`)}},
	} {
		enc, err := encodeHeaders(hs)
		if err != nil {
			t.Fatal(err)
		}
		if jsonbValue(enc) == nil {
			t.Errorf("headers %q encode to %s, which jsonb refuses", hs, enc)
		}
		dec, err := decodeHeaders(enc)
		if err != nil {
			t.Fatalf("decode %s: %v", enc, err)
		}
		if len(dec) != len(hs) {
			t.Fatalf("%s decodes to %d headers, want %d", enc, len(dec), len(hs))
		}
		for i := range hs {
			if dec[i].Key != hs[i].Key || !bytes.Equal(dec[i].Value, hs[i].Value) || (dec[i].Value == nil) != (hs[i].Value == nil) {
				t.Errorf("%s: header %d decodes to %q=%q, want %q=%q", enc, i, dec[i].Key, dec[i].Value, hs[i].Key, hs[i].Value)
			}
		}
	}
	if enc, _ := encodeHeaders([]sinks.Header{{Key: "h", Value: []byte("<&>")}}); !bytes.Contains(enc, []byte(`"<&>"`)) {
		t.Errorf("headers are HTML-escaped: %s", enc)
	}
}

func TestDebeziumEvent(t *testing.T) {
	for _, tc := range []struct {
		in, op, before, after string
		tombstone             bool
		says                  string
	}{
		{in: `{"before":null,"after":{"id":1},"op":"c"}`, op: "c", after: `{"id":1}`},
		{in: `{"schema":{},"payload":{"before":{"id":1},"after":null,"op":"d"}}`, op: "d", before: `{"id":1}`},
		{in: `{"schema":{"type":"struct"},"payload":null}`, tombstone: true},
		{in: `{"after":{"id":1},"op":"r","source":{"snapshot":"true"}}`, op: "r", after: `{"id":1}`},
		{in: `{"after":null,"op":"u"}`, says: `op "u" without after`},
		{in: `{"after":{"id":1}}`, says: `no "op"`},
		{in: `{"op":"t"}`, says: `op "t" is not applied`},
		{in: `{"op":1}`, says: "debezium event"},
		{in: `[1]`, says: "JSON array"},
		{in: `nope`, says: "not JSON"},
	} {
		ev, why := debeziumEvent([]byte(tc.in))
		if tc.says != "" {
			if !strings.Contains(why, tc.says) {
				t.Errorf("debeziumEvent(%s): %q, want it to say %q", tc.in, why, tc.says)
			}
			continue
		}
		if why != "" || ev.op != tc.op || string(ev.before) != tc.before || string(ev.after) != tc.after || ev.tombstone != tc.tombstone {
			t.Errorf("debeziumEvent(%s) = %+v, %q", tc.in, ev, why)
		}
	}
}

func TestKeyOf(t *testing.T) {
	one := keyPlan{cols: []string{"id"}, fields: [][]byte{[]byte(`"id"`)}}
	two := keyPlan{cols: []string{"a", "b"}, fields: [][]byte{[]byte(`"a"`), []byte(`"b"`)}}
	for _, tc := range []struct {
		p          keyPlan
		key        []byte
		unwrap     bool
		want, says string
	}{
		{p: one, key: []byte(`123`), want: `{"id":"123"}`},
		{p: one, key: []byte(` "a\"b" `), want: `{"id":"a\"b"}`},
		{p: one, key: []byte(`user-42`), want: `{"id":"user-42"}`},
		{p: one, key: []byte(`{"id":7,"other":1}`), want: `{"id":7}`},
		{p: one, key: []byte(`{"schema":{},"payload":{"id":7}}`), unwrap: true, want: `{"id":7}`},
		{p: one, key: []byte(`{"schema":{},"payload":{"id":7}}`), says: `no field "id"`},
		{p: two, key: []byte(`{"b":2,"a":1}`), want: `{"a":1,"b":2}`},
		{p: two, key: []byte(`1`), says: "2 columns (a, b)"},
		{p: one, key: nil, says: "no key"},
		{p: one, key: []byte{}, says: "empty"},
		{p: one, key: []byte("\xff"), says: "UTF-8"},
		{p: one, key: []byte(`null`), says: "JSON null"},
		{p: one, key: []byte(`[1]`), says: "JSON array"},
		{p: one, key: []byte(`{"id":null}`), says: "is null"},
		{p: one, key: []byte(`{"id":`), says: "not a JSON object"},
	} {
		got, why := tc.p.fromKey(tc.key, tc.unwrap)
		if tc.says != "" {
			if !strings.Contains(why, tc.says) {
				t.Errorf("fromKey(%q): %q, want it to say %q", tc.key, why, tc.says)
			}
			continue
		}
		if why != "" || string(got) != tc.want {
			t.Errorf("fromKey(%q) = %s, %q; want %s", tc.key, got, why, tc.want)
		}
	}
}

func TestObjectFields(t *testing.T) {
	names := []string{"id", "b"}
	for _, tc := range []struct {
		in   string
		want []string // "" for missing
		ok   bool
	}{
		{`{}`, []string{"", ""}, true},
		{` { "id" : 1 , "b":"x" } `, []string{"1", `"x"`}, true},
		{`{"a":{"id":9,"s":"}]"},"id":[1,{"b":2}],"b":"q\"}"}`, []string{`[1,{"b":2}]`, `"q\"}"`}, true},
		{`{"id":1,"id":2}`, []string{"2", ""}, true},
		{`{"id":-1.5e3,"b":null}`, []string{"-1.5e3", "null"}, true},
		{`{"i\u0064":1}`, nil, false},
		{"{\n\t\"b\":true}", []string{"", "true"}, true},
	} {
		vals, ok := objectFields([]byte(tc.in), names)
		if ok != tc.ok {
			t.Errorf("objectFields(%s): ok %v", tc.in, ok)
			continue
		}
		if !ok {
			continue
		}
		for i, v := range vals {
			if string(v) != tc.want[i] {
				t.Errorf("objectFields(%s)[%s] = %q, want %q", tc.in, names[i], v, tc.want[i])
			}
		}
	}
	// An escaped field name falls back to encoding/json.
	p := keyPlan{cols: []string{"id"}, fields: [][]byte{[]byte(`"id"`)}}
	if k, why := p.fromObject([]byte(`{"i\u0064":5}`), "value"); string(k) != `{"id":5}` || why != "" {
		t.Errorf("fromObject with an escaped name = %s, %q", k, why)
	}
}
