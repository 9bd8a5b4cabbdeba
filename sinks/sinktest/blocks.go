package sinktest

import (
	"bytes"
	"fmt"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// part names a partition.
type part struct {
	topic     string
	partition int
}

// base is the time of the suite's records; Kafka keeps milliseconds.
var base = time.Date(2024, 5, 1, 12, 0, 0, 123_000_000, time.UTC)

// block makes a block of simple records at the given offsets.
func block(topic string, partition int, from, next int64, offs ...int64) *sinks.Block {
	b := &sinks.Block{Topic: topic, Partition: partition, Epoch: 1, From: from, Next: next}
	for _, o := range offs {
		b.Records = append(b.Records, sinks.Record{
			Offset: o,
			Key:    fmt.Appendf(nil, "key-%d", o),
			Value:  fmt.Appendf(nil, `{"n":%d}`, o),
			Time:   base.Add(time.Duration(o) * time.Millisecond),
		})
	}
	return b
}

// roundTripBlock has a record for each kind of key, value, time and header
// a sink must keep, with gaps where Kafka has offsets without records.
func roundTripBlock() *sinks.Block {
	india := time.FixedZone("IST", 5*3600+1800)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	big[len(big)/2] = 0xff
	return &sinks.Block{
		Topic: "round-trip", Partition: 2, Epoch: 1, From: 100, Next: 120,
		Records: []sinks.Record{
			{Offset: 100, Key: nil, Value: []byte(`{"id":1,"name":"Ada","tags":["x","y"],"nested":{"ok":true,"n":null}}`), Time: base},
			{Offset: 101, Key: []byte("user-42"), Value: []byte("hello, world"), Time: base.Add(time.Second),
				Headers: []sinks.Header{{Key: "content-type", Value: []byte("text/plain")}}},
			// 102 is a transaction marker: no record.
			{Offset: 103, Key: []byte{0x00, 0xff, 0x10}, Value: []byte{0xff, 0xfe, 0xfd, 0x00, 0x01, '\n', 0x80}, Time: time.Date(2023, 1, 2, 3, 4, 5, 678_000_000, india)},
			{Offset: 104, Key: []byte(`{"k":1}`), Value: []byte("{\n  \"pretty\": true\n}\n"), Time: base,
				Headers: []sinks.Header{
					{Key: "h", Value: []byte("1")},
					{Key: "h", Value: []byte("2")},
					{Key: "null", Value: nil},
					{Key: "empty", Value: []byte{}},
					{Key: "bin", Value: []byte{0xc3, 0x28, 0x00}},
					{Key: "json", Value: []byte(`{"a":[1,2]}`)},
					{Key: "ключ ✓", Value: []byte("значение")},
					{Key: "", Value: []byte("empty key")},
				}},
			{Offset: 105, Key: []byte{}, Value: []byte("null"), Time: base},
			{Offset: 106, Key: []byte("gone"), Value: nil, Time: base}, // a tombstone
			{Offset: 107, Key: []byte("42"), Value: []byte{}, Time: base},
			{Offset: 108, Key: []byte(`"quoted"`), Value: []byte("line1\nline2\t\"q\" \\ é ✓ \u2028 <&> \x01"), Time: base},
			{Offset: 109, Key: []byte("big"), Value: big, Time: base},
			{Offset: 110, Key: []byte("no-timestamp"), Value: []byte("t"), Time: time.UnixMilli(-1)},
			{Offset: 111, Key: []byte("epoch"), Value: []byte(" {} "), Time: time.UnixMilli(0)},
			{Offset: 112, Key: []byte("number"), Value: []byte("-12.5e3"), Time: base.Add(-24 * time.Hour)},
			{Offset: 113, Key: []byte("string"), Value: []byte(`"a JSON string"`), Time: base},
			{Offset: 119, Key: []byte("last"), Value: []byte("true"), Time: base.Add(999 * time.Millisecond)},
		},
	}
}

// Seq is the offsets from, from+1, ... up to next, not included.
func Seq(from, next int64) []int64 {
	var o []int64
	for i := from; i < next; i++ {
		o = append(o, i)
	}
	return o
}

func concat(parts ...[]sinks.Record) []sinks.Record {
	var all []sinks.Record
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

func cloneBlock(b *sinks.Block) *sinks.Block {
	c := *b
	c.Records = make([]sinks.Record, len(b.Records))
	for i, r := range b.Records {
		c.Records[i] = CloneRecord(r)
	}
	return &c
}

// CloneRecord is r with buffers of its own: its key, its value and its
// headers' values.
func CloneRecord(r sinks.Record) sinks.Record {
	r.Key = bytes.Clone(r.Key)
	r.Value = bytes.Clone(r.Value)
	if r.Headers != nil {
		hs := make([]sinks.Header, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = sinks.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
		}
		r.Headers = hs
	}
	return r
}

func scribble(b []byte) {
	for i := range b {
		b[i] = 0xAA
	}
}
