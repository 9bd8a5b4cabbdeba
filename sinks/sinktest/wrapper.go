package sinktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// WrapperOptions declares what a wrapper gives up on purpose.
type WrapperOptions struct {
	// Unbatched: the wrapper does not implement sinks.BatchWriter, so that
	// the replica writes through it one block per Write whatever the inner
	// sink (say, because its hooks hold single blocks). Without it, the
	// wrapper must implement WriteBlocks and reach the inner sink's.
	Unbatched bool
}

// Wrapped is one wrapper for RunWrappers.
type Wrapped struct {
	Name string                            // the subtest's
	Wrap func(inner sinks.Sink) sinks.Sink // as for RunWrapper
	Opts WrapperOptions
}

// RunWrappers runs RunWrapper for each wrapper, in a subtest of its name.
func RunWrappers(t *testing.T, ws ...Wrapped) {
	for _, w := range ws {
		t.Run(w.Name, func(t *testing.T) { RunWrapper(t, w.Wrap, w.Opts) })
	}
}

// through is the upgrade T that sinks.As finds through the wrapper w; it
// fails the test, naming the upgrade, without one.
func through[T any](t *testing.T, w sinks.Sink, name string) T {
	t.Helper()
	u, ok := sinks.As[T](w)
	if !ok {
		t.Fatalf("sinks.As finds no %s through the wrapper", name)
	}
	return u
}

// RunWrapper checks that a sink wrapping another keeps the inner sink's
// upgrades: wrap is given a sink that implements every upgrade and returns
// the wrapper around it, as it comes, with no hook failing or holding a
// write. RunWrapper checks that
//
//   - sinks.As finds the inner Resumer, Pinger and DeadLetterCounter
//     through the wrapper (an upgrade the wrapper implements itself hides
//     the inner one and is left to the wrapper's own tests, but it must
//     still answer);
//   - sinks.WriteBlocks of the wrapper reaches the inner WriteBlocks, once
//     per call with every block, and hands back its errors in order (see
//     WrapperOptions.Unbatched for the exception);
//   - Write and Close reach the inner sink.
func RunWrapper(t *testing.T, wrap func(inner sinks.Sink) sinks.Sink, opts WrapperOptions) {
	ctx := context.Background()
	open := func(t *testing.T) (*fullSink, sinks.Sink) {
		t.Helper()
		inner := &fullSink{}
		w := wrap(inner)
		if w == nil {
			t.Fatal("wrap returned a nil sink")
		}
		return inner, w
	}

	t.Run("Unwrap", func(t *testing.T) {
		inner, w := open(t)
		for s, depth := sinks.Sink(w), 0; ; depth++ {
			if s == sinks.Sink(inner) {
				return
			}
			u, ok := s.(sinks.Wrapper)
			if !ok || depth > 64 {
				t.Fatalf("the chain of Unwrap from %T ends at %T without reaching the inner sink", w, s)
			}
			s = u.Unwrap()
		}
	})

	t.Run("Resumer", func(t *testing.T) {
		_, w := open(t)
		res := through[sinks.Resumer](t, w, "Resumer")
		// A wrapper's own Resume must pass the inner sink's offsets on.
		next, gen, ok, err := res.Resume(ctx, "orders", 3)
		if err != nil || !ok || next != fullNext || gen != fullGeneration {
			t.Errorf("Resume through the wrapper = %d, %d, %v, %v; want the inner sink's %d, %d, true, nil", next, gen, ok, err, fullNext, fullGeneration)
		}
	})

	t.Run("Pinger", func(t *testing.T) {
		inner, w := open(t)
		p := through[sinks.Pinger](t, w, "Pinger")
		if p != sinks.Pinger(inner) {
			t.Logf("the wrapper (%T) answers Ping itself", p)
			_ = p.Ping(ctx)
			return
		}
		if err := p.Ping(ctx); !errors.Is(err, errFullPing) {
			t.Errorf("Ping through the wrapper = %v, want the inner sink's %v", err, errFullPing)
		}
	})

	t.Run("DeadLetterCounter", func(t *testing.T) {
		inner, w := open(t)
		dl := through[sinks.DeadLetterCounter](t, w, "DeadLetterCounter")
		if dl != sinks.DeadLetterCounter(inner) {
			t.Logf("the wrapper (%T) counts dead letters itself: %d", dl, dl.DeadLetters())
			return
		}
		if n := dl.DeadLetters(); n != fullDeadLetters {
			t.Errorf("DeadLetters through the wrapper = %d, want the inner sink's %d", n, fullDeadLetters)
		}
	})

	t.Run("WriteBlocks", func(t *testing.T) {
		inner, w := open(t)
		_, batches := w.(sinks.BatchWriter)
		switch {
		case opts.Unbatched && batches:
			t.Fatalf("%T implements sinks.BatchWriter, but the options say Unbatched", w)
		case !opts.Unbatched && !batches:
			t.Fatalf("%T hides the inner sink's WriteBlocks: it does not implement sinks.BatchWriter", w)
		}
		blocks := []*sinks.Block{block("orders", 1, 0, 2, 0, 1), block("orders", 0, 0, 1, 0), block("payments", 4, 7, 9, 7, 8)}
		inner.failing = map[string]bool{blocks[1].String(): true}
		errs := sinks.WriteBlocks(ctx, w, blocks)
		if len(errs) != len(blocks) {
			t.Fatalf("WriteBlocks of %d blocks through the wrapper returned %d errors", len(blocks), len(errs))
		}
		for i, err := range errs {
			if want := i == 1; (err != nil) != want || want && !errors.Is(err, errFullWrite) {
				t.Errorf("errs[%d] = %v; want the inner sink's outcome for %s (failing: %v)", i, err, blocks[i], want)
			}
		}
		got := inner.counts()
		if opts.Unbatched {
			if got.calls != 0 || got.writes != len(blocks) {
				t.Errorf("the inner sink got %d WriteBlocks calls and %d Writes, want 0 and %d", got.calls, got.writes, len(blocks))
			}
			return
		}
		if got.calls != 1 || got.writes != 0 {
			t.Errorf("the inner sink got %d WriteBlocks calls and %d Writes, want 1 call and no Write", got.calls, got.writes)
		}
		if got.batched != len(blocks) {
			t.Errorf("the inner WriteBlocks got %d blocks, want %d", got.batched, len(blocks))
		}
	})

	t.Run("WriteAndClose", func(t *testing.T) {
		inner, w := open(t)
		if err := w.Write(ctx, block("orders", 2, 0, 1, 0)); err != nil {
			t.Fatalf("Write through the wrapper: %v", err)
		}
		if got := inner.counts(); got.writes != 1 {
			t.Errorf("the inner sink got %d Writes, want 1", got.writes)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("Close of the wrapper: %v", err)
		}
		if !inner.counts().closed {
			t.Error("Close of the wrapper did not close the inner sink")
		}
	})
}

