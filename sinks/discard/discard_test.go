package discard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
	"github.com/offsetkeeper/offsetkeeper/sinks/sinktest"
)

func TestConformance(t *testing.T) {
	// Nothing to read back: the suite checks the lifecycle only.
	sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
		return discard.New(), nil
	}, sinktest.Options{})
}

func TestCounts(t *testing.T) {
	s := discard.New()
	ctx := context.Background()
	blocks := []*sinks.Block{
		{Topic: "orders", From: 0, Next: 3, Records: make([]sinks.Record, 3)},
		{Topic: "orders", From: 3, Next: 9},
		{Topic: "orders", Partition: 1, From: 0, Next: 2, Records: make([]sinks.Record, 2)},
	}
	for _, b := range blocks {
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Write(cctx, blocks[0]); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Write: %v", err)
	}
	s.Close()
	if err := s.Write(ctx, blocks[0]); !errors.Is(err, discard.ErrClosed) {
		t.Errorf("Write after Close: %v", err)
	}
	if s.Records() != 5 || s.Blocks() != 3 {
		t.Errorf("counted %d records in %d blocks, want 5 in 3", s.Records(), s.Blocks())
	}
}

func TestWriteBlocksCounts(t *testing.T) {
	s := discard.New()
	ctx := context.Background()
	blocks := []*sinks.Block{
		{Topic: "orders", From: 0, Next: 3, Records: make([]sinks.Record, 3)},
		nil,
		{Topic: "orders", Partition: 1, From: 0, Next: 9},
		{Topic: "payments", From: 0, Next: 2, Records: make([]sinks.Record, 2)},
	}
	errs := s.WriteBlocks(ctx, blocks)
	if len(errs) != 4 || errs[0] != nil || errs[1] == nil || errs[2] != nil || errs[3] != nil {
		t.Fatalf("WriteBlocks = %v, want an error for the nil block only", errs)
	}
	if s.Records() != 5 || s.Blocks() != 3 {
		t.Errorf("counted %d records in %d blocks, want 5 in 3", s.Records(), s.Blocks())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for i, err := range s.WriteBlocks(cctx, blocks[:1]) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled WriteBlocks, block %d: %v", i, err)
		}
	}
	s.Close()
	for i, err := range s.WriteBlocks(ctx, []*sinks.Block{blocks[0], blocks[2]}) {
		if !errors.Is(err, discard.ErrClosed) {
			t.Errorf("WriteBlocks after Close, block %d: %v", i, err)
		}
	}
	if s.Records() != 5 || s.Blocks() != 3 {
		t.Errorf("after refused calls: %d records in %d blocks, want 5 in 3", s.Records(), s.Blocks())
	}
}

func BenchmarkWrite(b *testing.B) {
	s := discard.New()
	blk := &sinks.Block{Topic: "orders", From: 0, Next: 500, Records: make([]sinks.Record, 500)}
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Write(ctx, blk); err != nil {
				b.Fatal(err)
			}
		}
	})
}
