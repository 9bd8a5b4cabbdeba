package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Write rounds (group commit).
//
// Every write of a session's claims (Claim, PutIntent, Commit, Release) is an
// op queued on the session. One goroutine per session, the round loop, sends
// what is queued as one etcd Txn with no compares whose Then holds one nested
// Txn per op, each with exactly the compares, then and else of the contract
// (DESIGN.md) for that op. Each op's outcome is its own nested response, so a
// fenced partition fails alone while the others of the round succeed. While
// a round is in flight the next one gathers, and goes only once it is full
// (up to maxRoundsInFlight at once) or the round in flight is back. An idle
// session therefore sends an op at once, and a busy one batches.
//
// A round holds at most one op per partition. etcd refuses a Txn in which two
// ops put one key or a put overlaps a delete, and it evaluates every nested
// compare against the state before the whole Txn, so two ops of one
// partition in one round would not see each other. A later op of a
// partition waits for the next round; the queue is kept in order, so a
// partition's ops are applied in the order they were made. Likewise an op
// whose partition has an op in a round in flight waits for that round's
// outcome: rounds in flight at once never share a partition.
//
// Sizing (etcd server/etcdserver/api/v3rpc/key.go, checkTxnRequest): etcd
// counts max(len(compares), len(then), len(else)) of the top level, here the
// number of ops n, against --max-txn-ops, and checks each nested Txn against
// --max-txn-ops minus n. A round of n ops whose widest op has width w is
// therefore accepted when n + w <= max-txn-ops: 125 claims or commits (width
// 3) with the default 128. Its estimated encoded size is kept under the
// coordinator's byte limit (DefaultMaxTxnBytes), well below etcd's
// --max-request-bytes (1.5 MiB by default).

const (
	// DefaultMaxTxnOps is etcd's default --max-txn-ops.
	DefaultMaxTxnOps = 128
	// DefaultMaxTxnBytes bounds the estimated encoded size of one round: a
	// third of etcd's default --max-request-bytes (1.5 MiB).
	DefaultMaxTxnBytes = 512 << 10

	// maxOpWidth is the widest op: max(len(compares), len(then),
	// len(else)) of a claim or a commit.
	maxOpWidth = 3
	// minTxnOps is the smallest --max-txn-ops a round of one op fits.
	minTxnOps = 1 + maxOpWidth
	// minTxnBytes is the smallest byte limit accepted: one op of long
	// keys fits.
	minTxnBytes = 16 << 10
	// maxRoundsInFlight bounds the full rounds sent before the first is
	// back. Claiming 10,000 partitions is 80 rounds; one at a time, each
	// waited out its 3 ms (etcd's apply and WAL sync) and the claims took
	// 0.3 s. etcd syncs concurrent proposals together.
	maxRoundsInFlight = 3
)

// errNotAlive is an op's outcome when it was not sent because its session
// could not show its lease alive, or had ended.
var errNotAlive = errors.New("session not alive")

type opState uint8

const (
	opQueued    opState = iota // waiting for a round
	opSent                     // in the round in flight
	opDone                     // outcome set, done closed
	opCancelled                // its waiter left while it was queued: never sent
	opAbandoned                // its waiter left while it was in flight
)

// op is one nested Txn of a round.
type op struct {
	// key is the partition's claim key: a round holds one op per key.
	key        string
	cmps       []clientv3.Cmp
	then, els  []clientv3.Op
	width      int
	size       int
	needsAlive bool // fails without being sent when the session is not alive
	// orphan, if set, is called by the loop, outside any lock, with the
	// outcome of an op whose waiter had left while it was in flight.
	orphan func(opResult)

	// linger is how long the op may wait for others to share its round;
	// due is when it must be sent, set when it is queued.
	linger time.Duration
	due    time.Time

	state opState  // guarded by Session.rmu
	res   opResult // set before done is closed
	done  chan struct{}
}

