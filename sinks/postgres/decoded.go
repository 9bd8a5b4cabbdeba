package postgres

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// Records the replica decoded through a Schema Registry (Record.Decoded):
// Key and Value are their JSON, which the tables are filled from, while
// what stands for the record as it was in Kafka (the raw table's key and
// value_bytes, kafka_key, the dead-letter table) keeps its exact bytes.

// kafkaKey is rec's key as it was in Kafka.
func kafkaKey(rec *sinks.Record) []byte {
	if d := rec.Decoded; d != nil && d.KeyBytes != nil {
		return d.KeyBytes
	}
	return rec.Key
}

// kafkaValue is rec's value as it was in Kafka.
func kafkaValue(rec *sinks.Record) []byte {
	if d := rec.Decoded; d != nil && d.ValueBytes != nil {
		return d.ValueBytes
	}
	return rec.Value
}

// undecodable is why the replica could not decode rec, or "".
func undecodable(rec *sinks.Record) string {
	if d := rec.Decoded; d != nil {
		return d.Err
	}
	return ""
}

// rowValue is what the insert reads of rec's value, a JSON object (its
// fields with Bytes in bytea columns decoded, see hexBytes), and how many
// of its values no column takes; why is not "" for a record that cannot
// be a row. A value that is not a decoded object is returned as it is.
func (a *attempt) rowValue(rec *sinks.Record) (v []byte, ignored int, why string) {
	v = rec.Value
	d := rec.Decoded
	if d == nil || d.ValueSchema == nil || d.ValueBytes == nil || a.s.cfg.envelope == Debezium || sqlsink.RowReason(v) != "" {
		return v, 0, ""
	}
	p := a.fieldPlan(d.ValueSchema)
	if len(p.ignored) > 0 {
		ignored = countPresent(v, p.ignored)
	}
	if len(p.bytea) > 0 {
		if v, why = hexBytes(v, p.bytea); why != "" {
			return nil, 0, "value " + why
		}
	}
	return v, ignored, ""
}

// rowKey is what upsert mode reads of rec's key: a decoded object with
// its Bytes fields of bytea columns decoded, as rowValue's.
func (a *attempt) rowKey(rec *sinks.Record) ([]byte, string) {
	k := rec.Key
	d := rec.Decoded
	if d == nil || d.KeySchema == nil || d.KeyBytes == nil || a.s.cfg.envelope == Debezium || sqlsink.RowReason(k) != "" {
		return k, ""
	}
	if p := a.fieldPlan(d.KeySchema); len(p.bytea) > 0 {
		k, why := hexBytes(k, p.bytea)
		if why != "" {
			return nil, "record key " + why
		}
		return k, ""
	}
	return k, ""
}

// eachField calls fn with every top-level field of obj, valid JSON that is
// an object, in order: the field's name unquoted, and where its value
// starts and ends.
func eachField(obj []byte, fn func(name []byte, start, end int)) {
	i := skipSpace(obj, 0) + 1 // past {
	if i = skipSpace(obj, i); obj[i] == '}' {
		return
	}
	for {
		end := skipString(obj, i)
		name := obj[i+1 : end-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			var s string
			_ = json.Unmarshal(obj[i:end], &s) // valid JSON: no error
			name = []byte(s)
		}
		i = skipSpace(obj, skipSpace(obj, end)+1) // past :
		vend := skipValue(obj, i)
		fn(name, i, vend)
		if i = skipSpace(obj, vend); obj[i] == '}' {
			return
		}
		i = skipSpace(obj, i+1) // past ,
	}
}

func named(names []string, name []byte) bool {
	return slices.ContainsFunc(names, func(n string) bool { return n == string(name) })
}

// countPresent counts the fields of obj named in names that hold a value:
// absent or null, a field ignored loses nothing.
func countPresent(obj []byte, names []string) int {
	n := 0
	eachField(obj, func(name []byte, start, end int) {
		if string(obj[start:end]) != "null" && named(names, name) {
			n++
		}
	})
	return n
}

// hexBytes rewrites the fields of obj named in names, base64 strings (the
// JSON of Bytes), as the text bytea's input reads as those bytes: \x and
// hex. PostgreSQL would otherwise store the base64 text itself. null stays
// null; why is not "" for a field that holds anything but base64 or null.
func hexBytes(obj []byte, names []string) ([]byte, string) {
	var out []byte
	last := 0
	why := ""
	eachField(obj, func(name []byte, start, end int) {
		if why != "" || !named(names, name) || string(obj[start:end]) == "null" {
			return
		}
		var text string
		if obj[start] != '"' || json.Unmarshal(obj[start:end], &text) != nil {
			why = fmt.Sprintf("field %q (bytes) is %s, want a base64 string", name, jsonKind(obj[start]))
			return
		}
		b, err := decodeBase64(text)
		if err != nil {
			why = fmt.Sprintf("field %q (bytes) is not base64: %v", name, err)
			return
		}
		if out == nil {
			out = make([]byte, 0, len(obj)+len(b))
		}
		out = append(out, obj[last:start]...)
		out = append(out, `"\\x`...)
		out = hex.AppendEncode(out, b)
		out = append(out, '"')
		last = end
	})
	switch {
	case why != "":
		return nil, why
	case out == nil:
		return obj, ""
	}
	return append(out, obj[last:]...), ""
}

// decodeBase64 reads standard or URL-safe base64, padded or not: the
// decoders' JSON writes the standard padded form, but a JSON Schema
// producer writes what its own library does.
func decodeBase64(s string) ([]byte, error) {
	var first error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		b, err := enc.DecodeString(s)
		if err == nil {
			return b, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// jsonKind names the kind of JSON value that starts with c.
func jsonKind(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}
