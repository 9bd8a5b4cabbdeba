package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/offsetkeeper/offsetkeeper/sinks"
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
		return nil, fmt.Errorf("read %s/%d: %w: mode=%s; ReadAll reads raw tables", topic, partition, ErrURL, c.mode)
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
	var out []sinks.Record
	for rows.Next() {
		var r sinks.Record
		var headers []byte
		var at time.Time
		if err := rows.Scan(&r.Offset, &r.Key, &r.Value, &at, &headers); err != nil {
			return nil, fmt.Errorf("read %s/%d from %s: %w", topic, partition, c.table.Sanitize(), err)
		}
		r.Time = at.UTC()
		if r.Headers, err = decodeHeaders(headers); err != nil {
			return nil, fmt.Errorf("read %s/%d offset %d from %s: %w", topic, partition, r.Offset, c.table.Sanitize(), err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s/%d from %s: %w", topic, partition, c.table.Sanitize(), err)
	}
	return out, nil
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