// opResult is the outcome of an op.
type opResult struct {
	// sent is false when the op was never sent: err is then errNotAlive or
	// the waiter's ctx error, and the op certainly did not apply.
	sent bool
	// err is the round's Txn error, or the waiter's ctx error when it left
	// while the op was in flight: the outcome is then unknown.
	err error
	// ok is whether the op's compares held; resps holds its Then (ok) or
	// Else responses.
	ok    bool
	resps []*pb.ResponseOp
	// rev is the round's revision: the ModRevision of what an ok op wrote.
	rev int64
}

func newOp(key string, cmps []clientv3.Cmp, then, els []clientv3.Op) *op {
	return &op{
		key:        key,
		cmps:       cmps,
		then:       then,
		els:        els,
		width:      max(len(cmps), len(then), len(els)),
		size:       opBytes(cmps, then, els),
		needsAlive: true,
		done:       make(chan struct{}),
	}
}

// opBytes bounds the encoded size of one nested Txn: each key, value and
// range end, plus a generous allowance per message for protobuf's tags,
// lengths, revisions and lease IDs.
func opBytes(cmps []clientv3.Cmp, then, els []clientv3.Op) int {
	const (
		perTxn = 16 // RequestOp and TxnRequest framing
		perCmp = 24 // result, target, key framing, revision or value framing
		perOp  = 32 // RequestOp and request framing, lease ID
	)
	n := perTxn
	for i := range cmps {
		n += perCmp + len(cmps[i].KeyBytes()) + len(cmps[i].ValueBytes())
	}
	for _, ops := range [][]clientv3.Op{then, els} {
		for _, o := range ops {
			n += perOp + len(o.KeyBytes()) + len(o.ValueBytes()) + len(o.RangeBytes())
		}
	}
	return n
}

// roundTimeout bounds one round's Txn: the time of one commit attempt, so a
// round stuck on a dead connection holds the others back no longer than
// that.
func (s *Session) roundTimeout() time.Duration { return s.ttl / 8 }

// enqueue queues ops for the next round. It reports false when the round
// loop has ended: the session is closed or lost.
func (s *Session) enqueue(ops ...*op) bool {
	now := time.Now()
	for _, o := range ops {
		o.due = now.Add(min(o.linger, s.ttl/16))
	}
	s.rmu.Lock()
	if s.roundsEnded {
		s.rmu.Unlock()
		return false
	}
	s.queue = append(s.queue, ops...)
	for _, o := range ops {
		s.queueBytes += o.size
	}
	s.rmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

// do queues o and waits for its outcome.
func (s *Session) do(ctx context.Context, o *op) opResult {
	if !s.enqueue(o) {
		return opResult{err: errNotAlive}
	}
	return s.await(ctx, o)
}

// await waits for o's outcome or for ctx to end. A waiter that leaves takes
// a queued op out of the queue (it is never sent); one in flight has an
// unknown outcome.
func (s *Session) await(ctx context.Context, o *op) opResult {
	select {
	case <-o.done:
		return o.res
	case <-ctx.Done():
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	switch o.state {
	case opQueued:
		o.state = opCancelled
		return opResult{err: ctx.Err()}
	case opSent:
		o.state = opAbandoned
		return opResult{sent: true, err: ctx.Err()}
	default:
		return o.res
	}
}

// runRounds is the round loop. It sends a round when none is in flight and
// the first queued op is due: at once for an op without linger, else when
// its linger (WithLinger, or Linger on the write) has passed. A round takes
// every op queued by then, due or not, so ops that linger ride along with
// one that cannot wait. While rounds are in flight, another goes only when
// the queue holds a full one (a backlog of claims or commits); otherwise
// the next round gathers until one is back. It exits when the session is
// closed, abandoned or lost, after the rounds in flight (each bounded by
// roundTimeout); the ops still queued then fail unsent with errNotAlive.
func (s *Session) runRounds() {
	defer s.wg.Done()
	defer s.endRounds()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-s.done:
			s.roundsRun.Wait()
			return
		case <-s.wake:
		case <-timer.C:
		}
		for {
			s.rmu.Lock()
			flying := s.inFlight
			s.rmu.Unlock()
			if flying >= maxRoundsInFlight {
				break // a round coming back wakes the loop
			}
			due, full, ok := s.firstDue()
			if !ok || (flying > 0 && !full) {
				break
			}
			if wait := time.Until(due); wait > 0 && !full {
				timer.Reset(wait)
				break
			}
			if !s.sendRound() {
				break
			}
			select {
			case <-s.done:
				s.roundsRun.Wait()
				return
			default:
			}
		}
	}
}

