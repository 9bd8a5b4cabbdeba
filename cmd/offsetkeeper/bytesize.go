package main

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a flag of a size in bytes: a whole number, optionally with a
// binary unit (KiB, MiB, GiB), as in 256MiB.
type byteSize int64

var byteUnits = []struct {
	suffix string
	factor int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

func (s *byteSize) String() string {
	v := int64(*s)
	for _, u := range byteUnits[:3] {
		if v != 0 && v%u.factor == 0 {
			return fmt.Sprintf("%d%s", v/u.factor, u.suffix)
		}
	}
	return strconv.FormatInt(v, 10)
}

func (s *byteSize) Set(text string) error {
	num, factor := strings.TrimSpace(text), int64(1)
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, factor = strings.TrimSpace(n), u.factor
			break
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v <= 0 || v > (1<<62)/factor {
		return fmt.Errorf("size %q: want a positive whole number of bytes, optionally with KiB, MiB or GiB (e.g. 256MiB)", text)
	}
	*s = byteSize(v * factor)
	return nil
}

func (s *byteSize) Type() string { return "size" }
