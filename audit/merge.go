package audit

import (
	"context"
	"fmt"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Bounds is what Kafka and etcd say of a partition, against which its sink
// is audited.
type Bounds struct {
	// LogStart is the partition's log start offset: offsets below it
	// were removed by retention and cannot be checked.
	LogStart int64
	// Committed is the group's committed offset in etcd: the records
	// below it were delivered.
	Committed int64
	// InFlight is the range a sink may hold beyond Committed without
	// being wrong: the intent in etcd (a block being written, or a crash
	// before its commit), or for a sink that records its own offsets, what
	// it committed beyond etcd. Empty when there is none.
	InFlight Range
	// CheckMissing is false for a sink that may rightly not hold every
	// delivered record (an upsert table keeps one row per key).
	CheckMissing bool
	// Truncated is the range of committed offsets whose records Kafka lost
	// when it truncated the log (etcd's record of the generation): the
	// sink may hold an old record and the new log's at each of them (a
	// ClickHouse table keeps both generations), which is not a duplicate.
	// Empty when there is none.
	Truncated Range
}

// Partition is the audit of one partition.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	LogStart  int64  `json:"log_start"`
	Committed int64  `json:"committed"`
	// Held counts the offsets the sink holds (each once); Delivered the
	// records Kafka delivers in [LogStart, Committed).
	Held      int64 `json:"held"`
	Delivered int64 `json:"delivered"`
	// MissingChecked is false where the sink's kind makes missing
	// records unknowable (upsert tables): Missing is then empty.
	MissingChecked bool `json:"missing_checked"`
	// Compared counts the offsets, held and delivered, whose record in the
	// sink was compared with Kafka's by checksum; NotCompared those whose
	// record was not, the sink keeping no comparable copy of it (see
	// Capabilities.Records).
	Compared    int64 `json:"compared"`
	NotCompared int64 `json:"not_compared"`
	// DeadLetters counts the offsets held in the sink's dead-letter table.
	DeadLetters int64 `json:"dead_letters"`

	// Missing: delivered records the sink does not hold.
	Missing Ranges `json:"missing"`
	// Duplicated: offsets the sink holds more than once; Copies counts
	// the copies beyond the first.
	Duplicated Ranges `json:"duplicated"`
	Copies     int64  `json:"extra_copies"`
	// Mismatched: offsets whose record in the sink is not the one Kafka
	// holds there (another key, value or timestamp): a record of another
	// run, or of the topic before it was deleted and created again.
	Mismatched Ranges `json:"mismatched"`
	// InFlight and BeyondCommit are the offsets the sink holds at or past
	// Committed ("not committed"): inside the in-flight range, or not.
	InFlight     Ranges `json:"in_flight"`
	BeyondCommit Ranges `json:"beyond_commit"`
	// Aborted: offsets below Committed that the sink holds but that are
	// not delivered records (aborted transactions, control records, or
	// records compacted away since).
	Aborted Ranges `json:"aborted"`
	// Unverifiable: offsets the sink holds below LogStart, which Kafka no
	// longer has. Offsets below LogStart are never reported missing.
	Unverifiable Ranges `json:"unverifiable"`
	// TruncatedByKafka: committed offsets whose records Kafka lost when it
	// truncated the partition's log (an unclean leader election), as etcd
	// recorded it: the sink holds those records (apart from the new log's,
	// see sinks.Block.Truncated) and Kafka does not. Not a finding.
	TruncatedByKafka Ranges `json:"truncated_by_kafka"`
}

// Clean tells that nothing was found. Unverifiable offsets are not
// findings, nor are offsets in flight: a block being written, or one whose
// commit a crash cut off, which the next owner replays over the same range
// (or, for a sink that records its offsets, resumes after).
func (p *Partition) Clean() bool {
	return p.Missing.Count == 0 && p.Duplicated.Count == 0 && p.BeyondCommit.Count == 0 && p.Aborted.Count == 0 &&
		p.Mismatched.Count == 0
}

