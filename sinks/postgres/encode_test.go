package postgres

import (
	"bytes"
	"strings"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
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
		got := objectReason(tc.in)
		if (tc.says == "") != (got == "") || !strings.Contains(got, tc.says) {
			t.Errorf("objectReason(%q) = %q, want %q", tc.in, got, tc.says)
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
