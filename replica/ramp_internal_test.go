package replica

import "testing"

// TestRampRules: the ramp starts at an eighth of MaxBlockRows (at least
// 1,024, at most MaxBlockRows), doubles after a full block up to
// MaxBlockRows, stays after a block of a caught-up partition that held at
// least its start, and starts again after a smaller one (a trickle).
func TestRampRules(t *testing.T) {
	pt := &partition{r: &Replica{cfg: Config{MaxBlockRows: 65536}}}
	var got []int
	step := func(rows int) {
		limit := pt.blockRows()
		got = append(got, limit)
		pt.ramped(rows, limit)
	}
	step(9000)  // full at 8192
	step(16384) // full
	step(40000) // full at 32768
	step(70000) // full at 65536: stays
	step(20000) // caught up with many rows: stays
	step(10)    // a trickle: starts again
	step(8192)
	want := []int{8192, 16384, 32768, 65536, 65536, 65536, 8192}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("block limits %v, want %v", got, want)
		}
	}
	if pt.blockRows() != 16384 {
		t.Errorf("after a full block of 8192: limit %d, want 16384", pt.blockRows())
	}
	for _, c := range []struct{ max, start int }{{100, 100}, {5000, 1024}, {1 << 20, 1 << 17}} {
		if s := rampRows(c.max); s != c.start {
			t.Errorf("max-block-rows %d: the ramp starts at %d, want %d", c.max, s, c.start)
		}
	}
}
