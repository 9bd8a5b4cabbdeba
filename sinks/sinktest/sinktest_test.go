package sinktest_test

import (
	"cmp"
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/sinktest"
)

// memSink is the reference sink the suite is tested with: it keeps records
// in memory, by offset (dedup) or as written (appending), and fences when
// asked. A mutant is a deliberate bug: each must make the suite fail.
type memSink struct {
	dedup, fences bool
	mutant        string

	mu     sync.Mutex
	closed int
	parts  map[part][]sinks.Record
	epochs map[part]int64
	ranges map[part]map[[2]int64]bool
}

type part struct {
	topic     string
	partition int
}

func newMem(dedup, fences bool, mutant string) *memSink {
	return &memSink{
		dedup: dedup, fences: fences, mutant: mutant,
		parts:  map[part][]sinks.Record{},
		epochs: map[part]int64{},
		ranges: map[part]map[[2]int64]bool{},
	}
}

func (m *memSink) Write(ctx context.Context, b *sinks.Block) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed > 0 && m.mutant != "write-after-close" {
		return errors.New("closed")
	}
	k := part{b.Topic, b.Partition}
	switch m.mutant {
	case "ignore-partition":
		k.partition = 0
	case "ignore-topic":
		k.topic = ""
	}
	if err := ctx.Err(); err != nil {
		switch m.mutant {
		case "cancel-nil-drop":
			return nil
		case "cancel-other-error":
			return errors.New("boom")
		case "cancel-garble":
			if len(b.Records) > 0 {
				r := sinktest.CloneRecord(b.Records[0])
				r.Value = []byte("garbled")
				m.parts[k] = append(m.parts[k], r)
			}
		}
		return err
	}
	if len(b.Records) == 0 && m.mutant == "refuse-empty" {
		return errors.New("empty block")
	}
	if m.fences && m.mutant != "no-fence" {
		if b.Epoch < m.epochs[k] {
			return sinks.ErrFenced
		}
		m.epochs[k] = b.Epoch
	}
	if m.ranges[k] == nil {
		m.ranges[k] = map[[2]int64]bool{}
	}
	replay := m.ranges[k][[2]int64{b.From, b.Next}]
	m.ranges[k][[2]int64{b.From, b.Next}] = true
	if replay && m.mutant == "lose-replays" {
		m.parts[k] = slices.DeleteFunc(m.parts[k], func(r sinks.Record) bool { return r.Offset >= b.From && r.Offset < b.Next })
		return nil
	}
	for _, r := range b.Records {
		if m.mutant != "retain" {
			r = sinktest.CloneRecord(r)
		}
		switch m.mutant {
		case "nil-key-empty":
			if r.Key == nil {
				r.Key = []byte{}
			}
		case "drop-headers":
			r.Headers = nil
		case "seconds":
			r.Time = r.Time.Truncate(time.Second)
		}
		if m.dedup {
			m.parts[k] = slices.DeleteFunc(m.parts[k], func(o sinks.Record) bool { return o.Offset == r.Offset })
		}
		m.parts[k] = append(m.parts[k], r)
	}
	if m.mutant == "mutate" && len(b.Records) > 0 {
		b.Records[0].Value = nil
	}
	return nil
}

// WriteBlocks writes the blocks one Write each, unless a batch mutant
// breaks the contract of sinks.BatchWriter.
func (m *memSink) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	errs := make([]error, len(blocks))
	switch m.mutant {
	case "batch-fence-all":
		m.mu.Lock()
		for _, b := range blocks {
			if b.Epoch < m.epochs[part{b.Topic, b.Partition}] {
				m.mu.Unlock()
				for i := range errs {
					errs[i] = sinks.ErrFenced
				}
				return errs
			}
		}
		m.mu.Unlock()
	case "batch-drop-last":
		if len(blocks) > 1 {
			blocks = blocks[:len(blocks)-1]
		}
	case "batch-short":
		errs = errs[:len(errs)-min(len(errs), 1)]
	}
	for i, b := range blocks {
		if i < len(errs) {
			errs[i] = m.Write(ctx, b)
		}
	}
	return errs
}

func (m *memSink) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed++
	if m.closed > 1 && m.mutant == "close-twice" {
		return errors.New("already closed")
	}
	return nil
}

func (m *memSink) Records(t *testing.T, topic string, partition int) []sinks.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	recs := slices.Clone(m.parts[part{topic, partition}])
	slices.SortStableFunc(recs, func(a, b sinks.Record) int { return cmp.Compare(a.Offset, b.Offset) })
	if m.mutant == "unsorted" {
		slices.Reverse(recs)
	}
	return recs
}

