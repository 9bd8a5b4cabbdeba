package integration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// load produces to every partition of the env's topic in the background,
// round-robin, until stopped; it counts what each partition got.
type load struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	counts map[int]int64
	err    error
}

func (e *env) startLoad(perSecond int) *load {
	e.t.Helper()
	cl := e.producer()
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel, done: make(chan struct{}), counts: map[int]int64{}}
	go func() {
		defer close(l.done)
		defer cl.Close()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		chunk := max(1, perSecond/100)
		i := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var rs []*kgo.Record
			for range chunk {
				rs = append(rs, &kgo.Record{Topic: e.topic, Partition: int32(i % e.parts), Value: fmt.Appendf(nil, `{"i":%d}`, i)})
				i++
			}
			// Produce with a context of its own, so stopping the load never
			// leaves records acknowledged but uncounted.
			pctx, pcancel := context.WithTimeout(context.Background(), e.produceTimeout())
			err := cl.ProduceSync(pctx, rs...).FirstErr()
			pcancel()
			if err != nil {
				l.mu.Lock()
				l.err = err
				l.mu.Unlock()
				return
			}
			l.mu.Lock()
			for _, r := range rs {
				l.counts[int(r.Partition)]++
			}
			l.mu.Unlock()
		}
	}()
	e.t.Cleanup(l.stopNow)
	return l
}

func (l *load) stopNow() {
	l.cancel()
	<-l.done
}

// stop ends the load and returns how many records each partition got.
func (l *load) stop(t *testing.T) map[int]int64 {
	t.Helper()
	l.stopNow()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		t.Fatalf("load: %v", l.err)
	}
	out := map[int]int64{}
	for p, n := range l.counts {
		out[p] = n
	}
	return out
}

func addCounts(a, b map[int]int64) map[int]int64 {
	out := map[int]int64{}
	for p, n := range a {
		out[p] += n
	}
	for p, n := range b {
		out[p] += n
	}
	return out
}

// owners counts the claims of each replica.
func (e *env) owners() map[string]int {
	e.t.Helper()
	snap := e.snapshot()
	out := map[string]int{}
	for _, c := range snap.Claims {
		out[c.Replica]++
	}
	return out
}

// claimMap is the owner of each partition number.
func (e *env) claimMap() map[int]string {
	e.t.Helper()
	snap := e.snapshot()
	out := map[int]string{}
	for p, c := range snap.Claims {
		out[p.Partition] = c.Replica
	}
	return out
}

// balanced reports whether exactly ids own claims, each exactly want.
func balanced(got map[string]int, want map[string]int) bool {
	if len(got) != len(want) {
		return false
	}
	for id, n := range want {
		if got[id] != n {
			return false
		}
	}
	return true
}

// union reads the file sinks of several replicas (each its own directory)
// and counts every offset across them.
type union map[int]map[int64]int

func (e *env) readUnion(dirs ...string) union {
	e.t.Helper()
	u := union{}
	for p := 0; p < e.parts; p++ {
		u[p] = map[int64]int{}
		for _, d := range dirs {
			recs, err := file.ReadAll(d, e.topic, p)
			if err != nil {
				e.t.Fatal(err)
			}
			for _, r := range recs {
				u[p][r.Offset]++
			}
		}
	}
	return u
}

// check asserts that nothing below want[p] is missing and returns the
// duplicated offsets per partition.
func (u union) check(t *testing.T, want map[int]int64) map[int][]int64 {
	t.Helper()
	dups := map[int][]int64{}
	for p, n := range want {
		for off := int64(0); off < n; off++ {
			switch c := u[p][off]; {
			case c == 0:
				t.Fatalf("partition %d: offset %d lost", p, off)
			case c > 1:
				dups[p] = append(dups[p], off)
			}
		}
	}
	return dups
}

// contiguousRuns counts the runs of consecutive offsets in a sorted list.
func contiguousRuns(offs []int64) int {
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	runs := 0
	for i, o := range offs {
		if i == 0 || o != offs[i-1]+1 {
			runs++
		}
	}
	return runs
}

// lastWrite is the newest modification time of a file below dir.
func lastWrite(t *testing.T, dir string) time.Time {
	t.Helper()
	var last time.Time
	err := filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.IsDir() && info.ModTime().After(last) {
			last = info.ModTime()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// countingSink counts every write of every offset, across replicas.
type countingSink struct {
	mu     sync.Mutex
	writes map[int]map[int64]int
	total  atomic.Int64
}

func newCountingSink() *countingSink { return &countingSink{writes: map[int]map[int64]int{}} }

func (c *countingSink) Write(_ context.Context, b *sinks.Block) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.writes[b.Partition]
	if m == nil {
		m = map[int64]int{}
		c.writes[b.Partition] = m
	}
	for _, r := range b.Records {
		m[r.Offset]++
	}
	c.total.Add(int64(len(b.Records)))
	return nil
}

func (c *countingSink) Close() error { return nil }

// exactlyOnce asserts every offset below want[p] was written exactly once.
func (c *countingSink) exactlyOnce(t *testing.T, want map[int]int64) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, n := range want {
		for off := int64(0); off < n; off++ {
			if got := c.writes[p][off]; got != 1 {
				t.Fatalf("partition %d offset %d written %d times, want exactly once", p, off, got)
			}
		}
	}
}

// producer is a client that writes each record to the partition it names,
// lingering a millisecond to batch; the caller closes it.
func (e *env) producer() *kgo.Client {
	e.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.kafka.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(time.Millisecond)}, e.producerOpts()...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return cl
}
