// Package format reads records in Confluent's Schema Registry wire format
// (a magic byte 0, a 4-byte big-endian schema id, for Protobuf the message
// indexes, then the payload) into the JSON they stand for, with the schema
// they were written with, as the replica hands them to sinks.
//
//	d, err := format.New(sinks.Avro, registryClient, format.Options{})
//	js, schema, err := d.Decode(ctx, buf[:0], record.Value)
//
// A Decoder fetches each schema id from its Source once (concurrent first
// records of an id share one fetch), compiles it once and keeps at most
// Options.CacheSize compiled schemas. A Source error is not kept: the next
// record asks again. An id the registry does not know is kept as such for
// Options.NotFoundTTL. A schema that does not compile, or is of another
// type than the decoder's format, is kept as the RecordError it gives.
//
// # Errors
//
// A *RecordError is the record's fault and is returned again for the same
// bytes: its Reason depends on nothing but the bytes and the schema (no
// map order, no library text that varies between builds). Positions ("at
// byte 17") count from the record's first byte, the magic byte being 0.
// Any other error means the Source failed (or ctx ended): decode the
// record later.
//
// Limits that turn a record into a RecordError rather than a large
// allocation: nesting deeper than 1000 (records, arrays, maps, messages);
// an Avro length or block count beyond the bytes left; more than 65536
// array items, in one record, of a type that takes no bytes (null, an
// empty record); an
// Avro decimal of far more bytes than its precision needs.
//
// # The JSON
//
// The kinds of sinks.FieldKind are followed throughout. Choices that the
// formats leave open:
//
//   - Strings: JSON-escaped; in Avro and proto2 a byte that is not UTF-8
//     becomes \ufffd (as Avro's Java library and encoding/json read them),
//     while proto3 (and editions) strings of bad UTF-8 are a RecordError,
//     as protobuf's runtimes refuse them.
//   - Floats: NaN and the infinities have no JSON number and become null
//     (a float column then gets NULL), in Avro and Protobuf alike; other
//     values as encoding/json writes them, float as 32 bits.
//   - Bytes and fixed: standard base64 with padding.
//   - Timestamps: RFC 3339 in UTC with a Z, with 0, 3, 6 or 9 fractional
//     digits as needed (protojson's rule: "2024-05-01T12:00:00.120Z");
//     local timestamps the same without the Z; times "12:00:00.123".
//     Years outside 1 to 9999 (protojson's range) are a RecordError.
//   - Decimals: an exact JSON number with the scale's digits, trailing
//     zeros kept ("12.30", "-0.05"); one with more digits than the
//     precision is a RecordError.
//   - Maps: objects whose keys come in the record's order; a key repeated
//     in the bytes is repeated in the JSON, and readers that keep the
//     last (encoding/json, PostgreSQL's jsonb) see what Avro and protobuf
//     mean.
//
// Avro: records are objects in the schema's field order, unions their
// value itself (null for null), enums their symbol. Logical types as
// above; uuid is the string (a fixed(16) uuid is formatted); duration is
// {"months":m,"days":d,"milliseconds":ms}; timestamp-nanos and
// local-timestamp-nanos are read too, though hamba/avro does not know them.
// Trailing bytes after the value are a RecordError.
//
// Protobuf: the message indexes pick the message ([1,0]: the first nested
// message of the second one; the single byte 0 is [0]). Fields are named as
// written in the schema (snake_case), in declaration order. 64-bit
// integers are JSON numbers, not protojson's strings. A field without
// presence (a proto3 scalar) is written as its zero value when absent; one
// with presence (optional, a message, a oneof's member) is omitted. Repeated
// fields are arrays ([] when empty), maps objects of string keys, enums
// their value's name (or number, for one the schema does not name).
// Well-known types: Timestamp as above, Duration as protojson ("1.500s",
// "-0.000001s"), wrappers their plain value, Struct, Value and ListValue
// their JSON (a Value with no kind set is null), Empty {}, NullValue null;
// Any, FieldMask and the others are ordinary messages. Unknown fields are
// skipped; wire errors are those of protobuf's runtime. Imports resolve
// to the schema's references (by import path), else to protobuf's standard
// files or to confluent/meta.proto and confluent/type/decimal.proto, which
// Confluent's serializers import without a reference.
//
// JSON Schema: the JSON is the payload itself, compacted (whitespace
// dropped; numbers, escapes and key order as written), once it is valid
// UTF-8, valid JSON and valid against the schema: draft 7 unless the schema
// names another (Confluent's default), with formats checked, so that a
// field whose kind comes from its format holds one. A date-time or time is
// kept as written, so it may carry an offset other than Z. A $ref names a
// reference by the URL it resolves to or ends with; nothing is loaded from
// files or the network. The reason of an invalid payload is the
// validator's message for its first failing value by place in the
// payload, with the count of the others.
//
// # Schemas for sinks
//
// The *sinks.Schema of a record is one value for all the records of its id
// (for Protobuf, of its id and message), not to be modified. Its Fields are
// the top-level fields of a record (Avro), message (Protobuf) or object
// schema's properties (JSON Schema), with their kinds: a union of null and
// T, or a JSON Schema type ["null", T], takes T's kind; records, messages,
// arrays, maps and other unions are JSONValue; Protobuf's uint32 and fixed32
// are Long, its uint64 and fixed64 Decimal(20, 0).
package format
