package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
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
		return nil, fmt.Errorf("read %s/%d: %w: mode=%s; ReadAll reads raw tables", topic, partition, ErrURL, s.cfg.mode)
	}
	rows, err := s.conn.Query(ctx, `SELECT kafka_offset, kafka_key, value, kafka_timestamp, header_keys, header_values FROM `+
		s.cfg.table.String()+` WHERE kafka_topic = ? AND kafka_partition = ? ORDER BY kafka_offset`, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("read %s/%d from %s: %w", topic, partition, s.cfg.table, err)
	}
	defer rows.Close()
	var out []sinks.Record
	for rows.Next() {
		var r sinks.Record
		var key, value *string
		var at time.Time
		var hk []string
		var hv []*string
		if err := rows.Scan(&r.Offset, &key, &value, &at, &hk, &hv); err != nil {
			return nil, fmt.Errorf("read %s/%d from %s: %w", topic, partition, s.cfg.table, err)
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
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s/%d from %s: %w", topic, partition, s.cfg.table, err)
	}
	return out, nil
}
