package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
)

// deliveredStream is the offsets of the records a read_committed reader of
// one partition is delivered from a position up to an end: aborted records
// and transaction markers never come.
type deliveredStream struct {
	cur  *kafka.Cursor
	pos  int64 // where the next fetch starts
	end  int64
	offs []int64 // the offsets of the batch in hand, copied: its memory is freed at once
	i    int
	// timeout bounds each fetch; zero for none.
	timeout time.Duration
}

// newDeliveredStream opens cur's records [from, end).
func newDeliveredStream(cur *kafka.Cursor, from, end int64) *deliveredStream {
	cur.SeekTo(from)
	return &deliveredStream{cur: cur, pos: from, end: end}
}

func (s *deliveredStream) Next(ctx context.Context) (int64, int64, bool, error) {
	for s.i >= len(s.offs) {
		if s.pos >= s.end {
			return 0, 0, false, nil
		}
		b, err := s.fetch(ctx)
		if err != nil {
			return 0, 0, false, fmt.Errorf("read %s at %d: %w", s.cur.Partition(), s.pos, err)
		}
		s.offs, s.i = s.offs[:0], 0
		for _, r := range b.Records {
			// A fetch may start before the offset asked for.
			if r.Offset >= s.pos && r.Offset < s.end {
				s.offs = append(s.offs, r.Offset)
			}
		}
		s.cur.Free(b.Bytes)
		if b.Next > s.pos {
			s.pos = b.Next
		}
	}
	off := s.offs[s.i]
	s.i++
	return off, 1, true, nil
}

// fetch is one Fetch, within the timeout.
func (s *deliveredStream) fetch(ctx context.Context) (kafka.PolledBatch, error) {
	if s.timeout <= 0 {
		return s.cur.Fetch(ctx)
	}
	fctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	b, err := s.cur.Fetch(fctx)
	if err != nil && ctx.Err() == nil && fctx.Err() != nil {
		return b, fmt.Errorf("kafka did not answer within %s: %w", s.timeout, err)
	}
	return b, err
}

func (s *deliveredStream) Close() error { return s.cur.Close() }
