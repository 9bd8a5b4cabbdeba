package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The reset's target flags and the parsing of their values.

// The targets of a reset, one of which is given: each is a flag.
const (
	toEarliest = "to-earliest"
	toLatest   = "to-latest"
	toCurrent  = "to-current"
	toOffset   = "to-offset"
	shiftBy    = "shift-by"
	toDatetime = "to-datetime"
	byDuration = "by-duration"
	fromFile   = "from-file"
)

var resetTargets = []string{toEarliest, toLatest, toCurrent, toOffset, shiftBy, toDatetime, byDuration, fromFile}

func targetList() string {
	names := make([]string, len(resetTargets))
	for i, n := range resetTargets {
		names[i] = "--" + n
	}
	return strings.Join(names, ", ")
}

// parseDatetime parses an RFC 3339 time at or after 1970.
func parseDatetime(s string) (time.Time, error) {
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

// parseAgo parses a positive duration: ISO-8601's PnDTnHnMnS (days of 24
// hours; no years, months or weeks, whose length varies) or Go's (90m,
// 1h30m).
func parseAgo(s string) (time.Duration, error) {
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
