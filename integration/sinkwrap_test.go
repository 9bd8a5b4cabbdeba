package integration_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/sinktest"
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
//
// Its inner sink's side upgrades show through it (Unwrap), but not its
// batching: hookSink has no WriteBlocks on purpose, so that the replica
// writes to it one Write per block whatever the inner sink. Its hooks hold
// single blocks (a crash, a gate), and in a round they would hold every
// partition's block behind the one they hold; the tests that use them
// count on partitions writing side by side.
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

// Unwrap returns the wrapped sink.
func (h *hookSink) Unwrap() sinks.Sink { return h.inner }

// Resume passes the inner sink's own offsets on; an inner sink without them
// knows nothing. It stands in for Unwrap until the replica finds a Resumer
// with sinks.As, and keeps until then what the tests were written against:
// a hookSink is a Resumer, so the replica writes no intents for it.
func (h *hookSink) Resume(ctx context.Context, topic string, partition int) (int64, int64, bool, error) {
	if rs, ok := h.inner.(sinks.Resumer); ok {
		return rs.Resume(ctx, topic, partition)
	}
	return 0, 0, false, nil
}

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

// crashAt starts a replica whose sink h crashes it at the first block of
// partition p (any partition when p < 0): before the inner write, or after
// it when afterWrite. The crash stops everything at once (Replica.Kill) and
// holds the write until the replica is gone, so nothing after that point
// happens. crashAt returns the block the crash hit, once the replica is gone.
func (e *env) crashAt(cfg replica.Config, h *hookSink, p int, afterWrite bool) blockRange {
	e.t.Helper()
	var crashed atomic.Bool
	var hit blockRange
	var rn *running
	ready := make(chan struct{})
	crash := func(ctx context.Context, b *sinks.Block) error {
		if (p >= 0 && b.Partition != p) || !crashed.CompareAndSwap(false, true) {
			return nil
		}
		hit = blockRange{b.Partition, b.From, b.Next, len(b.Records), b.Epoch}
		<-ready
		rn.r.Kill()
		<-ctx.Done()
		return ctx.Err()
	}
	if afterWrite {
		h.after = crash
	} else {
		h.before = crash
	}
	rn = e.start(cfg, h)
	close(ready)
	await(e.t, 30*time.Second, "the crash", crashed.Load)
	<-rn.Done()
	return hit
}

// Every wrapper of these tests keeps its inner sink's upgrades: the side
// upgrades show through it (sinks.As), and its WriteBlocks, where it has
// one, reaches the inner sink's.
func TestWrappersKeepUpgrades(t *testing.T) {
	sinktest.RunWrappers(t,
		sinktest.Wrapped{Name: "hookSink", Wrap: func(inner sinks.Sink) sinks.Sink { return &hookSink{inner: inner} }, Opts: sinktest.WrapperOptions{Unbatched: true}},
		sinktest.Wrapped{Name: "gateSink", Wrap: func(inner sinks.Sink) sinks.Sink { return gateAround(inner) }, Opts: sinktest.WrapperOptions{}},
	)
}
