package kafka

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
	"go.uber.org/zap"
)

// brokerLoop fetches the cursors whose leader is one broker: one Fetch
// request covers all of them that may be fetched, each at its own offset and
// with its own byte limit, in an order that rotates so that every partition
// is first in turn (a broker always returns the first batch of a response,
// whatever its size, and may have no room left for the last ones).
type brokerLoop struct {
	c    *Consumer
	id   int32
	log  *zap.Logger
	wake chan struct{}      // cap 1: a cursor may have become fetchable
	done chan *fetchRequest // cap maxInFlight: a request came back

	// Guarded by c.mu.
	cursors []*Cursor
	rot     int
	// budgetWait: the last pick found the budget used up. The loop sleeps
	// until bytes are given back anywhere, which wakes it.
	budgetWait bool

	// Owned by run.
	inFlight int
	// quietPolls counts the requests in flight that carry quiet cursors:
	// while one does, it is the long poll others join when it is back.
	quietPolls int
	attempt    int
	retryAt    time.Time
}

// fetchRequest is one request in flight and, once back, its outcome.
type fetchRequest struct {
	parts   []*fetchPart
	reserve int64 // budget bytes set aside for the answer
	quiet   bool  // it carries quiet cursors
	err     error // the request as a whole failed
}

// fetchPart is one cursor's part of a request.
type fetchPart struct {
	cur  *Cursor
	seq  uint64
	from int64
	max  int32

	raw     *rawFetchPartition // its part of the response, until decoded
	batch   PolledBatch
	err     error // decoding failed
	code    int16 // the broker's error code for the partition
	present bool  // the response held the partition
	hw, lso int64
}

func newBrokerLoop(c *Consumer, id int32) *brokerLoop {
	return &brokerLoop{
		c:    c,
		id:   id,
		log:  c.log.With(zap.Int32("broker", id)),
		wake: make(chan struct{}, 1),
		done: make(chan *fetchRequest, maxInFlight),
	}
}

func (b *brokerLoop) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// add makes cur one of the loop's cursors. c.mu is held.
func (b *brokerLoop) add(cur *Cursor) {
	cur.loop, cur.leader = b, b.id
	b.cursors = append(b.cursors, cur)
	b.poke()
}

// remove takes cur out of the loop, to be looked up again. c.mu is held.
func (b *brokerLoop) remove(cur *Cursor) {
	if i := slices.Index(b.cursors, cur); i >= 0 {
		b.cursors = slices.Delete(b.cursors, i, i+1)
	}
	cur.loop, cur.leader = nil, -1
}

// run sends requests while there are cursors to fetch, until ctx ends; it
// then waits for the requests in flight, which end with ctx.
func (b *brokerLoop) run(ctx context.Context) {
	defer b.c.wg.Done()
	for {
		var timer <-chan time.Time
		if at := b.launch(ctx); !at.IsZero() {
			timer = time.After(time.Until(at))
		}
		select {
		case <-ctx.Done():
			for ; b.inFlight > 0; b.inFlight-- {
				<-b.done
			}
			return
		case <-b.wake:
		case r := <-b.done:
			b.inFlight--
			if r.quiet {
				b.quietPolls--
			}
			b.handle(r)
		case <-timer:
		}
	}
}

// launch sends requests while fewer than maxInFlight are out and some
// cursor may be fetched. It returns when to try again, if a backoff is what
// holds it.
func (b *brokerLoop) launch(ctx context.Context) time.Time {
	for b.inFlight < maxInFlight {
		now := time.Now()
		if now.Before(b.retryAt) {
			return b.retryAt
		}
		r, wait := b.pick(now)
		if r == nil {
			return wait
		}
		b.inFlight++
		if r.quiet {
			b.quietPolls++
		}
		go func() { b.done <- b.fetch(ctx, r) }()
	}
	return time.Time{}
}

