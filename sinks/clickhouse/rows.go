package clickhouse

import (
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// columns are a block's values column by column, each appended to its
// batch column at once (clickhouse-go's columnar Append).
type columns struct {
	n    int // rows
	cols []appender
}

func (c *columns) count() int { return c.n }

// fill appends the columns to batch.
func (c *columns) fill(batch driver.Batch) error {
	for i, col := range c.cols {
		if err := col.appendTo(batch.Column(i)); err != nil {
			return fmt.Errorf("append column %d: %w", i, err)
		}
	}
	return nil
}

// rowList is rows appended one by one: the dead letters'.
type rowList [][]any

func (l rowList) count() int { return len(l) }

// deadOffset is where a dead-letter row holds its record's offset
// (deadColumns).
const deadOffset = 2

// offsets returns the offsets of the dead-letter rows, rising.
func (l rowList) offsets() []int64 {
	out := make([]int64, len(l))
	for i, r := range l {
		out[i] = r[deadOffset].(int64)
	}
	slices.Sort(out)
	return out
}

// only returns the dead-letter rows of the given offsets (rising).
func (l rowList) only(offs []int64) rowList {
	var out rowList
	for _, r := range l {
		if _, ok := slices.BinarySearch(offs, r[deadOffset].(int64)); ok {
			out = append(out, r)
		}
	}
	return out
}

// only returns b with the records of the given offsets (rising) alone.
func only(b *sinks.Block, offs []int64) *sinks.Block {
	c := *b
	c.Records = nil
	for _, r := range b.Records {
		if _, ok := slices.BinarySearch(offs, r.Offset); ok {
			c.Records = append(c.Records, r)
		}
	}
	return &c
}

func (l rowList) fill(batch driver.Batch) error {
	for _, r := range l {
		if err := batch.Append(r...); err != nil {
			return fmt.Errorf("append a row: %w", err)
		}
	}
	return nil
}

// An appender appends a column's values to a batch column.
type appender interface {
	appendTo(c driver.BatchColumn) error
}

// A colBuilder gathers one column's values.
type colBuilder interface {
	// add appends a converter's value (nil for the column's zero or NULL).
	add(v any)
	// fits says whether add takes v: a converter's value is of the
	// column's Go type, or nil.
	fits(v any) bool
	// truncate drops the values after the first n.
	truncate(n int)
	appender
}

// sliceOf is a column of Go type T, nil adding T's zero.
type sliceOf[T any] []T

func (s *sliceOf[T]) add(v any) {
	x, _ := v.(T)
	*s = append(*s, x)
}

func (s *sliceOf[T]) fits(v any) bool {
	_, ok := v.(T)
	return ok || v == nil
}

func (s *sliceOf[T]) truncate(n int) { *s = (*s)[:n] }

func (s *sliceOf[T]) appendTo(c driver.BatchColumn) error { return c.Append([]T(*s)) }

// ptrsOf is a Nullable column of Go type T.
type ptrsOf[T any] []*T

func (s *ptrsOf[T]) add(v any) {
	x, ok := v.(T)
	if !ok {
		*s = append(*s, nil)
		return
	}
	*s = append(*s, &x)
}

func (s *ptrsOf[T]) fits(v any) bool {
	_, ok := v.(T)
	return ok || v == nil
}

func (s *ptrsOf[T]) truncate(n int) { *s = (*s)[:n] }

func (s *ptrsOf[T]) appendTo(c driver.BatchColumn) error { return c.Append([]*T(*s)) }

// eachOf is a column of Go type T appended value by value: for the types
// whose slices clickhouse-go takes by reflection, value by value, but
// their values without (an Array's plain arrays, a LowCardinality's).
type eachOf[T any] []T

func (s *eachOf[T]) appendTo(c driver.BatchColumn) error {
	for _, v := range *s {
		if err := c.AppendRow(v); err != nil {
			return err
		}
	}
	return nil
}

// anyOf is a column of another type, appended value by value.
type anyOf []any

func (s *anyOf) add(v any)      { *s = append(*s, v) }
func (s *anyOf) fits(any) bool  { return true }
func (s *anyOf) truncate(n int) { *s = (*s)[:n] }

func (s *anyOf) appendTo(c driver.BatchColumn) error {
	for _, v := range *s {
		if err := c.AppendRow(v); err != nil {
			return err
		}
	}
	return nil
}

// newBuilder is the builder of a column of type t, with room for n
// values; typed is true when the column takes every value its converter
// returns (a Go type of its own: String, the integers and floats, Bool,
// each maybe Nullable or LowCardinality). The values of another column
// are tried on a scratch column of the type first.
func newBuilder(t string, n int) (b colBuilder, typed bool) {
	name, args := typeArgs(t)
	if name == "LowCardinality" {
		return newBuilder(args[0], n)
	}
	null := name == "Nullable"
	if null {
		name, _ = typeArgs(args[0])
	}
	switch name {
	case "String":
		return pick[string](null, n), true
	case "Int8":
		return pick[int8](null, n), true
	case "Int16":
		return pick[int16](null, n), true
	case "Int32":
		return pick[int32](null, n), true
	case "Int64":
		return pick[int64](null, n), true
	case "UInt8":
		return pick[uint8](null, n), true
	case "UInt16":
		return pick[uint16](null, n), true
	case "UInt32":
		return pick[uint32](null, n), true
	case "UInt64":
		return pick[uint64](null, n), true
	case "Float32":
		return pick[float32](null, n), true
	case "Float64":
		return pick[float64](null, n), true
	case "Bool", "Boolean":
		return pick[bool](null, n), true
	}
	s := make(anyOf, 0, n)
	return &s, false
}

func pick[T any](null bool, n int) colBuilder {
	if null {
		s := make(ptrsOf[T], 0, n)
		return &s
	}
	s := make(sliceOf[T], 0, n)
	return &s
}

// rawRows are the columns of a raw table for b.
func rawRows(b *sinks.Block) *columns {
	n := len(b.Records)
	topics, parts, offs, gens := make(eachOf[string], n), make(sliceOf[int32], n), make(sliceOf[int64], n), make(sliceOf[int64], n)
	keys, times, vals := make(ptrsOf[string], n), make(sliceOf[time.Time], n), make(ptrsOf[string], n)
	hkeys, hvals := make(eachOf[[]string], n), make(eachOf[[]*string], n)
	strs := make([]string, 2*n) // what keys and vals point to
	for i := range b.Records {
		r := &b.Records[i]
		topics[i], parts[i], offs[i], gens[i], times[i] = b.Topic, int32(b.Partition), r.Offset, b.Generation, r.Time.UTC()
		if r.Key != nil {
			strs[2*i] = view(r.Key)
			keys[i] = &strs[2*i]
		}
		if r.Value != nil {
			strs[2*i+1] = view(r.Value)
			vals[i] = &strs[2*i+1]
		}
		hk, hv := make([]string, len(r.Headers)), make([]*string, len(r.Headers))
		for j, h := range r.Headers {
			hk[j] = h.Key
			if h.Value != nil {
				v := view(h.Value)
				hv[j] = &v
			}
		}
		hkeys[i], hvals[i] = hk, hv
	}
	return &columns{n: n, cols: []appender{&topics, &parts, &offs, &gens, &keys, &times, &vals, &hkeys, &hvals}}
}

// kafkaColumns are the columns filled from the record, not its value.
var kafkaColumns = map[string]bool{"kafka_topic": true, "kafka_partition": true, "kafka_offset": true,
	"kafka_generation": true, "kafka_key": true, "kafka_timestamp": true}

// view is b's bytes as a string, without a copy: for a block's columns,
// which live only until its insert is sent (clickhouse-go copies them into
// its buffers), while Write holds the block, whose bytes nothing changes.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

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
func (s *Sink) columnRows(b *sinks.Block) (rows *columns, dead rowList) {
	rows = &columns{cols: make([]appender, len(s.cols))}
	st := &rowState{builders: make([]colBuilder, len(s.cols)), scratch: make([]column.Interface, len(s.cols)), names: map[string]int{},
		direct: make([]directFn, len(s.cols)), fields: make([][]byte, len(s.cols))}
	for i, c := range s.cols {
		if !kafkaColumns[c.name] {
			st.names[c.name] = i
		}
	}
	st.index = newFieldIndex(st.names)
	// The values of a column whose type may refuse what its converter
	// returns are also appended to a scratch column of its type, so that a
	// value clickhouse-go would refuse is found before the batch, which one
	// refused row would spoil whole.
	for i, c := range s.cols {
		var typed bool
		st.builders[i], typed = newBuilder(c.typ, len(b.Records))
		rows.cols[i] = st.builders[i]
		st.direct[i] = directFor(c, st.builders[i])
		if typed {
			continue
		}
		col, err := column.Type(c.typ).Column(c.name, &column.ServerContext{Timezone: time.UTC})
		if err == nil {
			st.scratch[i] = col
		}
	}
	for i := range b.Records {
		r := &b.Records[i]
		if reason := s.columnRow(b, r, st, rows.n); reason != "" {
			dead = append(dead, []any{b.Topic, int32(b.Partition), r.Offset, b.Generation, nullable(r.Key), r.Time.UTC(), nullable(r.Value), reason})
			continue
		}
		rows.n++
	}
	return rows, dead
}
