package admin

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// TestPlanReset covers the planner alone: every target, the clamping into
// the log bounds at both ends, and the partitions left out, from offsets
// and bounds given as values (no etcd, no Kafka).
func TestPlanReset(t *testing.T) {
	p0 := sinks.Partition{Topic: "orders", Partition: 0}
	p1 := sinks.Partition{Topic: "orders", Partition: 1}
	p2 := sinks.Partition{Topic: "orders", Partition: 2}
	parts := []sinks.Partition{p0, p1, p2}
	// p0: log [0, 20) committed 10; p1: [0, 20) committed 15; p2: [5, 20),
	// nothing committed.
	committed := map[sinks.Partition]coordinator.Offsets{p0: {Next: 10}, p1: {Next: 15}}
	bounds := map[sinks.Partition]LogBounds{p0: {0, 20}, p1: {0, 20}, p2: {5, 20}}

	// want is each partition's new offset, "c" after it when clamped; a
	// partition left out is missing.
	type want map[sinks.Partition]string
	tests := []struct {
		name     string
		target   Target
		want     want
		warnings []string // each in one warning, in order
	}{
		{"to-earliest", Target{Kind: ToEarliest}, want{p0: "0", p1: "0", p2: "5"}, nil},
		{"to-latest", Target{Kind: ToLatest}, want{p0: "20", p1: "20", p2: "20"}, nil},
		{"to-current leaves out the uncommitted", Target{Kind: ToCurrent}, want{p0: "10", p1: "15"},
			[]string{"orders/2 has no committed offset: left out of --to-current"}},
		{"to-offset inside", Target{Kind: ToOffset, Offset: 7}, want{p0: "7", p1: "7", p2: "7"}, nil},
		{"to-offset before the log start", Target{Kind: ToOffset, Offset: 2}, want{p0: "2", p1: "2", p2: "5c"},
			[]string{"orders/2: offset 2 is before the log start 5; using 5"}},
		{"to-offset past the log end", Target{Kind: ToOffset, Offset: 99}, want{p0: "20c", p1: "20c", p2: "20c"},
			[]string{"orders/0: offset 99 is past the log end 20", "orders/1: offset 99", "orders/2: offset 99"}},
		{"shift-by back", Target{Kind: ShiftBy, Shift: -12}, want{p0: "0c", p1: "3"},
			[]string{"orders/0: offset -2 is before the log start 0; using 0", "orders/2 has no committed offset: left out of --shift-by"}},
		{"shift-by ahead", Target{Kind: ShiftBy, Shift: 5}, want{p0: "15", p1: "20"},
			[]string{"left out of --shift-by"}},
		{"shift-by saturates", Target{Kind: ShiftBy, Shift: math.MaxInt64}, want{p0: "20c", p1: "20c"},
			[]string{"orders/0: offset 9223372036854775807 is past the log end 20", "orders/1", "left out"}},
		{"to-datetime", Target{Kind: ToDatetime, AtTime: map[sinks.Partition]int64{p0: 3, p1: 18, p2: -1}},
			want{p0: "3", p1: "18", p2: "20"}, nil},
		{"by-duration", Target{Kind: ByDuration, AtTime: map[sinks.Partition]int64{p0: -1, p1: 0, p2: 0}},
			want{p0: "20", p1: "0", p2: "5c"}, []string{"orders/2: offset 0 is before the log start 5"}},
		{"from-file", Target{Kind: FromFile, File: map[sinks.Partition]int64{p0: 1, p1: 30, p2: 6}},
			want{p0: "1", p1: "20c", p2: "6"}, []string{"orders/1: offset 30 is past the log end 20; using 20"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, warnings := PlanReset(tc.target, parts, committed, bounds)
			got := want{}
			for _, r := range rows {
				s := strconv.FormatInt(r.New, 10)
				if r.Clamped {
					s += "c"
				}
				got[r.p] = s
				if c, ok := committed[r.p]; ok != (r.Current != nil) || ok && *r.Current != c.Next {
					t.Errorf("%s: current %v, want %d (committed %t)", r.p, r.Current, c.Next, ok)
				}
				if b := bounds[r.p]; r.LogStart != b.Earliest || r.LogEnd != b.End {
					t.Errorf("%s: bounds [%d, %d), want [%d, %d)", r.p, r.LogStart, r.LogEnd, b.Earliest, b.End)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("planned %v, want %v", got, tc.want)
			}
			for p, w := range tc.want {
				if got[p] != w {
					t.Errorf("%s: new %q, want %q (c: clamped)", p, got[p], w)
				}
			}
			if !slices.IsSortedFunc(rows, func(a, b PlanRow) int { return a.p.Compare(b.p) }) {
				t.Errorf("rows not in partition order")
			}
			next := 0
			for _, w := range tc.warnings {
				for next < len(warnings) && !strings.Contains(warnings[next], w) {
					next++
				}
				if next == len(warnings) {
					t.Errorf("no warning %q (in order) in %q", w, warnings)
					break
				}
				next++
			}
			if tc.warnings == nil && len(warnings) > 0 {
				t.Errorf("warnings %q, want none", warnings)
			}
		})
	}
}
