package sqlsink

import (
	"fmt"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// NotRaw is ReadAll's refusal of a URL whose mode is not raw: only the raw
// table holds whole records.
func (u URL) NotRaw(topic string, partition int, mode fmt.Stringer) error {
	return fmt.Errorf("read %s/%d: %w: mode=%s; ReadAll reads raw tables", topic, partition, u.Err, mode)
}

// Rows are the rows of a query, as pgx and clickhouse-go return them.
type Rows interface {
	Next() bool
	Err() error
}

// Records reads a raw table's rows of one partition into records, each
// filled by scan; what names the rows in errors: orders/3 from "t".
func Records(rows Rows, what string, scan func(*sinks.Record) error) ([]sinks.Record, error) {
	var out []sinks.Record
	for rows.Next() {
		var r sinks.Record
		if err := scan(&r); err != nil {
			return nil, fmt.Errorf("read %s: %w", what, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return out, nil
}
