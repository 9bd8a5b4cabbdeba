package kafka

import (
	"errors"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"go.uber.org/zap"
)

// What a broker loop does with an answer: each part goes to its cursor
// (records queued, the log end noted, the cursor quiet, starved or big for
// its next request), and failures send cursors to be looked up again or
// fail them.

// handle hands a request's outcome to its cursors. Parts whose cursor has
// moved to another loop, closed or been repositioned since the request
// went are dropped: their answers are stale.
func (b *brokerLoop) handle(r *fetchRequest) {
	c := b.c
	now := time.Now()
	relookup := false
	c.mu.Lock()
	defer func() {
		c.mu.Unlock()
		if relookup {
			c.askLeaders()
		}
	}()
	c.held.Add(-r.reserve)
	c.budgetFreed()
	if r.throttle > 0 {
		// The broker reads nothing more from the connection until the
		// throttle ends: send nothing either, rather than time out.
		b.retryAt = maxTime(b.retryAt, now.Add(r.throttle))
		c.throttled.Add(int64(r.throttle))
	}
	if r.session {
		if b.sess.answered(r) {
			b.log.Warn("fetch sessions fail again and again with this broker; fetching without them from now on",
				zap.Int("failures", maxSessionErrors), zap.Error(kafkago.Error(r.sessionErr)))
		} else if r.sessionEpoch == 0 && b.sess.epoch == 1 {
			b.log.Debug("fetch session opened", zap.Int32("session", b.sess.id), zap.Int("partitions", len(r.parts)))
		}
	}
	if r.err != nil {
		b.health.failed(now, r.err)
		c.countError(r.err)
		b.sess.failed()
		b.failed(r, now)
		relookup = true
		return
	}
	if r.sessionErr != 0 {
		// The broker lost the session (restarted, evicted it) or
		// counts its epochs otherwise: nothing was fetched, and the
		// parts go in the next request, which opens a new session and
		// lists them all.
		b.log.Debug("fetch session lost; opening another", zap.Int32("session", r.sessionID),
			zap.Int32("epoch", r.sessionEpoch), zap.Error(kafkago.Error(r.sessionErr)))
		for _, p := range r.parts {
			if p.cur.flight == r {
				p.cur.flight = nil
			}
		}
		return
	}
	b.attempt = 0
	b.health.answered(now)
	// The largest batch of this answer: a partition answered nothing
	// although it has records likely holds one as large (see below).
	largest := 0
	for _, p := range r.parts {
		largest = max(largest, p.batch.largest)
	}
	for _, p := range r.parts {
		cur := p.cur
		if cur.flight != r {
			continue // moved to another loop since: its answer is stale
		}
		cur.flight = nil
		if cur.closed || p.seq != cur.seq || cur.loop != b {
			continue // closed or repositioned since
		}
		if cur.following() && p.code != 0 {
			// A replica the leader named that cannot serve the fetch
			// (behind the leader's epoch, not in sync, out of range):
			// the leader decides again.
			b.unfollow(cur)
			continue
		}
		if p.redirect && p.code == 0 {
			// The leader sends the partition's fetches to another replica
			// (KIP-392: replica.selector.class, client.rack): follow it,
			// or the leader answers nothing forever.
			b.follow(cur, p.preferred, now)
			continue
		}
		if p.present {
			cur.hw, cur.lso = p.hw, p.lso
		}
		if p.code == 0 && cur.hw >= 0 && (p.present || r.sessionEpoch > 0) {
			// An incremental answer leaves out a partition whose log end
			// did not move: it is as fresh as one listed.
			cur.endAt = now
		}
		switch {
		case p.code != 0:
			relookup = b.partitionError(cur, kafkago.Error(p.code), now) || relookup
		case p.err != nil:
			if retriable(p.err) {
				cur.backoff(now)
			} else {
				cur.fail(p.err)
			}
		case p.batch.Next > p.batch.From:
			// A cursor that read up to the log end has nothing more to
			// fetch now: it rides the long poll with the quiet ones.
			// Counted as busy, it would make the request beside the long
			// poll a second long poll, and partitions with records would
			// wait for one of the two to end (a backlog of 64 partitions
			// waited 0.5 s a round).
			end := p.hw
			if c.cfg.IsolationLevel == ReadCommitted {
				end = p.lso
			}
			cur.attempt, cur.oorStreak = 0, 0
			p.batch.AfterLogEnd = cur.quiet
			cur.quiet = p.present && end >= 0 && p.batch.Next >= end
			cur.queued(p.batch)
			cur.fetchAt = p.batch.Next
			if e, ok := p.batch.LeaderEpoch(); ok {
				cur.fetchEpoch = e
			} else {
				cur.fetchEpoch = -1
			}
			// A batch larger than the limit came whole because it was
			// first: its successors are likely as large.
			cur.big = 0
			if big := max(p.batch.largest, p.batch.truncated); big > int(p.limit) {
				cur.big = int64(big)
			}
			cur.notify()
		case p.batch.truncated > int(p.limit):
			// Only the start of a batch larger than the limit: it
			// comes whole when its partition is first.
			cur.attempt, cur.quiet = 0, false
			cur.big = int64(p.batch.truncated)
			b.poke()
		default:
			// Nothing at fetchAt (yet): no large batch to expect, nor
			// to reserve budget for while it waits.
			cur.attempt, cur.big = 0, 0
			end := cur.hw
			if c.cfg.IsolationLevel == ReadCommitted {
				end = cur.lso
			}
			// Data was there but the response had no room for it: be
			// first next time, and do not wait for a long poll. A full
			// answer that leaves the partition out says nothing of it
			// (kfake stops listing partitions at the request's bound;
			// Kafka lists them all): it may have data too. Only an
			// incremental answer leaves out what has nothing new, and
			// only of a partition it told the log end before: Kafka
			// lists a partition new to the session in its first answer,
			// kfake may leave it out at the bound. Taken for quiet, a
			// partition never answered waited out a long poll in flight
			// beside its backlog (0.5 s in one run of three of a
			// 500,000-record ClickHouse benchmark).
			unanswered := !p.present && (r.sessionEpoch <= 0 || end < 0)
			cur.starved = end > cur.fetchAt || unanswered
			cur.quiet = !cur.starved
			if p.present && end > cur.fetchAt && r.throttle == 0 && r.got+int64(p.limit) <= r.reserve {
				// Records there, room in the answer, and none of them:
				// the next batch is larger than the limit and the broker
				// sends none of it (kfake; Kafka sends its start, whose
				// header tells its size). Ask for twice as much, as a
				// big batch, until it comes; a cursor that holds nothing
				// asks at once for as much as the answer's largest batch
				// if that is more. Not one that holds some: its limit
				// keeps what it decodes within its share, and a batch
				// past that is only for a cursor that holds nothing.
				want := 2 * int64(p.limit)
				if cur.held == 0 {
					want = max(want, int64(largest))
				}
				cur.big = min(want, int64(c.cfg.FetchMaxBytes))
			}
		}
	}
}

