// Package registry reads schemas from a Confluent-compatible Schema
// Registry by id, for the decoders of internal/format.
package registry

import "errors"

// Type is a schema's type as the registry names it.
type Type string

// The registry's schema types; a schema served without one is Avro.
const (
	Avro     Type = "AVRO"
	Protobuf Type = "PROTOBUF"
	JSON     Type = "JSON"
)

// Schema is a schema as the registry serves it by id, with its references
// resolved.
type Schema struct {
	ID         int // 0 for a schema reached only as a reference
	Type       Type
	Text       string
	References []Reference
}

// Reference is a schema that another one uses, under the name it uses it
// by: for Avro the full name of a type, for Protobuf the import path, for
// JSON Schema the $ref URL.
type Reference struct {
	Name    string
	Subject string
	Version int
	// Schema is the referenced schema, its own references resolved.
	Schema *Schema
}

// ErrNotFound is wrapped by the errors of lookups the registry answered
// with "not found": a schema id it does not know is the record's fault,
// not the registry's, and reading again will not mend it.
var ErrNotFound = errors.New("schema not found")
