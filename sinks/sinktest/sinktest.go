// Package sinktest checks that a sink keeps the contract of package sinks,
// in the manner of testing/fstest: a sink's own test calls Run with a
// constructor and a way to read back what the sink holds.
//
//	func TestConformance(t *testing.T) {
//		sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
//			dir := t.TempDir()
//			s, err := file.New(dir)
//			...
//			return s, sinktest.ReaderFunc(func(t *testing.T, topic string, partition int) []sinks.Record {
//				...file.ReadAll(dir, topic, partition)...
//			})
//		}, sinktest.Options{ReplayExact: true})
//	}
//
// What the suite holds every sink to, beyond the contract's words:
//
//   - a record reads back whole: offset, key, value, timestamp to the
//     millisecond (compared as instants, so any location will do) and
//     headers in order; nil and empty are different for keys, values and
//     header values (a nil value is a tombstone), while no headers may read
//     back as nil or empty;
//   - values of any bytes and size (the suite writes 1 MiB) are fine;
//   - a block without records (From < Next) is accepted and adds nothing;
//   - a sink neither changes a block nor keeps its slices after Write;
//   - a Write with a cancelled context either fails with an error wrapping
//     context.Canceled or stores the block; either way the sink stays usable;
//   - Write after Close fails and stores nothing; Close is idempotent: a
//     second Close returns nil too;
//   - Write is safe for concurrent use on different partitions.
//
// A sink that implements sinks.BatchWriter is held to its contract too:
//
//   - the blocks of several partitions and topics, in any order, go in with
//     one WriteBlocks, read back as the same blocks written one Write each
//     read back, and a call written again (a replay) adds nothing to a
//     sink that claims ReplayExact; a Resumer then resumes every partition
//     from its block's Next;
//   - errs has one entry per block; a fenced block (Fences) fails alone,
//     and the others of its call are stored;
//   - WriteBlocks neither changes the blocks nor keeps their slices, keeps
//     Write's rules on a cancelled context and after Close, and is safe for
//     concurrent use on different partitions.
//
// Each subtest opens its own sink, and closes it when it ends.
package sinktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Reader reads back what a sink holds, by a path of its own (the files, the
// database, the bytes written to a writer), not through the sink.
type Reader interface {
	// Records returns the records stored for one partition ordered by
	// offset; none for a partition never written. A sink that does not
	// deduplicate may hold an offset more than once: the copies come
	// together. Records must work after the sink is closed, and reports its
	// own failures through t.
	Records(t *testing.T, topic string, partition int) []sinks.Record
}

// ReaderFunc lets a function be a Reader.
type ReaderFunc func(t *testing.T, topic string, partition int) []sinks.Record

// Records calls f.
func (f ReaderFunc) Records(t *testing.T, topic string, partition int) []sinks.Record {
	return f(t, topic, partition)
}

// Options declares what a sink promises beyond the contract; a subtest that
// checks a promise the sink does not make checks only what every sink owes.
type Options struct {
	// ReplayExact: a block written again with the same range (after a crash)
	// is stored once. Without it the suite checks that every record is
	// there, in offset order, and that no other record is.
	ReplayExact bool
	// ReplayOverlap: after an operator reset, offsets re-delivered in blocks
	// with other bounds are stored once when the re-delivery is complete.
	ReplayOverlap bool
	// Fences: a block with an epoch lower than one the sink already wrote
	// for the partition is refused with an error wrapping sinks.ErrFenced,
	// and nothing of it is stored.
	Fences bool
}

// Run runs the suite. newSink is called once per subtest, with the
// subtest's t, and returns a new, empty sink and its reader. A sink that
// keeps nothing it can read back (a discarding sink) passes a nil Reader:
// the subtests that read back are then skipped and the others still run.
func Run(t *testing.T, newSink func(t *testing.T) (sinks.Sink, Reader), opts Options) {
	open := func(t *testing.T) (sinks.Sink, Reader) {
		t.Helper()
		s, r := newSink(t)
		if s == nil {
			t.Fatal("newSink returned a nil sink")
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close at the end of the subtest: %v", err)
			}
		})
		return s, r
	}
	reading := func(t *testing.T) (sinks.Sink, Reader) {
		t.Helper()
		s, r := open(t)
		if r == nil {
			t.Skip("the sink keeps nothing to read back")
		}
		return s, r
	}
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
			return slices.DeleteFunc(seq(from, next), func(o int64) bool { return o == 12 })
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
					b := block("orders", p, from, from+4, seq(from, from+4)...)
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

	runBatch(t, open, opts)

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

