package kafka

import (
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Buffer reuse. A partition's records as a fetch response brings them are
// read into a buffer of their own, which the records of uncompressed
// batches alias; the records of compressed batches alias what they were
// decompressed into, so their fetched bytes are given back as soon as they
// are decoded. The reader gives a batch's buffer back with Recycle once
// nothing holds its records: after its block is committed or rolled back
// and finished, when no sink holds a slice of it (the sinks' contract). The
// records slices the reader copies out of batches come back the same way
// (RecycleRecords). A buffer given back too early would hand a later fetch's
// bytes to records still in use: OFFSETKEEPER_POISON_BUFFERS=1 (for tests)
// overwrites given-back buffers instead of reusing them, so that such a
// record shows garbage at once.

const (
	minBufClass = 12 // 4 KiB: smaller buffers are not worth keeping
	maxBufClass = 24 // 16 MiB, DefaultMaxRequestBytes
)

var (
	bufPools [maxBufClass + 1]sync.Pool // *[]byte of cap 1<<class
	recPool  sync.Pool                  // *[]sinks.Record, cleared

	poisonBuffers atomic.Bool
)

// PoisonBuffersEnv set to 1 turns PoisonBuffers on from the start.
const PoisonBuffersEnv = "OFFSETKEEPER_POISON_BUFFERS"

func init() { poisonBuffers.Store(os.Getenv(PoisonBuffersEnv) == "1") }

// PoisonBuffers makes given-back buffers and records slices be overwritten
// rather than reused (or reused again, off): for tests that neither is
// given back while a block holds it.
func PoisonBuffers(on bool) { poisonBuffers.Store(on) }

// poisonRecord overwrites the records of a slice given back while poisoning.
var poisonRecord = sinks.Record{Offset: -1, Key: []byte("poisoned"), Value: []byte("poisoned")}

// bufClass is the class of a buffer of n bytes: the power of two at least n.
func bufClass(n int) int { return max(bits.Len(uint(n-1)), minBufClass) }

// getBytes returns n bytes, reused when a buffer of their class was given
// back. Their content is not cleared: the caller fills them.
func getBytes(n int) []byte {
	c := bufClass(n)
	if n <= 0 || c > maxBufClass {
		return make([]byte, n)
	}
	if v, ok := bufPools[c].Get().(*[]byte); ok {
		return (*v)[:n]
	}
	return make([]byte, n, 1<<c)
}

// putBytes gives back a buffer of getBytes that nothing refers to any more.
func putBytes(b []byte) {
	c := bufClass(cap(b))
	if cap(b) != 1<<c || c > maxBufClass {
		return // not one of getBytes', or too large to keep
	}
	b = b[:cap(b)]
	if poisonBuffers.Load() {
		for i := range b {
			b[i] = 0xEE
		}
		return
	}
	bufPools[c].Put(&b)
}

// getRecords returns an empty records slice with room for n.
func getRecords(n int) []sinks.Record {
	if v, ok := recPool.Get().(*[]sinks.Record); ok && cap(*v) >= n {
		return (*v)[:0]
	}
	return make([]sinks.Record, 0, n)
}

// Buffer is the memory that the records of a PolledBatch alias (zero when
// they alias none of their own). Recycle gives it back.
type Buffer struct{ b []byte }

// IsZero reports whether the batch had no buffer of its own.
func (b Buffer) IsZero() bool { return b.b == nil }

// Buffer returns the memory the batch's records alias, to give back with
// Recycle when nothing holds them any more.
func (b PolledBatch) Buffer() Buffer { return Buffer{b.buf} }

// Recycle gives back the buffers of batches whose records nothing holds
// any more: no record, key, value or header of theirs may be used after.
func Recycle(bufs []Buffer) {
	for _, b := range bufs {
		if b.b != nil {
			putBytes(b.b)
		}
	}
}

// RecycleRecords gives back a records slice of one's own once its records
// were copied elsewhere (the records themselves, and the bytes they alias,
// are not given back by it). Never a batch's: ReleaseRecords gives that
// back, which may lie in an arena.
func RecycleRecords(recs []sinks.Record) {
	if poisonBuffers.Load() {
		// A block still writing these records would show offset -1.
		for i := range recs {
			recs[i] = poisonRecord
		}
		return
	}
	if cap(recs) < 64 {
		return
	}
	recs = recs[:cap(recs)]
	clear(recs) // hold no bytes of theirs
	recs = recs[:0]
	recPool.Put(&recs)
}

// Records arenas. A cursor decodes the batches it fetches one after the
// other into one records slice, its arena, rather than into a slice per
// batch: a reader that builds blocks of several batches then joins them
// without copying a record (Slab.Join). Copying them was a fifth of a
// replica's CPU at 8 partitions: each record (112 bytes) was written by
// the decoder, copied into its block, and cleared twice. An arena goes back
// to the pool once its cursor has moved on to another and every batch in
// it is released; until then nothing else is decoded into what a batch
// holds of it.

const (
	minArenaClass = 6  // 64 records
	maxArenaClass = 17 // 131,072 records, 14 MiB
)

var arenaPools [maxArenaClass + 1]sync.Pool // *recordArena of cap 1<<class

// recordSize is what a record takes in a slice, besides its bytes.
const recordSize = int(unsafe.Sizeof(sinks.Record{}))

// recordArena is a records slice that a cursor's batches are decoded into,
// one after the other.
type recordArena struct {
	recs []sinks.Record
	// used is where the next batch's records go. Only the decoder that
	// holds the arena (it took it from its cursor) touches it.
	used int
	// refs counts the cursor's hold (while the arena is the one it
	// decodes into) and each batch's.
	refs atomic.Int32
}

// newArena returns an arena with room for rows records, held once.
func newArena(rows int) *recordArena {
	c := max(bits.Len(uint(rows-1)), minArenaClass)
	var a *recordArena
	if c <= maxArenaClass {
		if v, ok := arenaPools[c].Get().(*recordArena); ok {
			a = v
		} else {
			a = &recordArena{recs: make([]sinks.Record, 1<<c)}
		}
	} else {
		a = &recordArena{recs: make([]sinks.Record, rows)}
	}
	a.recs = a.recs[:rows] // exactly: a reader's blocks end where it ends
	a.used = 0
	a.refs.Store(1)
	return a
}

// room is how many records the arena can still take.
func (a *recordArena) room() int { return len(a.recs) - a.used }

// release gives back one hold; the last one gives the arena back.
func (a *recordArena) release() {
	switch n := a.refs.Add(-1); {
	case n > 0:
		return
	case n < 0:
		panic("kafka: a records arena released more often than held")
	}
	if poisonBuffers.Load() {
		// A block still writing these records would show offset -1.
		for i := range a.recs {
			a.recs[i] = poisonRecord
		}
		return
	}
	// Hold no bytes of theirs. Past len nothing was written: a decode
	// into the arena has room up to len only.
	clear(a.recs)
	if c := bits.Len(uint(cap(a.recs) - 1)); cap(a.recs) == 1<<c && c >= minArenaClass && c <= maxArenaClass {
		arenaPools[c].Put(a)
	}
}

// Slab is where a batch's records lie in the arena its cursor decoded
// them into, and one hold on that arena: records [start, end). The zero
// Slab is that of a batch whose records slice is its own.
type Slab struct {
	a          *recordArena
	start, end int
	// closing: when its last batch was decoded, the arena had room left
	// for fewer records than that batch held, so the next most likely
	// goes into another arena.
	closing bool
}

// Slab returns where the batch's records lie (zero when they have a slice
// of their own). The batch's hold on it is given back by Release, or by
// ReleaseRecords.
func (b PolledBatch) Slab() Slab { return b.slab }

// IsZero reports whether s holds nothing.
func (s Slab) IsZero() bool { return s.a == nil }

// Release gives back the hold: the records of s may not be used after.
func (s Slab) Release() {
	if s.a != nil {
		s.a.release()
	}
}

// Join returns the records of s followed by those of next as one slice,
// and the slab that holds them, when next lies right after s in the same
// arena: the batch fetched after s's, decoded after it. next's hold is
// given back (the joined slab's is s's). ok is false, and nothing changes,
// otherwise.
func (s Slab) Join(next Slab) (recs []sinks.Record, joined Slab, ok bool) {
	if !s.joins(next) {
		return nil, s, false
	}
	next.a.release() // never the last hold: s has one
	s.end, s.closing = next.end, next.closing
	return s.a.recs[s.start:s.end:s.end], s, true
}

// joins reports whether next lies right after s in the same arena.
func (s Slab) joins(next Slab) bool { return s.a != nil && s.a == next.a && s.end == next.start }

// ReleaseRecords gives back a batch's records slice once its records were
// copied elsewhere (not the bytes they alias: see Recycle).
func ReleaseRecords(b PolledBatch) {
	if b.slab.a != nil {
		b.slab.Release()
		return
	}
	RecycleRecords(b.Records)
}
