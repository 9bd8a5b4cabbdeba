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

// CheckColumnsScope refuses, for a sink's Reader, partitions a table cannot tell apart: without
// kafka_topic (kafka_partition), the offsets of two topics (partitions)
// share one column.
func CheckColumnsScope(ps []sinks.Partition, hasTopic, hasPartition bool, shown, table string) error {
	topics, parts := map[string]bool{}, map[sinks.Partition]bool{}
	for _, p := range ps {
		topics[p.Topic] = true
		parts[p] = true
	}
	if !hasTopic && len(topics) > 1 {
		return fmt.Errorf("%w: %s: table %s has no kafka_topic column, so its rows of the group's %d topics cannot be told apart; audit one topic (--topic T)",
			sinks.ErrUnreadable, shown, table, len(topics))
	}
	if !hasPartition && len(parts) > 1 {
		return fmt.Errorf("%w: %s: table %s has no kafka_partition column, so its rows of %d partitions cannot be told apart; audit one partition (--topic T:P)",
			sinks.ErrUnreadable, shown, table, len(parts))
	}
	return nil
}
