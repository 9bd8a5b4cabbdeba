// Package guard holds OffsetGuard: the type that makes a polled block either
// committed or rolled back, on every return path, error and panic.
//
// The pattern is the one of database/sql's Tx:
//
//	g := guard.New(committer, rewinder, from, next)
//	defer g.Release()
//	if err := sink.Write(ctx, block); err != nil {
//		return err
//	}
//	return g.Commit(ctx)
//
// Release after a successful Commit is a no-op, so the deferred call is always
// safe; Commit after Commit or after Release fails with ErrDone.
package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrDone is returned by Commit when the guard was already committed or released.
var ErrDone = errors.New("guard: already committed or released")

// Committer stores the offset after a block: next is the first offset not in it.
type Committer interface {
	Commit(ctx context.Context, next int64) error
}

// Rewinder moves the consumer back to from, the first offset of the block, so
// that the block is read again.
type Rewinder interface {
	Rewind(from int64)
}

// Guard wraps one block, [from, next). It is safe for concurrent use.
type Guard struct {
	committer Committer
	rewinder  Rewinder
	from      int64
	next      int64

	mu   sync.Mutex
	done bool
	// rolled tells whether Release rewound the consumer, for tests and logs.
	rolled bool
}

// New returns a guard for the block [from, next), polled but not yet committed.
func New(c Committer, r Rewinder, from, next int64) *Guard {
	return &Guard{committer: c, rewinder: r, from: from, next: next}
}

// From is the first offset of the block.
func (g *Guard) From() int64 { return g.from }

// Next is the offset Commit stores: the first offset after the block.
func (g *Guard) Next() int64 { return g.next }

// Commit stores next through the committer. On success the guard is done and
// Release does nothing. On failure the guard stays open, so the deferred
// Release rolls the consumer back to from.
func (g *Guard) Commit(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return ErrDone
	}
	if err := g.committer.Commit(ctx, g.next); err != nil {
		return fmt.Errorf("commit block [%d, %d): %w", g.from, g.next, err)
	}
	g.done = true
	return nil
}

// Release rolls the consumer back to from unless the guard was committed. It
// is idempotent and safe in defer, also while a panic unwinds.
func (g *Guard) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return
	}
	g.done = true
	g.rolled = true
	g.rewinder.Rewind(g.from)
}

// RolledBack reports whether Release rewound the consumer.
func (g *Guard) RolledBack() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rolled
}
