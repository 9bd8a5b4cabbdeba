package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// ReadAll reads back the records a raw-mode sink with this URL stored for
// one partition, ordered by offset, copies included (a table that does not
// deduplicate may hold an offset twice): what any reader of the table sees.
// It opens a connection of its own, so it works with no sink open. A
// partition never written has no records.
func ReadAll(ctx context.Context, url, topic string, partition int) ([]sinks.Record, error) {
	s, err := open(url)
	if err != nil {
		return nil, err
	}
	defer s.conn.Close()
	if s.cfg.mode != Raw {
		return nil, sinkURL.NotRaw(topic, partition, s.cfg.mode)
	}
	rows, err := s.conn.Query(ctx, `SELECT kafka_offset, kafka_key, value, kafka_timestamp, header_keys, header_values FROM `+
		s.cfg.table.String()+` WHERE kafka_topic = ? AND kafka_partition = ? ORDER BY kafka_offset`, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("read %s/%d from %s: %w", topic, partition, s.cfg.table, err)
	}
	defer rows.Close()
	return sqlsink.Records(rows, fmt.Sprintf("%s/%d from %s", topic, partition, s.cfg.table), func(r *sinks.Record) error {
		var key, value *string
		var at time.Time
		var hk []string
		var hv []*string
		if err := rows.Scan(&r.Offset, &key, &value, &at, &hk, &hv); err != nil {
			return err
		}
		if key != nil {
			r.Key = []byte(*key)
		}
		if value != nil {
			r.Value = []byte(*value)
		}
		r.Time = at.UTC()
		for i, k := range hk {
			h := sinks.Header{Key: k}
			if hv[i] != nil {
				h.Value = []byte(*hv[i])
			}
			r.Headers = append(r.Headers, h)
		}
		return nil
	})
}

// OffsetReader reads which offsets a sink URL's table holds, for tools that
// audit a sink (offsetkeeper audit) without opening it for writing: no
// table is created. Close it when done.
type OffsetReader struct {
	s                      *Sink
	hasTopic, hasPartition bool
	hasDead                bool
}

// ErrNoTable is returned by OpenOffsetReader for a table that is not
// there, and ErrNoOffsetColumn for one without kafka_offset.
var (
	ErrNoTable        = errors.New("table does not exist")
	ErrNoOffsetColumn = errors.New("table has no kafka_offset column")
)

// OpenOffsetReader connects with the URL and checks its table.
func OpenOffsetReader(ctx context.Context, url string) (*OffsetReader, error) {
	s, err := open(url)
	if err != nil {
		return nil, err
	}
	r := &OffsetReader{s: s}
	if err := r.inspect(ctx); err != nil {
		_ = s.conn.Close()
		return nil, err
	}
	return r, nil
}

func (r *OffsetReader) inspect(ctx context.Context) error {
	t := r.s.cfg.table
	have, err := columnNames(ctx, r.s.conn, t)
	if err != nil {
		return err
	}
	switch {
	case len(have) == 0:
		return fmt.Errorf("%s: %w", t, ErrNoTable)
	case !have["kafka_offset"]:
		return fmt.Errorf("%s: %w", t, ErrNoOffsetColumn)
	}
	r.hasTopic, r.hasPartition = have["kafka_topic"], have["kafka_partition"]
	dead, err := columnNames(ctx, r.s.conn, r.s.cfg.deadLetters)
	if err != nil {
		return err
	}
	r.hasDead = dead["kafka_offset"]
	return nil
}

// columnNames is the set of t's columns, empty when there is no table t.
func columnNames(ctx context.Context, conn driver.Conn, t ident) (map[string]bool, error) {
	rows, err := conn.Query(ctx, `SELECT name FROM system.columns WHERE database = ? AND table = ?`, t.db, t.name)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", t, err)
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("read the columns of %s: %w", t, err)
		}
		have[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", t, err)
	}
	return have, nil
}

// Table is the table, quoted.
func (r *OffsetReader) Table() string { return r.s.cfg.table.String() }

// HasTopic and HasPartition tell whether the table has kafka_topic and
// kafka_partition, without which its rows of several topics (partitions)
// cannot be told apart.
func (r *OffsetReader) HasTopic() bool     { return r.hasTopic }
func (r *OffsetReader) HasPartition() bool { return r.hasPartition }

// Offsets streams the offsets the table holds of one partition, rising,
// each with its count of rows (copies), the dead-letter table's rows
// counted as held: a record set aside is not lost. The count is of the rows
// as they are now: copies a ReplacingMergeTree has not merged yet count.
func (r *OffsetReader) Offsets(ctx context.Context, topic string, partition int) (*OffsetRows, error) {
	var where []string
	var args []any
	if r.hasTopic {
		where, args = append(where, "kafka_topic = ?"), append(args, topic)
	}
	if r.hasPartition {
		where, args = append(where, "kafka_partition = ?"), append(args, partition)
	}
	q := `SELECT toInt64(kafka_offset) AS o FROM ` + r.s.cfg.table.String()
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	if r.hasDead {
		q += ` UNION ALL SELECT toInt64(kafka_offset) FROM ` + r.s.cfg.deadLetters.String() + ` FINAL WHERE kafka_topic = ? AND kafka_partition = ?`
		args = append(args, topic, partition)
	}
	rows, err := r.s.conn.Query(ctx, `SELECT o, toInt64(count()) FROM (`+q+`) GROUP BY o ORDER BY o`, args...)
	if err != nil {
		return nil, fmt.Errorf("read the offsets of %s/%d from %s: %w", topic, partition, r.s.cfg.table, err)
	}
	return &OffsetRows{rows: rows}, nil
}

// Close ends the connections.
func (r *OffsetReader) Close() error { return r.s.conn.Close() }

// OffsetRows is what Offsets streams.
type OffsetRows struct{ rows driver.Rows }

// Next returns the next offset and its copies; ok is false at the end.
func (o *OffsetRows) Next() (offset, copies int64, ok bool, err error) {
	if !o.rows.Next() {
		return 0, 0, false, o.rows.Err()
	}
	if err := o.rows.Scan(&offset, &copies); err != nil {
		return 0, 0, false, err
	}
	return offset, copies, true, nil
}

// Close ends the rows.
func (o *OffsetRows) Close() error { return o.rows.Close() }
