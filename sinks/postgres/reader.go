package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// pgSink reads a postgres:// sink's table. Raw mode: the (topic, partition,
// "offset") keys, a primary key, so an offset is never held twice there,
// and each row's key, value_bytes and timestamp, the record as Kafka had
// it, summed. Columns and upsert modes: the kafka_offset column, counted,
// together with the dead-letter table's offsets (a record set aside there
// is held, not lost); kafka_topic and kafka_partition narrow it when the
// table has them. Their rows hold fields of the value, not the record:
// they are not compared.
type pgSink struct {
	conn                    *pgx.Conn
	t                       Tables
	group                   string
	shown                   string
	hasTopic, hasPartition  bool
	hasDeadLetters, hasOffs bool
}

func openPostgresSink(ctx context.Context, raw, shown, group string) (*pgSink, error) {
	t, err := ParseTables(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", sinks.ErrUnreadable, shown, err)
	}
	if t.Group != "" {
		group = t.Group
	}
	conn, err := pgx.Connect(ctx, t.ConnString)
	if err != nil {
		return nil, fmt.Errorf("audit %s: connect: %w", shown, err)
	}
	s := &pgSink{conn: conn, t: t, group: group, shown: shown}
	if err := s.inspect(ctx); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return s, nil
}

// exists tells whether the sanitized table name names a table.
func (s *pgSink) exists(ctx context.Context, table string) (bool, error) {
	var ok bool
	if err := s.conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil {
		return false, fmt.Errorf("audit %s: look up table %s: %w", s.shown, table, err)
	}
	return ok, nil
}

// inspect checks that the table is there and has what the mode reads.
func (s *pgSink) inspect(ctx context.Context) error {
	ok, err := s.exists(ctx, s.t.Table)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s: table %s does not exist", sinks.ErrUnreadable, s.shown, s.t.Table)
	}
	if s.hasOffs, err = s.exists(ctx, s.t.Offsets); err != nil {
		return err
	}
	if s.t.Mode == Raw {
		s.hasTopic, s.hasPartition = true, true
		return nil
	}
	if s.hasDeadLetters, err = s.exists(ctx, s.t.DeadLetters); err != nil {
		return err
	}
	rows, err := s.conn.Query(ctx, `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, s.t.Table)
	if err != nil {
		return fmt.Errorf("audit %s: columns of %s: %w", s.shown, s.t.Table, err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("audit %s: columns of %s: %w", s.shown, s.t.Table, err)
	}
	if !slices.Contains(cols, "kafka_offset") {
		return fmt.Errorf("%w: %s: table %s has no kafka_offset column (mode=%s): nothing says which records it holds; add one (bigint), which the sink fills",
			sinks.ErrUnreadable, s.shown, s.t.Table, s.t.Mode)
	}
	s.hasTopic, s.hasPartition = slices.Contains(cols, "kafka_topic"), slices.Contains(cols, "kafka_partition")
	return nil
}

func (s *pgSink) Describe() string { return s.shown }

func (s *pgSink) Capabilities() sinks.Capabilities {
	// Upsert keeps one row per key: an older record of a key is rightly
	// gone, so a record absent from the table is not known to be lost.
	c := sinks.Capabilities{Missing: s.t.Mode != Upsert, Duplicates: s.t.Mode != Raw, Records: s.t.Mode == Raw}
	switch s.t.Mode {
	case Columns:
		c.RecordsNote = "a columns table holds fields of each value, not the record's key, value and timestamp as Kafka had them"
	case Upsert:
		c.RecordsNote = "an upsert table holds the last value of each key, not each record as Kafka had it"
	}
	return c
}

func (s *pgSink) CheckScope(ps []sinks.Partition) error {
	return sqlsink.CheckColumnsScope(ps, s.hasTopic, s.hasPartition, s.shown, s.t.Table)
}

// SinkNext is the next offset the sink's offsets table holds for the
// partition: the sink commits a block and its offset together, before etcd
// does, so offsets up to it are in flight, not wrong.
func (s *pgSink) SinkNext(ctx context.Context, topic string, partition int) (int64, bool, error) {
	if !s.hasOffs {
		return 0, false, nil
	}
	var next int64
	err := s.conn.QueryRow(ctx, `SELECT next FROM `+s.t.Offsets+` WHERE "group" = $1 AND topic = $2 AND partition = $3`,
		s.group, topic, partition).Scan(&next)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("audit %s: read %s of %s/%d: %w", s.shown, s.t.Offsets, topic, partition, err)
	}
	return next, true, nil
}

func (s *pgSink) Offsets(ctx context.Context, topic string, partition int) (sinks.Stream, error) {
	if s.t.Mode == Raw {
		rows, err := s.conn.Query(ctx, `SELECT "offset", key, value_bytes, "timestamp" FROM `+s.t.Table+
			` WHERE topic = $1 AND partition = $2 ORDER BY "offset"`, topic, partition)
		if err != nil {
			return nil, fmt.Errorf("audit %s: read %s of %s/%d: %w", s.shown, s.t.Table, topic, partition, err)
		}
		return &pgRawStream{rows: rows}, nil
	}
	var args []any
	var where []string
	if s.hasTopic {
		args = append(args, topic)
		where = append(where, fmt.Sprintf("kafka_topic = $%d", len(args)))
	}
	if s.hasPartition {
		args = append(args, partition)
		where = append(where, fmt.Sprintf("kafka_partition = $%d", len(args)))
	}
	where = append(where, "kafka_offset IS NOT NULL")
	q := `SELECT kafka_offset AS o, false AS dead FROM ` + s.t.Table + ` WHERE ` + strings.Join(where, " AND ")
	if s.hasDeadLetters {
		args = append(args, topic, partition)
		q += fmt.Sprintf(` UNION ALL SELECT "offset", true FROM %s WHERE topic = $%d AND partition = $%d`, s.t.DeadLetters, len(args)-1, len(args))
	}
	q = `SELECT o, count(*), count(*) FILTER (WHERE dead) FROM (` + q + `) s GROUP BY o ORDER BY o`
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("audit %s: read %s of %s/%d: %w", s.shown, s.t.Table, topic, partition, err)
	}
	return &pgStream{rows: rows}, nil
}

func (s *pgSink) Close() error { return s.conn.Close(context.Background()) }

// pgStream streams the rows of (offset, copies, dead letters), as pgx
// reads them off the wire.
type pgStream struct{ rows pgx.Rows }

func (s *pgStream) Next(context.Context) (sinks.Entry, bool, error) {
	if !s.rows.Next() {
		return sinks.Entry{}, false, s.rows.Err()
	}
	var e sinks.Entry
	if err := s.rows.Scan(&e.Offset, &e.Copies, &e.DeadLetters); err != nil {
		return sinks.Entry{}, false, err
	}
	return e, true, nil
}

func (s *pgStream) Close() error { s.rows.Close(); return s.rows.Err() }

// pgRawStream streams a raw table's rows, each record summed as it comes
// off the wire.
type pgRawStream struct{ rows pgx.Rows }

func (s *pgRawStream) Next(context.Context) (sinks.Entry, bool, error) {
	if !s.rows.Next() {
		return sinks.Entry{}, false, s.rows.Err()
	}
	var off int64
	var key, value []byte
	var at time.Time
	if err := s.rows.Scan(&off, &key, &value, &at); err != nil {
		return sinks.Entry{}, false, err
	}
	return sinks.Entry{Offset: off, Copies: 1, Sum: sinks.Checksum(key, value, at), Summed: true}, true, nil
}

func (s *pgRawStream) Close() error { s.rows.Close(); return s.rows.Err() }
