package sinks_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// plain is a sink without upgrades; failing makes Write fail for a
// partition.
type plain struct {
	failing map[int]error
	writes  atomic.Int64
}

func (p *plain) Write(_ context.Context, b *sinks.Block) error {
	p.writes.Add(1)
	return p.failing[b.Partition]
}

func (*plain) Close() error { return nil }

// pinging is a sink with a Pinger and a DeadLetterCounter.
type pinging struct {
	plain
	dead int64
}

func (*pinging) Ping(context.Context) error { return nil }
func (p *pinging) DeadLetters() int64       { return p.dead }

// wrap is a wrapper; inner may be nil.
type wrap struct {
	inner sinks.Sink
}

func (w wrap) Write(ctx context.Context, b *sinks.Block) error { return w.inner.Write(ctx, b) }
func (w wrap) Close() error                                    { return w.inner.Close() }
func (w wrap) Unwrap() sinks.Sink                              { return w.inner }

// cycle is a wrapper that wraps itself.
type cycle struct{ self *cycle }

func (*cycle) Write(context.Context, *sinks.Block) error { return nil }
func (*cycle) Close() error                              { return nil }
func (c *cycle) Unwrap() sinks.Sink                      { return c.self }

func TestAs(t *testing.T) {
	inner := &pinging{dead: 7}
	loop := &cycle{}
	loop.self = loop
	for _, tc := range []struct {
		name  string
		s     sinks.Sink
		found bool
	}{
		{"direct", inner, true},
		{"through one wrapper", wrap{inner}, true},
		{"through two wrappers", wrap{wrap{inner}}, true},
		{"not found", &plain{}, false},
		{"not found through a wrapper", wrap{&plain{}}, false},
		{"nil Unwrap", wrap{nil}, false},
		{"nil sink", nil, false},
		{"a cycle, given up", loop, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dl, ok := sinks.As[sinks.DeadLetterCounter](tc.s)
			if ok != tc.found {
				t.Fatalf("As[DeadLetterCounter] ok = %v, want %v", ok, tc.found)
			}
			if !ok {
				if dl != nil {
					t.Errorf("As[DeadLetterCounter] = %v with ok false, want nil", dl)
				}
				return
			}
			if n := dl.DeadLetters(); n != 7 {
				t.Errorf("DeadLetters = %d, want the inner sink's 7", n)
			}
			if p, ok := sinks.As[sinks.Pinger](tc.s); !ok || p != sinks.Pinger(inner) {
				t.Errorf("As[Pinger] = %v, %v; want the inner sink", p, ok)
			}
			if _, ok := sinks.As[sinks.Resumer](tc.s); ok {
				t.Error("As[Resumer] found an upgrade no sink of the chain has")
			}
		})
	}
}

// The first sink of the chain that implements T wins: a wrapper with its
// own upgrade hides the inner one's.
func TestAsFindsTheOutermost(t *testing.T) {
	outer := &pingingWrap{wrap: wrap{&pinging{dead: 1}}}
	p, ok := sinks.As[sinks.Pinger](outer)
	if !ok || p != sinks.Pinger(outer) {
		t.Fatalf("As[Pinger] = %v, %v; want the wrapper itself", p, ok)
	}
	if dl, ok := sinks.As[sinks.DeadLetterCounter](outer); !ok || dl.DeadLetters() != 1 {
		t.Fatalf("As[DeadLetterCounter] = %v, %v; want the inner sink", dl, ok)
	}
}

type pingingWrap struct{ wrap }

func (*pingingWrap) Ping(context.Context) error { return errors.New("down") }

// batching is a BatchWriter that records its calls; its Write must not be
// called by WriteBlocks.
type batching struct {
	plain
	calls [][]*sinks.Block
}

func (b *batching) WriteBlocks(_ context.Context, blocks []*sinks.Block) []error {
	b.calls = append(b.calls, blocks)
	errs := make([]error, len(blocks))
	for i, bl := range blocks {
		errs[i] = fmt.Errorf("batched %s", bl)
	}
	return errs
}

func blocks(n int) []*sinks.Block {
	bs := make([]*sinks.Block, n)
	for i := range bs {
		bs[i] = &sinks.Block{Topic: "orders", Partition: i, From: 0, Next: 1}
	}
	return bs
}

func TestWriteBlocksBatchWriter(t *testing.T) {
	b := &batching{}
	bs := blocks(3)
	errs := sinks.WriteBlocks(context.Background(), b, bs)
	if len(b.calls) != 1 || len(b.calls[0]) != 3 {
		t.Fatalf("WriteBlocks made calls %v, want one of 3 blocks", b.calls)
	}
	if n := b.writes.Load(); n != 0 {
		t.Errorf("%d Writes beside WriteBlocks, want none", n)
	}
	for i, err := range errs {
		if want := fmt.Sprintf("batched %s", bs[i]); err == nil || err.Error() != want {
			t.Errorf("errs[%d] = %v, want the BatchWriter's %q", i, err, want)
		}
	}
	// WriteBlocks does not unwrap: through a wrapper, the wrapper's Write.
	sinks.WriteBlocks(context.Background(), wrap{b}, bs)
	if len(b.calls) != 1 || b.writes.Load() != 3 {
		t.Errorf("through a wrapper without WriteBlocks: %d calls, %d writes; want 1 and 3", len(b.calls), b.writes.Load())
	}
}

func TestWriteBlocksPerBlock(t *testing.T) {
	boom, bang := errors.New("boom"), errors.New("bang")
	p := &plain{failing: map[int]error{1: boom, 3: bang}}
	bs := blocks(5)
	errs := sinks.WriteBlocks(context.Background(), p, bs)
	if len(errs) != len(bs) {
		t.Fatalf("%d errors for %d blocks", len(errs), len(bs))
	}
	want := []error{nil, boom, nil, bang, nil}
	for i := range want {
		if errs[i] != want[i] {
			t.Errorf("errs[%d] = %v, want %v", i, errs[i], want[i])
		}
	}
	if n := p.writes.Load(); n != 5 {
		t.Errorf("%d Writes, want one per block", n)
	}
	if errs := sinks.WriteBlocks(context.Background(), p, nil); len(errs) != 0 {
		t.Errorf("WriteBlocks of no blocks = %v, want none", errs)
	}
}

// barrier is a sink whose every Write waits until n Writes have begun: it
// passes only if they run side by side.
type barrier struct {
	n       int
	mu      sync.Mutex
	entered int
	all     chan struct{}
}

func (b *barrier) Write(ctx context.Context, _ *sinks.Block) error {
	b.mu.Lock()
	b.entered++
	if b.entered == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (*barrier) Close() error { return nil }

func TestWriteBlocksConcurrent(t *testing.T) {
	const n = 8
	b := &barrier{n: n, all: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, err := range sinks.WriteBlocks(ctx, b, blocks(n)) {
		if err != nil {
			t.Fatalf("block %d: %v: the Writes did not run side by side", i, err)
		}
	}
}

func TestBlockString(t *testing.T) {
	for _, tc := range []struct {
		topic string
		want  string
	}{
		{"orders", "orders/3 [120, 180)"},
		{"orders.v2_eu-west", "orders.v2_eu-west/3 [120, 180)"},
		{"", `""/3 [120, 180)`},
		{"a b\n", `"a b\n"/3 [120, 180)`},
	} {
		b := &sinks.Block{Topic: tc.topic, Partition: 3, From: 120, Next: 180}
		if got := b.String(); got != tc.want {
			t.Errorf("String of topic %q = %q, want %q", tc.topic, got, tc.want)
		}
	}
}
