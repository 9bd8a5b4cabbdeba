package kafka

import (
	"context"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// overdueSlack is how long past MaxWait a fetch may go unanswered before
// the loop asks for fresh metadata: a broker that is paused or cut off
// answers nothing, and its partitions' new leaders are to be found while
// the request waits out its timeout.
const overdueSlack = 2 * time.Second

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
	// poked: poke was called since the last pick began its walk. A wake
	// whose pokes that walk already saw walks nothing again: with many
	// partitions pokes came while the loop walked, and every other walk
	// found nothing.
	poked atomic.Bool

	// Guarded by c.mu.
	cursors []*Cursor
	rot     int
	// budgetWait: the last pick found the budget used up. The loop sleeps
	// until bytes are given back anywhere, which wakes it.
	budgetWait bool

	// Owned by run.
	inFlight []*fetchRequest
	spare    []*fetchPart // parts of requests handled, for the next (part)
	// quietPolls counts the requests in flight that carry quiet cursors:
	// while one does, it is the long poll others join when it is back.
	// Atomic: a cursor's poke reads it (wakeLoop).
	quietPolls atomic.Int32
	attempt    int
	// holdSince: since when a small request beside one in flight has
	// been held back (holdSmall); zero when none is. holdNext: its next
	// pick.
	holdSince, holdNext time.Time
	retryAt             time.Time // a backoff after a failure, or the broker's throttle
	overdueAsk          time.Time // when the loop last asked for metadata over a late answer
	sess                fetchSession

	health brokerHealth // guarded by c.mu
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
	b.poked.Store(true)
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// add makes cur one of the loop's cursors: the loop of its leader, or of
// the replica its leader sends it to (follow). c.mu is held.
func (b *brokerLoop) add(cur *Cursor) {
	cur.loop = b
	b.cursors = append(b.cursors, cur)
	cur.wakeLoop()
}

// remove takes cur out of the loop, to be looked up again. A request in
// flight for it is left to end on its own, its answer for cur unused. c.mu
// is held.
func (b *brokerLoop) remove(cur *Cursor) {
	b.drop(cur)
	cur.leader = -1
}

// drop takes cur out of the loop, its leader kept. c.mu is held.
func (b *brokerLoop) drop(cur *Cursor) {
	if i := slices.Index(b.cursors, cur); i >= 0 {
		b.cursors = slices.Delete(b.cursors, i, i+1)
	}
	b.sess.leave(cur)
	cur.loop, cur.flight = nil, nil
	cur.preferredUntil = time.Time{}
}

// preferredTTL is how long a cursor fetches from the replica its leader
// named (KIP-392) before it asks the leader again, as Kafka's consumer
// does after metadata.max.age.ms.
const preferredTTL = 5 * time.Minute

// follow moves cur from the leader's loop to the loop of replica id, which
// the leader named to fetch from (KIP-392, preferred_read_replica). Its
// fetches there carry the leader's epoch, so a replica behind the leader's
// epoch refuses them. Any error of the replica's brings it back to the
// leader (unfollow). c.mu is held.
func (b *brokerLoop) follow(cur *Cursor, id int32, now time.Time) {
	c := b.c
	b.drop(cur)
	cur.preferredUntil = now.Add(preferredTTL)
	cur.quiet, cur.starved, cur.big = false, false, 0
	c.loop(id).add(cur)
}

// unfollow brings cur back from a replica's loop to its leader's. c.mu is
// held.
func (b *brokerLoop) unfollow(cur *Cursor) {
	c := b.c
	b.drop(cur)
	cur.quiet, cur.starved, cur.big = false, false, 0
	c.loop(cur.leader).add(cur)
}

// following tells whether cur fetches from a replica other than its leader.
// c.mu is held.
func (cur *Cursor) following() bool { return cur.loop != nil && cur.loop.id != cur.leader }

// run sends requests while there are cursors to fetch, until ctx ends; it
// then waits for the requests in flight, which end with ctx, and closes its
// fetch session.
func (b *brokerLoop) run(ctx context.Context) {
	defer b.c.wg.Done()
	var at time.Time
	walk := true
	for {
		if walk || b.poked.Load() {
			at = b.launch(ctx)
		}
		walk = true
		if due := b.overdueAt(); !due.IsZero() && (at.IsZero() || due.Before(at)) {
			at = due
		}
		var timer <-chan time.Time
		if !at.IsZero() {
			timer = time.After(time.Until(at))
		}
		select {
		case <-ctx.Done():
			for range b.inFlight {
				<-b.done
			}
			b.closeSession()
			return
		case <-b.wake:
			walk = false // unless poked since the last walk began
		case r := <-b.done:
			b.inFlight = slices.DeleteFunc(b.inFlight, func(x *fetchRequest) bool { return x == r })
			b.holdSince = time.Time{}
			if r.quiet {
				b.quietPolls.Add(-1)
			}
			b.handle(r)
			b.recycle(r)
		case <-timer:
			b.checkOverdue()
		}
	}
}

// overdueAt is when the oldest request in flight becomes overdue, or, once
// it is, when to ask again; zero when none is in flight.
func (b *brokerLoop) overdueAt() time.Time {
	if len(b.inFlight) == 0 {
		return time.Time{}
	}
	oldest := b.inFlight[0].sent
	for _, r := range b.inFlight[1:] {
		if r.sent.Before(oldest) {
			oldest = r.sent
		}
	}
	due := oldest.Add(b.c.cfg.FetchMaxWait + overdueSlack)
	if next := b.overdueAsk.Add(overdueSlack); next.After(due) {
		return next
	}
	return due
}

// checkOverdue asks for fresh metadata when a request has waited past its
// due time: the partitions' leaders may have moved away from a broker that
// stopped answering.
func (b *brokerLoop) checkOverdue() {
	now := time.Now()
	if due := b.overdueAt(); due.IsZero() || now.Before(due) {
		return
	}
	b.overdueAsk = now
	b.log.Debug("fetch overdue; looking the leaders up again")
	b.c.askLeaders()
}

// launch sends requests while fewer than maxInFlight are out and some
// cursor may be fetched. It returns when to try again, if a backoff or a
// throttle is what holds it.
func (b *brokerLoop) launch(ctx context.Context) time.Time {
	for len(b.inFlight) < maxInFlight {
		now := time.Now()
		if now.Before(b.retryAt) {
			return b.retryAt
		}
		r, wait, more := b.pick(now)
		if r == nil {
			return wait
		}
		r.sent = now
		b.inFlight = append(b.inFlight, r)
		if r.quiet {
			b.quietPolls.Add(1)
		}
		go func() { b.done <- b.fetch(ctx, r) }()
		if !more {
			// Every fetchable cursor went: another pick now would walk
			// them all for nothing (at 10,000 idle partitions, that walk
			// was most of the loop's time). A cursor that becomes
			// fetchable pokes the loop.
			return wait
		}
	}
	return time.Time{}
}

// pick gathers the cursors to fetch now into a request and sets aside the
// budget its answer may take. It returns when a backoff ends, and whether
// fetchable cursors were left for a later request (more).
//
// A cursor whose next batch is larger than its limit (big) goes only first
// in a request, where the broker returns that batch whole (KIP-74): one
// further back would get the batch's first bytes only, which are thrown
// away and fetched again. Parts are added while their limits fit the
// request's, so that the broker does not cut the last ones short either.
func (b *brokerLoop) pick(now time.Time) (r *fetchRequest, wait time.Time, more bool) {
	if b.holding(now) {
		return nil, b.holdNext, false
	}
	c := b.c
	c.mu.Lock()
	defer c.mu.Unlock()
	left := int64(c.cfg.MaxBufferBytes) - c.held.Load()
	n := len(b.cursors)
	b.budgetWait = left <= 0
	if left <= 0 || n == 0 {
		return nil, time.Time{}, false
	}
	b.poked.Store(false)
	c.picks.Add(1)
	share := c.share()
	limit := min(int64(c.cfg.FetchMaxBytes), left)
	// While a long poll carries the quiet cursors (their last answer was
	// empty), a request beside it is for cursors that may have more now:
	// the quiet ones wait for the next request of all, so that an idle
	// replica keeps one long poll per broker, not two.
	second := b.quietPolls.Load() > 0
	var first *fetchPart
	var parts, starved []*fetchPart
	var sum int64
	for i := range n {
		cur := b.cursors[(b.rot+i)%n]
		if !cur.fetchable(now, share) || (second && cur.quiet) {
			if cur.retryAt.After(now) && (wait.IsZero() || cur.retryAt.Before(wait)) {
				wait = cur.retryAt
			}
			continue
		}
		lim := int32(min(int64(c.cfg.FetchMaxPartitionBytes), cur.fetchLimit(share)))
		if cur.big > int64(lim) {
			if first == nil {
				// First, its first batch comes whole whatever the limit,
				// and with a limit of one byte nothing after it: no batch
				// cut short.
				first = b.part(cur, lim, 1)
				sum += cur.big
				continue
			}
			// Another: with its limit raised to the batch's size it
			// comes whole further back too, when the request has room
			// for all of it (with many partitions a share is smaller
			// than a producer's batch, and one such partition a request
			// made a request per partition).
			if cur.big > math.MaxInt32 || sum+cur.big > limit {
				more = true
				continue // a later request
			}
			p := b.part(cur, int32(cur.big), int32(cur.big))
			if cur.starved {
				starved = append(starved, p)
			} else {
				parts = append(parts, p)
			}
			sum += cur.big
		} else {
			// A quiet cursor goes in whatever the sum: most likely it
			// gets nothing, and one that gets records past the
			// request's bound is answered empty and starved (first next
			// time), not cut short. Left out, an idle partition would
			// wait for the window of limits to come round to it.
			if sum > 0 && sum+int64(lim) > limit && !cur.quiet {
				more = true
				continue // would be cut short: the next request
			}
			p := b.part(cur, lim, lim)
			if cur.starved {
				starved = append(starved, p)
			} else {
				parts = append(parts, p)
			}
			sum = min(sum+int64(p.max), limit)
		}
	}
	all := append(starved, parts...)
	if first != nil {
		all = append([]*fetchPart{first}, all...)
	}
	if len(all) == 0 {
		b.rot = (b.rot + 1) % n
		return nil, wait, false
	}
	if b.holdSmall(now, n, len(all)) {
		return nil, b.holdNext, false
	}
	if kept, ok := b.halve(all, first != nil, more); ok {
		all, more = kept, true
		sum = 0
		for _, p := range all {
			sum = min(sum+int64(p.max), limit)
		}
	}
	b.rot = (b.rot + 1) % n
	reserve := max(1, min(sum, limit))
	if first != nil {
		reserve = max(reserve, first.cur.big)
	}
	c.held.Add(reserve)
	r = &fetchRequest{parts: all, reserve: reserve, bound: limit, big: first != nil, beside: second}
	for _, p := range all {
		p.cur.flight = r
		p.cur.starved = false
		if p.cur.quiet {
			r.quiet = true
		}
	}
	if !r.big && !r.beside && !c.cfg.NoFetchSessions && b.sess.usable() {
		b.sess.begin(r)
	} else {
		r.listed, r.sessionEpoch = r.parts, -1
	}
	return r, wait, more
}

// halve keeps the first half of a request's parts when the request would
// take every fetchable cursor of a backlog and leave the loop's other slot
// empty: the rest go in a second request at once. With one request in
// flight the broker and the replica took turns, the broker reading the
// next answer only once the last was decoded; with two, it reads one
// while the other is decoded. A long poll (quiet cursors) and a big batch
// first are not halved. The parts dropped go back to spare.
func (b *brokerLoop) halve(all []*fetchPart, big, more bool) ([]*fetchPart, bool) {
	if more || big || len(all) < 2 || len(b.inFlight) > 0 || maxInFlight < 2 {
		return all, false
	}
	for _, p := range all {
		if p.cur.quiet {
			return all, false
		}
	}
	keep := (len(all) + 1) / 2
	for _, p := range all[keep:] {
		*p = fetchPart{}
	}
	b.spare = append(b.spare, all[keep:]...)
	return all[:keep], true
}

// part is cur's part of a request, with limit and max as fetchPart says,
// from the parts of requests answered (recycle): a long poll over 10,000
// idle partitions allocated 10,000 of them, twice a second.
func (b *brokerLoop) part(cur *Cursor, limit, max int32) *fetchPart {
	var p *fetchPart
	if n := len(b.spare); n > 0 {
		p, b.spare = b.spare[n-1], b.spare[:n-1]
	} else {
		p = new(fetchPart)
	}
	*p = fetchPart{cur: cur, seq: cur.seq, from: cur.fetchAt, epoch: cur.epoch, limit: limit, max: max}
	return p
}

// recycle keeps the parts of a request that was handled for the next
// picks: nothing refers to them any more (a batch went to its cursor's
// queue by value).
func (b *brokerLoop) recycle(r *fetchRequest) {
	for _, p := range r.parts {
		*p = fetchPart{}
	}
	b.spare = append(b.spare, r.parts...)
	r.parts, r.listed = nil, nil
}

// With many partitions, a cursor freed here and there (a block committed, a
// batch taken) would each make a pick that walks every cursor for a request
// of a few partitions: a backlog of 10,000 partitions sent thousands of
// such requests, most of the loop's time spent picking. So while a request
// that carries records is in flight (not a long poll: it is back soon), a
// request of under a sixteenth of the cursors waits for it, or for
// holdMax, with a pick every holdTick to gather more. Not at 512 cursors,
// where the wait cost more than the picks (0.86 of franz-go's records/s
// fell to 0.73).
const (
	holdCursors = 4096 // fewer cursors: no request waits
	holdTick    = 2 * time.Millisecond
	holdMax     = 10 * time.Millisecond
)

// holding says whether a request held back is still waiting (no pick
// until its next tick).
func (b *brokerLoop) holding(now time.Time) bool {
	return !b.holdSince.IsZero() && len(b.inFlight) > 0 && now.Before(b.holdNext) && b.quietPolls.Load() == 0
}

// holdSmall says whether a request of parts of the n cursors waits (see
// holdCursors), and starts or goes on with its wait.
func (b *brokerLoop) holdSmall(now time.Time, n, parts int) bool {
	if n < holdCursors || parts >= n/16 || len(b.inFlight) == 0 || b.quietPolls.Load() > 0 {
		b.holdSince = time.Time{}
		return false
	}
	if b.holdSince.IsZero() {
		b.holdSince = now
	}
	if now.Sub(b.holdSince) >= holdMax {
		b.holdSince = time.Time{}
		return false
	}
	b.holdNext = now.Add(holdTick)
	return true
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
