package main

import (
	"fmt"
	"math"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

// The reset planner: a pure function from the target, the committed
// offsets and the log bounds to the new offset of each partition.

// resetTarget is where a reset moves each partition: kind is one of the
// target flags (toEarliest...), with its value.
type resetTarget struct {
	kind   string
	offset int64 // --to-offset
	shift  int64 // --shift-by
	// atTime is, for --to-datetime and --by-duration, Kafka's first
	// offset at or after the time: -1 where it is after the last record.
	atTime map[coordinator.Partition]int64
	file   map[coordinator.Partition]int64 // --from-file
}

// planRow is one partition of a reset; its JSON fields are stable. current
// is null where nothing is committed; status and generation are set by
// --execute.
type planRow struct {
	Topic      string `json:"topic"`
	Partition  int    `json:"partition"`
	Current    *int64 `json:"current"`
	New        int64  `json:"new"`
	Clamped    bool   `json:"-"` // new is the log bound nearest to the offset asked
	LogStart   int64  `json:"log_start"`
	LogEnd     int64  `json:"log_end"`
	Status     string `json:"status,omitempty"`
	Generation *int64 `json:"generation,omitempty"`
	Error      string `json:"error,omitempty"`

	p    coordinator.Partition
	seen coordinator.Offsets
}

// planReset plans a reset of parts (sorted) to t: for each partition, its
// committed offset (current) and the new one, clamped into the log bounds.
// A partition without a committed offset is left out of --to-current and
// --shift-by. The warnings name what was left out or clamped. It needs
// neither etcd nor Kafka: committed and bounds are what they gave.
func planReset(t resetTarget, parts []coordinator.Partition, committed map[coordinator.Partition]coordinator.Offsets,
	bounds map[coordinator.Partition]logBounds) (rows []planRow, warnings []string) {
	rows = []planRow{}
	for _, p := range parts {
		b := bounds[p]
		seen, ok := committed[p]
		row := planRow{Topic: p.Topic, Partition: p.Partition, LogStart: b.earliest, LogEnd: b.end, p: p, seen: seen}
		if ok {
			row.Current = ptr(seen.Next)
		}
		var want int64
		switch t.kind {
		case toEarliest:
			want = b.earliest
		case toLatest:
			want = b.end
		case toCurrent, shiftBy:
			if !ok {
				warnings = append(warnings, fmt.Sprintf("%s has no committed offset: left out of --%s", p, t.kind))
				continue
			}
			want = seen.Next
			if t.kind == shiftBy {
				want = saturatingAdd(seen.Next, t.shift)
			}
		case toOffset:
			want = t.offset
		case toDatetime, byDuration:
			want = t.atTime[p]
			if want < 0 {
				want = b.end // no record at or after the time
			}
		case fromFile:
			want = t.file[p]
		}
		row.New = want
		switch {
		case want < b.earliest:
			row.New, row.Clamped = b.earliest, true
			warnings = append(warnings, fmt.Sprintf("%s: offset %d is before the log start %d; using %d", p, want, b.earliest, b.earliest))
		case want > b.end:
			row.New, row.Clamped = b.end, true
			warnings = append(warnings, fmt.Sprintf("%s: offset %d is past the log end %d; using %d", p, want, b.end, b.end))
		}
		rows = append(rows, row)
	}
	return rows, warnings
}

// saturatingAdd is a+b, held within int64.
func saturatingAdd(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}
