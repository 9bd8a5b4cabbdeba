package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// ReadAll reads back the records a raw-mode sink with this URL stored for
// one partition, ordered by offset: what any reader of the table sees. It
// opens a connection of its own, so it works with no sink open. A partition
// never written has no records.
func ReadAll(ctx context.Context, url, topic string, partition int) ([]sinks.Record, error) {
	c, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	if c.mode != Raw {
		return nil, sinkURL.NotRaw(topic, partition, c.mode)
	}
	conn, err := pgx.Connect(ctx, c.connString)
	if err != nil {
		return nil, fmt.Errorf("read %s/%d: %w", topic, partition, err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT "offset", key, value_bytes, "timestamp", headers FROM `+c.table.Sanitize()+
		` WHERE topic = $1 AND partition = $2 ORDER BY "offset"`, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("read %s/%d from %s: %w", topic, partition, c.table.Sanitize(), err)
	}
	defer rows.Close()
	return sqlsink.Records(rows, fmt.Sprintf("%s/%d from %s", topic, partition, c.table.Sanitize()), func(r *sinks.Record) error {
		var headers []byte
		var at time.Time
		if err := rows.Scan(&r.Offset, &r.Key, &r.Value, &at, &headers); err != nil {
			return err
		}
		r.Time = at.UTC()
		h, err := decodeHeaders(headers)
		if err != nil {
			return fmt.Errorf("offset %d: %w", r.Offset, err)
		}
		r.Headers = h
		return nil
	})
}

// Tables is where a sink URL keeps its rows, for tools that read a sink's
// tables without opening it (offsetkeeper audit). Identifiers are
// sanitized, ready for SQL.
type Tables struct {
	// ConnString is the URL without the sink's own parameters.
	ConnString string
	Mode       Mode
	// Group is group= of the URL, "" when not given.
	Group                       string
	Table, Offsets, DeadLetters string
}

// ParseTables parses a sink URL as New does, without connecting.
func ParseTables(raw string) (Tables, error) {
	c, err := parseURL(raw)
	if err != nil {
		return Tables{}, err
	}
	return Tables{ConnString: c.connString, Mode: c.mode, Group: c.group,
		Table: c.table.Sanitize(), Offsets: c.offsets.Sanitize(), DeadLetters: c.deadLetters.Sanitize()}, nil
}