// firstDue returns when the next round must be sent, and whether the queue
// holds a full round already (its ops lingered for company, and no more can
// join them: it is due now). Ops of partitions in flight wait, and count
// for neither.
func (s *Session) firstDue() (due time.Time, full, ok bool) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if !s.mayHoldFull() {
		// Only when it is due, then: no set of keys to fill.
		for _, o := range s.queue {
			if o.state != opCancelled && !s.flying[o.key] && (due.IsZero() || o.due.Before(due)) {
				due = o.due
			}
		}
		return due, false, !due.IsZero()
	}
	fill := s.newFill()
	for _, o := range s.queue {
		if o.state == opCancelled || s.flying[o.key] {
			continue
		}
		if due.IsZero() || o.due.Before(due) {
			due = o.due
		}
		if joined, dup := fill.add(o); (!joined && !dup) || fill.full() {
			return time.Now(), true, true
		}
	}
	return due, false, !due.IsZero()
}

// mayHoldFull reports whether the queue is long or large enough that a
// round filled from it could be full: a busy session queues an op or two
// between rounds, and filling a round on each of those wakes was most of
// the loop's work. s.rmu is held.
func (s *Session) mayHoldFull() bool {
	return len(s.queue)+1+maxOpWidth > s.c.maxTxnOps || s.queueBytes > s.c.maxTxnBytes
}

// roundFill is a round being filled in queue order: one op per partition,
// while n + widest <= max-txn-ops and the estimated size fits (see Sizing
// above). take fills the round it sends with it, and firstDue the round
// the queue holds, by the same rules.
type roundFill struct {
	c        *Coordinator
	flying   map[string]bool // keys of the rounds in flight
	keys     map[string]bool
	n, width int
	size     int
}

// newFill starts a round to fill, with the session's set of keys emptied.
// s.rmu is held.
func (s *Session) newFill() roundFill {
	if s.fillKeys == nil {
		s.fillKeys = map[string]bool{}
	}
	clear(s.fillKeys)
	return roundFill{c: s.c, flying: s.flying, keys: s.fillKeys}
}

// add reports whether o joins the round; dup when it cannot because its
// partition has an op in the round already or in one in flight, else
// because the round is full.
func (f *roundFill) add(o *op) (joined, dup bool) {
	if f.keys[o.key] || f.flying[o.key] {
		return false, true
	}
	if f.n > 0 && (f.n+1+max(f.width, o.width) > f.c.maxTxnOps || f.size+o.size > f.c.maxTxnBytes) {
		return false, false
	}
	f.keys[o.key] = true
	f.n, f.width, f.size = f.n+1, max(f.width, o.width), f.size+o.size
	return true, false
}

// full reports whether no claim or commit (the widest op) can join.
func (f *roundFill) full() bool {
	return f.n > 0 && f.n+1+maxOpWidth > f.c.maxTxnOps
}

// endRounds refuses new ops and fails the queued ones unsent.
func (s *Session) endRounds() {
	s.rmu.Lock()
	s.roundsEnded = true
	queued := s.queue
	s.queue, s.queueBytes = nil, 0
	s.rmu.Unlock()
	for _, o := range queued {
		s.deliver(o, opResult{err: errNotAlive})
	}
}

