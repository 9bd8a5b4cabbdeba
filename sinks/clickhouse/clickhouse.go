// Package clickhouse is the sink for URLs clickhouse://...: each block
// becomes one INSERT into a ClickHouse table, carrying a deduplication
// token made of the block's exact range, so that ClickHouse itself drops a
// block inserted again: after a crash between the insert and the etcd
// commit, after a lost answer, or a zombie's late insert of a block a new
// owner replayed. That closes the hole ClickHouse's own Kafka engine
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
//	retry_timeout=DURATION     how long an insert is retried (default 30s; 0 never)
//	compression=lz4|zstd|none  on the wire (default lz4; http: lz4 or none)
//
// The password is the URL's, or password_file's, or else the environment
// variable OFFSETKEEPER_CLICKHOUSE_PASSWORD; two of them at once is an
// error. DB is "default" when the path names none.
//
// # Exactly-once
//
// Each block of a partition is one INSERT with the settings
//
//	insert_deduplicate = 1, async_insert = 0,
//	insert_deduplication_token = 'offsetkeeper/GROUP/TOPIC/PARTITION/GENERATION/FROM-NEXT'
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
package clickhouse

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// ErrClosed is returned by Write and Resume after Close.
var ErrClosed = errors.New("clickhouse sink is closed")

// minWindow is the deduplication window below which New warns.
const minWindow = 1000

// Retry pacing of an insert.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 5 * time.Second
)

// Tiny-block warning: over each window, more inserts than tinyInserts of
// fewer rows than tinyRows on average.
const (
	tinyWindow  = time.Minute
	tinyInserts = 60
	tinyRows    = 1000
)

// Sink writes blocks to ClickHouse. It is safe for concurrent use; the
// blocks of different partitions are inserted side by side, each on a
// connection of its own.
type Sink struct {
	cfg  config
	conn driver.Conn

	cols    []tableColumn // columns mode's
	resumes bool          // the table has the kafka_* columns Resume reads
	dedup   dedupInfo

	// life is held shared by writes and Resume and exclusively by Close, so
	// that Close waits for the writes in flight and none starts after it.
	life   sync.RWMutex
	closed bool

	deadLetters atomic.Int64
	retries     atomic.Int64

	tinyMu      sync.Mutex
	tinyStart   time.Time
	tinyCount   int64
	tinyRowsSum int64
}

var (
	_ sinks.Sink              = (*Sink)(nil)
	_ sinks.Resumer           = (*Sink)(nil)
	_ sinks.IntentKeeper      = (*Sink)(nil)
	_ sinks.Pinger            = (*Sink)(nil)
	_ sinks.DeadLetterCounter = (*Sink)(nil)
)

// New connects to ClickHouse, creates the tables that are missing, checks
// that the table deduplicates (see the package documentation) and, in
// columns mode, reads its columns. ctx bounds only this; the sink's
// lifetime is the caller's, until Close.
func New(ctx context.Context, url string, opts ...Option) (*Sink, error) {
	c, err := parseURL(url)
	if err == nil {
		err = c.finish(opts)
	}
	if err != nil {
		return nil, err
	}
	s, err := connect(c)
	if err != nil {
		return nil, err
	}
	if err := s.setup(ctx); err != nil {
		_ = s.conn.Close()
		return nil, fmt.Errorf("clickhouse sink %s: %w", c.table, err)
	}
	return s, nil
}

// open is a sink of url's connection alone, without its setup: for
// ReadAll. The password comes as for New, without options.
func open(url string) (*Sink, error) {
	c, err := parseURL(url)
	if err == nil {
		// A reader needs no group: the tokens are the writers'.
		err = c.finish([]Option{WithGroup(cmpOr(c.group, "reader"))})
	}
	if err != nil {
		return nil, err
	}
	return connect(c)
}

// connect opens the connection pool of c (no round trip yet).
func connect(c config) (*Sink, error) {
	o := &ch.Options{
		Addr:        c.addrs,
		Auth:        ch.Auth{Database: c.database, Username: c.user, Password: c.password},
		TLS:         c.tls,
		DialTimeout: c.dialTimeout,
		ClientInfo:  ch.ClientInfo{Products: []struct{ Name, Version string }{{Name: "offsetkeeper", Version: "1"}}},
	}
	if c.protocol == HTTP {
		o.Protocol = ch.HTTP
	}
	switch c.compression {
	case LZ4:
		o.Compression = &ch.Compression{Method: ch.CompressionLZ4}
	case ZSTD:
		o.Compression = &ch.Compression{Method: ch.CompressionZSTD}
	}
	conn, err := ch.Open(o)
	if err != nil {
		return nil, fmt.Errorf("clickhouse sink: %w", err)
	}
	return &Sink{cfg: c, conn: conn, tinyStart: time.Now()}, nil
}

