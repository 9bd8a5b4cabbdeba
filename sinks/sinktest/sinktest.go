// Package sinktest checks that a sink keeps the contract of package sinks,
// in the manner of testing/fstest: a sink's own test calls Run with a
// constructor and a way to read back what the sink holds.
//
//	func TestConformance(t *testing.T) {
//		sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
//			dir := t.TempDir()
//			s, err := file.New(dir)
//			...
//			return s, sinktest.ReaderFunc(func(t *testing.T, topic string, partition int) []sinks.Record {
//				...file.ReadAll(dir, topic, partition)...
//			})
//		}, sinktest.Options{ReplayExact: true})
//	}
//
// What the suite holds every sink to, beyond the contract's words:
//
//   - a record reads back whole: offset, key, value, timestamp to the
//     millisecond (compared as instants, so any location will do) and
//     headers in order; nil and empty are different for keys, values and
//     header values (a nil value is a tombstone), while no headers may read
//     back as nil or empty;
//   - values of any bytes and size (the suite writes 1 MiB) are fine;
//   - a block without records (From < Next) is accepted and adds nothing;
//   - a sink neither changes a block nor keeps its slices after Write;
//   - a Write with a cancelled context either fails with an error wrapping
//     context.Canceled or stores the block; either way the sink stays usable;
//   - Write after Close fails and stores nothing; Close is idempotent: a
//     second Close returns nil too;
//   - Write is safe for concurrent use on different partitions.
//
// A sink that implements sinks.BatchWriter is held to its contract too:
//
//   - the blocks of several partitions and topics, in any order, go in with
//     one WriteBlocks, read back as the same blocks written one Write each
//     read back, and a call written again (a replay) adds nothing to a
//     sink that claims ReplayExact; a Resumer then resumes every partition
//     from its block's Next;
//   - errs has one entry per block; a fenced block (Fences) fails alone,
//     and the others of its call are stored;
//   - WriteBlocks neither changes the blocks nor keeps their slices, keeps
//     Write's rules on a cancelled context and after Close, and is safe for
//     concurrent use on different partitions.
//
// The side upgrades a sink declares (found with sinks.As, as the replica
// finds them) are held to their contracts:
//
//   - Resumer: a partition never written is unknown (ok false); after a
//     Write, Resume returns the block's Next and Generation, also after an
//     operator reset resumed the partition from an earlier offset;
//   - Pinger: an open sink answers Ping, also beside a Write;
//   - DeadLetterCounter: a new sink counts none, nor after plain records.
//
// Each subtest opens its own sink, and closes it when it ends.
//
// RunWrapper checks a sink that wraps another (a test's hook or counting
// wrapper): that sinks.As finds the inner sink's side upgrades through it,
// and that its WriteBlocks reaches the inner sink's.
package sinktest

import (
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Reader reads back what a sink holds, by a path of its own (the files, the
// database, the bytes written to a writer), not through the sink.
type Reader interface {
	// Records returns the records stored for one partition ordered by
	// offset; none for a partition never written. A sink that does not
	// deduplicate may hold an offset more than once: the copies come
	// together. Records must work after the sink is closed, and reports its
	// own failures through t.
	Records(t *testing.T, topic string, partition int) []sinks.Record
}

// ReaderFunc lets a function be a Reader.
type ReaderFunc func(t *testing.T, topic string, partition int) []sinks.Record

// Records calls f.
func (f ReaderFunc) Records(t *testing.T, topic string, partition int) []sinks.Record {
	return f(t, topic, partition)
}

// Options declares what a sink promises beyond the contract; a subtest that
// checks a promise the sink does not make checks only what every sink owes.
type Options struct {
	// ReplayExact: a block written again with the same range (after a crash)
	// is stored once. Without it the suite checks that every record is
	// there, in offset order, and that no other record is.
	ReplayExact bool
	// ReplayOverlap: after an operator reset, offsets re-delivered in blocks
	// with other bounds are stored once when the re-delivery is complete.
	ReplayOverlap bool
	// Fences: a block with an epoch lower than one the sink already wrote
	// for the partition is refused with an error wrapping sinks.ErrFenced,
	// and nothing of it is stored.
	Fences bool
}

// Run runs the suite. newSink is called once per subtest, with the
// subtest's t, and returns a new, empty sink and its reader. A sink that
// keeps nothing it can read back (a discarding sink) passes a nil Reader:
// the subtests that read back are then skipped and the others still run.
func Run(t *testing.T, newSink func(t *testing.T) (sinks.Sink, Reader), opts Options) {
	open := func(t *testing.T) (sinks.Sink, Reader) {
		t.Helper()
		s, r := newSink(t)
		if s == nil {
			t.Fatal("newSink returned a nil sink")
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close at the end of the subtest: %v", err)
			}
		})
		return s, r
	}
	reading := func(t *testing.T) (sinks.Sink, Reader) {
		t.Helper()
		s, r := open(t)
		if r == nil {
			t.Skip("the sink keeps nothing to read back")
		}
		return s, r
	}
	runWrite(t, open, reading, opts)
	runBatch(t, open, opts)
	runUpgrades(t, open, opts)
}
