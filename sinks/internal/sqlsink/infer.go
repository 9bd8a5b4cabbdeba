package sqlsink

import (
	"bytes"
	"encoding/json"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// ParamInferColumns is the parameter that lets evolve=add-columns add
// columns for JSON records without a schema, typed from their values.
const ParamInferColumns = "infer_columns"

// InferSchema is the schema a JSON object value implies, for
// infer_columns=true: a field per top-level key whose value is not null,
// typed from the value (a string String, true or false Boolean, an integer
// Long, another number Double, an object or array JSONValue), in the
// object's order. Its ID is below zero, the same for the same names and
// kinds, so it never meets a registry's. ok is false for a value that is
// not a JSON object, or one without a typed field.
func InferSchema(value []byte) (sc *sinks.Schema, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var fields []sinks.Field
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		name, _ := k.(string)
		kind := kindOf(raw)
		if kind == "" || slices.ContainsFunc(fields, func(f sinks.Field) bool { return f.Name == name }) {
			continue
		}
		fields = append(fields, sinks.Field{Name: name, Type: sinks.FieldType{Kind: kind}})
	}
	if len(fields) == 0 {
		return nil, false
	}
	h := fnv.New32a()
	for _, f := range fields {
		h.Write([]byte(f.Name))
		h.Write([]byte{0})
		h.Write([]byte(f.Type.Kind))
		h.Write([]byte{0})
	}
	return &sinks.Schema{ID: -int(h.Sum32()&0x7fffffff) - 1, Subject: "inferred from JSON", Fields: fields}, true
}

// ValueSchema is the schema of r's value: the registry's, or with infer
// the one a JSON record without one implies (InferSchema); nil for none.
func ValueSchema(r *sinks.Record, infer bool) *sinks.Schema {
	d := r.Decoded
	switch {
	case d != nil && d.Err == "" && d.ValueSchema != nil:
		return d.ValueSchema
	case d == nil && infer:
		if sc, ok := InferSchema(r.Value); ok {
			return sc
		}
	}
	return nil
}

// kindOf is the kind a JSON value implies; "" for null.
func kindOf(raw json.RawMessage) sinks.FieldKind {
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "" || s == "null":
		return ""
	case s == "true" || s == "false":
		return sinks.Boolean
	case s[0] == '"':
		return sinks.String
	case s[0] == '{' || s[0] == '[':
		return sinks.JSONValue
	case strings.ContainsAny(s, ".eE"):
		return sinks.Double
	}
	return sinks.Long
}
