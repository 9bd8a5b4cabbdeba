package sinktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

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
		if res, ok := sinks.As[sinks.Resumer](s); ok {
			for _, b := range last {
				next, _, ok, err := res.Resume(ctx, b.Topic, b.Partition)
				// A sink that resumes from its rows' offsets may stand
				// after the block's last record rather than at its Next
				// (the offsets after it held none).
				least := b.From
				if n := len(b.Records); n > 0 {
					least = b.Records[n-1].Offset + 1
				}
				if err != nil || !ok || next < least || next > b.Next {
					t.Errorf("Resume %s/%d after WriteBlocks = %d, %v, %v; want %d (or from %d, after its last record), true, nil",
						b.Topic, b.Partition, next, ok, err, b.Next, least)
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
						blocks = append(blocks, block("orders", p, from, from+3, Seq(from, from+3)...))
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