// pick gathers the cursors to fetch now into a request and sets aside the
// budget its answer may take. With none, it returns when a backoff ends.
func (b *brokerLoop) pick(now time.Time) (*fetchRequest, time.Time) {
	c := b.c
	c.mu.Lock()
	defer c.mu.Unlock()
	left := int64(c.cfg.MaxBufferBytes) - c.held.Load()
	n := len(b.cursors)
	b.budgetWait = left <= 0
	if left <= 0 || n == 0 {
		return nil, time.Time{}
	}
	share := c.share()
	// While a long poll carries the quiet cursors (their last answer was
	// empty), a request beside it is for cursors that may have more now:
	// the quiet ones wait for the next request of all, so that an idle
	// replica keeps one long poll per broker, not two.
	second := b.quietPolls > 0
	var parts, starved []*fetchPart
	var wait time.Time
	var sum int64
	for i := range n {
		cur := b.cursors[(b.rot+i)%n]
		if !cur.fetchable(now, share) || (second && cur.quiet) {
			if cur.retryAt.After(now) && (wait.IsZero() || cur.retryAt.Before(wait)) {
				wait = cur.retryAt
			}
			continue
		}
		p := &fetchPart{cur: cur, seq: cur.seq, from: cur.fetchAt, max: int32(min(int64(c.cfg.MaxBytes), share-cur.held))}
		cur.inFlight = true
		sum += int64(p.max)
		if cur.starved {
			cur.starved = false
			starved = append(starved, p)
		} else {
			parts = append(parts, p)
		}
	}
	b.rot = (b.rot + 1) % n
	if len(parts)+len(starved) == 0 {
		return nil, wait
	}
	reserve := max(1, min(sum, int64(c.cfg.MaxRequestBytes), left))
	c.held.Add(reserve)
	r := &fetchRequest{parts: append(starved, parts...), reserve: reserve}
	for _, p := range r.parts {
		if p.cur.quiet {
			r.quiet = true
			break
		}
	}
	return r, time.Time{}
}

// fetch sends one request and decodes what each partition got. It runs on
// a goroutine of its own, so decoding overlaps the other request in flight
// and the delivery of earlier batches.
func (b *brokerLoop) fetch(ctx context.Context, r *fetchRequest) *fetchRequest {
	c := b.c
	req := &rawFetchRequest{clientID: c.cfg.ClientID, broker: b.id, direct: true, Request: fetchapi.Request{
		ReplicaID:      -1,
		MaxWaitTime:    int32(c.cfg.MaxWait / time.Millisecond),
		MinBytes:       int32(c.cfg.MinBytes),
		MaxBytes:       int32(min(r.reserve, 1<<31-1)),
		IsolationLevel: int8(c.cfg.IsolationLevel.kafka()),
		SessionID:      -1,
		SessionEpoch:   -1,
	}}
	for _, p := range r.parts {
		rp := fetchapi.RequestPartition{
			Partition:          int32(p.cur.tp.Partition),
			CurrentLeaderEpoch: -1,
			FetchOffset:        p.from,
			LogStartOffset:     -1,
			PartitionMaxBytes:  p.max,
		}
		if t := len(req.Topics) - 1; t >= 0 && req.Topics[t].Topic == p.cur.tp.Topic {
			req.Topics[t].Partitions = append(req.Topics[t].Partitions, rp)
		} else {
			req.Topics = append(req.Topics, fetchapi.RequestTopic{Topic: p.cur.tp.Topic, Partitions: []fetchapi.RequestPartition{rp}})
		}
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.MaxWait+c.cfg.RequestTimeout)
	defer cancel()
	c.requests.Add(1)
	m, err := c.transport.RoundTrip(rctx, kafkago.TCP(c.cfg.Brokers...), req)
	if err != nil {
		r.err = err
		return r
	}
	res, ok := m.(*rawFetchResponse)
	if !ok {
		r.err = fmt.Errorf("unexpected response %T", m)
		return r
	}
	if res.ErrorCode != 0 {
		r.err = kafkago.Error(res.ErrorCode)
		return r
	}
	got := make(map[TopicPartition]*rawFetchPartition, len(r.parts))
	for i := range res.Topics {
		t := &res.Topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			got[TopicPartition{t.Topic, int(p.Partition)}] = p
		}
	}
	var work []*fetchPart
	for _, part := range r.parts {
		p, ok := got[part.cur.tp]
		if !ok {
			continue
		}
		part.present = true
		part.hw, part.lso = p.HighWatermark, p.LastStableOffset
		if part.lso < 0 {
			part.lso = p.HighWatermark // before fetch v4
		}
		if p.ErrorCode != 0 {
			part.code = p.ErrorCode
			continue
		}
		if len(p.Records) == 0 {
			part.batch = PolledBatch{From: part.from, Next: part.from, HighWatermark: part.hw, LastStable: part.lso}
			continue
		}
		part.raw = p
		work = append(work, part)
	}
	// The partitions of a response are decoded side by side, so that a
	// replica reading few brokers still uses every core for it.
	workers := min(len(work), runtime.GOMAXPROCS(0))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(work)); i = next.Add(1) - 1 {
				part := work[i]
				part.batch, part.err = part.cur.f.decodePartition(part.from, part.raw)
				part.raw = nil
			}
		}()
	}
	wg.Wait()
	return r
}