// runBatch runs the subtests of sinks.BatchWriter; they skip a sink that
// does not implement it.
func runBatch(t *testing.T, open func(t *testing.T) (sinks.Sink, Reader), opts Options) {
	ctx := context.Background()
	batch := func(t *testing.T) (sinks.BatchWriter, sinks.Sink, Reader) {
		t.Helper()
		s, r := open(t)
		bw, ok := s.(sinks.BatchWriter)
		if !ok {
			t.Skip("the sink does not implement sinks.BatchWriter")
		}
		return bw, s, r
	}

	t.Run("WriteBlocks", func(t *testing.T) {
		bw, s, r := batch(t)
		rounds := [][]*sinks.Block{{
			block("orders", 1, 0, 4, 0, 2, 3),
			block("payments", 7, 40, 42, 40, 41),
			block("orders", 0, 0, 3, 0, 1, 2),
			block("orders", 2, 0, 5), // markers only
			block("orders.v2_eu-west", 0, 0, 2, 0, 1),
		}, {
			block("orders", 2, 5, 7, 5, 6),
			block("orders", 0, 3, 6, 3, 4, 5),
			block("payments", 7, 42, 50),
			block("orders", 1, 4, 5, 4),
		}}
		want := map[part][]sinks.Record{}
		var pristine [][]*sinks.Block
		for n, round := range rounds {
			var clean []*sinks.Block
			for _, b := range round {
				// Same offsets in different partitions must not be confused.
				for j := range b.Records {
					b.Records[j].Value = fmt.Appendf(nil, "%s/%d round %d", b.Topic, b.Partition, n)
				}
				k := part{b.Topic, b.Partition}
				want[k] = append(want[k], cloneBlock(b).Records...)
				clean = append(clean, cloneBlock(b))
			}
			pristine = append(pristine, clean)
			writeBlocks(t, bw, round)
			for i, b := range round {
				if d := diffBlocks(b, clean[i]); d != "" {
					t.Errorf("WriteBlocks changed block %d: %s", i, d)
				}
			}
			// The caller may reuse its buffers once WriteBlocks has returned.
			for _, b := range round {
				for j := range b.Records {
					scribble(b.Records[j].Key)
					scribble(b.Records[j].Value)
				}
			}
		}
		// A crash between the call and the commits: the replica writes the
		// last round again, from buffers of its own.
		last := pristine[len(pristine)-1]
		replay := make([]*sinks.Block, len(last))
		for i, b := range last {
			replay[i] = cloneBlock(b)
		}
		writeBlocks(t, bw, replay)
		if r != nil {
			for k, recs := range want {
				check(t, r, k.topic, k.partition, recs, opts.ReplayExact)
			}
			check(t, r, "orders", 3, nil, true)
		}
		if res, ok := s.(sinks.Resumer); ok {
			for _, b := range last {
				next, _, ok, err := res.Resume(ctx, b.Topic, b.Partition)
				if err != nil || !ok || next != b.Next {
					t.Errorf("Resume %s/%d after WriteBlocks = %d, %v, %v; want %d, true, nil", b.Topic, b.Partition, next, ok, err, b.Next)
				}
			}
		}

		// The same blocks written one Write each, to a sink of their own,
		// read back the same.
		ref, refR := open(t)
		if r == nil || refR == nil {
			return
		}
		for _, round := range append(pristine, last) {
			for _, b := range round {
				write(t, ref, cloneBlock(b))
			}
		}
		for k := range want {
			got, w := r.Records(t, k.topic, k.partition), refR.Records(t, k.topic, k.partition)
			if len(got) != len(w) {
				t.Errorf("%s/%d: WriteBlocks stored %d records, Write %d: offsets %v and %v", k.topic, k.partition, len(got), len(w), offsets(got), offsets(w))
				continue
			}
			for i := range w {
				if d := diffRecords(&got[i], &w[i]); d != "" {
					t.Errorf("%s/%d: record %d differs from Write's: %s", k.topic, k.partition, i, d)
				}
			}
		}
	})

	t.Run("WriteBlocksFencing", func(t *testing.T) {
		if !opts.Fences {
			t.Skip("the sink does not fence (Options.Fences)")
		}
		bw, _, r := batch(t)
		a := block("orders", 9, 0, 3, 0, 1, 2)
		a.Epoch = 2
		writeBlocks(t, bw, []*sinks.Block{a})
		stale := block("orders", 9, 3, 6, 3, 4, 5)
		others := []*sinks.Block{block("orders", 10, 0, 1, 0), block("orders", 11, 0, 2, 0, 1)}
		errs := bw.WriteBlocks(ctx, []*sinks.Block{others[0], stale, others[1]})
		if len(errs) != 3 {
			t.Fatalf("WriteBlocks of 3 blocks returned %d errors", len(errs))
		}
		if !errors.Is(errs[1], sinks.ErrFenced) {
			t.Errorf("block from epoch 1 after epoch 2: %v, want an error wrapping sinks.ErrFenced", errs[1])
		}
		if errs[0] != nil || errs[2] != nil {
			t.Errorf("the other blocks of the call: %v, %v; want nil: a fenced block fails alone", errs[0], errs[2])
		}
		if r != nil {
			check(t, r, "orders", 9, a.Records, true)
			check(t, r, "orders", 10, others[0].Records, true)
			check(t, r, "orders", 11, others[1].Records, true)
		}
	})

	t.Run("WriteBlocksLifecycle", func(t *testing.T) {
		bw, s, r := batch(t)
		if errs := bw.WriteBlocks(ctx, nil); len(errs) != 0 {
			t.Errorf("WriteBlocks of no blocks = %v, want none", errs)
		}
		a := []*sinks.Block{block("orders", 6, 0, 3, 0, 1, 2), block("orders", 7, 0, 2, 0, 1)}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		errs := bw.WriteBlocks(cctx, a)
		if len(errs) != len(a) {
			t.Fatalf("WriteBlocks of %d blocks returned %d errors", len(a), len(errs))
		}
		for i, err := range errs {
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("WriteBlocks with a cancelled context, block %d: %v, want nil or an error wrapping context.Canceled", i, err)
			}
		}
		// Whatever the cancelled call left behind gives way to the blocks
		// written again.
		writeBlocks(t, bw, []*sinks.Block{cloneBlock(a[0]), cloneBlock(a[1])})
		if r != nil {
			check(t, r, "orders", 6, a[0].Records, opts.ReplayExact)
			check(t, r, "orders", 7, a[1].Records, opts.ReplayExact)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		errs = bw.WriteBlocks(ctx, []*sinks.Block{block("orders", 6, 3, 4, 3), block("orders", 8, 0, 1, 0)})
		if len(errs) != 2 || errs[0] == nil || errs[1] == nil {
			t.Errorf("WriteBlocks after Close = %v, want an error for each block", errs)
		}
		if r != nil {
			check(t, r, "orders", 6, a[0].Records, opts.ReplayExact)
			check(t, r, "orders", 8, nil, true)
		}
	})

	t.Run("WriteBlocksConcurrent", func(t *testing.T) {
		bw, _, r := batch(t)
		const callers, partitions, rounds = 4, 3, 4
		want := make([][]sinks.Record, callers*partitions)
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for i := range rounds {
					from := int64(i * 3)
					var blocks []*sinks.Block
					for p := c * partitions; p < (c+1)*partitions; p++ {
						blocks = append(blocks, block("orders", p, from, from+3, seq(from, from+3)...))
					}
					for j, err := range bw.WriteBlocks(ctx, blocks) {
						if err != nil {
							t.Errorf("WriteBlocks %s: %v", blocks[j], err)
							return
						}
					}
					for _, b := range blocks {
						want[b.Partition] = append(want[b.Partition], b.Records...)
					}
				}
			})
		}
		wg.Wait()
		if r != nil && !t.Failed() {
			for p := range want {
				check(t, r, "orders", p, want[p], true)
			}
		}
	})
}

