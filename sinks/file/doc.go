// Package file is the sink for URLs file:///DIR: blocks become JSON-lines
// files in a directory tree, one file per block.
//
// # Layout
//
// A block of topic T, partition P and range [From, Next) is the file
//
//	DIR/T/P/FFFFFFFFFFFFFFFFFFFF-NNNNNNNNNNNNNNNNNNNN.jsonl
//
// with From and Next in 20 decimal digits, so that names sort by offset
// (beside them, .epoch holds the highest epoch written to the partition: a
// block of a lower one, a fenced owner's late write, is refused with
// sinks.ErrFenced, for it would delete the newer owner's blocks; epochs
// are etcd revisions, so a group moved to a new etcd cluster, whose
// revisions start again, needs its .epoch files removed). The
// file is written to a temporary file in the same directory (its name starts
// with ".tmp-"), fsynced, renamed over its final name and the directory is
// fsynced: when Write returns nil the block is on disk, and a crash leaves
// either the whole file or none of it visible. A block without records is an
// empty file: its range was delivered and, like any block, replaces what it
// covers (below). Topic names are Kafka's: 1 to 249 ASCII letters, digits,
// '.', '_' and '-', and not "." or ".."; anything else is refused, so a name
// is always a safe directory name. On a case-insensitive file system two
// topics differing only in case would share a directory; don't do that.
//
// # Replays and re-delivery
//
// One file per range makes a replayed block (same From and Next, after a
// crash before the commit) replace its earlier copy: the rename is atomic.
// After an operator reset, blocks with other bounds may cover offsets already
// stored. The rule is: a block supersedes every offset from its From onward.
// Write deletes the files of the partition whose From lies in [From, Next)
// before it renames the new file in, and a reader takes the files in From
// order, each only up to the From of the next one (ReadAll does this). So a
// file that starts before the new block and reaches into it is cut at the
// block's From when read, stale files beyond Next are deleted as the
// re-delivered blocks reach them, and reading never yields an offset twice.
// A crash between the deletions and the rename leaves a gap at offsets the
// replica delivers again anyway, since it had not committed the block.
//
// # A directory moved away
//
// A partition's directory (or its topic's) that disappears while the sink
// runs, moved away by an archiving job or removed, is created again at the
// partition's next write, with a warning naming it (WithLogger) and counted
// (Recreated); its .epoch starts again at the highest epoch this sink had
// written there. A block that was being written when the directory went
// lands either in the moved directory, complete (the write succeeds: the
// directory is fsynced through a handle opened before the rename), or
// nowhere (the write fails and the replica writes it again, into the new
// directory): together the two directories hold every block once. DIR
// itself is never created again: a base directory that is gone (an
// unmounted volume) fails the writes, naming it.
//
// # Groups
//
// ClaimDestination (sinks.DestinationClaimer) records which group writes
// each topic of DIR in DIR/.offsetkeeper-groups/TOPIC, the group's name,
// created once by the first group (a hard link of a complete file, so two
// groups racing cannot both win). A second group's claim of the topic is
// refused unless it shares on purpose; removing the file forgets the group.
//
// # Format
//
// One record is one line, a JSON object with its fields in this order:
//
//	{"topic":"orders","partition":3,"offset":120,"key_string":"user-42","value":{"id":1},"timestamp":1714564800123,"headers":[{"key":"trace","value_string":"abc"}]}
//
// A byte field (the record's key, its value, a header's value) is written in
// the first of these forms that fits its bytes, so that JSON payloads stay
// readable by jq and nothing is ever lost:
//
//   - "value":null: the bytes are nil (a tombstone, a null key or header);
//   - "value":<JSON>: the bytes are valid UTF-8 and valid JSON, whatever
//     their whitespace, and not the four bytes null. They are embedded
//     verbatim when they fit on the line (compact, or spaced with spaces
//     and tabs inside as Python's json.dumps writes them), so "value":"x"
//     holds the three bytes "x" with their quotes. Runs of whitespace (outside
//     strings) that hold a line break, or lead or trail the value, are taken
//     out and listed after it as "value_spacing":[[offset,"whitespace"],...],
//     each to be put back at that byte offset of what "value" holds, in
//     order; ParseLine does, so the bytes read back exactly, while a reader
//     that knows nothing of value_spacing reads the same JSON data;
//   - "value_string":"...": the bytes are other valid UTF-8 text, including
//     the empty, non-nil value "";
//   - "value_base64":"...": any other bytes, in standard base64 with padding.
//
// A value decoded through a Schema Registry (run --value-format avro,
// protobuf or json-schema) is the JSON it stands for, in the JSON form, and
// is followed by "value_schema_id":<id>, the schema it was written with;
// the bytes as they were in Kafka are not kept. With --value-format bytes
// a value is never written in the JSON form, only as text or base64.
//
// The record key uses the same forms named key, key_spacing, key_string,
// key_base64 and key_schema_id. A
// header is {"key":"...", <value field>}, with "key_base64" instead of "key"
// for a header key that is not valid UTF-8; headers keep their order and
// duplicates, and are [] when there are none. The timestamp is Kafka's:
// milliseconds since the Unix epoch as an integer (Record.Time below the
// millisecond is dropped, and it reads back in UTC). AppendLine writes this
// format, ParseLine and ReadLines read it; the stdout sink uses them too.
package file
