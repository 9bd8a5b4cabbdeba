package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/internal/secure"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
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
	opts *ch.Options // what conn was opened with

	// cols are columns mode's columns, under colsMu: a Write reads them
	// shared for its whole insert, evolve (evolve=add-columns) replaces
	// them; evolved are the value schemas whose fields it looked at.
	colsMu  sync.RWMutex
	cols    []tableColumn
	evolved map[int]bool
	ddl     atomic.Int64
	resumes bool // the table has the kafka_* columns Resume reads
	// dedupSetting: the server knows deduplicate_insert (26.2 and later),
	// which the inserts set too.
	dedupSetting bool
	dedup        dedupInfo

	// life is held shared by writes and Resume and exclusively by Close, so
	// that Close waits for the writes in flight and none starts after it.
	life   sync.RWMutex
	closed bool

	deadLetters atomic.Int64
	retries     atomic.Int64
	reinserts   atomic.Int64
	incomplete  atomic.Int64
	unchecked   atomic.Int64

	// Where a block's insert is checked (see target), and the partitions
	// whose next block is checked whatever its insert's outcome.
	mainTarget, deadTarget target
	suspectMu              sync.Mutex
	suspect                map[partitionKey]bool

	// combines: the blocks of a round go in together (InsertsRounds).
	combines bool

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

// New connects to ClickHouse, checks the tables that exist against the
// mode (refusing one it cannot use with an error wrapping ErrTableShape,
// before anything is created) and, in columns mode, reads the table's
// columns; creates the tables that are missing, and checks that the table
// deduplicates (see the package documentation). ctx bounds only this; the
// sink's lifetime is the caller's, until Close.
func New(ctx context.Context, url string, opts ...Option) (*Sink, error) {
	s, err := connect(url, opts)
	if err != nil {
		return nil, err
	}
	retry := sqlsink.Setup{Sink: "clickhouse", Timeout: s.cfg.retryTimeout, Min: retryFirst, Max: retryMax,
		Unreachable: unreachable, Log: s.cfg.log}
	if err := retry.Run(ctx, s.setup); err != nil {
		_ = s.conn.Close()
		return nil, fmt.Errorf("clickhouse sink %s: %w", s.cfg.table, err)
	}
	return s, nil
}

// unreachable reports whether New's setup failed for want of a server to
// talk to, which waiting can mend (see sqlsink.Setup): a connection
// refused, reset, lost or timed out; not a TLS handshake that failed.
func unreachable(err error) bool { return !secure.HandshakeFailed(err) && backoff.ConnectionLost(err) }

// open is a sink of url's connection alone, without its setup: for
// ReadAll. The password comes as for New, without options.
func open(url string) (*Sink, error) {
	if IsSharded(url) {
		// One shard's table holds only its partitions.
		return nil, fmt.Errorf("%w: the URL names several shards (%s=): read the whole through a Distributed table over them, "+
			"or one shard's table by a URL without %s=", ErrURL, paramShards, paramShards)
	}
	// A reader needs no group: the tokens are the writers'.
	return connect(url, []Option{func(c *config) { c.optGroup = cmpOr(c.group, "reader") }})
}

// connect reads url and opts and opens the connection pool they configure
// (no round trip yet).
func connect(url string, opts []Option) (*Sink, error) {
	c, err := parseURL(url)
	if err == nil {
		err = c.finish(opts)
	}
	if err != nil {
		return nil, err
	}
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
	// Every query of the sink reads the tables as they are, whatever the
	// user's profile says of the query cache: a cached answer from before
	// an insert would hide its rows (and a profile that caches every query
	// fails the sink's reads of system tables).
	o.Settings = ch.Settings{"use_query_cache": 0}
	conn, err := ch.Open(o)
	if err != nil {
		return nil, fmt.Errorf("clickhouse sink: %w", err)
	}
	return &Sink{cfg: c, conn: conn, opts: o, tinyStart: time.Now(), evolved: map[int]bool{}}, nil
}

