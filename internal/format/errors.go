package format

import "fmt"

// RecordError is an error that is the record's own fault: its bytes or the
// schema they name cannot be read into JSON, and reading them again will
// not mend that. The replica sets such a record aside (a dead letter, or a
// skip); any other error from Decode means the registry could not be asked
// and the record should be read again later.
type RecordError struct {
	// Reason says what is wrong and where, as a pure function of the
	// record's bytes and its schema, so that a record set aside again
	// carries the same reason.
	Reason string
	// SchemaID is the id in the record's header; 0 when the header could
	// not be read.
	SchemaID int

	err error // the cause, for errors.Is (registry.ErrNotFound); never in Reason
}

// Error returns the reason.
func (e *RecordError) Error() string { return e.Reason }

// Unwrap returns the cause, if any: the Source's error for a schema id the
// registry does not know.
func (e *RecordError) Unwrap() error { return e.err }

// recordErrorf makes a RecordError of a reason that does not depend on
// anything but the record and its schema.
func recordErrorf(id int, format string, args ...any) *RecordError {
	return &RecordError{Reason: fmt.Sprintf(format, args...), SchemaID: id}
}
