package file

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/offsetkeeper/offsetkeeper/internal/format"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// The line format, documented in the package comment, is defined here once:
// the file sink writes it to disk and the stdout sink to its writer, so a
// tool that reads one reads both.

// Line is what one line of the format holds: a record and where it is from.
type Line struct {
	Topic     string
	Partition int
	Record    sinks.Record
}

// AppendLine appends the line for r, including the final newline, to dst and
// returns the extended buffer. It cannot fail: every record has a line.
func AppendLine(dst []byte, topic string, partition int, r *sinks.Record) []byte {
	dst = append(dst, `{"topic":`...)
	dst = format.AppendJSONString(dst, []byte(topic))
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, r.Offset, 10)
	dst = append(dst, ',')
	var keySchema, valueSchema *sinks.Schema
	if d := r.Decoded; d != nil {
		keySchema, valueSchema = d.KeySchema, d.ValueSchema
	}
	dst = appendField(dst, "key", r.Key, keySchema)
	dst = append(dst, ',')
	dst = appendField(dst, "value", r.Value, valueSchema)
	dst = append(dst, `,"timestamp":`...)
	dst = strconv.AppendInt(dst, r.Time.UnixMilli(), 10)
	dst = append(dst, `,"headers":[`...)
	for i, h := range r.Headers {
		if i > 0 {
			dst = append(dst, ',')
		}
		if utf8.ValidString(h.Key) {
			dst = append(dst, `{"key":`...)
			dst = format.AppendJSONString(dst, []byte(h.Key))
		} else {
			dst = append(dst, `{"key_base64":"`...)
			dst = base64.StdEncoding.AppendEncode(dst, []byte(h.Key))
			dst = append(dst, '"')
		}
		dst = append(dst, ',')
		dst = appendBytes(dst, "value", h.Value)
		dst = append(dst, '}')
	}
	return append(dst, "]}\n"...)
}

// appendField writes a record's key or value: in the form that fits its
// bytes, but never the JSON form for the bytes format; followed, for a
// key or value decoded through a Schema Registry, by name_schema_id.
func appendField(dst []byte, name string, b []byte, s *sinks.Schema) []byte {
	switch {
	case s == nil:
		return appendBytes(dst, name, b)
	case s.Format == sinks.Bytes && b != nil:
		return appendText(dst, name, b)
	}
	dst = appendBytes(dst, name, b)
	if s.ID > 0 {
		dst = append(dst, `,"`...)
		dst = append(dst, name...)
		dst = append(dst, `_schema_id":`...)
		dst = strconv.AppendInt(dst, int64(s.ID), 10)
	}
	return dst
}

// appendBytes writes the field name, or name_string or name_base64, and the
// bytes in the form that fits them (see the package comment); JSON that
// cannot stand on the line as it is comes with name_spacing.
func appendBytes(dst []byte, name string, b []byte) []byte {
	if b == nil {
		dst = append(dst, '"')
		dst = append(dst, name...)
		return append(dst, `":null`...)
	}
	if v, spacing, ok := splitJSON(b); ok {
		dst = append(dst, '"')
		dst = append(dst, name...)
		dst = append(dst, `":`...)
		dst = append(dst, v...)
		if len(spacing) == 0 {
			return dst
		}
		dst = append(dst, `,"`...)
		dst = append(dst, name...)
		dst = append(dst, `_spacing":[`...)
		for i, run := range spacing {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '[')
			dst = strconv.AppendInt(dst, int64(run.at), 10)
			dst = append(dst, ',')
			dst = format.AppendJSONString(dst, b[run.from:run.to])
			dst = append(dst, ']')
		}
		return append(dst, ']')
	}
	return appendText(dst, name, b)
}