// sendRound takes one round off the queue and sends it on a goroutine of
// its own. It reports false when nothing could be taken.
func (s *Session) sendRound() bool {
	select {
	case <-s.wake: // what it announced is taken now
	default:
	}
	batch := s.take()
	if len(batch) == 0 {
		return false
	}
	s.rmu.Lock()
	if s.flying == nil {
		s.flying = map[string]bool{}
	}
	for _, o := range batch {
		s.flying[o.key] = true
	}
	s.inFlight++
	s.rmu.Unlock()
	s.roundsRun.Add(1)
	go func() {
		defer s.roundsRun.Done()
		s.send(batch)
		s.rmu.Lock()
		for _, o := range batch {
			delete(s.flying, o.key)
		}
		s.inFlight--
		s.rmu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}()
	return true
}

// take removes the next round from the queue, in queue order: ops of
// partitions not yet in the round, while n + widest <= max-txn-ops and the
// estimated size fits. Ops passed over keep their place.
func (s *Session) take() []*op {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	var batch []*op
	fill := s.newFill()
	full := false
	rest := s.queue[:0]
	for _, o := range s.queue {
		if o.state == opCancelled {
			s.queueBytes -= o.size
			continue
		}
		if !full {
			joined, dup := fill.add(o)
			if joined {
				batch = append(batch, o)
				o.state = opSent
				s.queueBytes -= o.size
				continue
			}
			full = !dup
		}
		rest = append(rest, o)
	}
	clear(s.queue[len(rest):])
	s.queue = rest
	return batch
}

// send sends batch as one Txn and hands each op its outcome.
func (s *Session) send(batch []*op) {
	if !s.Alive() {
		// Fencing allows a write only while the lease is shown alive; a
		// release is safe without (its compares fence it) and goes on.
		kept := batch[:0]
		for _, o := range batch {
			if o.needsAlive {
				s.deliver(o, opResult{err: errNotAlive})
			} else {
				kept = append(kept, o)
			}
		}
		if batch = kept; len(batch) == 0 {
			return
		}
	}
	ops := make([]clientv3.Op, len(batch))
	size := 0
	for i, o := range batch {
		ops[i] = clientv3.OpTxn(o.cmps, o.then, o.els)
		size += o.size
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.roundTimeout())
	resp, err := s.c.cli.Txn(ctx).Then(ops...).Commit()
	cancel()
	s.c.rounds.Add(1)
	s.c.roundOps.Add(int64(len(batch)))
	if s.c.observeRound != nil {
		s.c.observeRound(len(batch))
	}
	if err == nil && len(resp.Responses) != len(batch) {
		err = fmt.Errorf("write round of %d ops: %d responses", len(batch), len(resp.Responses))
	}
	if err != nil {
		s.log.Debug("write round failed", zap.Int("ops", len(batch)), zap.Int("bytes", size), zap.Error(err))
		for _, o := range batch {
			s.deliver(o, opResult{sent: true, err: err})
		}
		return
	}
	s.log.Debug("write round", zap.Int("ops", len(batch)), zap.Int("bytes", size), zap.Int64("revision", resp.Header.Revision))
	for i, o := range batch {
		r := opResult{sent: true, rev: resp.Header.Revision}
		if t := resp.Responses[i].GetResponseTxn(); t != nil {
			r.ok, r.resps = t.Succeeded, t.Responses
		} else {
			r.err = fmt.Errorf("write round: response %d is not a txn", i)
		}
		s.deliver(o, r)
	}
}

// deliver sets o's outcome and wakes its waiter; an op whose waiter left in
// flight goes to its orphan handler.
func (s *Session) deliver(o *op, r opResult) {
	s.rmu.Lock()
	orphaned := o.state == opAbandoned
	o.res, o.state = r, opDone
	close(o.done)
	s.rmu.Unlock()
	if orphaned && o.orphan != nil {
		o.orphan(r)
	}
}
