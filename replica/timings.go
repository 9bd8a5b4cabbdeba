package replica

import (
	"math"
	"sync/atomic"
	"time"
)

// Histogram is a snapshot of a distribution: Count observations that sum
// to Sum, Buckets[i] of them at most Bounds[i] (cumulative counts, as
// Prometheus takes them; the observations above the last bound are in
// Count only).
type Histogram struct {
	Count   uint64
	Sum     float64
	Bounds  []float64 // upper bounds, rising
	Buckets []uint64  // cumulative counts, one per bound
}

// Timings are a replica's distributions, fed where a block is written and
// committed. Replica.Timings takes a snapshot.
type Timings struct {
	// BlockRows is the rows per block written to the sink; bounds 1, 4,
	// 16, ... 262,144.
	BlockRows Histogram
	// SinkWrite is the seconds a successful sink write of one block took;
	// bounds 1ms, 2ms, ... 33s.
	SinkWrite Histogram
	// Commit is the seconds a successful offset commit to etcd took,
	// retries included; bounds 0.5ms, 1ms, ... 16s.
	Commit Histogram
}

// timings are the live histograms behind Timings.
type timings struct {
	rows, write, commit *histogram
}

func newTimings() *timings {
	return &timings{
		rows:   newHistogram(1, 4, 10),
		write:  newHistogram(0.001, 2, 16),
		commit: newHistogram(0.0005, 2, 16),
	}
}

func (t *timings) snapshot() Timings {
	return Timings{BlockRows: t.rows.snapshot(), SinkWrite: t.write.snapshot(), Commit: t.commit.snapshot()}
}

// histogram counts observations in exponential buckets, lock-free.
type histogram struct {
	bounds []float64
	counts []atomic.Uint64 // per bucket, not cumulative; the last is above every bound
	sum    atomic.Uint64   // float64 bits
}

// newHistogram has n bounds: start, start*factor, ...
func newHistogram(start, factor float64, n int) *histogram {
	h := &histogram{bounds: make([]float64, n), counts: make([]atomic.Uint64, n+1)}
	for i := range h.bounds {
		h.bounds[i] = start
		start *= factor
	}
	return h
}

func (h *histogram) observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func (h *histogram) snapshot() Histogram {
	s := Histogram{Bounds: h.bounds, Buckets: make([]uint64, len(h.bounds))}
	for i := range h.counts {
		s.Count += h.counts[i].Load()
		if i < len(s.Buckets) {
			s.Buckets[i] = s.Count
		}
	}
	s.Sum = math.Float64frombits(h.sum.Load())
	return s
}

// observeWrite records a successful sink write of a block of rows records
// that took d. partition.deliver calls it.
func (r *Replica) observeWrite(rows int, d time.Duration) {
	r.hist.rows.observe(float64(rows))
	r.hist.write.observe(d.Seconds())
}

// observeCommit records a successful offset commit that took d.
// partition.deliver calls it.
func (r *Replica) observeCommit(d time.Duration) {
	r.hist.commit.observe(d.Seconds())
}
