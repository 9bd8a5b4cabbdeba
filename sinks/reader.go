package sinks

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strconv"
	"time"
)

// Reader is a sink read back, as `offsetkeeper audit` reads it: the
// offsets it holds of each partition, with the copies of each, compared by
// package audit with what Kafka delivered and etcd committed. A sink
// package that can be audited returns one from its Descriptor's Audit.
type Reader interface {
	// Describe names the sink in messages, without secrets.
	Describe() string
	Capabilities() Capabilities
	// CheckScope refuses partitions the sink cannot tell apart (a table
	// without a topic column, read for two topics), as ErrUnreadable.
	CheckScope(ps []Partition) error
	// Offsets streams the offsets the sink holds of a partition, rising,
	// with the copies of each.
	Offsets(ctx context.Context, topic string, partition int) (Stream, error)
	// SinkNext is the next offset the sink itself records for the
	// partition, for a sink that commits its offsets with its rows.
	SinkNext(ctx context.Context, topic string, partition int) (next int64, ok bool, err error)
	Close() error
}

// ErrUnreadable: a sink of a kind that can be read back, but not this one
// (a missing directory or table, a table without kafka_offset).
var ErrUnreadable = errors.New("sink cannot be read")

// Partition names one topic-partition: the one identity of a partition,
// in etcd's keys (coordinator), Kafka's requests (the consumer) and a
// sink's reading back (Reader).
type Partition struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
}

// String is "topic/partition", the form of logs, errors and etcd's keys.
func (p Partition) String() string { return p.Topic + "/" + strconv.Itoa(p.Partition) }

// Compare orders partitions by topic, then number, the way cmp.Compare
// does: sort with slices.SortFunc(ps, Partition.Compare).
func (p Partition) Compare(q Partition) int {
	return cmp.Or(cmp.Compare(p.Topic, q.Topic), cmp.Compare(p.Partition, q.Partition))
}

// Capabilities say what an audit of a sink can find.
type Capabilities struct {
	// Missing: the sink should hold every delivered record (not so in an
	// upsert table, which keeps one row per key).
	Missing bool `json:"missing"`
	// Duplicates: the sink can hold an offset twice (not so in a table
	// keyed by offset: the audit then finds none, by construction).
	Duplicates bool `json:"duplicates"`
	// Records: the sink keeps each record's key, value and timestamp as
	// Kafka had them, so the record held at each offset is compared with
	// Kafka's. RecordsNote says why records are not compared when Records
	// is false, and which are not when it is true (records decoded through
	// a Schema Registry, in a file sink).
	Records     bool   `json:"records"`
	RecordsNote string `json:"records_note,omitempty"`
}

// Stream gives a partition's offsets in rising order, one Entry each; ok
// is false at the end. Close ends it early.
type Stream interface {
	Next(ctx context.Context) (e Entry, ok bool, err error)
	Close() error
}

// Entry is one offset of a Stream: what Kafka delivered there, or what a
// sink holds there.
type Entry struct {
	Offset int64
	// Copies is how many times the offset is held: 1 for Kafka's records;
	// for a sink, its rows or lines of the offset.
	Copies int64
	// Sum is the record's checksum (Checksum), set when Summed: a sink
	// that keeps no comparable copy of the record (a columns table holds
	// fields of the value, not its bytes) leaves it unset, and the record
	// is then not compared.
	Sum    Sum
	Summed bool
	// Mixed tells that the copies of the offset do not all hold the same
	// record (Sum is the first's).
	Mixed bool
	// DeadLetters is how many of the Copies are in the sink's dead-letter
	// table.
	DeadLetters int64
}

// Sum is a record's checksum: of its key, its value and its timestamp, so
// that a record of another run or of another incarnation of the topic,
// held at the same offset, does not pass for the one Kafka holds.
type Sum [16]byte

// Checksum is the Sum of a record's key, value and timestamp (in
// milliseconds, Kafka's precision). A nil key or value (a tombstone) and an
// empty one differ. Headers are left out: not every sink keeps them as
// bytes.
func Checksum(key, value []byte, at time.Time) Sum {
	h := sha256.New()
	var buf [binary.MaxVarintLen64 + 1]byte
	field := func(b []byte) {
		if b == nil {
			_, _ = h.Write([]byte{0})
			return
		}
		buf[0] = 1
		n := binary.PutUvarint(buf[1:], uint64(len(b)))
		_, _ = h.Write(buf[:1+n])
		_, _ = h.Write(b)
	}
	field(key)
	field(value)
	binary.BigEndian.PutUint64(buf[:8], uint64(at.UnixMilli()))
	_, _ = h.Write(buf[:8])
	var s Sum
	copy(s[:], h.Sum(nil))
	return s
}

// Sum is the Sum of r.
func (r *Record) Sum() Sum { return Checksum(r.Key, r.Value, r.Time) }

// sliceStream is a Stream of entries in memory, rising. For tests and for
// small sets.
type sliceStream struct {
	entries []Entry
	i       int
}

// Offsets returns a Stream of offs, which must rise; an offset repeated
// next to itself counts as held that many times. Its records are not
// summed, so none is compared.
func Offsets(offs ...int64) Stream {
	var es []Entry
	for _, o := range offs {
		if n := len(es); n > 0 && es[n-1].Offset == o {
			es[n-1].Copies++
			continue
		}
		es = append(es, Entry{Offset: o, Copies: 1})
	}
	return &sliceStream{entries: es}
}

// Records returns a Stream of recs, whose offsets must rise, each summed;
// a record repeated at one offset counts as held that many times (Mixed
// when the copies differ).
func Records(recs ...Record) Stream {
	var es []Entry
	for i := range recs {
		s := recs[i].Sum()
		if n := len(es); n > 0 && es[n-1].Offset == recs[i].Offset {
			es[n-1].Copies++
			es[n-1].Mixed = es[n-1].Mixed || es[n-1].Sum != s
			continue
		}
		es = append(es, Entry{Offset: recs[i].Offset, Copies: 1, Sum: s, Summed: true})
	}
	return &sliceStream{entries: es}
}

func (s *sliceStream) Next(context.Context) (Entry, bool, error) {
	if s.i >= len(s.entries) {
		return Entry{}, false, nil
	}
	s.i++
	return s.entries[s.i-1], true, nil
}

func (s *sliceStream) Close() error { return nil }
