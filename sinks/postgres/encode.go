package postgres

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// rawJSONB is what the raw table's value column gets of rec: its value,
// when jsonb takes it and it is not opaque (the bytes format).
func rawJSONB(rec *sinks.Record) []byte {
	if rec.ValueOpaque() {
		return nil
	}
	return jsonbValue(rec.Value)
}

// jsonbValue returns v when PostgreSQL's jsonb will take it, else nil. That
// is valid JSON in valid UTF-8 without the escapes jsonb refuses although
// JSON allows them: \u0000, and a surrogate escape that is not half of a
// pair. (jsonb also refuses numbers beyond numeric's range; Write finds
// those out from the server and stores them without the jsonb copy.)
func jsonbValue(v []byte) []byte {
	if v == nil || !utf8.Valid(v) || !json.Valid(v) || !jsonbEscapes(v) {
		return nil
	}
	return v
}

// jsonbEscapes reports whether the \u escapes of valid JSON are ones jsonb
// accepts. Outside strings valid JSON has no backslash, so every backslash
// starts an escape.
func jsonbEscapes(v []byte) bool {
	for i := bytes.IndexByte(v, '\\'); i >= 0; {
		if v[i+1] == 'u' {
			r := hex4(v[i+2 : i+6])
			switch {
			case r == 0:
				return false
			case 0xD800 <= r && r < 0xDC00:
				if i+12 > len(v) || v[i+6] != '\\' || v[i+7] != 'u' {
					return false
				}
				if r2 := hex4(v[i+8 : i+12]); r2 < 0xDC00 || r2 >= 0xE000 {
					return false
				}
				i += 6 // the low half is checked here already
			case 0xDC00 <= r && r < 0xE000:
				return false
			}
		}
		// Skip the escape's second byte, so that \\u is not read as \u.
		j := bytes.IndexByte(v[i+2:], '\\')
		if j < 0 {
			break
		}
		i += 2 + j
	}
	return true
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// header is one element of the raw table's headers column. A name or value
// that jsonb cannot hold as text (invalid UTF-8, a NUL byte) goes in its
// _base64 field instead; a nil value is "value": null.
type header struct {
	Key         *string `json:"key,omitempty"`
	KeyBase64   *string `json:"key_base64,omitempty"`
	Value       *string `json:"value"`
	ValueBase64 *string `json:"value_base64,omitempty"`
}

// emptyHeaders is what a record without headers stores.
var emptyHeaders = []byte("[]")

// textSafe reports whether s can be a jsonb string as it is.
func textSafe(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// encodeHeaders is the headers column of a record: a JSON array in the
// record's order, duplicates kept.
func encodeHeaders(hs []sinks.Header) ([]byte, error) {
	if len(hs) == 0 {
		return emptyHeaders, nil
	}
	out := make([]header, len(hs))
	for i, h := range hs {
		k := h.Key
		if textSafe(k) {
			out[i].Key = &k
		} else {
			b := base64.StdEncoding.EncodeToString([]byte(k))
			out[i].KeyBase64 = &b
		}
		switch v := string(h.Value); {
		case h.Value == nil:
		case textSafe(v):
			out[i].Value = &v
		default:
			b := base64.StdEncoding.EncodeToString(h.Value)
			out[i].ValueBase64 = &b
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("encode headers: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// decodeHeaders reads the headers column back; none is nil.
func decodeHeaders(b []byte) ([]sinks.Header, error) {
	var in []header
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("decode headers: %w", err)
	}
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]sinks.Header, len(in))
	for i, h := range in {
		switch {
		case h.Key != nil:
			out[i].Key = *h.Key
		case h.KeyBase64 != nil:
			k, err := base64.StdEncoding.DecodeString(*h.KeyBase64)
			if err != nil {
				return nil, fmt.Errorf("decode header %d key: %w", i, err)
			}
			out[i].Key = string(k)
		default:
			return nil, fmt.Errorf("decode header %d: no key", i)
		}
		switch {
		case h.Value != nil:
			out[i].Value = []byte(*h.Value)
		case h.ValueBase64 != nil:
			v, err := base64.StdEncoding.DecodeString(*h.ValueBase64)
			if err != nil {
				return nil, fmt.Errorf("decode header %d value: %w", i, err)
			}
			out[i].Value = v
		}
	}
	return out, nil
}
