package admin

import (
	"testing"
	"time"
)

// TestParseAgo covers the duration forms --by-duration accepts.
func TestParseAgo(t *testing.T) {
	good := map[string]time.Duration{
		"PT1H": time.Hour, "pt1h": time.Hour, "PT30M": 30 * time.Minute, "PT45S": 45 * time.Second, "PT1.5S": 1500 * time.Millisecond,
		"P1D": 24 * time.Hour, "P1DT12H": 36 * time.Hour, "P2DT3H4M5S": 51*time.Hour + 4*time.Minute + 5*time.Second,
		"1h": time.Hour, "90m": 90 * time.Minute, "1h30m": 90 * time.Minute, "250ms": 250 * time.Millisecond,
	}
	for s, want := range good {
		if got, err := ParseAgo(s); err != nil || got != want {
			t.Errorf("ParseAgo(%q) = %s, %v; want %s", s, got, err, want)
		}
	}
	for _, s := range []string{"", "P", "PT", "P1DT", "P1W", "P1Y", "P1M", "PT1X", "1d", "-1h", "0s", "PT0S", "P-1D", "abc", "P99999999999D"} {
		if d, err := ParseAgo(s); err == nil {
			t.Errorf("ParseAgo(%q) = %s, want an error", s, d)
		}
	}
}
