package sinks

// Records read through a Schema Registry. A replica whose key or value
// format is one of the registry's (Avro, Protobuf, JSON Schema in
// Confluent's wire format) hands sinks the JSON a record stands for, so
// that every sink, ours or an embedder's, stores it without knowing the
// format; Decoded keeps what the sink may want besides: the bytes as they
// were in Kafka and the schema they were written with.

// Decoded is how a record's key and value were read, for a record the
// replica decoded (Record.Decoded); nil for a record that it did not (the
// json format, the default, passes the bytes through).
type Decoded struct {
	// KeyBytes and ValueBytes are the key and value as they were in Kafka,
	// when Key or Value holds their decoded JSON; nil when that one was not
	// decoded (its format is json, or it is null).
	KeyBytes, ValueBytes []byte
	// KeySchema and ValueSchema are the schemas the key and value were
	// written with; nil when that one was not decoded. For the bytes
	// format they are a Schema of Format Bytes alone (see ValueOpaque),
	// and the bytes are Key and Value themselves.
	KeySchema, ValueSchema *Schema
	// Err, when not "", is why the key or value could not be decoded (a
	// wrong magic byte, a schema id the registry does not know, bytes that
	// do not match their schema). Only a DeadLetterer receives such a
	// record; Key and Value are then the bytes as they were in Kafka.
	Err string
}

// Format names how a key or value is encoded in Kafka.
type Format string

// String returns the format's name.
func (f Format) String() string { return string(f) }

// Registered reports whether f reads its schemas from a Schema Registry:
// Avro, Protobuf and JSONSchema.
func (f Format) Registered() bool { return f == Avro || f == Protobuf || f == JSONSchema }

// The formats a replica reads (--key-format, --value-format).
const (
	JSON       Format = "json"        // JSON, or any bytes, passed through: the default
	Bytes      Format = "bytes"       // opaque bytes, never read as JSON
	Avro       Format = "avro"        // Confluent's wire format, Avro
	Protobuf   Format = "protobuf"    // Confluent's wire format, Protobuf
	JSONSchema Format = "json-schema" // Confluent's wire format, JSON Schema
)

// Schema is a registry schema as a sink needs it: which one it is, and the
// top-level fields of the records it describes, so that a sink can make a
// column for a field it has not seen (PostgreSQL's evolve=add-columns).
type Schema struct {
	ID     int    // the registry's schema id
	Format Format // Avro, Protobuf or JSONSchema
	// Subject names the schema for people: the record's full name (Avro),
	// the message's (Protobuf) or the schema's title (JSON Schema).
	Subject string
	// Fields are the top-level fields of a record, message or object
	// schema, in the schema's order; nil for any other schema.
	Fields []Field
}

// Field is one top-level field of a schema and the kind of value it holds
// in the decoded JSON.
type Field struct {
	Name string
	Type FieldType
}

// FieldType is the kind of a field's values, in terms a sink can map to
// its store's types.
type FieldType struct {
	Kind FieldKind
	// Precision and Scale of a Decimal.
	Precision, Scale int
}

// FieldKind is what a field's JSON value stands for.
type FieldKind string

// The kinds of field. The JSON of each: Boolean true or false; Int and
// Long numbers; Float and Double numbers; String, UUID and Enum strings;
// Bytes base64 strings; Timestamp an RFC 3339 string in UTC
// ("2024-05-01T12:00:00.123Z"), LocalTimestamp the same without the zone;
// Date "2024-05-01"; Time "12:00:00.123"; Decimal an exact JSON number;
// Duration seconds with an "s", as protojson writes them ("1.500s"); JSONValue
// anything else (records, arrays, maps, unions of several types) as JSON.
const (
	Boolean        FieldKind = "boolean"
	Int            FieldKind = "int"
	Long           FieldKind = "long"
	Float          FieldKind = "float"
	Double         FieldKind = "double"
	String         FieldKind = "string"
	Enum           FieldKind = "enum"
	UUID           FieldKind = "uuid"
	BytesKind      FieldKind = "bytes"
	Timestamp      FieldKind = "timestamp"
	LocalTimestamp FieldKind = "local-timestamp"
	Date           FieldKind = "date"
	Time           FieldKind = "time"
	Decimal        FieldKind = "decimal"
	Duration       FieldKind = "duration"
	JSONValue      FieldKind = "json"
)

// KeyOpaque and ValueOpaque report whether r's key or value is opaque
// bytes (the bytes format), which a sink stores as bytes and never reads
// as JSON, however they look.
func (r *Record) KeyOpaque() bool {
	return r.Decoded != nil && r.Decoded.KeySchema != nil && r.Decoded.KeySchema.Format == Bytes
}

// ValueOpaque: see KeyOpaque.
func (r *Record) ValueOpaque() bool {
	return r.Decoded != nil && r.Decoded.ValueSchema != nil && r.Decoded.ValueSchema.Format == Bytes
}

// DeadLetterer is implemented by sinks that keep the records they cannot
// take in a dead-letter table of their own, and take there, with the
// reason in Decoded.Err, the records whose key or value the replica could
// not decode. TakesUndecodable reports whether this sink, as configured,
// does.
//
// If a Sink does not implement DeadLetterer, or TakesUndecodable returns
// false, a record that cannot be decoded never reaches it: the replica
// stops its partition there with an error naming the record, or skips the
// record (counted) when told to. The replica finds a DeadLetterer with As,
// through wrappers.
type DeadLetterer interface {
	TakesUndecodable() bool
}

// IgnoredFieldCounter is implemented by sinks that fill columns from a
// decoded record's fields and ignore the fields they have no column for.
// IgnoredFields counts those values since the sink was opened, never
// falls, and is safe to call concurrently with writes; the replica's
// metrics export it as offsetkeeper_ignored_fields_total. If a Sink does
// not implement IgnoredFieldCounter, that count is zero.
type IgnoredFieldCounter interface {
	IgnoredFields() int64
}

// DDLCounter is implemented by sinks that change the shape of their tables
// (make a missing table, add columns: evolve=add-columns). DDL counts those
// statements since the sink was opened, never falls, and is safe to call
// concurrently with writes; the replica's metrics export it as
// offsetkeeper_sink_ddl_total. If a Sink does not implement DDLCounter,
// that count is zero.
type DDLCounter interface {
	DDL() int64
}
