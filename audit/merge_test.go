package audit

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// span lists the offsets [from, next).
func span(from, next int64) []int64 {
	var out []int64
	for o := from; o < next; o++ {
		out = append(out, o)
	}
	return out
}

func sorted(offs []int64) []int64 { slices.Sort(offs); return offs }

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
		truncated                                                    []Range
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
		// Kafka truncated the log at 5 after 8 was committed: a sink that
		// keeps both generations (ClickHouse) holds 5 to 7 twice, the
		// record Kafka lost and the new log's; a third copy is one.
		{name: "truncated by Kafka: the old record beside the new is no duplicate",
			bounds: Bounds{Committed: 20, CheckMissing: true, Truncated: Range{5, 8}},
			held:   sorted(append(slices.Clone(delivered), 5, 6, 7, 7)), delivered: delivered,
			want: want{duplicated: []Range{{7, 8}}, copies: 1, truncated: []Range{{5, 8}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Merge(context.Background(), "t", 0, tt.bounds, sinks.Offsets(tt.held...), sinks.Offsets(tt.delivered...), 0, nil)
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
			check("truncated by Kafka", p.TruncatedByKafka, tt.want.truncated)
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
	p, err := Merge(context.Background(), "t", 0, Bounds{Committed: 1000, CheckMissing: true}, sinks.Offsets(held...), sinks.Offsets(span(0, 1000)...), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Missing.Count != 500 || len(p.Missing.Ranges) != 10 || !p.Missing.Truncated {
		t.Fatalf("missing: count %d, %d ranges listed, truncated %v; want 500, 10, true", p.Missing.Count, len(p.Missing.Ranges), p.Missing.Truncated)
	}
}

func TestMergeRefusesUnorderedSink(t *testing.T) {
	if _, err := Merge(context.Background(), "t", 0, Bounds{Committed: 3, CheckMissing: true}, sinks.Offsets(2, 1), sinks.Offsets(0, 1, 2), 0, nil); err == nil {
		t.Fatal("offsets out of order: no error")
	}
}

// rec is a record of offset off with value v at second sec.
func rec(off int64, v string, sec int64) sinks.Record {
	return sinks.Record{Offset: off, Key: []byte("k"), Value: []byte(v), Time: time.Unix(sec, 0)}
}

// TestMergeComparesRecords: a record held at the right offset but not
// Kafka's (another value, another timestamp, a copy that differs) is
// mismatched; a sink that keeps no record to compare counts its offsets
// as not compared, never as matched.
func TestMergeComparesRecords(t *testing.T) {
	delivered := []sinks.Record{rec(0, "a", 1), rec(1, "b", 1), rec(2, "c", 1), rec(3, "d", 1), rec(4, "e", 1)}
	held := []sinks.Record{
		rec(0, "a", 1),
		rec(1, "B", 1),                 // another value
		rec(2, "c", 2),                 // another timestamp: another run's record
		rec(3, "d", 1), rec(3, "x", 1), // two copies that differ
		rec(4, "e", 1),
	}
	b := Bounds{Committed: 5, CheckMissing: true}
	p, err := Merge(context.Background(), "t", 0, b, sinks.Records(held...), sinks.Records(delivered...), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Compared != 5 || p.NotCompared != 0 {
		t.Errorf("compared %d, not compared %d; want 5, 0", p.Compared, p.NotCompared)
	}
	if want := []Range{{1, 4}}; !slices.Equal(p.Mismatched.Ranges, want) || p.Mismatched.Count != 3 {
		t.Errorf("mismatched %v (count %d), want %v (count 3)", p.Mismatched.Ranges, p.Mismatched.Count, want)
	}
	if p.Clean() {
		t.Error("Clean() with mismatched records")
	}

	p, err = Merge(context.Background(), "t", 0, b, sinks.Records(delivered...), sinks.Records(delivered...), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Clean() || p.Compared != 5 || p.Mismatched.Count != 0 {
		t.Errorf("the same records: clean %v, compared %d, mismatched %d; want true, 5, 0", p.Clean(), p.Compared, p.Mismatched.Count)
	}

	p, err = Merge(context.Background(), "t", 0, b, sinks.Offsets(0, 1, 2, 3, 4), sinks.Records(delivered...), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Clean() || p.Compared != 0 || p.NotCompared != 5 {
		t.Errorf("offsets only: clean %v, compared %d, not compared %d; want true, 0, 5", p.Clean(), p.Compared, p.NotCompared)
	}
}

func TestChecksumTellsRecordsApart(t *testing.T) {
	at := time.UnixMilli(1700000000123)
	base := sinks.Checksum([]byte("k"), []byte("v"), at)
	for _, tc := range []struct {
		name       string
		key, value []byte
		at         time.Time
	}{
		{"nil key", nil, []byte("v"), at},
		{"empty key", []byte{}, []byte("v"), at},
		{"tombstone", []byte("k"), nil, at},
		{"empty value", []byte("k"), []byte{}, at},
		{"key and value shifted", []byte("kv"), []byte{}, at},
		{"a millisecond later", []byte("k"), []byte("v"), at.Add(time.Millisecond)},
	} {
		if sinks.Checksum(tc.key, tc.value, tc.at) == base {
			t.Errorf("%s: same sum as k/v", tc.name)
		}
	}
	if sinks.Checksum(nil, []byte{}, at) == sinks.Checksum([]byte{}, nil, at) {
		t.Error("nil key and empty value: same sum as empty key and nil value")
	}
	// Kafka's precision: what is below the millisecond is not the record's.
	if sinks.Checksum([]byte("k"), []byte("v"), at.Add(999*time.Microsecond)) != base {
		t.Error("a sub-millisecond difference changed the sum")
	}
}