// writeBlocks writes blocks in one call and stops the subtest unless every
// block went in.
func writeBlocks(t *testing.T, bw sinks.BatchWriter, blocks []*sinks.Block) {
	t.Helper()
	errs := bw.WriteBlocks(context.Background(), blocks)
	if len(errs) != len(blocks) {
		t.Fatalf("WriteBlocks of %d blocks returned %d errors", len(blocks), len(errs))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("WriteBlocks, block %d (%s): %v", i, blocks[i], err)
		}
	}
}

// write writes b and stops the subtest on error.
func write(t *testing.T, s sinks.Sink, b *sinks.Block) {
	t.Helper()
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatalf("Write %s: %v", b, err)
	}
}

// check compares what r reads for a partition with want, which is ordered by
// offset. With exact, each record must be there once; without, a record may
// repeat, but the offsets still come in order, each copy must be right and
// no other record may be there.
func check(t *testing.T, r Reader, topic string, partition int, want []sinks.Record, exact bool) {
	t.Helper()
	got := r.Records(t, topic, partition)
	where := fmt.Sprintf("%s/%d", topic, partition)
	if exact {
		if len(got) != len(want) {
			t.Errorf("%s: read %d records, want %d; offsets read %v, want %v", where, len(got), len(want), offsets(got), offsets(want))
			return
		}
		for i := range want {
			if d := diffRecords(&got[i], &want[i]); d != "" {
				t.Errorf("%s: record %d: %s", where, i, d)
			}
		}
		return
	}
	byOffset := make(map[int64]*sinks.Record, len(want))
	for i := range want {
		byOffset[want[i].Offset] = &want[i]
	}
	seen := make(map[int64]bool, len(want))
	for i := range got {
		if i > 0 && got[i].Offset < got[i-1].Offset {
			t.Errorf("%s: offset %d read after %d: want offset order", where, got[i].Offset, got[i-1].Offset)
		}
		w, ok := byOffset[got[i].Offset]
		if !ok {
			t.Errorf("%s: read offset %d, which was never written", where, got[i].Offset)
			continue
		}
		if d := diffRecords(&got[i], w); d != "" {
			t.Errorf("%s: record %d: %s", where, i, d)
		}
		seen[got[i].Offset] = true
	}
	for _, w := range want {
		if !seen[w.Offset] {
			t.Errorf("%s: offset %d missing", where, w.Offset)
		}
	}
}

