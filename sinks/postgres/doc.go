// Package postgres is the sink for URLs postgres://...: blocks become rows
// of a PostgreSQL table, written in one transaction together with the
// partition's next offset. That makes delivery exactly-once: a block is in
// the table exactly when its offset is in the offsets table, a replica that
// crashed between its write and its etcd commit is resumed from here
// (Resume), and a zombie replica, whose epoch is older than the one stored,
// is refused.
//
// # URL
//
//	postgres://user:secret@db.example:5432/app?sslmode=require&group=orders&table=orders_raw
//
// The connection parameters are libpq's that pgx reads (host, port, dbname,
// user, password, passfile, service, servicefile, connect_timeout,
// target_session_attrs, application_name, options, ssl, sslmode,
// sslnegotiation, sslcert, sslkey, sslpassword, sslcertmode, sslrootcert,
// sslsni, min_protocol_version, max_protocol_version, channel_binding,
// require_auth, krbsrvname, krbspn), pgx's statement_cache_capacity,
// description_cache_capacity and default_query_exec_mode, and pgxpool's
// pool_max_conns and the other pool_ settings; PGPASSWORD and the other PG*
// variables fill what is missing. Any other name is refused (pgx would send
// it to the server as a setting: a misspelt tabel= would fail the
// connection); a server setting goes in options=-c NAME=VALUE, as with
// libpq. connect_timeout is 10s when not given (pgx's own default is none).
// The sink's own options are query parameters too, and are removed before
// connecting:
//
//	group=NAME                  the offsetkeeper group: the offsets table's key; required
//	                            unless the caller passes WithGroup (offsetkeeper run does)
//	mode=raw|columns|upsert     how records become rows (default raw)
//	table=[SCHEMA.]NAME         the rows' table (default offsetkeeper_records)
//	offsets_table=[SCHEMA.]NAME (default offsetkeeper_offsets)
//	dead_letter_table=[SCHEMA.]NAME (default offsetkeeper_dead_letters)
//	retry_timeout=DURATION      how long a write retries after losing its
//	                            connection, and how long New waits for a
//	                            server it cannot reach (default 30s; 0 never retries)
//
// for mode=columns and mode=upsert (given with mode=raw, it is refused):
//
//	evolve=none|add-columns     what a decoded record's field without a column does: none
//	                            (the default) ignores and counts it, add-columns adds the
//	                            column (see Decoded records; refused with envelope=debezium)
//
// and, for mode=upsert only (given with another mode, they are refused):
//
//	conflict=NAME               the unique constraint rows are found by (default: the primary key)
//	key_from=key|value          where the key columns come from (default key)
//	deletes=true|false          whether tombstones delete (default true; false with key_from=value)
//	envelope=none|debezium      what the value is (default none: the row itself)
//
// The sink keeps temporary staging tables on its connections, so it needs
// session-level connections: not a pooler in transaction mode. Table names
// are used as written, case included, and quoted in SQL. The
// offsets and dead-letter tables, and the raw table, are created if missing
// (under an advisory lock, so replicas starting together do not collide).
//
// # Raw mode
//
// Each record is one row of
//
//	topic       text        NOT NULL
//	partition   integer     NOT NULL
//	"offset"    bigint      NOT NULL
//	key         bytea                  NULL for a null key
//	value       jsonb                  the value, when it is JSON that jsonb takes; else NULL
//	value_bytes bytea                  the value's bytes exactly; NULL for a tombstone
//	"timestamp" timestamptz NOT NULL   the record's time
//	headers     jsonb       NOT NULL   [{"key": "...", "value": "..."}, ...] in order, [] for none
//	PRIMARY KEY (topic, partition, "offset")
//
// For a record the replica decoded (see Decoded records), value is its
// JSON, and key and value_bytes keep the bytes as they were in Kafka.
//
// value_bytes is the record; value is there to be queried (value->>'id'),
// and is NULL for anything jsonb would not take as it is: not JSON, not
// UTF-8, \u0000 or a lone surrogate in a string, a number beyond numeric's
// range. So a JSON value costs its size twice, and no value is ever refused
// or altered: a tombstone is value_bytes NULL, an empty value is
// an empty value_bytes (both with value NULL), and the JSON text null is
// value 'null'::jsonb. A header's key or value that is not valid UTF-8 or holds a
// NUL byte is stored base64 in "key_base64" or "value_base64" instead, and
// a nil header value is "value": null. ReadAll reads the table back as
// records, with the key and value as they were in Kafka.
//
// Rows go in with one COPY, those of all the blocks of a WriteBlocks
// together. A block that brings offsets the table holds already
// (re-delivery after an operator reset) goes through a staging table and
// INSERT ... ON CONFLICT DO NOTHING instead: the rows held are kept as
// they are.
//
// # Columns mode
//
// An existing table is filled from the JSON object that is each record's
// value: a column takes the field of the same name, converted to the
// column's type by PostgreSQL (jsonb_populate_record, so by the type's own
// input: "2024-05-01" fills a date, 12 a text, [1,2] an integer[]). A field
// the object lacks leaves its column the default, or NULL; fields without a
// column are ignored (for decoded records: counted, or given a column with
// evolve=add-columns); generated columns and GENERATED ALWAYS identities are
// left to PostgreSQL. Columns named kafka_topic, kafka_partition,
// kafka_offset, kafka_key (bytea: a text column would get the hex form)
// and kafka_timestamp, when the table has them, are filled from the record
// instead of its value: they tie each row to its offset. The rows are copied into a
// staging table and inserted with one INSERT ... SELECT, those of all the
// blocks of a WriteBlocks together.
//
// # Upsert mode
//
// An existing table with a primary key (or the unique constraint named by
// conflict=; New refuses a table without one, a deferrable one, or one
// whose columns are generated or filled from the record's position) is
// kept equal to the last record of each key, as a compacted topic or a
// Debezium stream of a source table describes it. The key columns come
// from:
//
//   - key_from=key (the default): the Kafka record key. A JSON object gives
//     the key columns by name (other fields are ignored); anything else is
//     the single key column's value, as text the column's type reads: 123,
//     "123" (a JSON string stands for its contents) and a plain
//     StringSerializer key alike. A key of several columns needs an object.
//   - key_from=value: the fields of the value. The record key is ignored, and
//     a tombstone has no value to find its row by: it is ignored and
//     counted (IgnoredTombstones). deletes=true is refused with key_from=value,
//     but for envelope=debezium, whose deletes carry before.
//
// The other columns are filled from the value's fields as in columns mode
// (the kafka_* columns from the record), and the row replaces the one the
// table holds: a field the value lacks sets its column to the default, or
// NULL, as an insert would; identity and serial columns that are not key
// columns keep their value on update. A tombstone (a nil value) deletes the
// row of its key (deletes=true, the default); with deletes=false it is
// ignored and counted.
//
// envelope=debezium reads each value as a Debezium change event, with or
// without the JsonConverter's {"schema": ..., "payload": ...} wrapper (a
// key so wrapped is unwrapped too): op c, r and u upsert after; op d
// deletes the row, found by the key (key_from=key) or by before's key
// columns (key_from=value); Debezium's tombstone after a delete is a
// tombstone. Other ops (t, a truncate; m, a message) and events without op
// go to the dead-letter table. Debezium's converters decide how values are
// written, and the columns must read them: numeric needs
// decimal.handling.mode=string or double (the default, precise, writes
// bytes); timestamptz reads Debezium's ISO strings, but timestamp, date
// and time arrive as epoch numbers, which those types refuse (dead
// letters), unless the column is an integer or a transform (such as
// TimestampConverter) makes them strings.
//
// Within a block (and the blocks of one WriteBlocks) records of the same
// key are merged before writing: the last wins, a tombstone last deletes,
// so a block never fails on a repeated key ("ON CONFLICT DO UPDATE command
// cannot affect row a second time"). A record superseded so is not applied;
// the sink checks its key and its JSON, the server its types, not its
// constraints. The changes are copied into a staging table and applied with
// one statement per block: the rows are read with json_populate_record,
// merged with DISTINCT ON the key columns as their types read them (so 1
// and "1" are one bigint key), the keys whose last change is a delete are
// deleted and the others go in with INSERT ... ON CONFLICT (key) DO
// UPDATE, in key order, so that two writers sharing keys lock them in one
// order; a deadlock (40P01) between them is retried as a lost connection
// is.
//
// Exactly-once holds as in the other modes: the changes and the offsets
// row commit together, a replayed block adds nothing, a zombie is refused.
// Ordering holds within a partition. Two partitions writing one key (a
// producer that does not key by partition, or a repartitioned topic) are
// applied in whatever order their blocks commit: that is Kafka's ordering,
// not the sink's. After an operator reset backwards the older values are
// applied again, as the reset asks.
//
// # Decoded records
//
// A replica reading a Schema Registry format (Avro, Protobuf, JSON Schema)
// hands the sink each record's JSON, with the bytes as they were in Kafka
// and the schemas in Record.Decoded. The tables are filled from the JSON;
// what stands for the record itself keeps the bytes: raw mode's key and
// value_bytes (value is the JSON), the kafka_key column, and the
// dead-letter table's key and value. ReadAll returns those bytes.
//
// A record the replica could not decode (Decoded.Err) goes to the
// dead-letter table in every mode, with the replica's reason
// (TakesUndecodable: the sink is a sinks.DeadLetterer).
//
// In columns and upsert modes each field's JSON is read by its column's
// type, as for any JSON, and the decoded JSON of each kind of field is
// what the matching type's input reads: a Timestamp ("2024-05-01T12:00:00.123Z")
// fills a timestamptz, a LocalTimestamp a timestamp, a Date a date, a Time
// a time, a Decimal (an exact JSON number) a numeric(p,s) without a digit
// lost, a UUID a uuid, a Duration ("1.5s") an interval (to the microsecond:
// interval's own input reads "1.5s"), records, arrays and maps a jsonb,
// the numbers, booleans, strings and enums their types. Bytes are the one
// conversion of the sink's own: their JSON is base64, which bytea would
// store as text, so a Bytes field whose column is bytea (or a domain over
// it) is rewritten to bytea's hex input (\x...) before PostgreSQL reads
// it; a column of another type (text) takes the base64 as it is, and a
// Bytes field that is not base64 is a dead letter. Only top-level fields
// have kinds: Bytes nested in a record filling a jsonb stay base64, and
// with envelope=debezium, whose schema's fields are the event's, nothing
// is converted.
//
// A top-level field of a record's value schema that no column takes is
// ignored. IgnoredFields (sinks.IgnoredFieldCounter) counts those values,
// one per record and field that holds one (not null), and the fields are
// logged once per schema id. With evolve=add-columns, a block whose
// records bring a field the table has no column for adds a nullable
// column of the field's type:
//
//	Boolean boolean; Int integer; Long bigint; Float real; Double double precision;
//	String, Enum text; UUID uuid; Bytes bytea; Timestamp timestamptz;
//	LocalTimestamp timestamp; Date date; Time time; Decimal numeric(p,s);
//	Duration interval; JSON (and any other) jsonb
//
// with ALTER TABLE ... ADD COLUMN IF NOT EXISTS in the block's transaction,
// before its rows, so that the block fills the column and a rolled-back
// block adds none; rows written before keep NULL there. Fields named
// kafka_* (the record's columns) and names over 63 bytes get no column.
// The ALTER holds the table's exclusive lock until the transaction
// commits: other writers of the table wait that long, once per new field.
// Writers adding the same column at once take turns under the sink's
// advisory lock, and the later one finds the column there.
//
// The sink reads the table's columns at New, and again, in the write's
// transaction, when a block brings a value schema id it has not checked
// yet (so a column another replica added is filled from the first block
// of the schema that has the field), or one whose fields it ignored more
// than a minute ago (so a column added by hand is filled without a
// restart); other blocks cost no catalog read. A write that finds a
// column dropped under it reads the columns again and is tried once more.
//
// # Dead letters
//
// A record the table cannot take goes to the dead-letter table, in the same
// transaction, and the block goes on without it:
//
//	topic, partition, "offset", key, value (bytea, the raw value), "timestamp",
//	error text (why), failed_at timestamptz; PRIMARY KEY (topic, partition, "offset")
//
// key and value are the record's as they were in Kafka (for a decoded
// record its KeyBytes and ValueBytes), so that it can be produced again.
// In every mode a record the replica could not decode is one, with the
// replica's reason.
//
// In columns mode that is a value that is not a JSON object (a tombstone
// included), and any row the insert refuses: a type the column refuses, a
// NOT NULL, CHECK, UNIQUE or foreign-key violation, a trigger's exception.
// In upsert mode also a record without its key (no key, a key without a
// key column or with one null, an array) and a Debezium event that is not
// one the sink applies; a tombstone is no dead letter.
// In raw mode only a row refused by a constraint or trigger added to the
// table, and an undecodable record. When the insert of a block fails on its rows' data, the rows are
// halved under savepoints until each refused row is alone, so a few bad
// records cost a few statements each and never hold back their neighbours,
// nor the other blocks written with them. DeadLetters counts them.
//
// # Offsets, fencing and exactly-once
//
// The offsets table (created if missing):
//
//	"group" text, topic text, partition integer, next bigint, epoch bigint,
//	generation bigint, updated_at timestamptz; PRIMARY KEY ("group", topic, partition)
//
// A Write is one transaction: it first takes the partition's offsets row
// with a row lock (creating it if missing), refuses the block with an error
// wrapping sinks.ErrFenced if the stored epoch is higher than the block's,
// writes the rows, then sets next, epoch and generation to the block's and
// commits. The lock is held to the end, so a zombie writing at the same
// time waits and is then refused. Records below the stored next of the same
// generation are in the table already and are skipped: a block written
// again after a crash, or after its etcd commit failed, adds nothing. After
// an operator reset (a new generation) the block is written whole, and the
// stored next follows it back.
//
// WriteBlocks (sinks.BatchWriter) writes the blocks of several partitions
// in one transaction, each checked against its own offsets row as above:
// it locks the rows in the order of (topic, partition), which every
// transaction of the sink follows, so that two writers of overlapping
// partitions wait for each other instead of deadlocking; a block whose
// row holds a higher epoch is refused with sinks.ErrFenced before
// anything is written, and the other blocks commit; each block sets its
// own row. Write is WriteBlocks of one block.
//
// Resume returns the stored next and generation; the replica starts from it
// when it is ahead of etcd's and of the same generation, so a crash between
// this commit and the etcd commit replays nothing.
//
// In columns mode (not upsert mode) the table has no key the sink knows, so a re-delivery
// after an operator reset inserts the rows again (give the table a UNIQUE
// key over kafka_topic, kafka_partition, kafka_offset to send them to the
// dead-letter table instead). A Kafka partition whose offsets restart
// within one generation (a topic deleted and created again) looks like
// offsets already held: reset the group's offsets after doing that.
//
// # Lost connections
//
// A write that loses its connection (PostgreSQL restarted, failed over or
// unreachable) is retried as a whole, all its blocks, with backoff for up
// to retry_timeout. Whether a lost commit happened is read from the offsets
// rows by the next attempt, as above, so nothing is applied twice. Retries
// counts them.
//
// New waits likewise for a server it cannot reach (connection refused or
// timed out, a name that does not resolve, a server starting up, shutting
// down or out of connection slots), with backoff for up to retry_timeout,
// logging each attempt; its ctx ends the wait at once. A refused login, a
// database, schema or table that does not exist, a table of the wrong
// shape and TLS that does not verify fail at once: no wait mends them.
//
// A write whose ctx ends (the replica's --write-timeout, a stop) returns at
// once: pgx closes its connection and sends the server a cancel request for
// the statement in flight, so that a statement waiting for a lock stops
// waiting on the server too, and its transaction is rolled back: nothing
// of it is committed (TestCancelledWriteCancelsOnServer).
//
// # Tables of another shape
//
// New reads the tables that exist before it creates any, and refuses one
// the mode cannot use with an error wrapping ErrTableShape that names the
// table, all that is wrong with it and the likely fix (offsetkeeper run
// exits 2), rather than fail every write after it started:
//
//   - raw mode: a table of another layout (a column of the raw layout missing,
//     of another type, or generated; a NOT NULL column without a default that
//     the sink does not fill; no primary key or unique index on (topic,
//     partition, "offset"), which its ON CONFLICT needs; a view). topic may be
//     text or varchar, partition integer or bigint; the others are the
//     layout's types. The fix named: mode=columns or mode=upsert, or another
//     table=;
//   - columns and upsert modes: a table that does not exist, an upsert table
//     without a usable key (above), and kafka_* columns of types the record's
//     values cannot be assigned to: kafka_topic a string type; kafka_partition
//     numeric (not smallint) or text; kafka_offset a numeric type that holds
//     64-bit offsets (bigint, numeric) or text; kafka_key bytea or text;
//     kafka_timestamp a date/time type or text. Each row would otherwise be a
//     dead letter;
//   - every mode: an offsets or dead-letter table of another layout than the
//     one the sink creates (a different offsets_table= or dead_letter_table=
//     is the fix).
//
// Last, the server parses and plans every statement the writes and Resume
// will run, and a class 42 error (a column or a cast the checks above did
// not foresee) is refused the same way.
//
// # Groups
//
// ClaimDestination (sinks.DestinationClaimer) records in GroupsTable which
// group writes each topic of the table, the first group to claim it, and
// refuses another group's claim unless it shares on purpose: two groups
// delivering one topic to one table each deliver every record once.
package postgres
