package audit

import "fmt"

// DefaultMaxRanges is how many ranges a finding lists per partition when
// Config.MaxRanges is zero; its count is exact beyond that.
const DefaultMaxRanges = 100

// Range is the offsets [From, Next) of a partition.
type Range struct {
	From int64 `json:"from"`
	Next int64 `json:"next"`
}

// Len is the number of offsets in r.
func (r Range) Len() int64 { return r.Next - r.From }

func (r Range) String() string {
	if r.Len() == 1 {
		return fmt.Sprint(r.From)
	}
	return fmt.Sprintf("[%d, %d)", r.From, r.Next)
}

// Ranges is one kind of finding of a partition: the offsets found, as
// ranges. Ranges lists at most the first limit ranges (Truncated then
// says more were found); Count counts every offset found all the same, so
// that memory is bounded by the limit and the totals stay exact.
type Ranges struct {
	Count     int64   `json:"count"`
	Ranges    []Range `json:"ranges"`
	Truncated bool    `json:"truncated,omitempty"`

	limit int
	last  Range // the range being extended, listed or not
	open  bool
}

func newRanges(limit int) Ranges { return Ranges{Ranges: []Range{}, limit: limit} }

// add records the offsets [from, next), which come in rising order.
func (rs *Ranges) add(from, next int64) {
	if next <= from {
		return
	}
	rs.Count += next - from
	if rs.open && from == rs.last.Next {
		rs.last.Next = next
		if n := len(rs.Ranges); n > 0 && rs.Ranges[n-1].From == rs.last.From {
			rs.Ranges[n-1].Next = next
		}
		return
	}
	rs.last, rs.open = Range{From: from, Next: next}, true
	if len(rs.Ranges) < rs.limit {
		rs.Ranges = append(rs.Ranges, rs.last)
	} else {
		rs.Truncated = true
	}
}
