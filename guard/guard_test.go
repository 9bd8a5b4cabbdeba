package guard_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/guard"
)

// consumer records what the guard did to it.
type consumer struct {
	mu        sync.Mutex
	committed []int64
	rewinds   []int64
	commitErr error
}

func (c *consumer) Commit(_ context.Context, next int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.commitErr != nil {
		return c.commitErr
	}
	c.committed = append(c.committed, next)
	return nil
}

func (c *consumer) Rewind(from int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rewinds = append(c.rewinds, from)
}

var errSink = errors.New("sink down")

// deliver is the pattern every caller uses; write stands for the sink.
func deliver(ctx context.Context, c *consumer, write func() error) (err error) {
	g := guard.New(c, c, 10, 20)
	defer g.Release()
	if err := write(); err != nil {
		return err
	}
	return g.Commit(ctx)
}

func TestPaths(t *testing.T) {
	errCommit := errors.New("etcd down")
	cases := []struct {
		name        string
		write       func() error
		commitErr   error
		wantErr     error
		wantCommits []int64
		wantRewinds []int64
	}{
		{"success", func() error { return nil }, nil, nil, []int64{20}, nil},
		{"sink error", func() error { return errSink }, nil, errSink, nil, []int64{10}},
		{"commit error", func() error { return nil }, errCommit, errCommit, nil, []int64{10}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &consumer{commitErr: tc.commitErr}
			err := deliver(context.Background(), c, tc.write)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if !equal(c.committed, tc.wantCommits) || !equal(c.rewinds, tc.wantRewinds) {
				t.Fatalf("commits %v rewinds %v, want %v %v", c.committed, c.rewinds, tc.wantCommits, tc.wantRewinds)
			}
		})
	}
}

func TestPanicRollsBack(t *testing.T) {
	c := &consumer{}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		_ = deliver(context.Background(), c, func() error { panic("sink bug") })
	}()
	if !equal(c.rewinds, []int64{10}) || len(c.committed) != 0 {
		t.Fatalf("after panic: commits %v rewinds %v, want none and [10]", c.committed, c.rewinds)
	}
}

func TestDoubleCalls(t *testing.T) {
	ctx := context.Background()
	t.Run("commit twice", func(t *testing.T) {
		c := &consumer{}
		g := guard.New(c, c, 0, 5)
		if err := g.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := g.Commit(ctx); !errors.Is(err, guard.ErrDone) {
			t.Fatalf("second commit: %v, want ErrDone", err)
		}
		g.Release()
		if !equal(c.committed, []int64{5}) || len(c.rewinds) != 0 || g.RolledBack() {
			t.Fatalf("commits %v rewinds %v", c.committed, c.rewinds)
		}
	})
	t.Run("commit after release", func(t *testing.T) {
		c := &consumer{}
		g := guard.New(c, c, 0, 5)
		g.Release()
		g.Release()
		if err := g.Commit(ctx); !errors.Is(err, guard.ErrDone) {
			t.Fatalf("commit after release: %v, want ErrDone", err)
		}
		if len(c.committed) != 0 || !equal(c.rewinds, []int64{0}) || !g.RolledBack() {
			t.Fatalf("commits %v rewinds %v, want none and one rewind", c.committed, c.rewinds)
		}
	})
	t.Run("retry after failed commit", func(t *testing.T) {
		c := &consumer{commitErr: errors.New("transient")}
		g := guard.New(c, c, 0, 5)
		if err := g.Commit(ctx); err == nil {
			t.Fatal("commit did not fail")
		}
		c.commitErr = nil
		if err := g.Commit(ctx); err != nil {
			t.Fatalf("second try: %v", err)
		}
		g.Release()
		if !equal(c.committed, []int64{5}) || len(c.rewinds) != 0 {
			t.Fatalf("commits %v rewinds %v", c.committed, c.rewinds)
		}
	})
}

func TestConcurrentRelease(t *testing.T) {
	var rewinds atomic.Int32
	r := rewinderFunc(func(int64) { rewinds.Add(1) })
	g := guard.New(&consumer{}, r, 0, 1)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() { defer wg.Done(); g.Release() }()
	}
	wg.Wait()
	if n := rewinds.Load(); n != 1 {
		t.Fatalf("%d rewinds from 64 concurrent releases, want 1", n)
	}
}

func TestConcurrentCommitAndRelease(t *testing.T) {
	// Either the commit wins and nothing is rewound, or the release wins and
	// the commit reports ErrDone: never both, never neither.
	for range 200 {
		c := &consumer{}
		g := guard.New(c, c, 3, 9)
		var wg sync.WaitGroup
		var err error
		wg.Add(2)
		go func() { defer wg.Done(); err = g.Commit(context.Background()) }()
		go func() { defer wg.Done(); g.Release() }()
		wg.Wait()
		committed, rewound := len(c.committed) == 1, len(c.rewinds) == 1
		if committed == rewound || (err == nil) != committed {
			t.Fatalf("commits %v rewinds %v err %v", c.committed, c.rewinds, err)
		}
	}
}

type rewinderFunc func(int64)

func (f rewinderFunc) Rewind(from int64) { f(from) }

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
