package clickhouse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// rowState is columnRow's scratch space, reused from record to record.
type rowState struct {
	builders []colBuilder
	scratch  []column.Interface
	direct   []directFn     // each column's, or nil
	names    map[string]int // the index of each column filled from the JSON
	index    *fieldIndex    // names, for scanFlat
	fields   [][]byte       // each column's field's JSON text; nil when missing
	obj      map[string]json.RawMessage
}

// columnRow appends one record's values to st.builders, which hold n
// rows, or says why it cannot be a row (the builders left at n rows). The value's JSON is read once, into its top-level fields (by
// scanFlat, or encoding/json for a value it does not take), then each
// field as its column needs it.
func (s *Sink) columnRow(b *sinks.Block, r *sinks.Record, st *rowState, n int) string {
	if r.Value == nil {
		return sqlsink.RowReason(r.Value)
	}
	if r.ValueOpaque() {
		return sqlsink.OpaqueValue
	}
	clear(st.fields)
	flat := scanFlat(r.Value, st.index, st.fields)
	if !flat {
		clear(st.fields)
		clear(st.obj)
		if err := json.Unmarshal(r.Value, &st.obj); err != nil || st.obj == nil {
			if reason := sqlsink.RowReason(r.Value); reason != "" {
				return reason
			}
			return "value is not a JSON object: " + err.Error()
		}
		for name, raw := range st.obj {
			if j, ok := st.names[name]; ok {
				st.fields[j] = raw
			}
		}
	}
	for i, c := range s.cols {
		if d := st.direct[i]; d != nil && d(b, r, st.fields[i], flat) {
			continue
		}
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
			if raw := st.fields[i]; raw != nil {
				var f any
				if f, err = decodeField(raw); err == nil {
					v, err = c.conv(f)
				}
			} else {
				v, err = c.conv(nil)
			}
		}
		if err == nil && !st.builders[i].fits(v) {
			err = fmt.Errorf("a %T for this column", v)
		}
		if err == nil && st.scratch[i] != nil {
			err = st.scratch[i].AppendRow(v)
		}
		if err != nil {
			for _, bl := range st.builders[:i] {
				bl.truncate(n)
			}
			return fmt.Sprintf("column %s (%s): %v", c.name, c.typ, err)
		}
		st.builders[i].add(v)
	}
	return ""
}

// decodeField is a field's value as encoding/json decodes it with
// UseNumber: nil, bool, json.Number, string, []any or map[string]any.
func decodeField(raw []byte) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	switch raw[0] {
	case 'n':
		return nil, nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	case '"':
		if plain(raw) {
			return string(raw[1 : len(raw)-1]), nil
		}
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '{', '[':
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		err := dec.Decode(&v)
		return v, err
	}
	return json.Number(raw), nil
}

// plain reports whether a JSON string's text is its contents between the
// quotes: no escapes, and ASCII.
func plain(raw []byte) bool {
	for _, c := range raw[1 : len(raw)-1] {
		if c == '\\' || c >= utf8.RuneSelf || c < ' ' {
			return false
		}
	}
	return true
}