func (s *Sink) setup(ctx context.Context) error {
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("connect to %s: %w", s.cfg.addrs[0], err)
	}
	if s.cfg.mode == Raw {
		if err := s.conn.Exec(ctx, createRaw(s.cfg.table)); err != nil {
			return fmt.Errorf("create %s: %w", s.cfg.table, err)
		}
	}
	if err := s.conn.Exec(ctx, createDead(s.cfg.deadLetters)); err != nil {
		return fmt.Errorf("create %s: %w", s.cfg.deadLetters, err)
	}
	if s.cfg.mode == Columns {
		cols, err := readColumns(ctx, s.conn, s.cfg.table)
		if err != nil {
			return err
		}
		s.cols = cols
		have := map[string]bool{}
		for _, c := range cols {
			have[c.name] = true
		}
		s.resumes = have["kafka_topic"] && have["kafka_partition"] && have["kafka_offset"] && have["kafka_generation"]
	} else {
		s.resumes = true
	}
	var err error
	if s.dedup, err = checkDedup(ctx, s.conn, s.cfg.table); err != nil {
		return err
	}
	log := s.cfg.log.With(zap.String("table", s.cfg.table.String()), zap.String("engine", s.dedup.engine),
		zap.Int64("deduplication_window", s.dedup.window), zap.Stringer("mode", s.cfg.mode), zap.Bool("resumes", s.resumes))
	if s.dedup.window <= 0 {
		if !s.cfg.atLeastOnce {
			return s.dedup.refusal(s.cfg.table)
		}
		log.Warn("the table does not deduplicate inserts: at-least-once only (at_least_once=true); a block written again after a crash is duplicated")
	} else {
		if s.dedup.window < minWindow {
			log.Warn("the table's deduplication window is small: a block replayed after more inserts than it holds (all partitions together) is duplicated",
				zap.Int64("advised", DefaultWindow))
		}
		log.Info("clickhouse sink ready: exactly-once by deduplication tokens")
	}
	return nil
}

// Mode is the table mode.
func (s *Sink) Mode() Mode { return s.cfg.mode }

// Deduplicates reports whether the table drops a repeated insert (false
// only with at_least_once=true).
func (s *Sink) Deduplicates() bool { return s.dedup.window > 0 }

// DeadLetters counts the records this sink moved to the dead-letter table.
func (s *Sink) DeadLetters() int64 { return s.deadLetters.Load() }

// Retries counts the inserts made again after a failure.
func (s *Sink) Retries() int64 { return s.retries.Load() }

// NeedsIntents implements sinks.IntentKeeper: always true, since a
// replayed block is dropped only when it comes with the same range.
func (s *Sink) NeedsIntents() bool { return true }

// Token is the insert_deduplication_token of a block written for group.
func Token(group string, b *sinks.Block) string {
	return "offsetkeeper/" + group + "/" + b.Topic + "/" + strconv.Itoa(b.Partition) + "/" +
		strconv.FormatInt(b.Generation, 10) + "/" + strconv.FormatInt(b.From, 10) + "-" + strconv.FormatInt(b.Next, 10)
}

// Write inserts b: its dead letters, if any, then its rows, each one INSERT
// with the block's deduplication token; see the package documentation. An
// insert that fails is retried with the same token for up to
// retry_timeout. A cancelled ctx fails the write with an error wrapping
// ctx's; what was sent may still be in the table, and the block's next
// write is dropped then.
func (s *Sink) Write(ctx context.Context, b *sinks.Block) error {
	if b == nil {
		return errors.New("write: nil block")
	}
	if err := b.Check(); err != nil {
		return fmt.Errorf("write %s: %w", b, err)
	}
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return fmt.Errorf("write %s: %w", b, ErrClosed)
	}
	if len(b.Records) == 0 {
		return nil
	}
	var rows, dead [][]any
	var cols []string
	if s.cfg.mode == Raw {
		rows, cols = rawRows(b), rawColumns
	} else {
		rows, dead = s.columnRows(b)
		cols = make([]string, len(s.cols))
		for i, c := range s.cols {
			cols[i] = c.name
		}
	}
	token := Token(s.cfg.group, b)
	if len(dead) > 0 {
		if err := s.insert(ctx, b, s.cfg.deadLetters, deadColumns, dead, token+"/dead"); err != nil {
			return fmt.Errorf("write %s: dead letters to %s: %w", b, s.cfg.deadLetters, err)
		}
		s.cfg.log.Warn("records set aside in the dead-letter table", zap.String("topic", b.Topic), zap.Int("partition", b.Partition),
			zap.Int64("from", b.From), zap.Int64("next", b.Next), zap.Int("rows", len(dead)), zap.String("table", s.cfg.deadLetters.String()))
	}
	if len(rows) > 0 {
		if err := s.insert(ctx, b, s.cfg.table, cols, rows, token); err != nil {
			return fmt.Errorf("write %s: %w", b, err)
		}
		s.observe(len(rows))
	}
	s.deadLetters.Add(int64(len(dead)))
	return nil
}

