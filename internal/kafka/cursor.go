package kafka

import (
	"context"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// maxQueued is how many fetched batches a cursor keeps ahead of its reader:
// enough to fetch while the reader delivers, few enough that the budget
// share, not the queue, is what bounds a busy partition.
const maxQueued = 4

// Cursor is one partition of a Consumer: where its reader stands, and the
// batches fetched ahead of it. Its reader uses it like a Fetcher (Fetch,
// SeekTo, Offset, Bounds) from one goroutine, and gives back the memory of
// what it has finished with through Free.
type Cursor struct {
	// Guarded by c.mu. First, what a broker loop's pick reads of every
	// cursor it walks (fetchable, fetchLimit), in the struct's first two
	// cache lines: at 10,000 partitions the walk is bound by memory, not
	// by the checks.
	flight     *fetchRequest // the request in flight for it, nil when none
	fetchAt    int64         // where the next fetch starts
	held       int64         // bytes of the queue and of batches not yet freed
	closed     bool
	quiet      bool  // its last answer was empty, or reached the log end
	outOfRange bool  // the broker refused fetchAt: the reader looks where the log is
	starved    bool  // the broker had data for it that did not fit a response
	decodes    bool  // its reader decodes the records into JSON it holds (ExpectDecoding)
	throttled  bool  // Fetch reported the share used since the last Free
	woken      bool  // Wake was called: the next wait returns at once
	err        error // a failure to return from the next Fetch
	queue      []PolledBatch
	retryAt    time.Time
	ratio      float64 // bytes of JSON a fetched byte decodes into, as the reader said (decoded.go); 0: not decoded
	inflate    float64 // bytes a fetched byte decompresses into, as the last batches did (decoded.go); 0: unknown
	batchWire  int64   // the size, as fetched, of the largest batch of its last answer
	big        int64   // its next batch is larger than its limit (this many bytes): fetched first in a request
	seq        uint64  // bumped when the position moves: older results are dropped
	epoch      int32   // the leader's epoch, sent with fetches so a stale leader refuses them; -1 unknown
	leader     int32
	validate   bool // the position waits for validation against the leader's log (truncation.go)
	// preferredUntil: while the cursor fetches from a replica its leader
	// named (KIP-392), when it goes back to ask the leader.
	preferredUntil time.Time

	c  *Consumer
	tp sinks.Partition
	// f does what is rare and per partition: the start offset, resets
	// when out of range, gaps left by compaction, bounds. Its offset is
	// the reader's position.
	f *Fetcher

	// Guarded by c.mu.
	loop         *brokerLoop // nil while the leader is unknown
	topicID      TopicID     // the topic's id when first seen (or as given by ExpectTopicID)
	recreated    *TopicRecreatedError
	unknownSince time.Time
	expect       int64 // where the queue starts: the reader's position if it follows it
	hw, lso      int64
	endAt        time.Time // when a fetch answer last told hw and lso (EndOffsets)
	oorStreak    int       // answers out of range in a row, with no progress between
	attempt      int

	// Leader epochs (truncation.go). fetchEpoch is the epoch of the
	// record before fetchAt, -1 unknown. The reader's marks: where its
	// last commit and its last batch left it, with their epochs, so that
	// a seek back to either (a rollback) knows its epoch. readHigh is
	// past the highest offset given to the reader since its last commit.
	fetchEpoch     int32
	committedAt    int64
	committedEpoch int32
	readAt         int64
	readEpoch      int32
	readHigh       int64
	validating     bool        // a validation request is in flight
	validateCause  string      // why the position is validated
	truncation     *Truncation // the leader's log diverges below fetchAt: for the reader

	// sess is the fetch session of its loop that holds its partition, as
	// sessPart (session.go); nil when none does.
	sess     *fetchSession
	sessPart sessionPart

	signal chan struct{} // cap 1: something for Fetch
}

// Partition names the cursor's partition.
func (cur *Cursor) Partition() sinks.Partition { return cur.tp }

// TopicID returns the id of the cursor's topic as first seen (zero until
// the metadata gave it, and with brokers before Kafka 2.8).
func (cur *Cursor) TopicID() TopicID {
	cur.c.mu.Lock()
	defer cur.c.mu.Unlock()
	return cur.topicID
}

// ExpectTopicID tells the cursor the id its topic had when its offset was
// committed: if the topic now has another, it was deleted and created
// again, and Fetch fails with a *TopicRecreatedError rather than read the
// new topic from the old offset. A zero id changes nothing.
func (cur *Cursor) ExpectTopicID(id TopicID) {
	if id.IsZero() {
		return
	}
	cur.c.mu.Lock()
	defer cur.c.mu.Unlock()
	switch {
	case cur.topicID.IsZero():
		cur.topicID = id
	case cur.topicID != id && cur.recreated == nil:
		cur.recreated = &TopicRecreatedError{Topic: cur.tp.Topic, Was: id, Now: cur.topicID}
		if cur.loop != nil {
			cur.loop.remove(cur)
		}
		cur.fail(cur.recreated)
	}
}

// notify wakes a Fetch that waits. c.mu is held.
func (cur *Cursor) notify() {
	select {
	case cur.signal <- struct{}{}:
	default:
	}
}

// fail makes the next Fetch return err. c.mu is held.
func (cur *Cursor) fail(err error) {
	cur.err = err
	cur.notify()
}

// fetchable reports whether the broker loop may fetch for the cursor now.
// c.mu is held.
func (cur *Cursor) fetchable(now time.Time, share int64) bool {
	return cur.ready(share) && !now.Before(cur.retryAt)
}

// ready is fetchable but for a backoff: the loop's pick waits out a
// backoff on its own. c.mu is held.
func (cur *Cursor) ready(share int64) bool {
	return !cur.closed && cur.flight == nil && cur.fetchAt != unset && cur.err == nil && !cur.outOfRange &&
		!cur.validate && cur.truncation == nil &&
		len(cur.queue) < maxQueued && cur.held < share && cur.roomForABatch(share)
}

// wakeLoop pokes the cursor's loop when a change (a batch taken, bytes
// given back, a new position) made the cursor fetchable. Not otherwise: in
// a backlog of 10,000 partitions each batch taken and each block freed woke
// the loop, and four picks in five walked every cursor to find none to
// fetch. The event that makes it fetchable later (bytes given back, a
// request answered) wakes the loop then. Nor for a quiet cursor while a
// long poll is out: the pick leaves it for the next long poll, which the
// answer of this one sends. c.mu is held.
func (cur *Cursor) wakeLoop() {
	b := cur.loop
	if b == nil || !cur.ready(cur.c.share()) || (cur.quiet && b.quietPolls.Load() > 0) {
		return
	}
	b.poke()
}

// backoff delays the cursor's next fetch after an error that passes. c.mu
// is held.
func (cur *Cursor) backoff(now time.Time) {
	cur.retryAt = now.Add(backoff(cur.c.cfg, cur.attempt))
	cur.attempt++
}

// queuedBytes is what the batches fetched ahead hold. c.mu is held.
func (cur *Cursor) queuedBytes() int64 {
	var n int64
	for _, b := range cur.queue {
		n += batchCost(b)
	}
	return n
}

// release gives n held bytes back to the budget. c.mu is held.
func (cur *Cursor) release(n int64) {
	n = min(n, cur.held)
	if n <= 0 {
		return
	}
	cur.held -= n
	cur.c.held.Add(-n)
	cur.c.budgetFreed()
	cur.throttled = false
	cur.wakeLoop()
}

// align makes the queue and the next fetch continue from pos, dropping what
// was fetched from elsewhere. c.mu is held.
func (cur *Cursor) align(pos int64) {
	if cur.expect == pos && cur.fetchAt != unset {
		return
	}
	dropped := cur.queuedBytes()
	cur.queue = nil
	cur.release(dropped)
	cur.fetchEpoch = cur.epochAt(pos)
	cur.fetchAt, cur.expect = pos, pos
	cur.seq++
	if cur.validate {
		cur.askValidate() // it waited for a position
	}
	cur.outOfRange, cur.oorStreak, cur.err, cur.starved, cur.quiet = false, 0, nil, false, false
	cur.retryAt, cur.attempt = time.Time{}, 0
	cur.wakeLoop()
}

// epochAt is the leader epoch of the record before pos, when the cursor
// knows it: pos is where it fetches, or one of its reader's marks. c.mu is
// held.
func (cur *Cursor) epochAt(pos int64) int32 {
	switch {
	case pos == unset:
		return -1
	case pos == cur.fetchAt:
		return cur.fetchEpoch
	case pos == cur.readAt:
		return cur.readEpoch
	case pos == cur.committedAt:
		return cur.committedEpoch
	}
	return -1
}

// moveTo puts the cursor in loop b, whose broker leads its partition in
// epoch. A new epoch has the position validated before anything more is
// fetched: the new leader's log may not hold what the old one gave. c.mu
// is held.
func (cur *Cursor) moveTo(b *brokerLoop, epoch int32) {
	old := cur.epoch
	cur.epoch, cur.leader = epoch, b.id
	b.add(cur)
	if epoch != old {
		if old >= 0 {
			cur.validateCause = CauseLeaderChanged
		}
		cur.askValidate()
	}
}

// SeekEpoch is SeekTo(offset) for an offset whose record before it was
// written in leader epoch epoch (a committed offset and the epoch stored
// with it): before anything is fetched from there, the leader is asked
// whether its log still holds that record, and a log truncated below
// offset is reported by Fetch (PolledBatch.Truncation). A negative epoch
// is unknown: nothing is checked.
func (cur *Cursor) SeekEpoch(offset int64, epoch int32) {
	cur.c.mu.Lock()
	cur.committedAt, cur.committedEpoch = offset, epoch
	cur.readAt, cur.readEpoch, cur.readHigh = offset, epoch, offset
	if epoch >= 0 && offset >= 0 {
		cur.validateCause = CauseSeek
		cur.askValidate()
	}
	cur.c.mu.Unlock()
	cur.SeekTo(offset)
}

// Committed tells the cursor that its reader committed next, the record
// before it of leader epoch epoch (-1 unknown): a rollback to next knows
// its epoch, and a truncation is reported only when it reaches what was
// read since.
func (cur *Cursor) Committed(next int64, epoch int32) {
	cur.c.mu.Lock()
	defer cur.c.mu.Unlock()
	cur.committedAt, cur.committedEpoch = next, epoch
	cur.readHigh = max(next, cur.readAt)
}

// SeekTo makes the next Fetch start at offset; a negative offset leaves it
// to the start policy. Batches fetched ahead from elsewhere are dropped.
func (cur *Cursor) SeekTo(offset int64) {
	cur.f.SeekTo(offset)
	cur.c.mu.Lock()
	defer cur.c.mu.Unlock()
	if offset >= 0 {
		cur.align(offset)
		return
	}
	cur.align(unset)
	cur.fetchAt, cur.expect = unset, unset
}

// AcceptTopic makes the cursor read its topic as it is now, after an
// operator reset its offset: a topic that was re-created is read from there,
// and its new id is the one expected from then on.
func (cur *Cursor) AcceptTopic() {
	cur.c.mu.Lock()
	defer cur.c.mu.Unlock()
	if r := cur.recreated; r != nil {
		cur.topicID, cur.recreated = r.Now, nil
		cur.err = nil
		cur.c.askLeaders()
	}
}

// Rewind is SeekTo(from): a block that was not committed is read again.
func (cur *Cursor) Rewind(from int64) { cur.SeekTo(from) }

// Offset returns the offset the next Fetch starts at, or -1 when that is
// left to the start policy.
func (cur *Cursor) Offset() int64 { return cur.f.Offset() }

// Bounds returns the partition's log start offset and its log end.
func (cur *Cursor) Bounds(ctx context.Context) (earliest, logEnd int64, err error) {
	return cur.f.Bounds(ctx)
}

// Free gives back the memory of batches the reader is done with (written
// and committed, or dropped): the sum of their Bytes.
func (cur *Cursor) Free(n int) {
	cur.c.mu.Lock()
	defer cur.c.mu.Unlock()
	cur.release(int64(n))
}

// Close takes the partition out of the consumer and gives back all it
// holds. Fetch fails afterwards.
func (cur *Cursor) Close() error {
	c := cur.c
	c.mu.Lock()
	if !cur.closed {
		cur.closed = true
		cur.queue = nil
		cur.release(cur.held)
		if c.cursors[cur.tp] == cur {
			delete(c.cursors, cur.tp)
		}
		if cur.loop != nil {
			cur.loop.remove(cur)
		}
		cur.notify()
	}
	c.mu.Unlock()
	return cur.f.Close()
}

// Fetch returns the next batch: one fetched ahead, or the next one the
// broker loop brings, waiting up to MaxWait (then it returns an empty batch,
// Next == From). Broker and network errors are retried by the loop; an out
// of range offset is reset by the start policy. A batch with Throttled set
// says the cursor holds its share of the budget: nothing more comes until
// Free. Fetch returns ctx.Err() as soon as ctx ends.
func (cur *Cursor) Fetch(ctx context.Context) (PolledBatch, error) {
	return cur.fetch(ctx, true)
}

// Next is Fetch without the MaxWait: it waits until there is a batch, ctx
// ends, or Wake is called (then it returns an empty batch). A reader with
// nothing in hand uses it, so that an idle partition costs nothing between
// the broker loop's polls.
func (cur *Cursor) Next(ctx context.Context) (PolledBatch, error) {
	return cur.fetch(ctx, false)
}

// Wake makes a Next that waits, or the next one, return at once.
func (cur *Cursor) Wake() {
	cur.c.mu.Lock()
	defer cur.c.mu.Unlock()
	cur.woken = true
	cur.notify()
}

func (cur *Cursor) fetch(ctx context.Context, bounded bool) (PolledBatch, error) {
	f, c := cur.f, cur.c
	start, err := f.ready(ctx)
	if err != nil {
		return PolledBatch{}, err
	}
	if start != unset {
		cur.SeekTo(start)
	}
	var timeout <-chan time.Time
	for {
		c.mu.Lock()
		if cur.closed {
			c.mu.Unlock()
			return PolledBatch{}, f.errorf(f.offset, errClosed)
		}
		if rec := cur.recreated; rec != nil {
			// What was fetched may be the new topic's: drop it.
			n := cur.queuedBytes()
			cur.queue = nil
			cur.release(n)
			c.mu.Unlock()
			return PolledBatch{}, f.errorf(f.offset, rec)
		}
		cur.align(f.offset)
		// The reader's block may take half the share; the other half is
		// fetched ahead while the block is written and committed.
		if inHand := cur.held - cur.queuedBytes(); inHand > 0 && inHand >= c.share()/2 && !cur.throttled {
			cur.throttled = true
			empty := PolledBatch{From: f.offset, Next: f.offset, HighWatermark: cur.hw, LastStable: cur.lso, Throttled: true}
			c.mu.Unlock()
			return empty, nil
		}
		if len(cur.queue) > 0 {
			b := cur.queue[0]
			cur.queue[0] = PolledBatch{}
			cur.queue = cur.queue[1:]
			cur.expect = b.Next
			cur.readAt, cur.readHigh = b.Next, max(cur.readHigh, b.Next)
			if e, ok := b.LeaderEpoch(); ok {
				cur.readEpoch = e
			} else if b.Next > b.From {
				cur.readEpoch = -1
			}
			// The log end as known now, not when the batch was fetched: a
			// reader that sees it caught up ends its block, which it must
			// not do with more batches fetched behind this one.
			b.HighWatermark, b.LastStable = max(b.HighWatermark, cur.hw), max(b.LastStable, cur.lso)
			cur.wakeLoop()
			c.mu.Unlock()
			f.offset = b.Next
			return b, nil
		}
		if t := cur.truncation; t != nil {
			cur.truncation = nil
			if b, ok := cur.truncated(*t); ok {
				return b, nil
			}
			continue
		}
		if err := cur.err; err != nil {
			cur.err = nil
			if cur.loop != nil {
				// Fetchable again: the loop skipped it while it held the
				// error, and may have gone idle since.
				cur.loop.poke()
			}
			c.mu.Unlock()
			return PolledBatch{}, f.errorf(f.offset, err)
		}
		if cur.outOfRange {
			streak := cur.oorStreak
			if epoch := cur.epochAt(f.offset); epoch >= 0 {
				// Out of range may be a truncated log: Kafka says which
				// before the offset is moved by where it lies.
				c.mu.Unlock()
				t, err := f.validate(ctx, f.offset, epoch, CauseOutOfRange)
				c.mu.Lock()
				if err == nil && t != nil {
					cur.outOfRange, cur.oorStreak = false, 0
					if b, ok := cur.truncated(*t); ok {
						return b, nil
					}
					continue
				}
				if err != nil && !unsupported(err) {
					// Asked again after a backoff: the offset is not moved
					// before Kafka says whether the log diverged.
					cur.outOfRange = false
					cur.backoff(time.Now())
					if cur.loop != nil {
						cur.loop.poke()
					}
					c.mu.Unlock()
					if ctx.Err() != nil {
						return PolledBatch{}, ctx.Err()
					}
					continue
				}
			}
			c.mu.Unlock()
			b, ok, err := f.reset(ctx, f.offset, streak)
			c.mu.Lock()
			cur.outOfRange = false
			if err != nil || !ok {
				// In range after all, or not yet sure: fetch again after
				// a backoff, not at once.
				cur.backoff(time.Now())
			}
			if cur.loop != nil {
				cur.loop.poke()
			}
			c.mu.Unlock()
			switch {
			case err != nil && ctx.Err() != nil:
				return PolledBatch{}, ctx.Err()
			case err != nil && !retriable(err):
				return PolledBatch{}, f.errorf(f.offset, err)
			case err == nil && ok:
				cur.SeekTo(b.Next)
				return b, nil
			}
			continue
		}
		empty := PolledBatch{From: f.offset, Next: f.offset, HighWatermark: cur.hw, LastStable: cur.lso}
		if cur.woken {
			cur.woken = false
			c.mu.Unlock()
			return empty, nil
		}
		c.mu.Unlock()
		if timeout == nil && bounded {
			t := time.NewTimer(f.cfg.FetchMaxWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-cur.signal:
		case <-timeout:
			return empty, nil
		case <-ctx.Done():
			return PolledBatch{}, ctx.Err()
		}
	}
}
