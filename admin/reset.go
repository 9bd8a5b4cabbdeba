package admin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// The reset's target flags and the parsing of their values.

// The targets of a reset, one of which is given: each is a flag.
const (
	ToEarliest = "to-earliest"
	ToLatest   = "to-latest"
	ToCurrent  = "to-current"
	ToOffset   = "to-offset"
	ShiftBy    = "shift-by"
	ToDatetime = "to-datetime"
	ByDuration = "by-duration"
	FromFile   = "from-file"
	FromGroup  = "from-group"
)

var Targets = []string{ToEarliest, ToLatest, ToCurrent, ToOffset, ShiftBy, ToDatetime, ByDuration, FromFile, FromGroup}

func TargetList() string {
	names := make([]string, len(Targets))
	for i, n := range Targets {
		names[i] = "--" + n
	}
	return strings.Join(names, ", ")
}

// ParseDatetime parses an RFC 3339 time at or after 1970.
func ParseDatetime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time such as 2026-12-01T10:00:00Z or 2026-12-01T11:00:00+01:00", s)
	}
	if t.UnixMilli() < 0 {
		return time.Time{}, fmt.Errorf("%q: before 1970, when Kafka's record times start; want a later RFC 3339 time", s)
	}
	return t, nil
}

var isoDuration = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:[.,]\d+)?)S)?)?$`)

// ParseAgo parses a positive duration: ISO-8601's PnDTnHnMnS (days of 24
// hours; no years, months or weeks, whose length varies) or Go's (90m,
// 1h30m).
func ParseAgo(s string) (time.Duration, error) {
	const want = "want a positive ISO-8601 duration such as PT1H, PT30M or P1DT12H, or a Go duration such as 90m or 1h30m"
	v := strings.TrimSpace(s)
	var d time.Duration
	if strings.HasPrefix(strings.ToUpper(v), "P") {
		m := isoDuration.FindStringSubmatch(strings.ToUpper(v))
		if m == nil || strings.HasSuffix(strings.ToUpper(v), "T") || len(v) < 3 {
			return 0, fmt.Errorf("%q: %s", s, want)
		}
		total := 0.0
		for i, unit := range []float64{24 * 3600, 3600, 60, 1} {
			if m[i+1] == "" {
				continue
			}
			n, err := strconv.ParseFloat(strings.ReplaceAll(m[i+1], ",", "."), 64)
			if err != nil {
				return 0, fmt.Errorf("%q: %s", s, want)
			}
			total += n * unit
		}
		if total*float64(time.Second) > math.MaxInt64/2 {
			return 0, fmt.Errorf("%q: too long; %s", s, want)
		}
		d = time.Duration(total * float64(time.Second))
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, fmt.Errorf("%q: %s", s, want)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: not positive; %s", s, want)
	}
	return d, nil
}

// The reset planner: a pure function from the target, the committed
// offsets and the log bounds to the new offset of each partition.

// Target is where a reset moves each partition: kind is one of the
// target flags (ToEarliest...), with its value.
type Target struct {
	Kind   string // ToEarliest, ...
	Offset int64  // ToOffset
	Shift  int64  // ShiftBy
	// AtTime is, for ToDatetime and ByDuration, Kafka's first offset at
	// or after the time: -1 where it is after the last record.
	AtTime map[sinks.Partition]int64
	File   map[sinks.Partition]int64 // FromFile
	// Group is FromGroup's Kafka consumer group; Plan fills GroupOffsets
	// with what it committed.
	Group        string
	GroupOffsets map[sinks.Partition]int64
}

// PlanRow is one partition of a reset; its JSON fields are stable. current
// is null where nothing is committed; status and generation are set by
// --execute.
type PlanRow struct {
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

	p    sinks.Partition
	seen coordinator.Offsets
}

// PlanReset plans a reset of parts (sorted) to t: for each partition, its
// committed offset (current) and the new one, clamped into the log bounds.
// A partition without a committed offset is left out of --to-current and
// --shift-by. The warnings name what was left out or clamped. It needs
// neither etcd nor Kafka: committed and bounds are what they gave.
func PlanReset(t Target, parts []sinks.Partition, committed map[sinks.Partition]coordinator.Offsets,
	bounds map[sinks.Partition]LogBounds) (rows []PlanRow, warnings []string) {
	rows = []PlanRow{}
	for _, p := range parts {
		b := bounds[p]
		seen, ok := committed[p]
		row := PlanRow{Topic: p.Topic, Partition: p.Partition, LogStart: b.Earliest, LogEnd: b.End, p: p, seen: seen}
		if ok {
			row.Current = ptr(seen.Next)
		}
		var want int64
		switch t.Kind {
		case ToEarliest:
			want = b.Earliest
		case ToLatest:
			want = b.End
		case ToCurrent, ShiftBy:
			if !ok {
				warnings = append(warnings, fmt.Sprintf("%s has no committed offset: left out of --%s", p, t.Kind))
				continue
			}
			want = seen.Next
			if t.Kind == ShiftBy {
				want = saturatingAdd(seen.Next, t.Shift)
			}
		case ToOffset:
			want = t.Offset
		case ToDatetime, ByDuration:
			want = t.AtTime[p]
			if want < 0 {
				want = b.End // no record at or after the time
			}
		case FromFile:
			want = t.File[p]
		case FromGroup:
			var has bool
			if want, has = t.GroupOffsets[p]; !has {
				warnings = append(warnings, fmt.Sprintf("%s: Kafka consumer group %s committed no offset: left out of --%s", p, t.Group, t.Kind))
				continue
			}
		}
		row.New = want
		switch {
		case want < b.Earliest:
			row.New, row.Clamped = b.Earliest, true
			warnings = append(warnings, fmt.Sprintf("%s: offset %d is before the log start %d; using %d", p, want, b.Earliest, b.Earliest))
		case want > b.End:
			row.New, row.Clamped = b.End, true
			warnings = append(warnings, fmt.Sprintf("%s: offset %d is past the log end %d; using %d", p, want, b.End, b.End))
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

// Applying a plan: one fenced etcd transaction per partition.

// Statuses of an executed plan's rows.
const (
	StatusReset        = "reset"
	StatusConflict     = "conflict"
	StatusFailed       = "failed"
	StatusNotAttempted = "not-attempted"
)

// Plan is the plan, or its outcome after --execute. JSON: an object
// with the group, whether it was executed, and the partitions.
type Plan struct {
	Group      string    `json:"group"`
	Executed   bool      `json:"executed"`
	Partitions []PlanRow `json:"partitions"`
}

// Apply writes each row by its own fenced transaction, conditioned on the
// offsets as the plan read them; etcdTimeout bounds each. A conflict does
// not stop the others; an etcd failure does, as etcd is then unlikely to
// answer the rest: etcdError says what such a failure is.
func (plan *Plan) Apply(ctx context.Context, coord *coordinator.Coordinator, etcdTimeout time.Duration, etcdError func(error) error) error {
	plan.Executed = true
	var applied, conflicted, failed, skipped []string
	var failure error
	for i := range plan.Partitions {
		r := &plan.Partitions[i]
		if failure != nil {
			r.Status = StatusNotAttempted
			skipped = append(skipped, r.p.String())
			continue
		}
		ectx, cancel := context.WithTimeout(ctx, etcdTimeout)
		got, err := coord.ResetOffsets(ectx, r.p, r.New, r.seen)
		cancel()
		switch {
		case err == nil:
			r.Status, r.Generation = StatusReset, ptr(got.Generation)
			applied = append(applied, r.p.String())
		case errors.Is(err, coordinator.ErrConflict):
			r.Status, r.Error = StatusConflict, err.Error()
			conflicted = append(conflicted, r.p.String())
		default:
			r.Status, r.Error = StatusFailed, err.Error()
			failed = append(failed, r.p.String())
			failure = etcdError(err)
		}
	}
	if len(conflicted) == 0 && failure == nil {
		return nil
	}
	var msg []string
	if len(conflicted) > 0 {
		msg = append(msg, fmt.Sprintf("not reset, offsets changed since the plan was read (a replica committed or another reset ran; run again to plan from the new state): %s",
			strings.Join(conflicted, ", ")))
	}
	if failure != nil {
		msg = append(msg, fmt.Sprintf("failed, the outcome unknown (check with offsets describe): %s: %v", strings.Join(failed, ", "), failure))
		if len(skipped) > 0 {
			msg = append(msg, "not attempted: "+strings.Join(skipped, ", "))
		}
	}
	if len(applied) > 0 {
		msg = append(msg, "reset: "+strings.Join(applied, ", "))
	} else {
		msg = append(msg, "nothing was reset")
	}
	return errors.New(strings.Join(msg, "; "))
}
