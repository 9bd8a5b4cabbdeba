package dev

import (
	"context"
	"errors"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// upgradedSink implements Sink and every upgrade, and notes how it was
// called.
type upgradedSink struct {
	writes, batches int
}

var errUpgradedRefused = errors.New("refused")

func (s *upgradedSink) Write(context.Context, *sinks.Block) error { s.writes++; return nil }
func (s *upgradedSink) Close() error                              { return nil }

// WriteBlocks refuses blocks of partition 9, to show that the recorder
// records only the blocks that became durable.
func (s *upgradedSink) WriteBlocks(_ context.Context, blocks []*sinks.Block) []error {
	s.batches++
	errs := make([]error, len(blocks))
	for i, b := range blocks {
		if b.Partition == 9 {
			errs[i] = errUpgradedRefused
		}
	}
	return errs
}

func (s *upgradedSink) Resume(context.Context, string, int) (int64, int64, bool, error) {
	return 42, 7, true, nil
}
func (s *upgradedSink) Ping(context.Context) error { return nil }
func (s *upgradedSink) DeadLetters() int64         { return 3 }

func TestRecorderKeepsUpgrades(t *testing.T) {
	inner := &upgradedSink{}
	rec := newRecorder(inner)
	var s sinks.Sink = rec

	if got := rec.Unwrap(); got != sinks.Sink(inner) {
		t.Fatalf("Unwrap() = %v, want the inner sink", got)
	}
	res, ok := sinks.As[sinks.Resumer](s)
	if !ok {
		t.Fatal("sinks.As finds no Resumer through the recorder")
	}
	if next, gen, ok, err := res.Resume(context.Background(), "t", 0); next != 42 || gen != 7 || !ok || err != nil {
		t.Fatalf("Resume = %d, %d, %v, %v; want the inner sink's 42, 7, true, nil", next, gen, ok, err)
	}
	if _, ok := sinks.As[sinks.Pinger](s); !ok {
		t.Fatal("sinks.As finds no Pinger through the recorder")
	}
	dl, ok := sinks.As[sinks.DeadLetterCounter](s)
	if !ok {
		t.Fatal("sinks.As finds no DeadLetterCounter through the recorder")
	}
	if n := dl.DeadLetters(); n != 3 {
		t.Fatalf("DeadLetters() = %d, want the inner sink's 3", n)
	}
	bw, ok := s.(sinks.BatchWriter)
	if !ok {
		t.Fatal("the recorder is no BatchWriter")
	}

	blocks := []*sinks.Block{
		{Topic: "t", Partition: 0, From: 0, Next: 2, Records: []sinks.Record{{Offset: 0}, {Offset: 1}}},
		{Topic: "t", Partition: 1, From: 0, Next: 1, Records: []sinks.Record{{Offset: 0}}},
		{Topic: "t", Partition: 9, From: 0, Next: 1, Records: []sinks.Record{{Offset: 0}}},
	}
	errs := bw.WriteBlocks(context.Background(), blocks)
	if len(errs) != 3 || errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], errUpgradedRefused) {
		t.Fatalf("WriteBlocks = %v, want [nil nil refused]", errs)
	}
	if inner.batches != 1 || inner.writes != 0 {
		t.Fatalf("inner sink got %d WriteBlocks and %d Writes, want 1 and 0", inner.batches, inner.writes)
	}
	if n := rec.distinct(); n != 3 {
		t.Fatalf("recorded %d distinct records, want 3 (the refused block not counted)", n)
	}
	v := rec.tally("t", map[int]int64{0: 2, 1: 1, 9: 1})
	if v.Delivered != 3 || v.Lost != 1 || v.Duplicates != 0 || v.firstLost != "t/9 at offset 0" {
		t.Fatalf("tally = %+v, want 3 delivered, 1 lost (t/9 at offset 0), 0 duplicates", v)
	}

	if err := s.Write(context.Background(), blocks[1]); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if inner.writes != 1 || rec.replayed() != 1 {
		t.Fatalf("after a Write again: inner writes %d, replayed %d; want 1, 1", inner.writes, rec.replayed())
	}
}
