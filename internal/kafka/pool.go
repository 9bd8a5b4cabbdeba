package kafka

import (
	"math/bits"
	"sync"
	"sync/atomic"

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
// bytes to records still in use: PoisonBuffers (for tests; the CLI turns
// it on with OFFSETKEEPER_POISON_BUFFERS=1) overwrites given-back buffers instead of reusing them, so that such a
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

// PoisonBuffersEnv set to 1 turns PoisonBuffers on in a process of the
// CLI (its main reads it; this package reads no environment).
const PoisonBuffersEnv = "OFFSETKEEPER_POISON_BUFFERS"

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

// RecycleRecords gives back a batch's records slice once its records were
// copied elsewhere (the records themselves, and the bytes they alias, are
// not given back by it).
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
