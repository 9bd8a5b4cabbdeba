package clickhouse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

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
