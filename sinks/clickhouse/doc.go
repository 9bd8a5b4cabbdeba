// Package clickhouse is the sink for URLs clickhouse://...: the blocks of
// many partitions that end together (a round, one WriteBlocks call) become
// one INSERT into a ClickHouse table, carrying a deduplication token made
// of the round's name, which the replica records with each block's intent,
// so that ClickHouse itself drops a round inserted again: after a crash
// between the insert and the etcd commit, after a lost answer, or a
// zombie's late insert of a round whose blocks a new owner replayed (see
// WriteBlocks). Where the table cannot be checked for a block's rows,
// each block is an INSERT of its own, its token made of its exact range. That closes the hole ClickHouse's own Kafka engine
// leaves open ("Last block was already written to target table(s), but
// was not committed to Kafka"), without a transaction around the insert.
//
// # URL
//
//	clickhouse://[USER[:PASSWORD]@]HOST[:PORT][,HOST[:PORT]...]/DB?table=T&group=G
//
// The URL takes only these parameters; any other is refused (never passed
// to ClickHouse as a setting):
//
//	group=NAME                 the offsetkeeper group, part of every token; required
//	                           unless the caller passes WithGroup (offsetkeeper run does)
//	table=[DB.]NAME            the rows' table (default offsetkeeper_records, in DB)
//	mode=raw|columns           how records become rows (default raw)
//	dead_letter_table=[DB.]NAME (default offsetkeeper_dead_letters; created if missing)
//	protocol=native|http       native TCP (default; port 9000, 9440 with TLS) or the
//	                           HTTP interface (port 8123, 8443 with TLS)
//	secure=true|false          TLS (default false)
//	ca_file=PATH               PEM CA certificates to verify the server by (secure only)
//	tls_server_name=NAME       the name the certificate must hold (secure only)
//	skip_verify=true|false     do not verify the certificate (secure only; tests only)
//	password_file=PATH         the password, read at start (one trailing newline dropped)
//	at_least_once=true|false   accept a table that does not deduplicate (default false)
//	dial_timeout=DURATION      opening a connection (default 10s)
//	retry_timeout=DURATION     how long an insert is retried, and New waits for an unreachable server (default 30s; 0 never)
//	insert_interval=DURATION   the least time between two rounds' inserts into the table, unless a round holds
//	                           32,768 rows or more, or is a backlog's (default 1s; 0 no pacing)
//	compression=lz4|zstd|none  on the wire (default lz4; http: lz4 or none)
//
// The password is the URL's, or password_file's, or else the environment
// variable OFFSETKEEPER_CLICKHOUSE_PASSWORD; two of them at once is an
// error. DB is "default" when the path names none.
//
// # Exactly-once
//
// Each round is one INSERT per table (each block alone where the table
// cannot be checked) with the settings
//
//	insert_deduplicate = 1, async_insert = 0,
//	insert_deduplication_token = 'offsetkeeper/GROUP/round/ROUND'
//	                             (alone: 'offsetkeeper/GROUP/TOPIC/PARTITION/GENERATION/FROM-NEXT')
//
// (set explicitly: the defaults differ between versions, and an async
// insert is deduplicated otherwise). An insert is atomic, one part (or one
// part per partition of the table's PARTITION BY, each deduplicated by the
// token and its index), and ClickHouse drops an insert whose token it has
// seen among the table's last N inserts. So exactly-once rests on three
// things:
//
//   - The replica's intent: before each block, the replica puts the
//     block's range in etcd, fenced by its claim, and a new owner replays
//     exactly that range first. The sink asks for intents (it is a
//     sinks.IntentKeeper) although it is a Resumer. A replayed block has the
//     previous owner's range, hence its token, and is dropped if it went
//     in; a zombie (a replica that lost its claim) can only write a block
//     whose intent it put while it owned the partition, and that is the
//     block the new owner replays, so whichever insert comes second is
//     dropped. A retry after a lost answer carries the same token.
//   - Resume (sinks.Resumer): where the table has kafka_topic,
//     kafka_partition, kafka_offset and kafka_generation (the raw table
//     does), the new owner starts after the highest offset of the highest
//     generation the table holds, when that is ahead of etcd: a crash
//     between the insert and the etcd commit then replays nothing, however
//     old the block is. This is safe beside the intent because a
//     partition's blocks are inserted one at a time, in order, each
//     atomically: if the intent's block is in the table, the new owner
//     starts past it (a zombie's retry of it is still dropped by its
//     token); if not, it starts at etcd's offset and replays the intent.
//     A replica of the table that lags only makes Resume lower, which is
//     the intent's case.
//     Each insert goes as one block, so one part; a table with a partition
//     key would make a block spanning its partitions several parts, not
//     atomic as a whole, so such a table does not resume from its rows;
//     nor does one whose merges may fold rows of several offsets together
//     or rewrite kafka_offset (a SummingMergeTree, or another folding
//     engine whose sorting key does not hold kafka_topic, kafka_partition
//     and kafka_offset).
//   - An insert the server may have dropped as a duplicate of a part it
//     no longer has (a crash between recording its block id and renaming
//     the part) is checked: the offsets missing from the table are
//     inserted again, alone, under a token derived from them, once; rows
//     still missing then fail the write (see target in verify.go).
//   - The user's profile cannot undo it: inserts set insert_deduplicate
//     and deduplicate_insert, queries use_query_cache = 0; a table read
//     through a row policy, and several hosts for a table each server
//     keeps apart, are refused (ErrTableShape).
//   - The table deduplicates: New checks that it is a MergeTree with
//     non_replicated_deduplication_window > 0, or a Replicated (or Shared)
//     MergeTree with replicated_deduplication_window > 0, and refuses any
//     other (ErrNoDeduplication, with what to set), unless at_least_once=true
//     is given; then the sink logs a warning and a crash may duplicate a
//     block.
//
// What is not exactly-once:
//
//   - An operator's reset backwards re-inserts: the new generation is a new
//     token, as the reset asks. A zombie's block of the old generation that
//     arrives after a reset is inserted too.
//   - A block inserted again after more than the window's inserts into the
//     table (all partitions of all groups together): ClickHouse has
//     forgotten its token. Size the window for the inserts made while a
//     replica fails over (its lease TTL plus a claim and a replay): raw
//     tables are created with 10,000. ReplicatedMergeTree also forgets by
//     age (replicated_deduplication_window_seconds).
//   - Zombies beyond that: ClickHouse checks no epoch, so the fence is the
//     replica's (it stops writing when it cannot show its lease alive for
//     TTL/2, and every block needs its intent, fenced by the claim). A
//     zombie's insert that was already sent when its claim was lost is
//     dropped only while its token is in the window.
//   - Materialized views on the table deduplicate their own inserts only
//     with deduplicate_blocks_in_dependent_materialized_views=1 (a server
//     or user setting).
//
// # Raw mode
//
// The table (created if missing, with the window above) holds each record
// whole:
//
//	kafka_topic LowCardinality(String), kafka_partition Int32, kafka_offset Int64,
//	kafka_generation Int64, kafka_key Nullable(String) (NULL for a null key),
//	kafka_timestamp DateTime64(3, 'UTC'), value Nullable(String) (NULL for a tombstone),
//	header_keys Array(String), header_values Array(Nullable(String))
//	ENGINE = MergeTree ORDER BY (kafka_topic, kafka_partition, kafka_offset)
//
// A String holds any bytes, so no record is refused or altered. ReadAll
// reads the table back as records.
//
// # Columns mode
//
// An existing table is filled from the JSON object that is each record's
// value: a column takes the field of the same name, converted in Go to the
// column's type (integers from JSON numbers or strings of digits, floats,
// Bool, String (a JSON string's contents, any other value's JSON text),
// FixedString, Date, Date32, DateTime and DateTime64 (RFC 3339,
// "YYYY-MM-DD hh:mm:ss[.fff]", "YYYY-MM-DD" or seconds since 1970), Decimal,
// Enum, UUID, IPv4/6, Array, Map, Tuple, Nullable and LowCardinality of
// those; JSON and other types from the value's JSON text). A field the
// object lacks, or a null, is the column's NULL, or for a column that is not
// Nullable its type's zero: DEFAULT expressions are not applied, since the
// insert names every column. MATERIALIZED and ALIAS columns are left to
// ClickHouse. Columns named kafka_topic, kafka_partition, kafka_offset,
// kafka_generation, kafka_key and kafka_timestamp are filled from the record
// instead; with the first four, Resume works (order the table by them, or
// by a prefix, so that it reads little).
//
// # Dead letters
//
// In columns mode a record whose value is not a JSON object (a tombstone
// included), or whose field a column's type refuses, goes to the
// dead-letter table instead (created if missing):
//
//	kafka_topic, kafka_partition, kafka_offset, kafka_generation, kafka_key,
//	kafka_timestamp, value (Nullable(String), the raw value), error String (why),
//	failed_at DateTime64(3, 'UTC'); ENGINE = ReplacingMergeTree ORDER BY (kafka_topic,
//	kafka_partition, kafka_offset)
//
// The conversion is done in Go and is a pure function of the record and the
// column types, so the same block always splits into the same rows and the
// same dead letters, and a replay is dropped by its tokens as a whole. A
// block's dead letters are inserted first, with the token and "/dead", then
// its rows: a crash between the two leaves the rows out, so Resume starts
// before the block and the replay completes it. A refusal by the server
// itself (a CONSTRAINT) fails the block whole, and the replica writes it
// again: the sink does not split inserts, which would multiply parts and
// tokens. DeadLetters counts the dead letters.
//
// # Tables of another shape
//
// New checks the tables that exist before it creates any, and refuses one
// the mode cannot use with an error wrapping ErrTableShape that names the
// table, what is wrong with it and the likely fix (offsetkeeper run exits
// 2), rather than report ready and fail every Resume or insert after:
//
//   - raw mode: the table must have the raw layout's columns (LowCardinality
//     or plain String for kafka_topic and the error, Array(LowCardinality(String))
//     for header_keys, any DateTime64 of 3 to 9 digits for kafka_timestamp, the
//     other types as above), none MATERIALIZED or ALIAS; other columns are
//     left to their defaults. A table of another shape is refused, saying to
//     use mode=columns or another table name;
//   - columns mode: the table must exist, every column the insert fills must
//     be of a type the client inserts, and each kafka_* column must hold any
//     value the record gives it (a 249-byte topic, any partition and 64-bit
//     offset and generation, a time); a table with all four of kafka_topic,
//     kafka_partition, kafka_offset and kafka_generation resumes from them, so
//     kafka_topic must be a String and the others integers (Resume compares the
//     topic and takes the highest generation and offset). A table without all
//     four is accepted and resumes from etcd alone;
//   - both modes: a dead-letter table of another layout than the one above.
//
// A table that does not deduplicate (ErrNoDeduplication) is likewise refused
// before anything is created.
//
// # Block sizes
//
// ClickHouse wants few, large inserts: every insert is a part, and a table
// with too many parts slows down and then refuses inserts ("Too many
// parts"). Each block is one insert, and blocks of different partitions are
// inserted side by side, never merged (a token covers one insert). Let
// blocks grow: the replica's max-block-rows (65,536) and flush-interval
// (1s) suit a busy topic; for many quiet partitions raise flush-interval
// (5s to 30s) and max-empty-polls, so that a block is not cut at every
// poll. The sink logs a warning when, over a minute, it made more than one
// insert a second of fewer than 1,000 rows on average.
//
// # Cancelled inserts
//
// A write whose ctx ends (the replica's --write-timeout, a stop) returns at
// once: over the native protocol the driver sends ClickHouse a Cancel packet
// and drops the connection, over HTTP it drops the request. An INSERT whose
// data had all reached the server may still be stored; the block's next
// write carries the same token and is dropped then, so the block is stored
// once (within the deduplication window).
//
// # Groups
//
// ClaimDestination (sinks.DestinationClaimer) records in GroupsTable which
// group writes each topic of the table, the first group to claim it, and
// refuses another group's claim unless it shares on purpose: the tokens
// hold the group, so two groups delivering one topic to one table each
// store every record once. There are no transactions: the first claim of
// a topic wins by insert deduplication on one server, but not across the
// servers of a cluster (see ClaimDestination).
package clickhouse
