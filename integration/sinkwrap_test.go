package integration_test

import (
	"context"
	"errors"
	"sync"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// blockRange is what a sink was asked to write.
type blockRange struct {
	Partition  int
	From, Next int64
	Rows       int
	Epoch      int64
}

// hookSink wraps a sink: before is called before each write and may fail it
// (or block, to stand in for a crash); every block that reached the inner
// sink is recorded.
type hookSink struct {
	inner  sinks.Sink
	before func(ctx context.Context, b *sinks.Block) error
	after  func(ctx context.Context, b *sinks.Block) error

	mu      sync.Mutex
	written []blockRange
}

func (h *hookSink) Write(ctx context.Context, b *sinks.Block) error {
	if h.before != nil {
		if err := h.before(ctx, b); err != nil {
			return err
		}
	}
	if err := h.inner.Write(ctx, b); err != nil {
		return err
	}
	h.mu.Lock()
	h.written = append(h.written, blockRange{b.Partition, b.From, b.Next, len(b.Records), b.Epoch})
	h.mu.Unlock()
	if h.after != nil {
		return h.after(ctx, b)
	}
	return nil
}

func (h *hookSink) Close() error { return h.inner.Close() }

// blocks lists the blocks written for partition p, in order.
func (h *hookSink) blocks(p int) []blockRange {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []blockRange
	for _, b := range h.written {
		if b.Partition == p {
			out = append(out, b)
		}
	}
	return out
}

var errInjected = errors.New("injected sink failure")