// insert sends one INSERT of rows with the token, retrying with backoff
// for up to retry_timeout while the failure is not the rows' own.
func (s *Sink) insert(ctx context.Context, b *sinks.Block, t ident, cols []string, rows [][]any, token string) error {
	var giveUp time.Time
	retry := backoff.Backoff{Min: retryFirst, Max: retryMax}
	for attempt := 1; ; attempt++ {
		err := s.insertOnce(ctx, t, cols, rows, token)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		case !transient(err):
			return err
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(s.cfg.retryTimeout)
		}
		wait := retry.Next()
		if time.Now().Add(wait).After(giveUp) {
			return fmt.Errorf("still failing after %d attempts in %s: %w", attempt, s.cfg.retryTimeout, err)
		}
		s.retries.Add(1)
		s.cfg.log.Warn("insert failed; retrying with the same token", zap.String("topic", b.Topic), zap.Int("partition", b.Partition),
			zap.Int64("from", b.From), zap.Int64("next", b.Next), zap.Int("attempt", attempt), zap.Error(err))
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

func (s *Sink) insertOnce(ctx context.Context, t ident, cols []string, rows [][]any, token string) error {
	ctx = ch.Context(ctx, ch.WithSettings(ch.Settings{
		"insert_deduplicate":         1,
		"insert_deduplication_token": token,
		"async_insert":               0,
	}))
	batch, err := s.conn.PrepareBatch(ctx, insertSQL(t, cols))
	if err != nil {
		return err
	}
	for _, r := range rows {
		if err := batch.Append(r...); err != nil {
			_ = batch.Abort()
			return fmt.Errorf("append a row: %w", err)
		}
	}
	return batch.Send()
}

// transientCodes are ClickHouse's exceptions that a later attempt may not
// meet: timeouts, lost connections, overload, a read-only replica, Keeper.
var transientCodes = map[int32]bool{
	3: true, 159: true, 164: true, 202: true, 203: true, 209: true, 210: true, 241: true, 242: true,
	252: true, 319: true, 425: true, 999: true, 1000: true,
}

// transient reports whether err is worth another attempt: a failure of the
// connection, or an exception in transientCodes; not one about the rows.
func transient(err error) bool {
	var ex *proto.Exception
	if errors.As(err, &ex) {
		return transientCodes[ex.Code]
	}
	var ce *column.ColumnConverterError
	return !errors.As(err, &ce) && !errors.Is(err, ch.ErrBatchInvalid)
}

// observe counts an insert of n rows for the tiny-block warning.
func (s *Sink) observe(n int) {
	s.tinyMu.Lock()
	defer s.tinyMu.Unlock()
	s.tinyCount++
	s.tinyRowsSum += int64(n)
	if since := time.Since(s.tinyStart); since >= tinyWindow {
		if s.tinyCount > tinyInserts*int64(since/tinyWindow) && s.tinyRowsSum < tinyRows*s.tinyCount {
			s.cfg.log.Warn("many small inserts: ClickHouse wants few large ones (too many parts); raise --flush-interval or --max-empty-polls",
				zap.Int64("inserts", s.tinyCount), zap.Int64("rows_per_insert", s.tinyRowsSum/s.tinyCount), zap.Duration("over", since))
		}
		s.tinyStart, s.tinyCount, s.tinyRowsSum = time.Now(), 0, 0
	}
}

// rawRows are the rows of a raw table for b.
func rawRows(b *sinks.Block) [][]any {
	rows := make([][]any, len(b.Records))
	for i, r := range b.Records {
		keys := make([]string, len(r.Headers))
		vals := make([]*string, len(r.Headers))
		for j, h := range r.Headers {
			keys[j] = h.Key
			if h.Value != nil {
				v := string(h.Value)
				vals[j] = &v
			}
		}
		rows[i] = []any{b.Topic, int32(b.Partition), r.Offset, b.Generation, nullable(r.Key), r.Time.UTC(), nullable(r.Value), keys, vals}
	}
	return rows
}

// nullable is a Nullable(String)'s value: nil for nil bytes.
func nullable(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// columnRows converts b's records to the table's columns: the rows, and
// the dead letters of the records that do not convert.
func (s *Sink) columnRows(b *sinks.Block) (rows, dead [][]any) {
	// Each value is also appended to a scratch column of its type, so that
	// a value clickhouse-go would refuse is found before the batch, which
	// one refused row would spoil whole.
	scratch := make([]column.Interface, len(s.cols))
	for i, c := range s.cols {
		col, err := column.Type(c.typ).Column(c.name, &column.ServerContext{Timezone: time.UTC})
		if err == nil {
			scratch[i] = col
		}
	}
	for _, r := range b.Records {
		row, reason := s.columnRow(b, &r, scratch)
		if reason != "" {
			dead = append(dead, []any{b.Topic, int32(b.Partition), r.Offset, b.Generation, nullable(r.Key), r.Time.UTC(), nullable(r.Value), reason})
			continue
		}
		rows = append(rows, row)
	}
	return rows, dead
}

// columnRow is one record's row, or why it cannot be one.
func (s *Sink) columnRow(b *sinks.Block, r *sinks.Record, scratch []column.Interface) ([]any, string) {
	if reason := objectReason(r.Value); reason != "" {
		return nil, reason
	}
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.Value))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return nil, "value is not a JSON object: " + err.Error()
	}
	row := make([]any, len(s.cols))
	for i, c := range s.cols {
		var v any
		var err error
		switch c.name {
		case "kafka_topic":
			v, err = c.conv(b.Topic)
		case "kafka_partition":
			v, err = c.conv(json.Number(strconv.Itoa(b.Partition)))
		case "kafka_offset":
			v, err = c.conv(json.Number(strconv.FormatInt(r.Offset, 10)))
		case "kafka_generation":
			v, err = c.conv(json.Number(strconv.FormatInt(b.Generation, 10)))
		case "kafka_key":
			if r.Key != nil {
				v, err = c.conv(string(r.Key))
			}
		case "kafka_timestamp":
			v, err = c.conv(r.Time.UTC())
		default:
			v, err = c.conv(obj[c.name])
		}
		if err == nil && scratch[i] != nil {
			err = scratch[i].AppendRow(v)
		}
		if err != nil {
			return nil, fmt.Sprintf("column %s (%s): %v", c.name, c.typ, err)
		}
		row[i] = v
	}
	return row, ""
}

