package file_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// TestValueForms pins the form each kind of bytes takes on a line.
func TestValueForms(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value []byte
		want  string
	}{
		{"nil", nil, `"value":null`},
		{"object", []byte(`{"id":1,"tags":["x"]}`), `"value":{"id":1,"tags":["x"]}`},
		{"number", []byte("42"), `"value":42`},
		{"JSON string", []byte(`"hi"`), `"value":"hi"`},
		{"true", []byte("true"), `"value":true`},
		{"HTML kept", []byte(`{"a":"<&>"}`), `"value":{"a":"<&>"}`},
		{"the text null", []byte("null"), `"value_string":"null"`},
		{"empty", []byte{}, `"value_string":""`},
		{"text", []byte("hello, world"), `"value_string":"hello, world"`},
		// JSON lands in value whatever its whitespace. Spaces and tabs
		// inside stay on the line as they are; line breaks and whitespace
		// around the value come out, into value_spacing, and go back in
		// when read, so the bytes read back exactly.
		{"Python's json.dumps", []byte(`{"id": 1, "tags": ["x", "y"]}`), `"value":{"id": 1, "tags": ["x", "y"]}`},
		{"tabs", []byte("{\"a\":\t1}"), "\"value\":{\"a\":\t1}"},
		{"nested and spaced", []byte(`{"a": {"b": [1, {"c": null}]}, "d": "x y"}`), `"value":{"a": {"b": [1, {"c": null}]}, "d": "x y"}`},
		{"unicode JSON", []byte(`{"name": "Zoë ✓ 𝄞", "ключ": "значение"}`), `"value":{"name": "Zoë ✓ 𝄞", "ключ": "значение"}`},
		{"JSON string with spaces", []byte(`"a JSON string"`), `"value":"a JSON string"`},
		{"spaced number", []byte(" -12.5e3"), `"value":-12.5e3,"value_spacing":[[0," "]]`},
		{"pretty JSON", []byte("{\n  \"a\": 1\n}"), `"value":{"a": 1},"value_spacing":[[1,"\n  "],[7,"\n"]]`},
		{"json.Encoder's newline", []byte("{\"a\":1}\n"), `"value":{"a":1},"value_spacing":[[7,"\n"]]`},
		{"CRLF", []byte("[1,\r\n 2]\r\n"), `"value":[1,2],"value_spacing":[[3,"\r\n "],[5,"\r\n"]]`},
		{"JSON with spaces", []byte(" {} "), `"value":{},"value_spacing":[[0," "],[2," "]]`},
		{"the text null, spaced", []byte(" null\n"), `"value_string":" null\n"`},
		{"invalid JSON, spaced", []byte(`{"id": 1,}`), `"value_string":"{\"id\": 1,}"`},
		{"invalid JSON, binary", []byte("{\"id\": \xff}"), `"value_base64":"eyJpZCI6IP99"`},
		{"escapes", []byte("tab\t quote\" back\\ nul\x00 ls\u2028 <&>"), `"value_string":"tab\t quote\" back\\ nul\u0000 ls\u2028 <&>"`},
		{"unicode", []byte("é ✓ 𝄞"), `"value_string":"é ✓ 𝄞"`},
		{"binary", []byte{0xff, 0x00, 0x10}, `"value_base64":"/wAQ"`},
		{"JSON with invalid UTF-8", []byte("\"\xff\""), `"value_base64":"Iv8i"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sinks.Record{Offset: 7, Key: []byte("k"), Value: tc.value, Time: time.UnixMilli(1714564800123)}
			line := string(file.AppendLine(nil, "orders", 3, &r))
			want := `{"topic":"orders","partition":3,"offset":7,"key_string":"k",` + tc.want + `,"timestamp":1714564800123,"headers":[]}` + "\n"
			if line != want {
				t.Errorf("line\n%s\nwant\n%s", line, want)
			}
			if !json.Valid([]byte(line)) {
				t.Errorf("line is not JSON: %s", line)
			}
			roundTrip(t, "orders", 3, r)
		})
	}
}

func TestKeyAndHeaderForms(t *testing.T) {
	r := sinks.Record{
		Offset: 0,
		Key:    []byte{0xc3, 0x28},
		Value:  []byte(`{"a":1}`),
		Time:   time.UnixMilli(-1),
		Headers: []sinks.Header{
			{Key: "trace", Value: []byte("abc")},
			{Key: "trace", Value: nil},
			{Key: "\xff", Value: []byte{0xff}},
			{Key: "n", Value: []byte("1")},
		},
	}
	line := string(file.AppendLine(nil, "t", 0, &r))
	want := `{"topic":"t","partition":0,"offset":0,"key_base64":"wyg=","value":{"a":1},"timestamp":-1,"headers":[` +
		`{"key":"trace","value_string":"abc"},{"key":"trace","value":null},{"key_base64":"/w==","value_base64":"/w=="},{"key":"n","value":1}]}` + "\n"
	if line != want {
		t.Errorf("line\n%s\nwant\n%s", line, want)
	}
	roundTrip(t, "t", 0, r)
	r.Key = nil
	if line := string(file.AppendLine(nil, "t", 0, &r)); !strings.Contains(line, `"key":null,`) {
		t.Errorf("nil key: %s", line)
	}
}

func TestParseLineErrors(t *testing.T) {
	for _, line := range []string{
		``,
		`{"topic":"t","partition":0,"offset":1,"key":null,"value":1,"headers":[]}`,
		`{"topic":"t","partition":0,"offset":1,"key":null,"value":1,"value_string":"1","timestamp":0}`,
		`{"topic":"t","partition":0,"offset":1,"value":1,"timestamp":0}`,
		`{"topic":"t","partition":0,"offset":1,"key":null,"value_base64":"!!","timestamp":0}`,
		`{"topic":"t","partition":0,"offset":1,"key":null,"value":1,"timestamp":0,"headers":[{"value":1}]}`,
		`{"topic":"t","partition":0,"offset":1,"key":null,"value":1,"timestamp":0,"headers":[{"key":"a"}]}`,
		`not json`,
	} {
		if l, err := file.ParseLine([]byte(line)); err == nil {
			t.Errorf("ParseLine(%s) = %+v, want an error", line, l)
		}
	}
	if _, err := file.ReadLines(strings.NewReader("{\"topic\":\"t\"}\n\n")); err == nil || !strings.HasPrefix(err.Error(), "line 1: ") {
		t.Errorf("ReadLines: %v, want an error on line 1", err)
	}
}

func TestReadLinesLongAndUnterminated(t *testing.T) {
	big := sinks.Record{Offset: 1, Value: bytes.Repeat([]byte("x"), 3<<20), Time: time.UnixMilli(0)}
	small := sinks.Record{Offset: 2, Value: []byte("y"), Time: time.UnixMilli(0)}
	buf := file.AppendLine(nil, "t", 0, &big)
	buf = file.AppendLine(buf, "t", 0, &small)
	buf = buf[:len(buf)-1] // the last newline is optional
	lines, err := file.ReadLines(bytes.NewReader(buf))
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 || len(lines[0].Record.Value) != 3<<20 || string(lines[1].Record.Value) != "y" {
		t.Errorf("read %d lines", len(lines))
	}
}

// Readers that know nothing of value_spacing (jq, encoding/json) read the
// same data in value, whatever the producer's whitespace; ReadLines reads
// the bytes back as they were.
func TestSpacedJSONReadsAsJSON(t *testing.T) {
	compact := []byte(`{"id":1,"tags":["x","y"],"n":{"ok":true}}`)
	for _, v := range [][]byte{
		compact,
		[]byte(`{"id": 1, "tags": ["x", "y"], "n": {"ok": true}}`),
		[]byte("{\n  \"id\": 1,\n  \"tags\": [\"x\", \"y\"],\n  \"n\": {\"ok\": true}\n}\n"),
		[]byte("\t{\"id\":1,\"tags\":[\"x\",\"y\"],\"n\":{\"ok\":true}} "),
	} {
		r := sinks.Record{Offset: 1, Value: v, Time: time.UnixMilli(0)}
		line := file.AppendLine(nil, "t", 0, &r)
		var got struct{ Value json.RawMessage }
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		var a, b any
		if err := json.Unmarshal(got.Value, &a); err != nil {
			t.Fatalf("%q: value %s is not JSON: %v", v, got.Value, err)
		}
		json.Unmarshal(compact, &b)
		if ja, jb := must(json.Marshal(a)), must(json.Marshal(b)); !bytes.Equal(ja, jb) {
			t.Errorf("%q: value reads as %s, want %s", v, ja, jb)
		}
		l, err := file.ParseLine(line)
		if err != nil || !bytes.Equal(l.Record.Value, v) {
			t.Errorf("%q: ParseLine = %q, %v; want the bytes as written", v, l.Record.Value, err)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestParseLineRefusesBadSpacing(t *testing.T) {
	head := `{"topic":"t","partition":0,"offset":1,"key":null,`
	tail := `,"timestamp":0,"headers":[]}`
	for _, tc := range []struct{ field, err string }{
		{`"value_string":"x","value_spacing":[[0," "]]`, "value_spacing without a JSON value"},
		{`"value":null,"value_spacing":[[0," "]]`, "value_spacing without a JSON value"},
		{`"value":{},"value_spacing":[[3," "]]`, "outside the 2 bytes"},
		{`"value":{},"value_spacing":[[1," "],[1," "]]`, "out of order"},
		{`"value":{},"value_spacing":[[2," "],[1," "]]`, "out of order"},
		{`"value":{},"value_spacing":[[0,"x"]]`, "want JSON whitespace"},
		{`"value":{},"value_spacing":[[0,""]]`, "want JSON whitespace"},
		{`"value":{},"value_spacing":[[0]]`, "want [offset, whitespace]"},
	} {
		_, err := file.ParseLine([]byte(head + tc.field + tail))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want an error saying %q", tc.field, err, tc.err)
		}
	}
	// A header's value and the key take spacing too.
	line := `{"topic":"t","partition":0,"offset":1,"key":1,"key_spacing":[[1,"\n"]],"value":null,"timestamp":0,"headers":[{"key":"h","value":[],"value_spacing":[[1," \n"]]}]}`
	l, err := file.ParseLine([]byte(line))
	if err != nil || string(l.Record.Key) != "1\n" || string(l.Record.Headers[0].Value) != "[ \n]" {
		t.Errorf("ParseLine = key %q, header %q, %v; want key \"1\\n\", header \"[ \\n]\"", l.Record.Key, l.Record.Headers, err)
	}
}

// FuzzRoundTrip: whatever the bytes, a line is one line of valid JSON and
// reads back as the record it was made from.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("k"), []byte(`{"a":1}`), "h", []byte("v"), int64(1714564800123))
	f.Add([]byte{}, []byte("null"), "", []byte{}, int64(-1))
	f.Add([]byte{0xff}, []byte("{\n}"), "\xff", []byte{0}, int64(0))
	f.Add([]byte(`"`), []byte(`"\u2028"`), "\u2028", []byte("1 "), int64(-62135596800000))
	f.Add([]byte(" [1,\n2] "), []byte("{\"id\": 1}\n"), "h", []byte("\r\n{ }\t"), int64(0))
	f.Fuzz(func(t *testing.T, key, value []byte, hkey string, hvalue []byte, ms int64) {
		r := sinks.Record{Offset: 5, Key: key, Value: value, Time: time.UnixMilli(ms),
			Headers: []sinks.Header{{Key: hkey, Value: hvalue}, {Key: hkey, Value: nil}}}
		line := file.AppendLine(nil, "fuzz", 1, &r)
		if i := bytes.IndexByte(line, '\n'); i != len(line)-1 {
			t.Fatalf("newline at %d of %d: %q", i, len(line), line)
		}
		if !json.Valid(line) {
			t.Fatalf("not JSON: %q", line)
		}
		roundTrip(t, "fuzz", 1, r)
	})
}

func roundTrip(t *testing.T, topic string, partition int, r sinks.Record) {
	t.Helper()
	l, err := file.ParseLine(file.AppendLine(nil, topic, partition, &r))
	if err != nil {
		t.Fatalf("ParseLine: %v", err)
	}
	got := l.Record
	if l.Topic != topic || l.Partition != partition || got.Offset != r.Offset {
		t.Errorf("read %s/%d offset %d, want %s/%d offset %d", l.Topic, l.Partition, got.Offset, topic, partition, r.Offset)
	}
	if !sameBytes(got.Key, r.Key) || !sameBytes(got.Value, r.Value) {
		t.Errorf("read key %q value %q, want key %q value %q (nil: %v %v, want %v %v)",
			got.Key, got.Value, r.Key, r.Value, got.Key == nil, got.Value == nil, r.Key == nil, r.Value == nil)
	}
	if !got.Time.Equal(time.UnixMilli(r.Time.UnixMilli())) || got.Time.Location() != time.UTC {
		t.Errorf("read time %v, want %v in UTC", got.Time, r.Time)
	}
	if len(got.Headers) != len(r.Headers) {
		t.Fatalf("read %d headers, want %d", len(got.Headers), len(r.Headers))
	}
	for i, h := range r.Headers {
		if got.Headers[i].Key != h.Key || !sameBytes(got.Headers[i].Value, h.Value) {
			t.Errorf("header %d: read %q=%q, want %q=%q", i, got.Headers[i].Key, got.Headers[i].Value, h.Key, h.Value)
		}
	}
}

func sameBytes(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

// TestDecodedForms: a value decoded through a Schema Registry is written
// as its JSON with the schema's id, and reads back with it; a value of the
// bytes format is never written in the JSON form, though it is JSON.
func TestDecodedForms(t *testing.T) {
	schema := &sinks.Schema{ID: 7, Format: sinks.Avro}
	opaque := &sinks.Schema{Format: sinks.Bytes}
	for _, tc := range []struct {
		name string
		rec  sinks.Record
		want string
		ids  [2]int // key's and value's schema ids read back; 0 none
	}{
		{"decoded value", sinks.Record{Key: []byte("k"), Value: []byte(`{"id":1}`),
			Decoded: &sinks.Decoded{ValueBytes: []byte{0, 0, 0, 0, 7, 2}, ValueSchema: schema}},
			`"key_string":"k","value":{"id":1},"value_schema_id":7`, [2]int{0, 7}},
		{"decoded key and value", sinks.Record{Key: []byte(`3`), Value: []byte(`{"id":1}`),
			Decoded: &sinks.Decoded{KeySchema: &sinks.Schema{ID: 5}, ValueSchema: schema}},
			`"key":3,"key_schema_id":5,"value":{"id":1},"value_schema_id":7`, [2]int{5, 7}},
		{"bytes that are JSON", sinks.Record{Key: []byte(`{"a":1}`), Value: []byte(`{"id":1}`),
			Decoded: &sinks.Decoded{KeySchema: opaque, ValueSchema: opaque}},
			`"key_string":"{\"a\":1}","value_string":"{\"id\":1}"`, [2]int{}},
		{"bytes that are not text", sinks.Record{Value: []byte{0xff, 0}, Decoded: &sinks.Decoded{ValueSchema: opaque}},
			`"key":null,"value_base64":"/wA="`, [2]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := file.AppendLine(nil, "t", 0, &tc.rec)
			if !bytes.Contains(line, []byte(tc.want)) {
				t.Fatalf("line %s\nwant it to hold %s", line, tc.want)
			}
			got, err := file.ParseLine(line)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Record.Value, tc.rec.Value) || !bytes.Equal(got.Record.Key, tc.rec.Key) {
				t.Fatalf("read back key %q value %q, want %q %q", got.Record.Key, got.Record.Value, tc.rec.Key, tc.rec.Value)
			}
			var ids [2]int
			if d := got.Record.Decoded; d != nil {
				if d.KeySchema != nil {
					ids[0] = d.KeySchema.ID
				}
				if d.ValueSchema != nil {
					ids[1] = d.ValueSchema.ID
				}
			}
			if ids != tc.ids {
				t.Fatalf("schema ids read back %v, want %v", ids, tc.ids)
			}
		})
	}
}