// Merge audits one partition: held is the sink's offsets, delivered
// Kafka's delivered offsets from b.LogStart up to b.Committed, both rising.
// Where both streams sum an offset's record, the two sums must agree, or
// the offset is mismatched: an offset alone does not say which record the
// sink holds there. It holds nothing but the findings' listed ranges,
// however long the streams. progress, if not nil, is called with the count of offsets read
// from either stream, now and then. Merge does not close the streams.
func Merge(ctx context.Context, topic string, partition int, b Bounds, held, delivered sinks.Stream, maxRanges int, progress func(read int64)) (*Partition, error) {
	if maxRanges <= 0 {
		maxRanges = DefaultMaxRanges
	}
	p := &Partition{Topic: topic, Partition: partition, LogStart: b.LogStart, Committed: b.Committed,
		MissingChecked: b.CheckMissing,
		Missing:        newRanges(maxRanges), Duplicated: newRanges(maxRanges), Mismatched: newRanges(maxRanges), InFlight: newRanges(maxRanges),
		BeyondCommit: newRanges(maxRanges), Aborted: newRanges(maxRanges), Unverifiable: newRanges(maxRanges),
		TruncatedByKafka: newRanges(maxRanges)}
	if b.Truncated.Next > b.Truncated.From {
		p.TruncatedByKafka.add(b.Truncated.From, b.Truncated.Next)
	}
	var read, reported int64
	tick := func() {
		read++
		if progress != nil && read-reported >= 4096 {
			progress(read - reported)
			reported = read
		}
	}
	defer func() {
		if progress != nil && read > reported {
			progress(read - reported)
		}
	}()

	// d is the next delivered record not yet matched; dOK false once the
	// delivered stream ended.
	var d sinks.Entry
	dOK := true
	nextDelivered := func() error {
		for {
			e, ok, err := delivered.Next(ctx)
			if err != nil {
				return fmt.Errorf("kafka %s/%d: %w", topic, partition, err)
			}
			if !ok || e.Offset >= b.Committed {
				dOK = false
				return nil
			}
			if e.Offset < b.LogStart {
				continue // before the log start: a fetch may begin early
			}
			tick()
			p.Delivered++
			d = e
			return nil
		}
	}
	if err := nextDelivered(); err != nil {
		return nil, err
	}
	// missing records the delivered offsets below off that the sink does
	// not hold, and leaves d at the first delivered offset at or past off.
	missingBelow := func(off int64) error {
		for dOK && d.Offset < off {
			if b.CheckMissing {
				p.Missing.add(d.Offset, d.Offset+1)
			}
			if err := nextDelivered(); err != nil {
				return err
			}
		}
		return nil
	}

	prev := int64(-1)
	for {
		h, ok, err := held.Next(ctx)
		if err != nil {
			return nil, fmt.Errorf("sink %s/%d: %w", topic, partition, err)
		}
		if !ok {
			break
		}
		off, copies := h.Offset, h.Copies
		if off <= prev {
			return nil, fmt.Errorf("sink %s/%d: offset %d after %d: the sink's offsets must come in rising order", topic, partition, off, prev)
		}
		prev = off
		tick()
		p.Held++
		if h.DeadLetters > 0 {
			p.DeadLetters++
		}
		if copies > 1 && off >= b.Truncated.From && off < b.Truncated.Next {
			copies-- // the record Kafka lost, beside the new log's
		}
		if copies > 1 {
			p.Duplicated.add(off, off+1)
			p.Copies += copies - 1
		}
		switch {
		case off >= b.Committed:
			if off >= b.InFlight.From && off < b.InFlight.Next {
				p.InFlight.add(off, off+1)
			} else {
				p.BeyondCommit.add(off, off+1)
			}
		case off < b.LogStart:
			p.Unverifiable.add(off, off+1)
		default:
			if err := missingBelow(off); err != nil {
				return nil, err
			}
			if dOK && d.Offset == off {
				p.compare(h, d)
				if err := nextDelivered(); err != nil {
					return nil, err
				}
			} else {
				p.Aborted.add(off, off+1)
			}
		}
	}
	if err := missingBelow(b.Committed); err != nil {
		return nil, err
	}
	return p, nil
}

// compare checks the record held at an offset against the one delivered
// there, where both are summed.
func (p *Partition) compare(held, delivered sinks.Entry) {
	if !held.Summed || !delivered.Summed {
		p.NotCompared++
		return
	}
	p.Compared++
	if held.Mixed || held.Sum != delivered.Sum {
		p.Mismatched.add(held.Offset, held.Offset+1)
	}
}