// handle hands a request's outcome to its cursors.
func (b *brokerLoop) handle(r *fetchRequest) {
	c := b.c
	now := time.Now()
	relookup := false
	c.mu.Lock()
	c.held.Add(-r.reserve)
	c.budgetFreed()
	if r.err != nil {
		for _, p := range r.parts {
			p.cur.inFlight = false
		}
		if retriable(r.err) && b.c.ctx.Err() == nil {
			d := backoff(c.cfg, b.attempt)
			b.attempt++
			b.retryAt = now.Add(d)
			if b.attempt == 1 || b.attempt%10 == 0 {
				b.log.Warn("fetch failed; retrying", zap.Int("partitions", len(r.parts)), zap.Int("attempt", b.attempt),
					zap.Duration("backoff", d), zap.Error(r.err))
			}
			// The broker may be gone or no longer lead these: look the
			// leaders up again, from fresh metadata.
			for _, p := range r.parts {
				if p.cur.loop == b {
					b.remove(p.cur)
				}
			}
			relookup = true
		} else if c.ctx.Err() == nil {
			for _, p := range r.parts {
				p.cur.fail(r.err)
			}
		}
		c.mu.Unlock()
		if relookup {
			c.transport.CloseIdleConnections()
			c.askLeaders()
		}
		return
	}
	b.attempt = 0
	for _, p := range r.parts {
		cur := p.cur
		cur.inFlight = false
		if cur.closed || p.seq != cur.seq || cur.loop != b {
			continue // moved, closed or repositioned since: the result is stale
		}
		if p.present {
			cur.hw, cur.lso = p.hw, p.lso
		}
		switch {
		case p.code != 0:
			err := kafkago.Error(p.code)
			switch {
			case errors.Is(err, kafkago.OffsetOutOfRange):
				cur.outOfRange = true
				cur.notify()
			case leaderMoved(err) || unknownTopic(err):
				cur.retryAt = now.Add(backoff(c.cfg, cur.attempt))
				cur.attempt++
				b.remove(cur)
				relookup = true
			case err.Temporary():
				cur.retryAt = now.Add(backoff(c.cfg, cur.attempt))
				cur.attempt++
			default:
				cur.fail(err)
			}
		case p.err != nil:
			if retriable(p.err) {
				cur.retryAt = now.Add(backoff(c.cfg, cur.attempt))
				cur.attempt++
			} else {
				cur.fail(p.err)
			}
		case p.batch.Next > p.batch.From:
			cur.attempt, cur.quiet = 0, false
			cur.queue = append(cur.queue, p.batch)
			cur.held += int64(p.batch.Bytes)
			c.held.Add(int64(p.batch.Bytes))
			cur.fetchAt = p.batch.Next
			cur.notify()
		default:
			cur.attempt = 0
			end := cur.hw
			if c.cfg.IsolationLevel == ReadCommitted {
				end = cur.lso
			}
			// Data was there but the response had no room for it: be
			// first next time, and do not wait for a long poll.
			cur.starved = end > cur.fetchAt
			cur.quiet = !cur.starved
		}
	}
	c.mu.Unlock()
	if relookup {
		c.transport.CloseIdleConnections()
		c.askLeaders()
	}
}

// leaderMoved tells whether a partition error means the broker no longer
// leads it.
func leaderMoved(err kafkago.Error) bool {
	switch err {
	case kafkago.NotLeaderForPartition, kafkago.LeaderNotAvailable, kafkago.ReplicaNotAvailable,
		kafkago.FencedLeaderEpoch, kafkago.UnknownLeaderEpoch, kafkago.KafkaStorageError, kafkago.BrokerNotAvailable:
		return true
	}
	return false
}
