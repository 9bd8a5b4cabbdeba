package audit

import "context"

// sliceStream is a Stream of offsets in memory, rising, each held once or
// as many times as it repeats. For tests and for small sets.
type sliceStream struct {
	offs []int64
	i    int
}

// Offsets returns a Stream of offs, which must rise; an offset repeated
// next to itself counts as held that many times.
func Offsets(offs ...int64) Stream { return &sliceStream{offs: offs} }

func (s *sliceStream) Next(context.Context) (int64, int64, bool, error) {
	if s.i >= len(s.offs) {
		return 0, 0, false, nil
	}
	off, n := s.offs[s.i], int64(0)
	for s.i < len(s.offs) && s.offs[s.i] == off {
		s.i++
		n++
	}
	return off, n, true, nil
}

func (s *sliceStream) Close() error { return nil }
