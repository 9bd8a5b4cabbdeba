package clickhouse

import (
	"encoding/json"
	"testing"
)

// scanFlat must take only valid JSON objects, and read their fields as
// encoding/json does.
func FuzzScanFlat(f *testing.F) {
	for _, s := range []string{`{}`, ` { } `, `{"a":1}`, `{"a": -1.5e3, "b": "x", "c": true, "d": null, "a": 2}`,
		`{"a":01}`, `{"a":1.}`, `{"a":1e}`, `{"a":-}`, `{"a":"x\"y"}`, `{"a":"é"}`, `{"a":{"b":1}}`, `{"a":[1]}`,
		`{"a":1,}`, `{"a":1}x`, `{"a" 1}`, `{a:1}`, `{"a":tru}`, `{"a":truex}`, `{"a":1 "b":2}`, `{"b":"\t"}`,
		"{\"b\":\"\x01\"}", `[1]`, `1`, `null`, ``, `{"a":1`, `{"a":"1`, `{"b":""}`, `{"a":-0.0E+1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		names := map[string]int{"a": 0, "b": 1, "c": 2, "d": 3}
		index := newFieldIndex(names)
		// The index remembers each position's column from one object to
		// the next: v is read after an object of another order, and again
		// after itself.
		if !scanFlat([]byte(`{"b":1,"x":2,"a":3,"d":4,"c":5}`), index, make([][]byte, 4)) {
			t.Fatal("scanFlat refused the warm-up object")
		}
		for range 2 {
			fields := make([][]byte, 4)
			if !scanFlat(v, index, fields) {
				return
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(v, &obj); err != nil || obj == nil {
				t.Fatalf("scanFlat took %q, which encoding/json refuses as an object: %v", v, err)
			}
			for name, j := range names {
				raw, ok := obj[name]
				if ok != (fields[j] != nil) || string(raw) != string(fields[j]) {
					t.Fatalf("%q: field %s = %q, encoding/json %q (%v)", v, name, fields[j], raw, ok)
				}
			}
		}
	})
}
