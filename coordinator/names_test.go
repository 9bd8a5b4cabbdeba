package coordinator

import (
	"strings"
	"testing"
)

func TestLegal(t *testing.T) {
	for _, c := range []struct {
		s    string
		max  int
		want bool
	}{
		{"orders", 249, true},
		{"a.b_c-D9", 249, true},
		{"", 249, false},
		{strings.Repeat("x", 249), 249, true},
		{strings.Repeat("x", 250), 249, false},
		{"has space", 249, false},
		{"slash/", 249, false},
		{"ünicode", 249, false},
		{"nul\x00", 249, false},
	} {
		if got := legal(c.s, c.max); got != c.want {
			t.Errorf("legal(%.20q, %d) = %v, want %v", c.s, c.max, got, c.want)
		}
	}
}
