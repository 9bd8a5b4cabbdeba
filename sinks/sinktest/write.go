package sinktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// runWrite runs the subtests of Write's rules. open opens a sink for a
// subtest; reading does too, and skips a sink without a Reader.
func runWrite(t *testing.T, open, reading func(t *testing.T) (sinks.Sink, Reader), opts Options) {
	ctx := context.Background()

	t.Run("RoundTrip", func(t *testing.T) {
		s, r := reading(t)
		b := roundTripBlock()
		write(t, s, b)
		check(t, r, b.Topic, b.Partition, b.Records, true)
	})

	t.Run("Blocks", func(t *testing.T) {
		s, r := reading(t)
		var want []sinks.Record
		for _, b := range []*sinks.Block{
			block("orders", 0, 0, 3, 0, 1, 2),
			block("orders", 0, 3, 7, 3, 4, 6),
			block("orders", 0, 7, 10, 7, 9),
		} {
			write(t, s, b)
			want = append(want, b.Records...)
		}
		check(t, r, "orders", 0, want, true)
	})

	t.Run("PartitionsAndTopics", func(t *testing.T) {
		s, r := reading(t)
		blocks := []*sinks.Block{
			block("orders", 0, 0, 2, 0, 1),
			block("orders", 1, 0, 3, 0, 1, 2),
			block("orders.v2_eu-west", 0, 0, 2, 0, 1),
			block("payments", 7, 40, 42, 40, 41),
			block("orders", 0, 2, 4, 2, 3),
			block("orders", 1, 3, 4, 3),
			block("orders.v2_eu-west", 0, 2, 3, 2),
		}
		want := map[part][]sinks.Record{}
		for i, b := range blocks {
			// Same offsets in different partitions must not be confused:
			// make every record tell where it belongs.
			for j := range b.Records {
				b.Records[j].Value = fmt.Appendf(nil, "%s/%d #%d", b.Topic, b.Partition, i)
			}
			write(t, s, b)
			k := part{b.Topic, b.Partition}
			want[k] = append(want[k], b.Records...)
		}
		for k, recs := range want {
			check(t, r, k.topic, k.partition, recs, true)
		}
		check(t, r, "orders", 2, nil, true)
		check(t, r, "never-written", 0, nil, true)
	})

	t.Run("EmptyBlock", func(t *testing.T) {
		s, r := reading(t)
		write(t, s, block("orders", 5, 0, 10))
		check(t, r, "orders", 5, nil, true)
		first := block("orders", 5, 10, 13, 10, 11, 12)
		write(t, s, first)
		write(t, s, block("orders", 5, 13, 20))
		check(t, r, "orders", 5, first.Records, true)
		last := block("orders", 5, 20, 22, 20, 21)
		write(t, s, last)
		check(t, r, "orders", 5, concat(first.Records, last.Records), true)
	})

	t.Run("BlockNotRetained", func(t *testing.T) {
		s, r := reading(t)
		b := roundTripBlock()
		pristine := cloneBlock(b)
		write(t, s, b)
		if d := diffBlocks(b, pristine); d != "" {
			t.Errorf("Write changed the block: %s", d)
		}
		// The caller may reuse its buffers once Write has returned.
		for i := range b.Records {
			rec := &b.Records[i]
			scribble(rec.Key)
			scribble(rec.Value)
			for j := range rec.Headers {
				scribble(rec.Headers[j].Value)
				rec.Headers[j].Key = "scribbled"
			}
		}
		b.Records = b.Records[:1]
		check(t, r, pristine.Topic, pristine.Partition, pristine.Records, true)
	})

	t.Run("Replay", func(t *testing.T) {
		s, r := reading(t)
		a := block("orders", 3, 0, 5, 0, 1, 2, 3, 4)
		b := block("orders", 3, 5, 10, 5, 7, 9)
		write(t, s, a)
		write(t, s, b)
		// A crash between Write and the commit: the replica writes the same
		// block again, from buffers of its own.
		write(t, s, cloneBlock(b))
		check(t, r, "orders", 3, concat(a.Records, b.Records), opts.ReplayExact)
		c := block("orders", 3, 10, 12, 10, 11)
		write(t, s, c)
		check(t, r, "orders", 3, concat(a.Records, b.Records, c.Records), opts.ReplayExact)
	})

	t.Run("Redeliver", func(t *testing.T) {
		s, r := reading(t)
		// Offset 12 is a transaction marker: no record, in either delivery.
		marked := func(from, next int64) []int64 {
			return slices.DeleteFunc(Seq(from, next), func(o int64) bool { return o == 12 })
		}
		all := block("orders", 4, 0, 30, marked(0, 30)...).Records
		write(t, s, block("orders", 4, 0, 10, marked(0, 10)...))
		write(t, s, block("orders", 4, 10, 20, marked(10, 20)...))
		write(t, s, block("orders", 4, 20, 25, marked(20, 25)...))
		// An operator reset to 5: the same records come again, in blocks
		// with other bounds, under the next generation.
		for _, b := range []*sinks.Block{
			block("orders", 4, 5, 12, marked(5, 12)...),
			block("orders", 4, 12, 13),
			block("orders", 4, 13, 22, marked(13, 22)...),
			block("orders", 4, 22, 30, marked(22, 30)...),
		} {
			b.Generation = 1
			write(t, s, b)
		}
		check(t, r, "orders", 4, all, opts.ReplayOverlap)
	})

	t.Run("CancelledContext", func(t *testing.T) {
		s, r := open(t)
		a := block("orders", 6, 0, 3, 0, 1, 2)
		b := block("orders", 6, 3, 6, 3, 4, 5)
		write(t, s, a)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := s.Write(cctx, b)
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Write with a cancelled context: %v, want nil or an error wrapping context.Canceled", err)
		}
		if err == nil && r != nil {
			check(t, r, "orders", 6, concat(a.Records, b.Records), true)
		}
		// After an error the replica rewinds and writes the block again; after
		// nil it may write it again anyway, after a crash. Whatever the failed
		// write left behind must give way to that.
		write(t, s, cloneBlock(b))
		c := block("orders", 6, 6, 8, 6, 7)
		write(t, s, c)
		if r != nil {
			check(t, r, "orders", 6, concat(a.Records, b.Records, c.Records), opts.ReplayExact)
		}
	})

	t.Run("WriteAfterClose", func(t *testing.T) {
		s, r := open(t)
		a := block("orders", 8, 0, 2, 0, 1)
		write(t, s, a)
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Write(ctx, block("orders", 8, 2, 4, 2, 3)); err == nil {
			t.Error("Write after Close returned nil")
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close: %v, want nil", err)
		}
		if r != nil {
			check(t, r, "orders", 8, a.Records, true)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		s, r := open(t)
		const partitions, blocks = 8, 5
		want := make([][]sinks.Record, partitions)
		var wg sync.WaitGroup
		for p := range partitions {
			wg.Go(func() {
				for i := range blocks {
					from := int64(i * 4)
					b := block("orders", p, from, from+4, Seq(from, from+4)...)
					if err := s.Write(ctx, b); err != nil {
						t.Errorf("Write %s: %v", b, err)
						return
					}
					want[p] = append(want[p], b.Records...)
				}
			})
		}
		wg.Wait()
		if r != nil && !t.Failed() {
			for p := range partitions {
				check(t, r, "orders", p, want[p], true)
			}
		}
	})

	t.Run("Fencing", func(t *testing.T) {
		if !opts.Fences {
			t.Skip("the sink does not fence (Options.Fences)")
		}
		s, r := open(t)
		a := block("orders", 9, 0, 3, 0, 1, 2)
		a.Epoch = 2
		write(t, s, a)
		stale := block("orders", 9, 3, 6, 3, 4, 5)
		stale.Epoch = 1
		if err := s.Write(ctx, stale); !errors.Is(err, sinks.ErrFenced) {
			t.Fatalf("Write from epoch 1 after epoch 2: %v, want an error wrapping sinks.ErrFenced", err)
		}
		if r != nil {
			check(t, r, "orders", 9, a.Records, true)
		}
		other := block("orders", 10, 0, 1, 0)
		other.Epoch = 1
		write(t, s, other) // epochs are per partition
		b := cloneBlock(stale)
		b.Epoch = 3
		write(t, s, b)
		if r != nil {
			check(t, r, "orders", 9, concat(a.Records, b.Records), true)
		}
	})
}
