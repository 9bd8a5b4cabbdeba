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
// # Groups
//
// ClaimDestination (sinks.DestinationClaimer) records in GroupsTable which
// group writes each topic of the table, the first group to claim it, and
// refuses another group's claim unless it shares on purpose: two groups
// delivering one topic to one table each deliver every record once.
package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// ErrClosed is returned by Write, WriteBlocks and Resume after Close.
var ErrClosed = errors.New("postgres sink is closed")

// Sink writes blocks to PostgreSQL. It is safe for concurrent use; writes
// to different partitions run in parallel, each Write or WriteBlocks on a
// connection of its own from the pool.
type Sink struct {
	cfg  config
	pool *pgxpool.Pool
	sql  statements

	// life is held shared by writes and Resume and exclusively by Close, so
	// that Close waits for the writes in flight and none starts after it.
	life   sync.RWMutex
	closed bool

	key keyPlan // upsert mode's

	// Columns and upsert modes': the table as the last write that read
	// it saw it (see publish), and what the sink learnt of the schemas of
	// decoded records, under schemaMu.
	tab      atomic.Pointer[table]
	schemaMu sync.Mutex
	checked  map[int]time.Time  // value schema ids checked against the catalog, and when
	plans    map[int]*fieldPlan // by schema id, for one table
	logged   map[int]bool       // value schema ids whose ignored fields were logged
	recheck  time.Duration      // recheckAfter, but in tests

	deadLetters   atomic.Int64
	ignored       atomic.Int64
	ignoredFields atomic.Int64
	retries       atomic.Int64
}

var _ sinks.Sink = (*Sink)(nil)
var _ sinks.Resumer = (*Sink)(nil)
var _ sinks.BatchWriter = (*Sink)(nil)
var _ sinks.DeadLetterer = (*Sink)(nil)
var _ sinks.IgnoredFieldCounter = (*Sink)(nil)

// New connects to the database of url, creates the tables that are missing
// and, in columns mode, reads the table's columns. ctx bounds only this;
// the sink's lifetime is the caller's, until Close.
func New(ctx context.Context, url string, opts ...Option) (*Sink, error) {
	c, err := parseURL(url)
	if err == nil {
		err = c.finish(opts)
	}
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(c.connString)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrURL, err)
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		// pgx's default is none: one connection attempt to a server that
		// drops packets would take the whole wait at start.
		pc.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	stage := createStageRaw
	switch c.mode {
	case Columns:
		stage = createStageCols
	case Upsert:
		stage = createStageUpsert
	}
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, stage); err != nil {
			return fmt.Errorf("create the staging table: %w", err)
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres sink: %w", err)
	}
	s := &Sink{cfg: c, pool: pool, checked: map[int]time.Time{}, plans: map[int]*fieldPlan{}, logged: map[int]bool{}, recheck: recheckAfter}
	if err := s.setupRetrying(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres sink %s: %w", c.table.Sanitize(), err)
	}
	return s, nil
}