func TestDeduplicating(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
		m := newMem(true, true, "")
		return m, m
	}, sinktest.Options{ReplayExact: true, ReplayOverlap: true, Fences: true})
}

func TestAppending(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
		m := newMem(false, false, "")
		return m, m
	}, sinktest.Options{})
}

// noBatch hides a sink's WriteBlocks: the suite must skip the subtests of
// sinks.BatchWriter and pass.
type noBatch struct{ sinks.Sink }

func TestNoBatch(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
		m := newMem(true, true, "")
		return noBatch{m}, m
	}, sinktest.Options{ReplayExact: true, ReplayOverlap: true, Fences: true})
}

func TestNoReader(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
		return newMem(false, false, ""), nil
	}, sinktest.Options{})
}

// TestMutant runs the suite on one mutant, named by $SINKTEST_MUTANT, for
// TestMutantsFail; it is skipped otherwise.
func TestMutant(t *testing.T) {
	mutant := os.Getenv("SINKTEST_MUTANT")
	if mutant == "" {
		t.Skip("run by TestMutantsFail")
	}
	dedup := os.Getenv("SINKTEST_DEDUP") != ""
	claim := os.Getenv("SINKTEST_CLAIM") != ""
	if strings.HasPrefix(mutant, "wrap-") {
		sinktest.RunWrapper(t, func(inner sinks.Sink) sinks.Sink {
			switch mutant {
			case "wrap-no-unwrap":
				return noUnwrap{inner}
			case "wrap-no-batch":
				return &wrapper{inner: inner}
			}
			return &perWrite{wrapper{inner: inner}}
		}, sinktest.WrapperOptions{})
		return
	}
	sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
		m := newMem(dedup, true, mutant)
		if strings.HasPrefix(mutant, "up-") {
			return &upgraded{wrapper: wrapper{inner: m}, m: m}, m
		}
		return m, m
	}, sinktest.Options{ReplayExact: claim, ReplayOverlap: claim, Fences: true})
}

// TestMutantsFail keeps the suite honest: every deliberate bug must make the
// subtest that looks for it fail.
func TestMutantsFail(t *testing.T) {
	for _, tc := range []struct {
		mutant string
		dedup  bool // the mutant deduplicates, and says so
		fails  []string
	}{
		{"nil-key-empty", true, []string{"RoundTrip"}},
		{"drop-headers", true, []string{"RoundTrip"}},
		{"seconds", true, []string{"RoundTrip"}},
		{"ignore-partition", true, []string{"PartitionsAndTopics"}},
		{"ignore-topic", true, []string{"PartitionsAndTopics"}},
		{"refuse-empty", true, []string{"EmptyBlock"}},
		{"mutate", true, []string{"BlockNotRetained", "WriteBlocks"}},
		{"", false, []string{"Replay", "Redeliver", "WriteBlocks"}}, // appends but claims to deduplicate
		{"lose-replays", false, []string{"Replay"}},
		// With deduplication, rewriting the block repairs the garbled record:
		// that is the contract working, so only the appending mutant fails.
		{"cancel-garble", false, []string{"CancelledContext"}},
		{"cancel-nil-drop", true, []string{"CancelledContext"}},
		{"cancel-other-error", true, []string{"CancelledContext"}},
		{"write-after-close", true, []string{"WriteAfterClose"}},
		{"close-twice", true, []string{"WriteAfterClose"}},
		{"unsorted", false, []string{"Blocks"}},
		{"no-fence", true, []string{"Fencing", "WriteBlocksFencing"}},
		{"batch-fence-all", true, []string{"WriteBlocksFencing"}},
		{"batch-drop-last", true, []string{"WriteBlocks", "WriteBlocksConcurrent"}},
		{"batch-short", true, []string{"WriteBlocks", "WriteBlocksFencing", "WriteBlocksLifecycle"}},
		{"retain", true, []string{"BlockNotRetained", "WriteBlocks"}},
		{"up-resume-from", true, []string{"Resumer", "WriteBlocks"}},
		{"up-resume-generation", true, []string{"Resumer"}},
		{"up-ping-fail", true, []string{"Pinger"}},
		{"up-dead-letters", true, []string{"DeadLetterCounter"}},
		{"wrap-no-unwrap", true, []string{"Unwrap", "Resumer", "Pinger", "DeadLetterCounter"}},
		{"wrap-no-batch", true, []string{"WriteBlocks"}},
		{"wrap-batch-per-write", true, []string{"WriteBlocks"}},
	} {
		name := cmp.Or(tc.mutant, "appending")
		if tc.dedup {
			name += "/dedup"
		}
		t.Run(name, func(t *testing.T) {
			mutant := cmp.Or(tc.mutant, "none")
			cmd := exec.Command(os.Args[0], "-test.run=^TestMutant$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "SINKTEST_MUTANT="+mutant)
			if tc.dedup {
				cmd.Env = append(cmd.Env, "SINKTEST_DEDUP=1")
			}
			if tc.dedup || tc.mutant == "" {
				cmd.Env = append(cmd.Env, "SINKTEST_CLAIM=1")
			}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed or did not run (%v):\n%s", err, out)
			}
			for _, sub := range tc.fails {
				if !strings.Contains(string(out), "--- FAIL: TestMutant/"+sub+" ") {
					t.Errorf("subtest %s did not fail:\n%s", sub, out)
				}
			}
		})
	}
}

