// Package discard is the sink that keeps nothing: it counts the records and
// blocks it is given, so that benchmarks measure everything but the store.
package discard

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// ErrClosed is returned by Write and WriteBlocks after Close.
var ErrClosed = errors.New("discard sink is closed")

// Sink counts what it is written. It is safe for concurrent use.
type Sink struct {
	records atomic.Int64
	blocks  atomic.Int64
	closed  atomic.Bool
}

var _ sinks.BatchWriter = (*Sink)(nil)

// New returns a sink with its counters at zero.
func New() *Sink { return &Sink{} }

// Write counts the block and its records, unless ctx is done or the sink is
// closed: then it counts nothing and returns the error, like a real sink.
func (s *Sink) Write(ctx context.Context, b *sinks.Block) error {
	if b == nil {
		return errors.New("write: nil block")
	}
	if s.closed.Load() {
		return fmt.Errorf("write %s: %w", b, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("write %s: %w", b, err)
	}
	s.records.Add(int64(len(b.Records)))
	s.blocks.Add(1)
	return nil
}

// WriteBlocks counts each block as Write does, with an error for each
// block Write would refuse; see sinks.BatchWriter.
func (s *Sink) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	errs := make([]error, len(blocks))
	for i, b := range blocks {
		errs[i] = s.Write(ctx, b)
	}
	return errs
}

// Close makes later writes fail with ErrClosed. It is idempotent and always
// returns nil.
func (s *Sink) Close() error {
	s.closed.Store(true)
	return nil
}

// Records is the number of records written so far.
func (s *Sink) Records() int64 { return s.records.Load() }

// Blocks is the number of blocks written so far, empty ones included.
func (s *Sink) Blocks() int64 { return s.blocks.Load() }