// diffRecords describes how got differs from want, or returns "".
func diffRecords(got, want *sinks.Record) string {
	var d []string
	if got.Offset != want.Offset {
		d = append(d, fmt.Sprintf("offset %d, want %d", got.Offset, want.Offset))
	}
	if s := diffBytes("key", got.Key, want.Key); s != "" {
		d = append(d, s)
	}
	if s := diffBytes("value", got.Value, want.Value); s != "" {
		d = append(d, s)
	}
	if !got.Time.Equal(want.Time) {
		d = append(d, fmt.Sprintf("time %s, want %s", got.Time.UTC().Format(time.RFC3339Nano), want.Time.UTC().Format(time.RFC3339Nano)))
	}
	if len(got.Headers) != len(want.Headers) {
		d = append(d, fmt.Sprintf("%d headers, want %d", len(got.Headers), len(want.Headers)))
	} else {
		for i := range want.Headers {
			g, w := got.Headers[i], want.Headers[i]
			if g.Key != w.Key {
				d = append(d, fmt.Sprintf("header %d key %q, want %q", i, g.Key, w.Key))
			}
			if s := diffBytes(fmt.Sprintf("header %d value", i), g.Value, w.Value); s != "" {
				d = append(d, s)
			}
		}
	}
	if len(d) > 0 {
		return fmt.Sprintf("offset %d: %s", want.Offset, strings.Join(d, "; "))
	}
	return ""
}

func diffBytes(what string, got, want []byte) string {
	switch {
	case got == nil && want != nil:
		return fmt.Sprintf("%s nil, want %s", what, show(want))
	case got != nil && want == nil:
		return fmt.Sprintf("%s %s, want nil", what, show(got))
	case !bytes.Equal(got, want):
		return fmt.Sprintf("%s %s, want %s", what, show(got), show(want))
	}
	return ""
}

// show prints bytes for a failure message, cut short when long.
func show(b []byte) string {
	if len(b) > 64 {
		return fmt.Sprintf("%q... (%d bytes)", b[:64], len(b))
	}
	return fmt.Sprintf("%q", b)
}

func diffBlocks(got, want *sinks.Block) string {
	if got.Topic != want.Topic || got.Partition != want.Partition || got.Epoch != want.Epoch ||
		got.Generation != want.Generation || got.From != want.From || got.Next != want.Next {
		return fmt.Sprintf("block %s, want %s", got, want)
	}
	if len(got.Records) != len(want.Records) {
		return fmt.Sprintf("%d records, want %d", len(got.Records), len(want.Records))
	}
	for i := range want.Records {
		if d := diffRecords(&got.Records[i], &want.Records[i]); d != "" {
			return d
		}
	}
	return ""
}

func offsets(recs []sinks.Record) []int64 {
	o := make([]int64, len(recs))
	for i, r := range recs {
		o[i] = r.Offset
	}
	return o
}

// part names a partition.
type part struct {
	topic     string
	partition int
}