// appendText writes b in the string form, or the base64 form when it is
// not valid UTF-8.
func appendText(dst []byte, name string, b []byte) []byte {
	switch {
	case utf8.Valid(b):
		dst = append(dst, '"')
		dst = append(dst, name...)
		dst = append(dst, `_string":`...)
		return format.AppendJSONString(dst, b)
	default:
		dst = append(dst, '"')
		dst = append(dst, name...)
		dst = append(dst, `_base64":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, b)
		return append(dst, '"')
	}
}

// spacingRun is whitespace taken out of a JSON value so that it fits on
// the line: b[from:to], to be put back at offset at of what is written.
type spacingRun struct {
	at, from, to int
}

// splitJSON tells whether b is written in the JSON form: valid UTF-8 (so
// other JSON tools read it as it is) and valid JSON, and not the four bytes
// null, which stand for nil. It returns what goes on the line: b, when b
// has no whitespace a line cannot hold as it is; else b without the runs of
// whitespace (outside strings) that hold a line break or lead or trail the
// value, which spacing lists so that ParseLine puts them back. Runs of
// spaces and tabs inside the value stay where they are, so JSON spaced as
// Python's json.dumps writes it ({"id": 1}) goes on the line verbatim. ok
// is false, for the string or base64 form, when b is not such JSON, or is
// null once its spacing is taken out.
func splitJSON(b []byte) (v []byte, spacing []spacingRun, ok bool) {
	if !utf8.Valid(b) || string(b) == "null" || !json.Valid(b) {
		return nil, nil, false
	}
	inString, escaped := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case escaped:
			escaped = false
			continue
		case inString && c == '\\':
			escaped = true
			continue
		case c == '"':
			inString = !inString
			continue
		case inString || !isSpace(c):
			continue
		}
		j, lineBreak := i, false
		for j < len(b) && isSpace(b[j]) {
			lineBreak = lineBreak || b[j] == '\n' || b[j] == '\r'
			j++
		}
		if lineBreak || i == 0 || j == len(b) {
			spacing = append(spacing, spacingRun{from: i, to: j})
		}
		i = j - 1
	}
	if len(spacing) == 0 {
		return b, nil, true
	}
	v = make([]byte, 0, len(b))
	last := 0
	for k := range spacing {
		v = append(v, b[last:spacing[k].from]...)
		spacing[k].at = len(v)
		last = spacing[k].to
	}
	v = append(v, b[last:]...)
	if string(v) == "null" {
		return nil, nil, false
	}
	return v, spacing, true
}

// isSpace tells whether c is JSON whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// wireRecord and wireHeader are the decoding side. Every byte field is read
// in its three forms so that ParseLine can insist on exactly one.
type wireRecord struct {
	Topic      *string         `json:"topic"`
	Partition  *int            `json:"partition"`
	Offset     *int64          `json:"offset"`
	Key        json.RawMessage `json:"key"`
	KeySpacing []spacing       `json:"key_spacing"`
	KeyString  *string         `json:"key_string"`
	KeyBase64  *string         `json:"key_base64"`
	wireValue
	KeySchemaID   *int         `json:"key_schema_id"`
	ValueSchemaID *int         `json:"value_schema_id"`
	Timestamp     *int64       `json:"timestamp"`
	Headers       []wireHeader `json:"headers"`
}

type wireHeader struct {
	Key       *string `json:"key"`
	KeyBase64 *string `json:"key_base64"`
	wireValue
}

// wireValue is the value of a record or of a header, in its three forms.
type wireValue struct {
	Value        json.RawMessage `json:"value"`
	ValueSpacing []spacing       `json:"value_spacing"`
	ValueString  *string         `json:"value_string"`
	ValueBase64  *string         `json:"value_base64"`
}

// decode returns the value's bytes, from the one form present.
func (w *wireValue) decode() ([]byte, error) {
	return decodeBytes("value", w.Value, w.ValueSpacing, w.ValueString, w.ValueBase64)
}

// spacing is one run of name_spacing as read: [offset, whitespace].
type spacing struct {
	at    int
	space string
}

func (s *spacing) UnmarshalJSON(b []byte) error {
	var pair []json.RawMessage
	if err := json.Unmarshal(b, &pair); err != nil || len(pair) != 2 ||
		json.Unmarshal(pair[0], &s.at) != nil || json.Unmarshal(pair[1], &s.space) != nil {
		return fmt.Errorf("spacing %s: want [offset, whitespace]", b)
	}
	if s.space == "" || strings.TrimLeft(s.space, " \t\n\r") != "" {
		return fmt.Errorf("spacing %s: want JSON whitespace", b)
	}
	return nil
}

// ParseLine decodes one line of the format, with or without its newline.
// Times come back in UTC. Unknown fields are ignored, so that fields can be
// added later; a missing field or a byte field given twice is an error.
func ParseLine(line []byte) (Line, error) {
	var w wireRecord
	if err := json.Unmarshal(line, &w); err != nil {
		return Line{}, fmt.Errorf("parse line: %w", err)
	}
	if w.Topic == nil || w.Partition == nil || w.Offset == nil || w.Timestamp == nil {
		return Line{}, errors.New("parse line: topic, partition, offset or timestamp missing")
	}
	key, err := decodeBytes("key", w.Key, w.KeySpacing, w.KeyString, w.KeyBase64)
	if err != nil {
		return Line{}, fmt.Errorf("parse line: offset %d: %w", *w.Offset, err)
	}
	value, err := w.decode()
	if err != nil {
		return Line{}, fmt.Errorf("parse line: offset %d: %w", *w.Offset, err)
	}
	var headers []sinks.Header
	for i, wh := range w.Headers {
		var h sinks.Header
		switch {
		case wh.Key != nil && wh.KeyBase64 == nil:
			h.Key = *wh.Key
		case wh.Key == nil && wh.KeyBase64 != nil:
			k, err := base64.StdEncoding.DecodeString(*wh.KeyBase64)
			if err != nil {
				return Line{}, fmt.Errorf("parse line: offset %d: header %d: key_base64: %w", *w.Offset, i, err)
			}
			h.Key = string(k)
		default:
			return Line{}, fmt.Errorf("parse line: offset %d: header %d: want exactly one of key and key_base64", *w.Offset, i)
		}
		h.Value, err = wh.decode()
		if err != nil {
			return Line{}, fmt.Errorf("parse line: offset %d: header %d: %w", *w.Offset, i, err)
		}
		headers = append(headers, h)
	}
	return Line{
		Topic:     *w.Topic,
		Partition: *w.Partition,
		Record: sinks.Record{
			Offset:  *w.Offset,
			Key:     key,
			Value:   value,
			Time:    time.UnixMilli(*w.Timestamp).UTC(),
			Headers: headers,
			Decoded: schemaIDs(w.KeySchemaID, w.ValueSchemaID),
		},
	}, nil
}

// schemaIDs is what a line says of the schemas its key and value were
// decoded with: their ids alone, nil when it names none.
func schemaIDs(key, value *int) *sinks.Decoded {
	if key == nil && value == nil {
		return nil
	}
	d := &sinks.Decoded{}
	if key != nil {
		d.KeySchema = &sinks.Schema{ID: *key}
	}
	if value != nil {
		d.ValueSchema = &sinks.Schema{ID: *value}
	}
	return d
}

// decodeBytes turns the one form present of a byte field back into bytes,
// with its spacing put back into the JSON form.
func decodeBytes(name string, raw json.RawMessage, spaced []spacing, str, b64 *string) ([]byte, error) {
	n := 0
	for _, present := range []bool{raw != nil, str != nil, b64 != nil} {
		if present {
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("want exactly one of %s, %s_string and %s_base64, got %d", name, name, name, n)
	}
	if spaced != nil && (raw == nil || string(raw) == "null") {
		return nil, fmt.Errorf("%s_spacing without a JSON %s", name, name)
	}
	switch {
	case raw != nil:
		if string(raw) == "null" {
			return nil, nil
		}
		if spaced == nil {
			return bytes.Clone(raw), nil
		}
		return unsplit(name, raw, spaced)
	case str != nil:
		if *str == "" {
			return []byte{}, nil
		}
		return []byte(*str), nil
	default:
		b, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return nil, fmt.Errorf("%s_base64: %w", name, err)
		}
		if b == nil {
			b = []byte{}
		}
		return b, nil
	}
}

// unsplit puts the runs of spacing back into v, which are in rising order
// of offset, each within v.
func unsplit(name string, v []byte, spaced []spacing) ([]byte, error) {
	n := len(v)
	for _, s := range spaced {
		n += len(s.space)
	}
	b := make([]byte, 0, n)
	last := 0
	for i, s := range spaced {
		if s.at < last || s.at > len(v) || i > 0 && s.at == last {
			return nil, fmt.Errorf("%s_spacing: offset %d out of order or outside the %d bytes of %s", name, s.at, len(v), name)
		}
		b = append(b, v[last:s.at]...)
		b = append(b, s.space...)
		last = s.at
	}
	return append(b, v[last:]...), nil
}

// ReadLines decodes every line from r, in order. Lines may be of any length;
// the last one may lack its newline. An empty line is an error.
func ReadLines(r io.Reader) ([]Line, error) {
	br := bufio.NewReader(r)
	var lines []Line
	for n := 1; ; n++ {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			l, perr := ParseLine(b)
			if perr != nil {
				return lines, fmt.Errorf("line %d: %w", n, perr)
			}
			lines = append(lines, l)
		}
		if errors.Is(err, io.EOF) {
			return lines, nil
		}
		if err != nil {
			return lines, fmt.Errorf("line %d: %w", n, err)
		}
	}
}