// setupRetrying is setup, tried again with backoff for up to retry_timeout
// while the server cannot be reached or is starting or stopping: a replica
// (re)started during a failover waits for the database, as its writes
// would, instead of exiting and crash-looping. What no retry mends (a
// refused login, a database or table that does not exist, a table of the
// wrong shape) fails at once, and so does a cancelled ctx (a stop).
func (s *Sink) setupRetrying(ctx context.Context) error {
	giveUp := time.Now().Add(s.cfg.retryTimeout)
	retry := backoff.Backoff{Min: retryFirst, Max: startRetryMax}
	for attempt := 1; ; attempt++ {
		err := s.setup(ctx)
		if err == nil || ctx.Err() != nil || !unreachable(err) {
			return err
		}
		wait := retry.Next()
		if time.Now().Add(wait).After(giveUp) {
			return fmt.Errorf("still unreachable after retry_timeout=%s (%d attempts): %w", s.cfg.retryTimeout, attempt, err)
		}
		s.retries.Add(1)
		s.cfg.log.Warn("postgres unreachable at start; retrying", zap.Int("attempt", attempt),
			zap.Duration("gives_up_in", time.Until(giveUp).Round(time.Second)), zap.Error(err))
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

func (s *Sink) setup(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if err := ensureTables(ctx, s.pool, &s.cfg); err != nil {
		return err
	}
	if s.cfg.mode != Raw {
		oid, cols, names, err := readColumns(ctx, s.pool, s.cfg.table, s.cfg.mode)
		if err != nil {
			return err
		}
		if s.cfg.mode == Upsert {
			if s.key, err = readKey(ctx, s.pool, s.cfg.table, oid, s.cfg.conflict, cols); err != nil {
				return err
			}
		}
		s.tab.Store(s.newTable(cols, names))
	}
	s.sql = buildStatements(&s.cfg)
	return nil
}

// Group is the group the offsets are stored under.
func (s *Sink) Group() string { return s.cfg.group }

// Mode is the table mode.
func (s *Sink) Mode() Mode { return s.cfg.mode }

// DeadLetters counts the records this sink moved to the dead-letter table,
// in writes that committed.
func (s *Sink) DeadLetters() int64 { return s.deadLetters.Load() }

// IgnoredTombstones counts the tombstones upsert mode left out, in writes
// that committed: all of them with deletes=false, and with key_from=value
// those that have no value to find their row by.
func (s *Sink) IgnoredTombstones() int64 { return s.ignored.Load() }

// TakesUndecodable reports true: every mode has the dead-letter table,
// where a record the replica could not decode goes with the reason
// (sinks.DeadLetterer).
func (s *Sink) TakesUndecodable() bool { return true }

// IgnoredFields counts the values of decoded records' fields that no
// column took, in writes that committed (sinks.IgnoredFieldCounter): per
// record, one for each field of its schema that the table has no column
// for (evolve=none) or that is named as a kafka_* column, when the record
// holds a value for it (not null). Raw mode keeps every field: zero.
func (s *Sink) IgnoredFields() int64 { return s.ignoredFields.Load() }

// Retries counts the attempts made again for want of a server: New's while
// it waited for one, and Write's and WriteBlocks' after losing their
// connection.
func (s *Sink) Retries() int64 { return s.retries.Load() }

// Write stores b and the partition's (next, epoch, generation) in one
// transaction; see the package documentation. An error wrapping
// sinks.ErrFenced means a newer owner wrote to the partition: nothing was
// stored, and writing again cannot succeed. A cancelled ctx fails the write
// with an error wrapping ctx's, unless the commit went through already.
// Write is WriteBlocks of one block.
func (s *Sink) Write(ctx context.Context, b *sinks.Block) error {
	return s.WriteBlocks(ctx, []*sinks.Block{b})[0]
}

// WriteBlocks stores blocks of different partitions in one transaction,
// each block together with its partition's (next, epoch, generation) and
// checked against that partition's offsets row exactly as Write checks a
// block; see sinks.BatchWriter and the package documentation. A block
// refused as fenced (an error wrapping sinks.ErrFenced) stores nothing and
// the others commit; a block that Check refuses is left out. An error of
// the transaction (a lost connection past retry_timeout, ctx done, a
// statement that failed) is every block's: nothing of the call is stored.
// The whole call holds one connection from the pool.
func (s *Sink) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	errs := make([]error, len(blocks))
	order := make([]int, 0, len(blocks)) // the blocks to write, by (topic, partition)
	for i, b := range blocks {
		if b == nil {
			errs[i] = errors.New("write: nil block")
			continue
		}
		if err := b.Check(); err != nil {
			errs[i] = fmt.Errorf("write %s: %w", b, err)
			continue
		}
		order = append(order, i)
	}
	// One order for every transaction, so that two of them that lock the
	// same offsets rows (a zombie's and the owner's) cannot deadlock.
	slices.SortFunc(order, func(i, j int) int {
		return cmp.Or(strings.Compare(blocks[i].Topic, blocks[j].Topic), cmp.Compare(blocks[i].Partition, blocks[j].Partition))
	})
	fail := func(err error) []error {
		for _, i := range order {
			errs[i] = fmt.Errorf("write %s: %w", blocks[i], err)
		}
		return errs
	}
	sorted := make([]*sinks.Block, len(order))
	rows := 0
	for k, i := range order {
		sorted[k] = blocks[i]
		rows += len(blocks[i].Records)
		if k > 0 && sorted[k].Topic == sorted[k-1].Topic && sorted[k].Partition == sorted[k-1].Partition {
			return fail(fmt.Errorf("two blocks of %s/%d in one call", sorted[k].Topic, sorted[k].Partition))
		}
	}
	if len(sorted) == 0 {
		return errs
	}

	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return fail(ErrClosed)
	}
	var giveUp time.Time
	retry := backoff.Backoff{Min: retryFirst, Max: retryMax}
	reloaded := false
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		ws, err := s.writeOnce(ctx, sorted)
		switch {
		case err == nil:
			for k, w := range ws {
				if w.fenced != nil {
					errs[order[k]] = fmt.Errorf("write %s: %w", w.b, w.fenced)
					continue
				}
				s.deadLetters.Add(int64(len(w.dead)))
				s.ignored.Add(int64(w.ignored))
				s.ignoredFields.Add(int64(w.ignoredFields))
			}
			return errs
		case ctx.Err() != nil:
			return fail(fmt.Errorf("%w: %w", ctx.Err(), err))
		case !reloaded && s.cfg.mode != Raw && columnGone(err):
			// A column was dropped under the sink's statement: read the
			// table again and try once more at once.
			reloaded = true
			if rerr := s.reload(ctx); rerr != nil {
				return fail(fmt.Errorf("%w (reading the columns again: %w)", err, rerr))
			}
			continue
		case !transient(err):
			return fail(err)
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(s.cfg.retryTimeout)
		}
		wait := retry.Next()
		if time.Now().Add(wait).After(giveUp) {
			return fail(fmt.Errorf("still failing after %d attempts in %s: %w", attempt, s.cfg.retryTimeout, err))
		}
		s.retries.Add(1)
		fields := []zap.Field{zap.Int("attempt", attempt), zap.Error(err)}
		if b := sorted[0]; len(sorted) == 1 {
			fields = append(fields, zap.String("topic", b.Topic), zap.Int("partition", b.Partition), zap.Int64("from", b.From), zap.Int64("next", b.Next))
		} else {
			fields = append(fields, zap.Int("blocks", len(sorted)), zap.Int("rows", rows))
		}
		s.cfg.log.Warn("write lost its connection; retrying", fields...)
		if err := backoff.Sleep(ctx, wait); err != nil {
			return fail(err)
		}
	}
}

// Resume returns the next offset stored for a partition and the generation
// it was written under; ok is false for a partition never written.
func (s *Sink) Resume(ctx context.Context, topic string, partition int) (next, generation int64, ok bool, err error) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return 0, 0, false, fmt.Errorf("resume %s/%d: %w", topic, partition, ErrClosed)
	}
	err = s.pool.QueryRow(ctx, s.sql.resume, s.cfg.group, topic, partition).Scan(&next, &generation)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, 0, false, nil
	case err != nil:
		return 0, 0, false, fmt.Errorf("resume %s/%d from %s: %w", topic, partition, s.cfg.offsets.Sanitize(), err)
	}
	return next, generation, true, nil
}

// Close waits for the writes in flight, then closes the connections; later
// writes fail with ErrClosed. A second Close returns nil.
func (s *Sink) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if !s.closed {
		s.closed = true
		s.pool.Close()
	}
	return nil
}
