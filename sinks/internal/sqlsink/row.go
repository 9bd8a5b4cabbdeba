package sqlsink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// OpaqueValue is why a value of the bytes format cannot be a row, whatever its
// bytes: the replica was told they are not JSON.
const OpaqueValue = "value format is bytes (--value-format bytes): a row needs a JSON object; use json or a Schema Registry format"

// RowReason says why v cannot be a row, or "" when it is a JSON object. The
// reason is a pure function of v: a sink that sets the record aside by it
// sets it aside again when the block is written again.
func RowReason(v []byte) string {
	if v == nil {
		return "value is null (a tombstone): columns mode needs a JSON object"
	}
	if !utf8.Valid(v) {
		return "value is not JSON: invalid UTF-8"
	}
	// json.Valid checks without copying; Unmarshal only to say why not.
	if !json.Valid(v) {
		err := json.Unmarshal(v, new(json.RawMessage))
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return fmt.Sprintf("value is not JSON: %v at byte %d", syn, syn.Offset)
		}
		return "value is not JSON: " + err.Error()
	}
	switch t := bytes.TrimLeft(v, " \t\r\n"); t[0] {
	case '{':
		return ""
	case '[':
		return "value is a JSON array: a row needs a JSON object"
	default:
		return "value is a JSON scalar: a row needs a JSON object"
	}
}
