package audit

import (
	"context"
	"slices"
	"testing"
)

// span lists the offsets [from, next).
func span(from, next int64) []int64 {
	var out []int64
	for o := from; o < next; o++ {
		out = append(out, o)
	}
	return out
}

func without(offs []int64, drop ...int64) []int64 {
	return slices.DeleteFunc(slices.Clone(offs), func(o int64) bool { return slices.Contains(drop, o) })
}

func TestMergeFindsWhatIsPlanted(t *testing.T) {
	// Kafka: 0..9 delivered, 10 and 11 an aborted record and its marker,
	// 12..19 delivered; the group committed 20.
	delivered := append(span(0, 10), span(12, 20)...)
	base := Bounds{LogStart: 0, Committed: 20, CheckMissing: true}
	type want struct {
		missing, duplicated, inFlight, beyond, aborted, unverifiable []Range
		copies                                                       int64
	}
	tests := []struct {
		name      string
		bounds    Bounds
		held      []int64
		delivered []int64
		want      want
	}{
		{name: "clean", bounds: base, held: delivered, delivered: delivered},
		{name: "deleted record is missing", bounds: base, held: without(delivered, 3, 4, 15), delivered: delivered,
			want: want{missing: []Range{{3, 5}, {15, 16}}}},
		{name: "last records missing", bounds: base, held: span(0, 10), delivered: delivered,
			want: want{missing: []Range{{12, 20}}}},
		{name: "copied record is duplicated", bounds: base, held: slices.Insert(slices.Clone(delivered), 5, 5, 5), delivered: delivered,
			want: want{duplicated: []Range{{5, 6}}, copies: 2}},
		{name: "aborted record held", bounds: base, held: slices.Insert(slices.Clone(delivered), 10, 10), delivered: delivered,
			want: want{aborted: []Range{{10, 11}}}},
		{name: "past the commit with an intent is in flight", bounds: Bounds{Committed: 20, InFlight: Range{20, 25}, CheckMissing: true},
			held: append(slices.Clone(delivered), 20, 21), delivered: delivered,
			want: want{inFlight: []Range{{20, 22}}}},
		{name: "past the commit without an intent is beyond", bounds: base,
			held: append(slices.Clone(delivered), 20, 21, 30), delivered: delivered,
			want: want{beyond: []Range{{20, 22}, {30, 31}}}},
		{name: "past the intent is beyond", bounds: Bounds{Committed: 20, InFlight: Range{20, 21}, CheckMissing: true},
			held: append(slices.Clone(delivered), 20, 21), delivered: delivered,
			want: want{inFlight: []Range{{20, 21}}, beyond: []Range{{21, 22}}}},
		{name: "retention: below the log start is unverifiable, not missing", bounds: Bounds{LogStart: 5, Committed: 20, CheckMissing: true},
			held: append([]int64{1, 2}, without(delivered, 0, 1, 2, 3, 4)...), delivered: without(delivered, 0, 1, 2, 3, 4),
			want: want{unverifiable: []Range{{1, 3}}}},
		{name: "upsert: missing not checked", bounds: Bounds{Committed: 20}, held: []int64{4, 19}, delivered: delivered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Merge(context.Background(), "t", 0, tt.bounds, Offsets(tt.held...), Offsets(tt.delivered...), 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			check := func(kind string, got Ranges, want []Range) {
				t.Helper()
				if want == nil {
					want = []Range{}
				}
				var n int64
				for _, r := range want {
					n += r.Len()
				}
				if !slices.Equal(got.Ranges, want) || got.Count != n {
					t.Errorf("%s: got %v (count %d), want %v (count %d)", kind, got.Ranges, got.Count, want, n)
				}
			}
			check("missing", p.Missing, tt.want.missing)
			check("duplicated", p.Duplicated, tt.want.duplicated)
			check("in flight", p.InFlight, tt.want.inFlight)
			check("beyond the commit", p.BeyondCommit, tt.want.beyond)
			check("aborted", p.Aborted, tt.want.aborted)
			check("unverifiable", p.Unverifiable, tt.want.unverifiable)
			if p.Copies != tt.want.copies {
				t.Errorf("extra copies: got %d, want %d", p.Copies, tt.want.copies)
			}
			clean := tt.want.missing == nil && tt.want.duplicated == nil && tt.want.beyond == nil && tt.want.aborted == nil
			if p.Clean() != clean {
				t.Errorf("Clean() = %v, want %v", p.Clean(), clean)
			}
		})
	}
}

func TestRangesCapKeepsCountExact(t *testing.T) {
	held := []int64{}
	for o := int64(0); o < 1000; o += 2 {
		held = append(held, o) // every odd offset missing: 500 ranges
	}
	p, err := Merge(context.Background(), "t", 0, Bounds{Committed: 1000, CheckMissing: true}, Offsets(held...), Offsets(span(0, 1000)...), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Missing.Count != 500 || len(p.Missing.Ranges) != 10 || !p.Missing.Truncated {
		t.Fatalf("missing: count %d, %d ranges listed, truncated %v; want 500, 10, true", p.Missing.Count, len(p.Missing.Ranges), p.Missing.Truncated)
	}
}

func TestMergeRefusesUnorderedSink(t *testing.T) {
	if _, err := Merge(context.Background(), "t", 0, Bounds{Committed: 3, CheckMissing: true}, Offsets(2, 1), Offsets(0, 1, 2), 0, nil); err == nil {
		t.Fatal("offsets out of order: no error")
	}
}
