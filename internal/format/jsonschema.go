package format

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// jsCodec validates the records of one JSON Schema; their JSON is the
// payload itself, compacted.
type jsCodec struct {
	id     int
	schema *jsonschema.Schema
	out    *sinks.Schema
}

// jsBase is where the schemas of a record are, for the compiler: a URL of
// no host, from which a reference's relative name resolves to a URL that
// ends in that name.
const jsBase = "mem://registry/schemas/"

// compileJSONSchema compiles s, its references loaded by name: a $ref
// names a reference by the URL it resolves to, or ends with.
func compileJSONSchema(s *registry.Schema) (codec, error) {
	refs := jsLoader{}
	err := walkReferences(s, registry.JSON, func(ref registry.Reference) error {
		if _, ok := refs[ref.Name]; ok {
			return nil
		}
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(ref.Schema.Text))
		if err != nil {
			return fmt.Errorf("reference %q is not JSON: %w", ref.Name, err)
		}
		refs[ref.Name] = doc
		return nil
	})
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(s.Text))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	// Confluent's serializers write draft 7 schemas unless they say.
	c.DefaultDraft(jsonschema.Draft7)
	// A field that a sink takes as a timestamp, date, time or uuid must
	// hold one, so formats are checked, not merely noted.
	c.AssertFormat()
	c.UseLoader(refs)
	url := jsBase + strconv.Itoa(s.ID) + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, err
	}
	return &jsCodec{id: s.ID, schema: sch, out: jsSinksSchema(s.ID, []byte(s.Text))}, nil
}

// jsLoader gives the compiler the referenced schemas by name, and nothing
// else: no file or network is read.
type jsLoader map[string]any

// Load returns the reference named url, or the one whose name is the
// longest that url ends with, after a slash.
func (l jsLoader) Load(url string) (any, error) {
	if doc, ok := l[url]; ok {
		return doc, nil
	}
	best := ""
	for name := range l {
		if len(name) > len(best) && strings.HasSuffix(url, "/"+strings.TrimPrefix(name, "/")) {
			best = name
		}
	}
	if best == "" {
		return nil, fmt.Errorf("no reference named %q", url)
	}
	return l[best], nil
}

func (c *jsCodec) decode(dst, b []byte) ([]byte, *sinks.Schema, error) {
	p := b[headerSize:]
	if !utf8.Valid(p) {
		return dst, nil, recordErrorf(c.id, "json-schema: invalid UTF-8 at byte %d", headerSize+firstInvalidUTF8(p))
	}
	start := len(dst)
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, p); err != nil {
		// Compact's errors have no offset; Unmarshal's do.
		if e := json.Unmarshal(p, new(json.RawMessage)); e != nil {
			err = e
		}
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return dst, nil, recordErrorf(c.id, "json-schema: payload is not JSON: %v at byte %d", syn, headerSize+int(syn.Offset))
		}
		return dst, nil, recordErrorf(c.id, "json-schema: payload is not JSON: %v", err)
	}
	out := buf.Bytes()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(out[start:]))
	if err != nil { // not reached: Compact took it
		return dst, nil, recordErrorf(c.id, "json-schema: payload is not JSON: %v", err)
	}
	if err := c.schema.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return dst, nil, recordErrorf(c.id, "json-schema: %v", err)
		}
		return dst, nil, &RecordError{Reason: "json-schema: " + validationReason(ve), SchemaID: c.id}
	}
	return out, c.out, nil
}

func firstInvalidUTF8(p []byte) int {
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(p)
}

var english = message.NewPrinter(language.English)

// maxMessage bounds the validator's message in a reason (an enum's list,
// a long pattern).
const maxMessage = 200