// wrapper passes everything on to inner, the way a wrapper must, except
// for WriteBlocks: it writes one block per Write.
type wrapper struct {
	inner sinks.Sink
}

func (w *wrapper) Write(ctx context.Context, b *sinks.Block) error { return w.inner.Write(ctx, b) }
func (w *wrapper) Close() error                                    { return w.inner.Close() }
func (w *wrapper) Unwrap() sinks.Sink                              { return w.inner }

// batchWrapper is wrapper with WriteBlocks through sinks.WriteBlocks.
type batchWrapper struct{ wrapper }

func (w *batchWrapper) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	return sinks.WriteBlocks(ctx, w.inner, blocks)
}

// noUnwrap is a mutant wrapper that hides the inner sink's upgrades.
type noUnwrap struct{ inner sinks.Sink }

func (w noUnwrap) Write(ctx context.Context, b *sinks.Block) error { return w.inner.Write(ctx, b) }
func (w noUnwrap) Close() error                                    { return w.inner.Close() }
func (w noUnwrap) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	return sinks.WriteBlocks(ctx, w.inner, blocks)
}

// perWrite is a mutant wrapper that batches nothing: its WriteBlocks
// writes the inner sink one Write per block.
type perWrite struct{ wrapper }

func (w *perWrite) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	errs := make([]error, len(blocks))
	for i, b := range blocks {
		errs[i] = w.inner.Write(ctx, b)
	}
	return errs
}

func TestRunWrapper(t *testing.T) {
	sinktest.RunWrappers(t,
		sinktest.Wrapped{Name: "Batched", Wrap: func(inner sinks.Sink) sinks.Sink { return &batchWrapper{wrapper{inner: inner}} }, Opts: sinktest.WrapperOptions{}},
		sinktest.Wrapped{Name: "Unbatched", Wrap: func(inner sinks.Sink) sinks.Sink { return &wrapper{inner: inner} }, Opts: sinktest.WrapperOptions{Unbatched: true}},
		sinktest.Wrapped{Name: "TwoDeep", Wrap: func(inner sinks.Sink) sinks.Sink {
			return &batchWrapper{wrapper{inner: &batchWrapper{wrapper{inner: inner}}}}
		}, Opts: sinktest.WrapperOptions{}},
	)
}

// upgraded is a memSink behind a wrapper with the side upgrades, which
// the suite must find through the wrapper (sinks.As). Its Resume is the
// last block written's Next and Generation; the up- mutants break it.
type upgraded struct {
	wrapper
	m *memSink

	mu   sync.Mutex
	next map[part][2]int64
}

func (u *upgraded) Write(ctx context.Context, b *sinks.Block) error {
	if err := u.m.Write(ctx, b); err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.next == nil {
		u.next = map[part][2]int64{}
	}
	next, gen := b.Next, b.Generation
	switch u.m.mutant {
	case "up-resume-from":
		next = b.From
	case "up-resume-generation":
		gen = 0
	}
	u.next[part{b.Topic, b.Partition}] = [2]int64{next, gen}
	return nil
}

func (u *upgraded) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	errs := make([]error, len(blocks))
	for i, b := range blocks {
		errs[i] = u.Write(ctx, b)
	}
	return errs
}

func (u *upgraded) Resume(_ context.Context, topic string, partition int) (int64, int64, bool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	n, ok := u.next[part{topic, partition}]
	return n[0], n[1], ok, nil
}

func (u *upgraded) Ping(context.Context) error {
	if u.m.mutant == "up-ping-fail" {
		return errors.New("down")
	}
	return nil
}

func (u *upgraded) DeadLetters() int64 {
	if u.m.mutant == "up-dead-letters" {
		return 1
	}
	return 0
}

func TestUpgraded(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
		m := newMem(true, true, "")
		return &upgraded{wrapper: wrapper{inner: m}, m: m}, m
	}, sinktest.Options{ReplayExact: true, ReplayOverlap: true, Fences: true})
}