// base is the time of the suite's records; Kafka keeps milliseconds.
var base = time.Date(2024, 5, 1, 12, 0, 0, 123_000_000, time.UTC)

// block makes a block of simple records at the given offsets.
func block(topic string, partition int, from, next int64, offs ...int64) *sinks.Block {
	b := &sinks.Block{Topic: topic, Partition: partition, Epoch: 1, From: from, Next: next}
	for _, o := range offs {
		b.Records = append(b.Records, sinks.Record{
			Offset: o,
			Key:    fmt.Appendf(nil, "key-%d", o),
			Value:  fmt.Appendf(nil, `{"n":%d}`, o),
			Time:   base.Add(time.Duration(o) * time.Millisecond),
		})
	}
	return b
}

// roundTripBlock has a record for each kind of key, value, time and header
// a sink must keep, with gaps where Kafka has offsets without records.
func roundTripBlock() *sinks.Block {
	india := time.FixedZone("IST", 5*3600+1800)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	big[len(big)/2] = 0xff
	return &sinks.Block{
		Topic: "round-trip", Partition: 2, Epoch: 1, From: 100, Next: 120,
		Records: []sinks.Record{
			{Offset: 100, Key: nil, Value: []byte(`{"id":1,"name":"Ada","tags":["x","y"],"nested":{"ok":true,"n":null}}`), Time: base},
			{Offset: 101, Key: []byte("user-42"), Value: []byte("hello, world"), Time: base.Add(time.Second),
				Headers: []sinks.Header{{Key: "content-type", Value: []byte("text/plain")}}},
			// 102 is a transaction marker: no record.
			{Offset: 103, Key: []byte{0x00, 0xff, 0x10}, Value: []byte{0xff, 0xfe, 0xfd, 0x00, 0x01, '\n', 0x80}, Time: time.Date(2023, 1, 2, 3, 4, 5, 678_000_000, india)},
			{Offset: 104, Key: []byte(`{"k":1}`), Value: []byte("{\n  \"pretty\": true\n}\n"), Time: base,
				Headers: []sinks.Header{
					{Key: "h", Value: []byte("1")},
					{Key: "h", Value: []byte("2")},
					{Key: "null", Value: nil},
					{Key: "empty", Value: []byte{}},
					{Key: "bin", Value: []byte{0xc3, 0x28, 0x00}},
					{Key: "json", Value: []byte(`{"a":[1,2]}`)},
					{Key: "ключ ✓", Value: []byte("значение")},
					{Key: "", Value: []byte("empty key")},
				}},
			{Offset: 105, Key: []byte{}, Value: []byte("null"), Time: base},
			{Offset: 106, Key: []byte("gone"), Value: nil, Time: base}, // a tombstone
			{Offset: 107, Key: []byte("42"), Value: []byte{}, Time: base},
			{Offset: 108, Key: []byte(`"quoted"`), Value: []byte("line1\nline2\t\"q\" \\ é ✓ \u2028 <&> \x01"), Time: base},
			{Offset: 109, Key: []byte("big"), Value: big, Time: base},
			{Offset: 110, Key: []byte("no-timestamp"), Value: []byte("t"), Time: time.UnixMilli(-1)},
			{Offset: 111, Key: []byte("epoch"), Value: []byte(" {} "), Time: time.UnixMilli(0)},
			{Offset: 112, Key: []byte("number"), Value: []byte("-12.5e3"), Time: base.Add(-24 * time.Hour)},
			{Offset: 113, Key: []byte("string"), Value: []byte(`"a JSON string"`), Time: base},
			{Offset: 119, Key: []byte("last"), Value: []byte("true"), Time: base.Add(999 * time.Millisecond)},
		},
	}
}

func seq(from, next int64) []int64 {
	var o []int64
	for i := from; i < next; i++ {
		o = append(o, i)
	}
	return o
}

func concat(parts ...[]sinks.Record) []sinks.Record {
	var all []sinks.Record
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

func cloneBlock(b *sinks.Block) *sinks.Block {
	c := *b
	c.Records = make([]sinks.Record, len(b.Records))
	for i, r := range b.Records {
		r.Key = bytes.Clone(r.Key)
		r.Value = bytes.Clone(r.Value)
		if r.Headers != nil {
			hs := make([]sinks.Header, len(r.Headers))
			for j, h := range r.Headers {
				hs[j] = sinks.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
			}
			r.Headers = hs
		}
		c.Records[i] = r
	}
	return &c
}

func scribble(b []byte) {
	for i := range b {
		b[i] = 0xAA
	}
}