// objectReason says why a value cannot fill columns, or "" when it is a
// JSON object.
func objectReason(v []byte) string {
	if v == nil {
		return "value is null (a tombstone): columns mode needs a JSON object"
	}
	if !json.Valid(v) {
		return "value is not JSON"
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

// Resume implements sinks.Resumer: one past the highest offset of the
// partition's highest generation in the table, and that generation (the
// dead-letter table is not read: its rows go in before their block's, so
// they may be there without the block); ok is false for a
// partition never written, or a columns table without kafka_topic,
// kafka_partition, kafka_offset and kafka_generation. The offset may lie
// before the block's Next, when the block's last offsets held no record:
// the replica then reads those offsets again and finds nothing to deliver.
func (s *Sink) Resume(ctx context.Context, topic string, partition int) (next, generation int64, ok bool, err error) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return 0, 0, false, fmt.Errorf("resume %s/%d: %w", topic, partition, ErrClosed)
	}
	if !s.resumes {
		return 0, 0, false, nil
	}
	rows, err := s.conn.Query(ctx, `SELECT toInt64(kafka_generation) AS g, toInt64(max(kafka_offset)) FROM `+s.cfg.table.String()+
		` WHERE kafka_topic = ? AND kafka_partition = ? GROUP BY g ORDER BY g DESC LIMIT 1`, topic, partition)
	if err != nil {
		return 0, 0, false, fmt.Errorf("resume %s/%d from %s: %w", topic, partition, s.cfg.table, err)
	}
	defer rows.Close()
	var last int64
	for rows.Next() {
		if err := rows.Scan(&generation, &last); err != nil {
			return 0, 0, false, fmt.Errorf("resume %s/%d from %s: %w", topic, partition, s.cfg.table, err)
		}
		ok = true
	}
	if err := rows.Err(); err != nil {
		return 0, 0, false, fmt.Errorf("resume %s/%d from %s: %w", topic, partition, s.cfg.table, err)
	}
	if !ok {
		return 0, 0, false, nil
	}
	return last + 1, generation, true, nil
}

// Ping implements sinks.Pinger: the server answers.
func (s *Sink) Ping(ctx context.Context) error {
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("ping clickhouse %s: %w", s.cfg.addrs[0], err)
	}
	return nil
}

// Close waits for the writes in flight, then closes the connections; later
// writes fail with ErrClosed. A second Close returns nil.
func (s *Sink) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.conn.Close(); err != nil {
		return fmt.Errorf("close clickhouse sink: %w", err)
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
