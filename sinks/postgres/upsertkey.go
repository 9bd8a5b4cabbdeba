package postgres

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// fromKey builds k from a Kafka record key: a JSON object gives the key
// columns by name; anything else is the single key column's value, as
// text (a JSON string stands for its contents), converted to the column's
// type by PostgreSQL. With unwrap (envelope=debezium) the JsonConverter's
// {"schema": ..., "payload": ...} is taken off first.
func (p keyPlan) fromKey(key []byte, unwrap bool) ([]byte, string) {
	if key == nil {
		return nil, "record has no key: key_from=key finds the row by it"
	}
	t := bytes.TrimSpace(key)
	if len(t) == 0 {
		return nil, "record key is empty: key_from=key finds the row by it"
	}
	if !utf8.Valid(t) {
		return nil, "record key is not UTF-8 text"
	}
	if unwrap && t[0] == '{' {
		if inner, ok := unwrapSchema(t); ok {
			t = bytes.TrimSpace(inner)
		}
	}
	if t[0] == '{' {
		if !json.Valid(t) {
			err := json.Unmarshal(t, new(json.RawMessage))
			return nil, fmt.Sprintf("record key is not a JSON object: %v", err)
		}
		return p.fromObject(t, "record key")
	}
	if len(p.cols) > 1 {
		return nil, fmt.Sprintf("record key is not a JSON object, but the key has %d columns (%s)", len(p.cols), strings.Join(p.cols, ", "))
	}
	var text string
	switch {
	case t[0] == '[' && json.Valid(t):
		return nil, "record key is a JSON array: want a JSON object or a scalar"
	case string(t) == "null":
		return nil, "record key is JSON null"
	case t[0] == '"' && json.Unmarshal(t, &text) == nil:
	default:
		text = string(t)
	}
	s, _ := json.Marshal(text) // a string: no error
	return p.build([]json.RawMessage{s}), ""
}

// fromObject builds k from the fields of obj, valid JSON that is an
// object (what names it: "record key", "value"); every key column must be
// there and not null.
func (p keyPlan) fromObject(obj []byte, what string) ([]byte, string) {
	vals, ok := objectFields(obj, p.cols)
	if !ok { // a field name with escapes: let encoding/json read it
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(obj, &fields); err != nil {
			return nil, fmt.Sprintf("%s is not a JSON object: %v", what, err)
		}
		for i, c := range p.cols {
			vals[i] = fields[c]
		}
	}
	for i, c := range p.cols {
		switch v := vals[i]; {
		case v == nil:
			return nil, fmt.Sprintf("%s has no field %q (key column)", what, c)
		case string(v) == "null":
			return nil, fmt.Sprintf("%s field %q (key column) is null", what, c)
		}
	}
	return p.build(vals), ""
}

// objectFields returns the values of the named top-level fields of obj,
// valid JSON that is an object, without decoding the rest; a field given
// twice is its last. A field missing is nil. ok is false when a field name
// holds an escape, which a byte comparison cannot match.
func objectFields(obj []byte, names []string) (vals []json.RawMessage, ok bool) {
	vals = make([]json.RawMessage, len(names))
	i := skipSpace(obj, 0) + 1 // past {
	if i = skipSpace(obj, i); obj[i] == '}' {
		return vals, true
	}
	for {
		end := skipString(obj, i)
		name := obj[i+1 : end-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			return vals, false
		}
		i = skipSpace(obj, skipSpace(obj, end)+1) // past :
		vend := skipValue(obj, i)
		for k, n := range names {
			if string(name) == n {
				vals[k] = obj[i:vend]
			}
		}
		if i = skipSpace(obj, vend); obj[i] == '}' {
			return vals, true
		}
		i = skipSpace(obj, i+1) // past ,
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the end of the JSON string that starts at b[i].
func skipString(b []byte, i int) int {
	for j := i + 1; ; j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
}

// skipValue returns the end of the valid JSON value that starts at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; ; j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
	}
	j := i
	for j < len(b) && !strings.ContainsRune(",}] \t\r\n", rune(b[j])) {
		j++
	}
	return j
}

func (p keyPlan) build(vals []json.RawMessage) []byte {
	n := 2
	for i := range vals {
		n += len(p.fields[i]) + len(vals[i]) + 2
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, p.fields[i]...)
		b = append(b, ':')
		b = append(b, v...)
	}
	return append(b, '}')
}
