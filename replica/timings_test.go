package replica

import (
	"slices"
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	h := newHistogram(1, 4, 3) // 1, 4, 16
	for _, v := range []float64{0.5, 1, 3, 16, 17, 100} {
		h.observe(v)
	}
	s := h.snapshot()
	if s.Count != 6 || s.Sum != 137.5 {
		t.Errorf("count %d sum %v, want 6 and 137.5", s.Count, s.Sum)
	}
	if !slices.Equal(s.Bounds, []float64{1, 4, 16}) || !slices.Equal(s.Buckets, []uint64{2, 3, 4}) {
		t.Errorf("bounds %v buckets %v", s.Bounds, s.Buckets)
	}
}

func TestTimingsObserved(t *testing.T) {
	r := &Replica{hist: newTimings()}
	r.observeWrite(100, 20*time.Millisecond)
	r.observeWrite(300, 40*time.Millisecond)
	r.observeCommit(5 * time.Millisecond)
	tm := r.Timings()
	if tm.BlockRows.Count != 2 || tm.BlockRows.Sum != 400 || tm.SinkWrite.Count != 2 || tm.Commit.Count != 1 {
		t.Errorf("timings %+v", tm)
	}
}