// failed handles a request that failed as a whole: a retriable failure
// (the broker gone, the connection cut, a timeout) sends its cursors to be
// looked up again after a backoff; another fails them. c.mu is held.
func (b *brokerLoop) failed(r *fetchRequest, now time.Time) {
	c := b.c
	var mine []*Cursor
	for _, p := range r.parts {
		if p.cur.flight == r {
			p.cur.flight = nil
			mine = append(mine, p.cur)
		}
	}
	if c.ctx.Err() != nil {
		return
	}
	if !retriable(r.err) {
		for _, cur := range mine {
			cur.fail(r.err)
		}
		return
	}
	d := backoff(c.cfg, b.attempt)
	b.attempt++
	b.retryAt = maxTime(b.retryAt, now.Add(d))
	if b.attempt == 1 || b.attempt%10 == 0 {
		b.log.Warn("fetch failed; retrying", zap.Int("partitions", len(r.parts)), zap.Int("attempt", b.attempt),
			zap.Duration("backoff", d), zap.String("why", explain(r.err)), zap.Error(r.err))
	}
	// The broker may be gone or no longer lead these: look the leaders
	// up again. Only this broker's connection is dropped (by the
	// transport, the one that failed); the others' stay.
	for _, cur := range mine {
		if cur.loop == b {
			b.remove(cur)
		}
	}
}

// partitionError handles the broker's error for one partition, and tells
// whether the leaders must be looked up again. c.mu is held.
func (b *brokerLoop) partitionError(cur *Cursor, err kafkago.Error, now time.Time) (relookup bool) {
	b.c.countError(err)
	switch {
	case errors.Is(err, kafkago.OffsetOutOfRange):
		cur.outOfRange = true
		cur.oorStreak++
		cur.notify()
	case errors.Is(err, kafkago.UnknownLeaderEpoch):
		// The broker has not yet learned of the epoch the metadata
		// gave: it will.
		cur.backoff(now)
	case leaderMoved(err) || unknownTopic(err):
		cur.backoff(now)
		b.remove(cur)
		return true
	case err.Temporary():
		cur.backoff(now)
	default:
		cur.fail(err)
	}
	return false
}

// leaderMoved tells whether a partition error means the broker no longer
// leads it, or that the metadata that sent the request here is stale.
func leaderMoved(err kafkago.Error) bool {
	switch err {
	case kafkago.NotLeaderForPartition, kafkago.LeaderNotAvailable, kafkago.ReplicaNotAvailable,
		kafkago.FencedLeaderEpoch, kafkago.KafkaStorageError, kafkago.BrokerNotAvailable:
		return true
	}
	return false
}