// unknownSetting is ClickHouse's UNKNOWN_SETTING exception code.
const unknownSetting = 115

func (s *Sink) setup(ctx context.Context) error {
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("connect to %s: %w", s.cfg.addrs[0], err)
	}
	var ex *proto.Exception
	if err := s.conn.Exec(ctx, `SELECT 1`); errors.As(err, &ex) && ex.Code == unknownSetting && s.opts.Settings != nil {
		// A server before 23.1 has no query cache, nor the setting.
		s.opts.Settings = nil
		conn, err := ch.Open(s.opts)
		if err != nil {
			return fmt.Errorf("clickhouse sink: %w", err)
		}
		_ = s.conn.Close()
		s.conn = conn
	} else if err != nil {
		return fmt.Errorf("connect to %s: %w", s.cfg.addrs[0], err)
	}
	// The tables that exist are checked before any is made, so that a
	// refused start changes nothing (ErrTableShape, ErrNoDeduplication); in
	// columns mode this reads the table's columns. The raw table, when it
	// is made, is made deduplicating, as is a columns table made for
	// evolve=add-columns, which has no shape to refuse.
	if s.cfg.mode == Columns && s.cfg.evolve == AddColumns {
		if err := s.createMissing(ctx); err != nil {
			return err
		}
	}
	if err := s.checkTables(ctx); err != nil {
		return err
	}
	if s.cfg.mode == Raw {
		if err := s.conn.Exec(ctx, createRaw(s.cfg.table)); err != nil {
			return fmt.Errorf("create %s: %w", s.cfg.table, err)
		}
		s.resumes = true
	}
	var err error
	if s.dedup, err = checkDedup(ctx, s.conn, s.cfg.table); err != nil {
		return err
	}
	if s.dedup.window <= 0 && !s.cfg.atLeastOnce {
		return s.dedup.refusal(s.cfg.table)
	}
	if len(s.cfg.addrs) > 1 && !s.dedup.replicated {
		// Each server keeps its own copy of the table and its own
		// deduplication log: a retry, a check or a resume that reaches
		// another server than the insert did sees nothing of it.
		return fmt.Errorf("%w: %s is a %s, kept apart by each server: the URL names %d hosts (%s), and an insert retried, "+
			"checked or resumed on another host than the one it reached would be doubled or lost; name one host, or use a "+
			"Replicated (or Shared) table, whose replicas share their deduplication", ErrTableShape, s.cfg.table, s.dedup.engine,
			len(s.cfg.addrs), strings.Join(s.cfg.addrs, ", "))
	}
	if err := s.checkDeduplicate(ctx); err != nil {
		return err
	}
	if err := s.checkRowPolicies(ctx); err != nil {
		return err
	}
	if err := s.conn.Exec(ctx, createDead(s.cfg.deadLetters)); err != nil {
		return fmt.Errorf("create %s: %w", s.cfg.deadLetters, err)
	}
	// Resume trusts the highest offset in the table because a block is one
	// part, inserted whole or not at all. In a table with a partition key a
	// block spanning several of its partitions is several parts: a crash
	// between them would leave rows below that offset missing. Such a table
	// resumes from etcd alone, and the intent's replay, with its token,
	// completes the block instead.
	// Nor does one whose merges may fold or rewrite kafka_offset: a
	// SummingMergeTree sums it with the other numeric columns outside its
	// key, a Collapsing one deletes rows.
	s.resumes = s.resumes && !s.dedup.partitioned && !s.dedup.folds()
	if err := s.planChecks(ctx); err != nil {
		return err
	}
	// A round's block written again is checked for its rows, which only
	// a table that can be checked allows; so is its dead letters'.
	s.combines = s.dedup.window > 0 && s.mainTarget.check && s.deadTarget.check
	log := s.cfg.log.With(zap.String("table", s.cfg.table.String()), zap.String("engine", s.dedup.engine),
		zap.Int64("deduplication_window", s.dedup.window), zap.Stringer("mode", s.cfg.mode), zap.Bool("resumes", s.resumes),
		zap.Bool("inserts_rounds", s.combines), zap.Duration("insert_interval", s.cfg.insertInterval))
	if s.dedup.window > 0 && !s.dedup.replicated && !s.mainTarget.check {
		log.Warn("the sink cannot check that a block ClickHouse drops as a duplicate is in the table (merges of this engine fold rows " +
			"of several offsets, or the table lacks kafka_topic, kafka_partition and kafka_offset): a server killed between " +
			"recording an insert and committing its part loses that block; ORDER BY (kafka_topic, kafka_partition, kafka_offset, ...) " +
			"lets the sink check it")
	}
	s.warnDurability(ctx, log)
	if s.dedup.window <= 0 {
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

// TakesUndecodable implements sinks.DeadLetterer: records the replica
// could not decode go to the dead-letter table, in either mode.
func (s *Sink) TakesUndecodable() bool { return true }

// undecodable returns b without the records the replica could not decode
// (b itself when there are none), and their dead letters.
func undecodable(b *sinks.Block) (*sinks.Block, rowList) {
	var dead rowList
	var kept []sinks.Record
	for i := range b.Records {
		r := &b.Records[i]
		if r.Decoded == nil || r.Decoded.Err == "" {
			if dead != nil {
				kept = append(kept, *r)
			}
			continue
		}
		if dead == nil {
			kept = append(make([]sinks.Record, 0, len(b.Records)-1), b.Records[:i]...)
		}
		dead = append(dead, []any{b.Topic, int32(b.Partition), r.Offset, b.Generation, nullable(r.Key), r.Time.UTC(), nullable(r.Value), r.Decoded.Err})
	}
	if dead == nil {
		return b, nil
	}
	c := *b
	c.Records = kept
	return &c, dead
}

// NeedsIntents implements sinks.IntentKeeper: always true, since a
// replayed block is dropped only when it comes with the same range.
func (s *Sink) NeedsIntents() bool { return true }

// Token is the insert_deduplication_token of a block written for group
// alone, outside a round.
func Token(group string, b *sinks.Block) string {
	return "offsetkeeper/" + group + "/" + b.Topic + "/" + strconv.Itoa(b.Partition) + "/" +
		strconv.FormatInt(b.Generation, 10) + "/" + strconv.FormatInt(b.From, 10) + "-" + strconv.FormatInt(b.Next, 10)
}

// Write inserts b: its dead letters, if any, then its rows, each one INSERT
// with the block's deduplication token; see the package documentation. An
// insert that fails is retried with the same token for up to
// retry_timeout. A cancelled ctx fails the write with an error wrapping
// ctx's; what was sent may still be in the table, and the block's next
// write is dropped then. An insert that succeeded only on a retry, and a
// partition's first block after Resume or a failed Write, is checked to be
// in the table, and inserted again with a new token if it is not (see
// target). A block with a Round goes in under its round's token where the
// sink inserts rounds (WriteBlocks): the blocks of one round must come in
// one WriteBlocks call, as the replica sends them.
func (s *Sink) Write(ctx context.Context, b *sinks.Block) (err error) {
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
	return s.writeOne(ctx, b)
}

// writeOne is Write of a checked block, the sink open.
func (s *Sink) writeOne(ctx context.Context, b *sinks.Block) (err error) {
	if len(b.Records) == 0 {
		return nil
	}
	if s.cfg.mode == Columns && s.cfg.evolve == AddColumns {
		if err := s.evolve(ctx, b); err != nil {
			return fmt.Errorf("write %s: %w", b, err)
		}
	}
	// The columns stay as they are for the whole insert, its checks and
	// retries included.
	s.colsMu.RLock()
	defer s.colsMu.RUnlock()
	suspect := s.takeSuspect(b.Topic, b.Partition)
	defer func() {
		if err != nil {
			// The block is written again: its token may be known.
			s.suspectNext(b.Topic, b.Partition)
		}
	}()
	p := s.prepare(b)
	token := s.token(b)
	if len(p.dead) > 0 {
		if err := s.insertChecked(ctx, p.b, s.deadTarget, deadColumns, p.dead, token+"/dead", suspect, p.deadOffsets,
			p.deadSubset); err != nil {
			return fmt.Errorf("write %s: dead letters to %s: %w", b, s.cfg.deadLetters, err)
		}
		s.saidDead(p)
	}
	if p.rows.count() > 0 {
		if err := s.insertChecked(ctx, p.b, s.mainTarget, p.cols, p.rows, token, suspect, p.wanted, p.subset); err != nil {
			return fmt.Errorf("write %s: %w", b, err)
		}
		s.observe(p.rows.count())
	}
	s.deadLetters.Add(int64(len(p.dead)))
	b.NoteSetAside(len(p.dead))
	return nil
}

// prepared is a block made rows: its rows for the table and its dead
// letters, with what checking their inserts needs.
type prepared struct {
	b    *sinks.Block // without the records the replica could not decode
	rows *columns
	cols []string
	dead rowList
	// deadOffsets and wanted are the offsets of dead and of rows, rising;
	// subset and deadSubset make the rows of some of them (ensureLanded).
	deadOffsets, wanted []int64
	subset, deadSubset  func(offsets []int64) insertRows
}

// prepare makes b rows, under colsMu.
func (s *Sink) prepare(b *sinks.Block) *prepared {
	p := &prepared{}
	p.b, p.dead = undecodable(b)
	b = p.b
	// The offsets of the rows, and the rows of some of them, for an
	// insert's check (ensureLanded).
	p.subset = func(offs []int64) insertRows { return rawRows(only(b, offs)) }
	if s.cfg.mode == Raw {
		p.rows, p.cols = rawRows(b), rawColumns
	} else {
		var more rowList
		p.rows, more = s.columnRows(b)
		p.dead = append(p.dead, more...)
		p.cols = make([]string, len(s.cols))
		for i, c := range s.cols {
			p.cols[i] = c.name
		}
		p.subset = func(offs []int64) insertRows {
			r, _ := s.columnRows(only(b, offs))
			return r
		}
	}
	p.deadOffsets = p.dead.offsets()
	p.deadSubset = func(offs []int64) insertRows { return p.dead.only(offs) }
	p.wanted = make([]int64, 0, len(b.Records))
	for _, r := range b.Records {
		if _, isDead := slices.BinarySearch(p.deadOffsets, r.Offset); !isDead {
			p.wanted = append(p.wanted, r.Offset)
		}
	}
	return p
}

// saidDead logs the dead letters of a block inserted.
func (s *Sink) saidDead(p *prepared) {
	s.cfg.log.Warn("records set aside in the dead-letter table", zap.String("topic", p.b.Topic), zap.Int("partition", p.b.Partition),
		zap.Int64("from", p.b.From), zap.Int64("next", p.b.Next), zap.Int("rows", len(p.dead)), zap.String("table", s.cfg.deadLetters.String()))
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
	// A new owner starts here: its first block may be the previous
	// owner's, replayed with a token the server knows.
	s.suspectNext(topic, partition)
	if !s.resumes {
		return 0, 0, false, nil
	}
	rows, err := s.conn.Query(ctx, `SELECT toInt64(kafka_generation) AS g, toInt64(max(kafka_offset)) FROM `+s.cfg.table.String()+
		` WHERE kafka_topic = ? AND kafka_partition = ? GROUP BY g ORDER BY g DESC LIMIT 1 SETTINGS use_query_cache = 0`, topic, partition)
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
