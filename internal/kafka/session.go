package kafka

import (
	"context"
	"math"
	"slices"
	"strings"
	"time"

	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Fetch sessions (KIP-227, Fetch v7 and later): a broker keeps the
// partitions of a session and the offsets last sent for them, so that a
// request lists only the partitions whose fetch changed and an idle
// partition costs nothing per request. The broker's answer in a session
// holds only the partitions that have records, an error or a new high
// watermark or log start: one it leaves out had nothing.
//
// Each broker loop keeps one session, and a request uses it when all of
// these hold (otherwise it is a full fetch outside any session, as before):
//   - no other request of the session is in flight: a session's epochs are
//     strictly sequential;
//   - it is the loop's first request, not one sent beside a long poll: so
//     the session carries the quiet partitions, which is where listing
//     them cost most, and the requests beside it carry the few partitions
//     that became fetchable meanwhile, which would be listed anyway (their
//     offsets moved);
//   - it has no batch larger than its limit to fetch first: the broker
//     orders a session's partitions itself, and only the first one with
//     data gets its whole batch (KIP-74).
//
// One session per slot in flight was the alternative: it would save the
// listing of the requests beside a long poll too, which are small, for a
// second session and its bookkeeping.
//
// A session request fetches exactly its parts: those whose fetch the
// broker does not hold as it is now are listed, and the partitions the
// session held that the request does not carry (closed, moved to another
// leader, in flight elsewhere, backing off, holding their share of the
// budget) are forgotten. So no partition is fetched by two requests of the
// loop at once, and the broker's session always holds what the last
// request of it sent.
//
// The first request opens the session (epoch 0); one that fails as a
// whole, an answer FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH
// (a broker restarted, a session evicted) and any failed request of the
// loop (a connection cut) make the next request open a new one, closing
// the old. A broker that declines to open one (its cache is full: session
// id 0) gets full fetches, each asking again. A broker whose sessions fail
// maxSessionErrors times in a row, with no incremental answer between, gets
// full fetches for the loop's life.

// sessionCloseTimeout bounds the request that closes a loop's session when
// the consumer closes: a broker that does not answer in time evicts the
// session itself, in time.
const sessionCloseTimeout = 500 * time.Millisecond

// maxSessionErrors is how many session errors in a row, with no incremental
// answer between, turn sessions off for a broker: one that loses or
// misnumbers every session is not worth a failed request each time.
const maxSessionErrors = 3

// fetchSession is a broker loop's fetch session. It is used under the
// consumer's lock (c.mu), like the cursors it keeps its state on.
type fetchSession struct {
	// id is the broker's id for the session, 0 when none was opened. It
	// stays when the session is dropped, so that the request opening the
	// next one closes it.
	id int32
	// epoch is the epoch of the next request: 0 opens a session.
	epoch int32
	// members are the cursors the broker's session holds, each with its
	// partition as last sent (Cursor.sessPart; Cursor.sess is this
	// session). Kept on the cursors, not in a map by partition: at 10,000
	// idle partitions a long poll's lookups cost as much as the rest of
	// the loop. gen marks those of the request being built.
	members []*Cursor
	gen     uint64
	// left are the partitions of cursors that left the loop (moved to
	// another leader, closed) while the session held them: the next
	// request forgets them.
	left []sinks.Partition
	busy bool // a request of the session is in flight
	// spoiled: a request of the loop failed while the session's was in
	// flight: the session starts anew once that one is back.
	spoiled bool
	errors  int  // session errors in a row
	off     bool // maxSessionErrors reached
}

// sessionPart is a partition as the session holds it.
type sessionPart struct {
	from  int64
	max   int32
	epoch int32
	gen   uint64
}

// usable tells whether a request may use the session now.
func (s *fetchSession) usable() bool { return !s.off && !s.busy }

// begin makes r a request of the session: it opens one, or lists only the
// parts whose fetch changed and forgets the partitions r does not carry.
func (s *fetchSession) begin(r *fetchRequest) {
	s.busy = true
	s.gen++
	r.session, r.sessionID, r.sessionEpoch = true, s.id, s.epoch
	open := s.epoch == 0
	if open {
		s.reset()
	}
	r.listed = r.listed[:0]
	held := len(s.members)
	kept := 0 // parts the session held already
	for _, p := range r.parts {
		cur := p.cur
		now := sessionPart{from: p.from, max: p.max, epoch: p.epoch, gen: s.gen}
		if cur.sess != s {
			cur.sess, cur.sessPart = s, now
			s.members = append(s.members, cur)
			r.listed = append(r.listed, p)
			continue
		}
		kept++
		if was := cur.sessPart; was.from != now.from || was.max != now.max || was.epoch != now.epoch {
			r.listed = append(r.listed, p)
		}
		cur.sessPart = now
	}
	if open {
		return
	}
	if kept < held {
		// Some partition the session held is not in r: forget it.
		in := s.members[:0]
		for _, m := range s.members {
			if m.sessPart.gen == s.gen {
				in = append(in, m)
				continue
			}
			m.sess = nil
			r.forgotten = append(r.forgotten, m.tp)
		}
		clear(s.members[len(in):])
		s.members = in
	}
	if len(s.left) > 0 {
		// A partition listed again, by a cursor that came back or a new
		// one, is not forgotten: the broker adds a request's partitions
		// before it forgets, so it would be dropped.
		listed := make(map[sinks.Partition]bool, len(r.listed))
		for _, p := range r.listed {
			listed[p.cur.tp] = true
		}
		for _, tp := range s.left {
			if !listed[tp] && !slices.Contains(r.forgotten, tp) {
				r.forgotten = append(r.forgotten, tp)
			}
		}
		s.left = s.left[:0]
	}
	slices.SortFunc(r.forgotten, func(a, b sinks.Partition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return a.Partition - b.Partition
	})
}

// leave takes cur out of the session as its cursor leaves the loop: the
// next request forgets its partition.
func (s *fetchSession) leave(cur *Cursor) {
	if cur.sess != s {
		return
	}
	cur.sess = nil
	if i := slices.Index(s.members, cur); i >= 0 {
		s.members = slices.Delete(s.members, i, i+1)
	}
	s.left = append(s.left, cur.tp)
}

// reset empties the session's bookkeeping.
func (s *fetchSession) reset() {
	for _, m := range s.members {
		if m.sess == s {
			m.sess = nil
		}
	}
	clear(s.members)
	s.members, s.left = s.members[:0], s.left[:0]
}

// answered takes the answer to the session's request r; r.err or
// r.sessionErr tells of a failure. It reports a session error that turned
// sessions off.
func (s *fetchSession) answered(r *fetchRequest) (off bool) {
	s.busy = false
	switch {
	case r.err != nil || s.spoiled:
		s.drop()
	case r.sessionErr != 0:
		s.drop()
		s.errors++
		if s.errors >= maxSessionErrors {
			s.off = true
			return true
		}
	case r.sessionEpoch == 0 && r.answerID == 0:
		// Declined (or a version before v7, or a throttled answer): no
		// session; the next request asks again.
		s.id, s.epoch = 0, 0
		s.reset()
	case r.sessionEpoch == 0:
		s.id, s.epoch = r.answerID, 1
	case r.answerID != s.id:
		// The broker ended it (a session left with no partitions is
		// closed): start anew.
		s.drop()
	default:
		s.epoch = nextSessionEpoch(s.epoch)
		s.errors = 0
	}
	return false
}

// failed tells the session that a request of the loop failed: the
// connection or the broker may be gone, and the session with it.
func (s *fetchSession) failed() {
	if s.busy {
		s.spoiled = true
		return
	}
	s.drop()
}

// drop forgets the session: the next request opens a new one, closing this
// one.
func (s *fetchSession) drop() {
	s.epoch, s.spoiled = 0, false
	s.reset()
}

// nextSessionEpoch follows epoch; after the largest, it wraps to 1 (0 opens
// a session, -1 closes one).
func nextSessionEpoch(epoch int32) int32 {
	if epoch == math.MaxInt32 {
		return 1
	}
	return epoch + 1
}

// closeSession ends the loop's session on the broker (epoch -1), so that it
// does not hold a slot of the broker's session cache until evicted. It is
// called once the loop's requests are back, after its ctx ended.
func (b *brokerLoop) closeSession() {
	if b.sess.id == 0 {
		return
	}
	c := b.c
	ctx, cancel := context.WithTimeout(context.Background(), sessionCloseTimeout)
	defer cancel()
	req := &rawFetchRequest{clientID: c.cfg.ClientID, broker: b.id, direct: true, versions: c.kc.versions, Request: fetchapi.Request{
		ReplicaID:      -1,
		IsolationLevel: int8(wireIsolation(c.cfg.IsolationLevel)),
		SessionID:      b.sess.id,
		SessionEpoch:   -1,
	}}
	if _, err := c.transport.RoundTrip(ctx, c.kc.addr, req); err != nil {
		b.log.Debug("closing the fetch session failed; the broker evicts it", zap.Int32("session", b.sess.id), zap.Error(err))
	}
	b.sess.id = 0
}
