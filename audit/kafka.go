package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// deliveredStream is the records a read_committed reader of one partition
// is delivered from a position up to an end, as offsets and, with sums,
// checksums: aborted records and transaction markers never come.
type deliveredStream struct {
	cur *kafka.Cursor
	pos int64 // where the next fetch starts
	end int64
	// entries of the batch in hand: offsets and sums, copied, so that its
	// memory is freed at once.
	entries []sinks.Entry
	i       int
	// sums tells whether to sum the records: not for a sink that keeps
	// none to compare.
	sums bool
	// timeout bounds each fetch; zero for none. brokers are named when
	// it passes.
	timeout time.Duration
	brokers []string
}

// newDeliveredStream opens cur's records [from, end).
func newDeliveredStream(cur *kafka.Cursor, from, end int64, sums bool) *deliveredStream {
	cur.SeekTo(from)
	return &deliveredStream{cur: cur, pos: from, end: end, sums: sums}
}

func (s *deliveredStream) Next(ctx context.Context) (sinks.Entry, bool, error) {
	for s.i >= len(s.entries) {
		if s.pos >= s.end {
			return sinks.Entry{}, false, nil
		}
		b, err := s.fetch(ctx)
		if err != nil {
			return sinks.Entry{}, false, fmt.Errorf("read %s at %d: %w", s.cur.Partition(), s.pos, err)
		}
		s.entries, s.i = s.entries[:0], 0
		for j := range b.Records {
			r := &b.Records[j]
			// A fetch may start before the offset asked for.
			if r.Offset < s.pos || r.Offset >= s.end {
				continue
			}
			e := sinks.Entry{Offset: r.Offset, Copies: 1}
			if s.sums {
				e.Sum, e.Summed = r.Sum(), true
			}
			s.entries = append(s.entries, e)
		}
		s.cur.Free(b.Bytes)
		if b.Next > s.pos {
			s.pos = b.Next
		}
	}
	s.i++
	return s.entries[s.i-1], true, nil
}

// fetch is one Fetch, within the timeout.
func (s *deliveredStream) fetch(ctx context.Context) (kafka.PolledBatch, error) {
	if s.timeout <= 0 {
		return s.cur.Fetch(ctx)
	}
	fctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	b, err := s.cur.Fetch(fctx)
	return b, kafkaTimeout(ctx, fctx, s.brokers, s.timeout, err)
}

func (s *deliveredStream) Close() error { return s.cur.Close() }
