package dev

import (
	"context"
	"sync"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// recorder wraps a sink and remembers which offsets were written, so dev can
// tell lost records from duplicates whatever the sink. It is a sinks.Wrapper:
// the inner sink's side upgrades (Resumer, Pinger, DeadLetterCounter) stay
// visible through sinks.As, and its WriteBlocks keeps the inner sink's
// batching.
type recorder struct {
	inner     sinks.Sink
	mu        sync.Mutex
	seen      map[int]map[int64]int // partition → offset → writes
	distinctN int64
	writes    int64
}

func newRecorder(s sinks.Sink) *recorder { return &recorder{inner: s, seen: map[int]map[int64]int{}} }

// Unwrap returns the recorded sink (sinks.Wrapper).
func (r *recorder) Unwrap() sinks.Sink { return r.inner }

// Write writes b to the inner sink and records it once it is durable.
func (r *recorder) Write(ctx context.Context, b *sinks.Block) error {
	if err := r.inner.Write(ctx, b); err != nil {
		return err
	}
	r.record(b)
	return nil
}

// WriteBlocks (sinks.BatchWriter) writes blocks through the inner sink's own
// WriteBlocks if it has one, and records those that became durable.
func (r *recorder) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	errs := sinks.WriteBlocks(ctx, r.inner, blocks)
	for i, err := range errs {
		if err == nil {
			r.record(blocks[i])
		}
	}
	return errs
}

// Close closes the inner sink.
func (r *recorder) Close() error { return r.inner.Close() }

func (r *recorder) record(b *sinks.Block) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.seen[b.Partition]
	if m == nil {
		m = map[int64]int{}
		r.seen[b.Partition] = m
	}
	for _, rec := range b.Records {
		if m[rec.Offset] == 0 {
			r.distinctN++
		}
		m[rec.Offset]++
		r.writes++
	}
}

// tally compares what was written with what was produced: distinct offsets
// delivered, offsets never delivered, and extra copies.
func (r *recorder) tally(topic string, produced map[int]int64) Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	var v Verdict
	for _, p := range sortedKeys(produced) {
		for off := int64(0); off < produced[p]; off++ {
			v.note(topic, p, off, r.seen[p][off])
		}
	}
	return v
}

// distinct is how many different records were written.
func (r *recorder) distinct() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.distinctN
}

// replayed is how many record writes repeated an earlier one.
func (r *recorder) replayed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes - r.distinctN
}
