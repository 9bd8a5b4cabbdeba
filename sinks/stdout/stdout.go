// Package stdout is the sink that prints blocks to a writer, normally
// os.Stdout, in the JSON-lines format of package file: one line per record.
// It is for watching and piping, not for keeping: it appends, so a replayed
// block is printed again, and Write returning nil means the lines were handed
// to the writer (and flushed, for a writer with a Flush method), not that
// they are on disk.
package stdout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("stdout sink is closed")

// Sink writes the lines of each block to its writer with one Write call, so
// lines of concurrent blocks never interleave. It is safe for concurrent use.
type Sink struct {
	mu     sync.Mutex
	w      io.Writer
	buf    []byte
	closed bool
}

// New returns a sink writing to w. The sink does not close w.
func New(w io.Writer) *Sink {
	return &Sink{w: w}
}

// Write prints the block's records, one line each; a block without records
// prints nothing.
func (s *Sink) Write(ctx context.Context, b *sinks.Block) error {
	if b == nil {
		return errors.New("write: nil block")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("write %s: %w", b, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("write %s: %w", b, err)
	}
	if len(b.Records) == 0 {
		return nil
	}
	s.buf = s.buf[:0]
	for i := range b.Records {
		s.buf = file.AppendLine(s.buf, b.Topic, b.Partition, &b.Records[i])
	}
	n, err := s.w.Write(s.buf)
	if err == nil && n < len(s.buf) {
		err = io.ErrShortWrite
	}
	if f, ok := s.w.(interface{ Flush() error }); ok && err == nil {
		err = f.Flush()
	}
	if cap(s.buf) > 1<<20 {
		s.buf = nil // don't hold on to the memory of one big block
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", b, err)
	}
	return nil
}

// Close makes later writes fail with ErrClosed; it leaves the writer open.
// Close is idempotent and always returns nil.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