// What fullSink answers, so that its answers are told from anyone else's.
const (
	fullNext        = 4242
	fullGeneration  = 7
	fullDeadLetters = 31
)

var (
	errFullPing  = errors.New("the inner sink's ping")
	errFullWrite = errors.New("the inner sink's refusal")
)

// fullSink implements every upgrade, with answers of its own, and counts
// what reached it. Blocks named in failing are refused.
type fullSink struct {
	mu      sync.Mutex
	failing map[string]bool
	got     fullCounts
}

// fullCounts is what reached a fullSink.
type fullCounts struct {
	calls   int // of WriteBlocks
	writes  int // of Write
	batched int // blocks handed to WriteBlocks
	closed  bool
}

var (
	_ sinks.BatchWriter       = (*fullSink)(nil)
	_ sinks.Resumer           = (*fullSink)(nil)
	_ sinks.Pinger            = (*fullSink)(nil)
	_ sinks.DeadLetterCounter = (*fullSink)(nil)
)

func (f *fullSink) Write(_ context.Context, b *sinks.Block) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got.writes++
	return f.take(b)
}

func (f *fullSink) WriteBlocks(_ context.Context, blocks []*sinks.Block) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got.calls++
	f.got.batched += len(blocks)
	errs := make([]error, len(blocks))
	for i, b := range blocks {
		errs[i] = f.take(b)
	}
	return errs
}

// take accepts b, or refuses it; f.mu is held.
func (f *fullSink) take(b *sinks.Block) error {
	if f.failing[b.String()] {
		return fmt.Errorf("write %s: %w", b, errFullWrite)
	}
	return nil
}

func (f *fullSink) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got.closed = true
	return nil
}

func (*fullSink) Resume(context.Context, string, int) (int64, int64, bool, error) {
	return fullNext, fullGeneration, true, nil
}

func (*fullSink) Ping(context.Context) error { return errFullPing }

func (*fullSink) DeadLetters() int64 { return fullDeadLetters }

// counts returns what has reached f so far.
func (f *fullSink) counts() fullCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.got
}