// validationReason names the first failed check, where in the payload it
// failed, and how many others did. The validator visits properties in no
// fixed order, so "first" is by place in the payload, then by keyword: the
// reason of a payload is always the same.
func validationReason(ve *jsonschema.ValidationError) string {
	type leaf struct{ at, keyword, msg string }
	var leaves []leaf
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if ap, ok := e.ErrorKind.(*kind.AdditionalProperties); ok {
			slices.Sort(ap.Properties) // listed as a map gave them
		}
		if len(e.Causes) == 0 {
			leaves = append(leaves, leaf{
				at:      jsonPointer(e.InstanceLocation),
				keyword: strings.Join(e.ErrorKind.KeywordPath(), "/"),
				msg:     e.ErrorKind.LocalizedString(english),
			})
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(leaves) == 0 {
		return "payload does not validate"
	}
	l := slices.MinFunc(leaves, func(a, b leaf) int {
		return cmpStrings(a.at, b.at, a.keyword, b.keyword, a.msg, b.msg)
	})
	msg := l.msg
	if r := []rune(msg); len(r) > maxMessage {
		msg = string(r[:maxMessage]) + "…"
	}
	reason := msg
	if l.at != "" {
		reason = fmt.Sprintf("at %q: %s", l.at, msg)
	}
	if n := len(leaves) - 1; n > 0 {
		reason += fmt.Sprintf(" (and %d more)", n)
	}
	return reason
}

// cmpStrings compares pairs in turn: a, b; then c, d; ...
func cmpStrings(pairs ...string) int {
	for i := 0; i+1 < len(pairs); i += 2 {
		if c := strings.Compare(pairs[i], pairs[i+1]); c != 0 {
			return c
		}
	}
	return 0
}

func jsonPointer(tokens []string) string {
	var sb strings.Builder
	for _, t := range tokens {
		sb.WriteByte('/')
		sb.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return sb.String()
}

// jsSinksSchema describes the records of a schema for sinks: the
// properties of an object, in the schema's order.
func jsSinksSchema(id int, text []byte) *sinks.Schema {
	s := &sinks.Schema{ID: id, Format: sinks.JSONSchema}
	var top struct {
		Title      string          `json:"title"`
		Type       json.RawMessage `json:"type"`
		Properties json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(text, &top) != nil { // a schema of true or false
		return s
	}
	s.Subject = top.Title
	if t, _ := jsType(top.Type); t != "object" || len(top.Properties) == 0 {
		return s
	}
	// encoding/json's maps lose the order; its tokens keep it.
	dec := json.NewDecoder(bytes.NewReader(top.Properties))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return s
	}
	s.Fields = []sinks.Field{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return s
		}
		var p struct {
			Type   json.RawMessage `json:"type"`
			Format string          `json:"format"`
		}
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return s
		}
		_ = json.Unmarshal(raw, &p) // a schema of true or false has neither
		s.Fields = append(s.Fields, sinks.Field{Name: tok.(string), Type: jsFieldType(p.Type, p.Format)})
	}
	return s
}

// jsType is a schema's one type: "type": T, or ["null", T]; ok is false
// for none or several.
func jsType(raw json.RawMessage) (string, bool) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one, true
	}
	var several []string
	if json.Unmarshal(raw, &several) != nil {
		return "", false
	}
	t := ""
	for _, s := range several {
		if s == "null" {
			continue
		}
		if t != "" {
			return "", false
		}
		t = s
	}
	return t, t != ""
}

// jsKinds are the kinds of JSON Schema's scalar types, and jsStringKinds
// those of the string formats a sink can type; any other value is a
// JSONValue.
var (
	jsKinds = map[string]sinks.FieldKind{
		"integer": sinks.Long,
		"number":  sinks.Double,
		"boolean": sinks.Boolean,
		"string":  sinks.String,
	}
	jsStringKinds = map[string]sinks.FieldKind{
		"date-time": sinks.Timestamp,
		"date":      sinks.Date,
		"time":      sinks.Time,
		"uuid":      sinks.UUID,
	}
)

func jsFieldType(raw json.RawMessage, format string) sinks.FieldType {
	t, _ := jsType(raw)
	k, ok := jsKinds[t]
	if !ok {
		return sinks.FieldType{Kind: sinks.JSONValue}
	}
	if f, ok := jsStringKinds[format]; ok && t == "string" {
		k = f
	}
	return sinks.FieldType{Kind: k}
}
