package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// commitAttempts is how many times a commit is tried while etcd does not
// answer, all within the lease TTL (DESIGN.md).
const commitAttempts = 5

// Claim is a replica's ownership of one partition: the claim key bound to the
// session's lease. Holding it is not guaranteed until Release: the lease can
// expire, or an operator can delete the key. Every write the claim makes is
// therefore a Txn conditioned on the claim key still carrying this replica's
// ID and this claim's epoch; a commit that finds otherwise returns ErrFenced.
//
// A Claim is safe for concurrent use, but the replica runs one block at a
// time per partition.
type Claim struct {
	s     *Session
	p     sinks.Partition
	epoch int64
	keys  claimKeys
	log   *zap.Logger

	mu       sync.Mutex
	offsets  Offsets // last seen; ModRevision is the commit condition
	topicID  string  // what commits store as Offsets.TopicID, when set
	intent   *Intent // found when claimed
	released bool

	lostOnce sync.Once
	lost     chan struct{}
}

type claimKeys struct{ claim, offsets, intent string }

// Claim takes p if no one holds it, in one Txn that also reads its offsets
// and intent. It returns ErrClaimed when another claim exists. The Txn is a
// nested one in the session's next write round.
func (s *Session) Claim(ctx context.Context, p sinks.Partition) (*Claim, error) {
	claims, errs := s.ClaimAll(ctx, []sinks.Partition{p})
	return claims[0], errs[0]
}

// ClaimAll claims each of ps as Claim does, sharing write rounds, so that
// hundreds of partitions take a handful of etcd transactions. claims[i] and
// errs[i] are the outcome for ps[i]: a claim, or an error such as
// ErrClaimed; never both. A partition listed twice is claimed once, the
// second getting ErrClaimed.
//
// The claims made in one round share its revision as their epoch (each claim
// key's CreateRevision). That is sound: an epoch fences one partition's
// claims against each other, and a partition has one op per round.
func (s *Session) ClaimAll(ctx context.Context, ps []sinks.Partition) ([]*Claim, []error) {
	claims, errs := make([]*Claim, len(ps)), make([]error, len(ps))
	if !s.Alive() {
		for i, p := range ps {
			errs[i] = leaseLost("claim " + p.String())
		}
		return claims, errs
	}
	ops := make([]*op, len(ps))
	keys := make([]claimKeys, len(ps))
	for i, p := range ps {
		keys[i] = s.c.claimKeys(p)
		ops[i] = s.claimOp(keys[i])
	}
	queued := s.enqueue(ops...)
	for i, p := range ps {
		res := opResult{err: errNotAlive}
		if queued {
			res = s.await(ctx, ops[i])
		}
		claims[i], errs[i] = s.claimed(p, keys[i], res)
	}
	return claims, errs
}

func (c *Coordinator) claimKeys(p sinks.Partition) claimKeys {
	return claimKeys{claim: c.keys.Claim(p), offsets: c.keys.Offsets(p), intent: c.keys.Intent(p)}
}

// claimOp is the contract's claim: If CreateRevision(claim) == 0 Then
// Put(claim, id, lease), Get(offsets), Get(intent) Else Get(claim).
func (s *Session) claimOp(k claimKeys) *op {
	o := newOp(k.claim,
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k.claim), "=", 0)},
		[]clientv3.Op{
			clientv3.OpPut(k.claim, s.member.ID, clientv3.WithLease(s.lease)),
			clientv3.OpGet(k.offsets),
			clientv3.OpGet(k.intent),
		},
		[]clientv3.Op{clientv3.OpGet(k.claim)})
	// A claim taken after its caller stopped waiting would hold the
	// partition with no Claim to release it: give it back.
	o.orphan = func(r opResult) {
		if r.err != nil || !r.ok {
			return
		}
		s.log.Debug("claim taken after its caller left; releasing it", zap.String("key", k.claim), zap.Int64("epoch", r.rev))
		rel := s.releaseOp(k.claim, r.rev)
		s.enqueue(rel)
	}
	return o
}

// claimed turns a claim op's outcome into a Claim.
func (s *Session) claimed(p sinks.Partition, k claimKeys, res opResult) (*Claim, error) {
	switch {
	case errors.Is(res.err, errNotAlive):
		return nil, leaseLost("claim " + p.String())
	case res.err != nil:
		return nil, fmt.Errorf("claim %s: %w", p, res.err)
	case !res.ok:
		owner := "?"
		if kvs := res.resps[0].GetResponseRange().Kvs; len(kvs) > 0 {
			owner = string(kvs[0].Value)
		}
		return nil, fmt.Errorf("claim %s: %w by %s", p, ErrClaimed, owner)
	}
	c := &Claim{
		s:     s,
		p:     p,
		epoch: res.rev, // the round's revision is the claim key's CreateRevision
		keys:  k,
		lost:  make(chan struct{}),
	}
	// Lazy: encoded when the claim first logs, not for each of thousands
	// claimed at once.
	c.log = s.log.WithLazy(zap.String("topic", p.Topic), zap.Int("partition", p.Partition), zap.Int64("epoch", c.epoch))
	if kvs := res.resps[1].GetResponseRange().Kvs; len(kvs) > 0 {
		o, err := decodeOffsets(kvs[0].Value, kvs[0].ModRevision)
		if err != nil {
			// The key exists: keep its revision so a commit cannot silently
			// overwrite what an operator may have to look at.
			c.log.Error("offsets unreadable; committing will overwrite them", zap.Error(err))
			o = Offsets{ModRevision: kvs[0].ModRevision}
		}
		c.offsets = o
	}
	if kvs := res.resps[2].GetResponseRange().Kvs; len(kvs) > 0 {
		var in Intent
		if err := json.Unmarshal(kvs[0].Value, &in); err == nil {
			c.intent = &in
		}
	}
	go func() {
		select {
		case <-s.lost:
			c.markLost()
		case <-c.lost:
		}
	}()
	c.log.Debug("claimed", zap.Int64("next", c.offsets.Next))
	return c, nil
}

// Partition is the claimed partition.
func (c *Claim) Partition() sinks.Partition { return c.p }

// Epoch is the claim key's CreateRevision: the fencing token.
func (c *Claim) Epoch() int64 { return c.epoch }

// SetTopicID sets the topic id the next commits store with the offset
// (Offsets.TopicID). Until it is set, a commit keeps the one it found.
func (c *Claim) SetTopicID(id string) {
	c.mu.Lock()
	c.topicID = id
	c.mu.Unlock()
}

// Offsets is the offsets value last seen: read when claimed, then the one
// each commit wrote, or the one that made a commit fail with
// ErrOffsetsChanged. ModRevision is zero when there is none.
func (c *Claim) Offsets() Offsets {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offsets
}

// Intent is the intent found when the partition was claimed: the block a
// previous owner was writing. The new owner replays exactly that range first.
func (c *Claim) Intent() (Intent, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.intent == nil {
		return Intent{}, false
	}
	return *c.intent, true
}

// Lost is closed when the claim is fenced, released, or its session is lost.
func (c *Claim) Lost() <-chan struct{} { return c.lost }

func (c *Claim) markLost() { c.lostOnce.Do(func() { close(c.lost) }) }

// owned is the Txn condition that the claim is still this one.
func (c *Claim) owned() []clientv3.Cmp { return c.s.owned(c.keys.claim, c.epoch) }

// owned is the Txn condition that the claim key still holds this session's
// claim of epoch.
func (s *Session) owned(claimKey string, epoch int64) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(claimKey), "=", s.member.ID),
		clientv3.Compare(clientv3.CreateRevision(claimKey), "=", epoch),
	}
}

func (c *Claim) usable(what string) error {
	c.mu.Lock()
	released := c.released
	c.mu.Unlock()
	if released {
		return fmt.Errorf("%s %s: %w", what, c.p, ErrReleased)
	}
	if !c.s.Alive() {
		c.markLost()
		return leaseLost(what + " " + c.p.String())
	}
	return nil
}

// PutIntent records that the block [from, next) is about to be written, in
// one Txn with the claim check, nested in the session's next write round. It
// returns ErrFenced if the claim is gone.
func (c *Claim) PutIntent(ctx context.Context, from, next int64, opts ...WriteOption) error {
	return c.PutRoundIntent(ctx, from, next, "", opts...)
}

// PutRoundIntent is PutIntent of a block that goes in with the blocks of
// round (Intent.Round).
func (c *Claim) PutRoundIntent(ctx context.Context, from, next int64, round string, opts ...WriteOption) error {
	what := fmt.Sprintf("intent %s [%d, %d)", c.p, from, next)
	if err := c.usable(what); err != nil {
		return err
	}
	v, _ := json.Marshal(Intent{From: from, Next: next, Epoch: c.epoch, Round: round})
	res := c.s.do(ctx, c.s.newWrite(c.keys.claim, c.owned(), []clientv3.Op{clientv3.OpPut(c.keys.intent, string(v))}, nil, opts))
	switch {
	case errors.Is(res.err, errNotAlive):
		c.markLost()
		return leaseLost(what)
	case res.err != nil:
		return fmt.Errorf("%s: %w", what, res.err)
	case !res.ok:
		c.markLost()
		return fmt.Errorf("%s: %w", what, ErrFenced)
	}
	return nil
}

// Commit stores next (and the rows of the block) in one Txn conditioned on
// the claim and on the offsets not having changed since they were last seen.
// It deletes the intent in the same Txn. The Txn is a nested one in the
// session's next write round, fenced on its own: other partitions' outcomes
// in the round do not affect this one's.
//
//   - claim gone or of another epoch: ErrFenced; never retried.
//   - offsets written by someone else: ErrOffsetsChanged; Offsets() then holds
//     what they wrote.
//   - etcd not answering: retried, at most commitAttempts times within the
//     TTL; a request whose outcome is unknown is resolved by reading the keys
//     back, never by sending it again blindly. When all fail: *CommitError.
//     An attempt that ctx or its TTL/8 timeout ends while it still waits in
//     the queue was never sent, and is tried again without a read-back.
func (c *Claim) Commit(ctx context.Context, next, rows int64, opts ...WriteOption) error {
	return c.CommitEpoch(ctx, next, -1, rows, opts...)
}

// CommitEpoch is Commit storing leaderEpoch, the Kafka leader epoch of the
// record before next (Offsets.LeaderEpoch; negative: unknown).
func (c *Claim) CommitEpoch(ctx context.Context, next int64, leaderEpoch int32, rows int64, opts ...WriteOption) error {
	c.mu.Lock()
	seen := c.offsets
	c.mu.Unlock()
	return c.commit(ctx, fmt.Sprintf("commit %s at %d", c.p, next), seen, next, leaderEpoch, rows, seen.Generation, seen.Truncated, opts)
}

// CommitTruncation starts a new generation at next, after Kafka truncated
// the partition's log below what this replica had read (t says where): one
// Txn fenced as a commit's, storing next, the generation after the one seen,
// t and leaderEpoch, and deleting the intent, without a sink write. A sink
// then takes records at offsets it holds from an older generation as new
// ones (sinks.Block.Truncated). Errors are Commit's.
func (c *Claim) CommitTruncation(ctx context.Context, next int64, leaderEpoch int32, t Truncation) error {
	c.mu.Lock()
	seen := c.offsets
	c.mu.Unlock()
	what := fmt.Sprintf("commit %s at %d after the log was truncated at %d", c.p, next, t.At)
	return c.commit(ctx, what, seen, next, leaderEpoch, 0, seen.Generation+1, &t, nil)
}

// commit writes want's offsets over seen's, as Commit documents.
func (c *Claim) commit(ctx context.Context, what string, seen Offsets, next int64, leaderEpoch int32, rows, gen int64,
	truncated *Truncation, opts []WriteOption) error {
	if err := c.usable(what); err != nil {
		return err
	}
	c.mu.Lock()
	topicID := c.topicID
	c.mu.Unlock()
	if topicID == "" {
		topicID = seen.TopicID
	}
	want := Offsets{
		Next:       next,
		Epoch:      c.epoch,
		Replica:    c.s.member.ID,
		At:         time.Now().UTC(),
		Rows:       rows,
		Generation: gen,
		TopicID:    topicID,
		Truncated:  truncated,
	}
	if leaderEpoch >= 0 {
		want.LeaderEpoch = &leaderEpoch
	}
	value, _ := json.Marshal(want)
	cmps := append(c.owned(), clientv3.Compare(clientv3.ModRevision(c.keys.offsets), "=", seen.ModRevision))
	then := []clientv3.Op{clientv3.OpPut(c.keys.offsets, string(value)), clientv3.OpDelete(c.keys.intent)}
	els := []clientv3.Op{clientv3.OpGet(c.keys.claim), clientv3.OpGet(c.keys.offsets)}

	ttl := c.s.ttl
	attemptTimeout := ttl / 8
	// Waits double from TTL/50, with jitter: at most 15/50 of the TTL in all.
	wait := backoff.Backoff{Min: ttl / 50, Max: ttl / 50 << (commitAttempts - 2)}
	var lastErr error
	for attempt := 1; attempt <= commitAttempts; attempt++ {
		if attempt > 1 {
			if err := wait.Wait(ctx); err != nil {
				return c.commitFailed(next, attempt-1, err)
			}
			if !c.s.Alive() {
				c.markLost()
				return c.commitFailed(next, attempt-1, leaseLost(what))
			}
		}
		o := c.s.newWrite(c.keys.claim, cmps, then, els, opts)
		// The time the write may linger in the queue is not the round's:
		// the attempt is bounded by the round's timeout beyond it.
		actx, cancel := context.WithTimeout(ctx, attemptTimeout+min(o.linger, ttl/16))
		res := c.s.do(actx, o)
		cancel()
		switch {
		case errors.Is(res.err, errNotAlive):
			// Not sent: the session could not show its lease alive when
			// the round went, as the check before this attempt would say.
			c.markLost()
			if attempt == 1 {
				return leaseLost(what)
			}
			return c.commitFailed(next, attempt-1, leaseLost(what))
		case res.err == nil && res.ok:
			want.ModRevision = res.rev
			c.setOffsets(want)
			return nil
		case res.err == nil:
			return c.judge(what, want, res.resps[0].GetResponseRange().Kvs, res.resps[1].GetResponseRange().Kvs)
		}
		lastErr = res.err
		if ctx.Err() != nil {
			break
		}
		if !res.sent {
			continue // the attempt ended in the queue: certainly not applied
		}
		// The outcome is unknown: the request may have reached etcd. Read
		// the keys back and decide from what they hold. A retry sent after
		// this read goes in a later round than the attempt it repeats, and
		// both are conditioned on the same ModRevision: at most one applies.
		rctx, rcancel := context.WithTimeout(ctx, attemptTimeout)
		rb, rerr := c.s.c.cli.Txn(rctx).Then(clientv3.OpGet(c.keys.claim), clientv3.OpGet(c.keys.offsets)).Commit()
		rcancel()
		if rerr != nil {
			c.log.Debug("commit outcome unknown, read-back failed", zap.Int64("next", next), zap.Error(rerr))
			continue
		}
		claimKVs, offKVs := rb.Responses[0].GetResponseRange().Kvs, rb.Responses[1].GetResponseRange().Kvs
		var curRev int64
		if len(offKVs) > 0 {
			curRev = offKVs[0].ModRevision
		}
		if curRev == seen.ModRevision && c.ownedIn(claimKVs) {
			continue // not applied, still ours: safe to send again
		}
		return c.judge(what, want, claimKVs, offKVs)
	}
	if ctx.Err() != nil {
		lastErr = ctx.Err()
	}
	return c.commitFailed(next, commitAttempts, lastErr)
}

func (c *Claim) commitFailed(next int64, attempts int, err error) error {
	c.s.c.commitFailures.Add(1)
	return &CommitError{Partition: c.p, Next: next, Attempts: attempts, Err: err}
}

func (c *Claim) ownedIn(claimKVs []*mvccKV) bool {
	return len(claimKVs) > 0 && string(claimKVs[0].Value) == c.s.member.ID && claimKVs[0].CreateRevision == c.epoch
}

// judge decides a commit from the claim and offsets keys as they are after
// it: our own value means it was applied (a retried or delayed request),
// otherwise a changed claim fences and changed offsets are someone else's.
func (c *Claim) judge(what string, want Offsets, claimKVs, offKVs []*mvccKV) error {
	var cur Offsets
	if len(offKVs) > 0 {
		if o, err := decodeOffsets(offKVs[0].Value, offKVs[0].ModRevision); err == nil {
			cur = o
		} else {
			cur = Offsets{ModRevision: offKVs[0].ModRevision}
		}
	}
	if cur.ModRevision != 0 && cur.Next == want.Next && cur.Epoch == want.Epoch &&
		cur.Replica == want.Replica && cur.At.Equal(want.At) {
		c.setOffsets(cur)
		return nil
	}
	if !c.ownedIn(claimKVs) {
		c.markLost()
		return fmt.Errorf("%s: %w", what, ErrFenced)
	}
	c.setOffsets(cur)
	return fmt.Errorf("%s: %w (now next=%d generation=%d)", what, ErrOffsetsChanged, cur.Next, cur.Generation)
}

// Refresh reads the offsets again and reports whether someone else (an
// operator's reset) wrote them since they were last seen; Offsets then holds
// what they wrote, and the next commit is conditioned on it.
func (c *Claim) Refresh(ctx context.Context) (Offsets, bool, error) {
	resp, err := c.s.c.cli.Get(ctx, c.keys.offsets)
	if err != nil {
		return Offsets{}, false, fmt.Errorf("refresh offsets of %s: %w", c.p, err)
	}
	var cur Offsets
	if len(resp.Kvs) > 0 {
		if cur, err = decodeOffsets(resp.Kvs[0].Value, resp.Kvs[0].ModRevision); err != nil {
			return Offsets{}, false, fmt.Errorf("refresh offsets of %s: %w", c.p, err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur.ModRevision == c.offsets.ModRevision {
		return c.offsets, false, nil
	}
	c.offsets = cur
	return cur, true, nil
}

func (c *Claim) setOffsets(o Offsets) {
	c.mu.Lock()
	c.offsets = o
	c.mu.Unlock()
}

// Release deletes the claim key if it is still this claim, so the planned
// owner can take the partition at once. Finish or roll back the block in
// flight first. Release is idempotent; a claim already gone is not an error.
// Concurrent releases share write rounds; ReleaseAll releases many at once.
func (c *Claim) Release(ctx context.Context) error {
	return ReleaseAll(ctx, []*Claim{c})
}

// ReleaseAll releases each of claims as Release does, sharing write rounds,
// so that hundreds of claims take a handful of etcd transactions: each
// claim's release goes in its own session's rounds, all queued at once. The
// error joins those of the claims that failed, each naming its partition.
//
// Unlike other writes, a release needs no live session: its compares fence
// it. Once the session has ended, so that it has no rounds any more, each
// claim is released with a Txn of its own.
func ReleaseAll(ctx context.Context, claims []*Claim) error {
	type pending struct {
		c  *Claim
		o  *op
		ok bool // queued
	}
	var ps []pending
	bySession := map[*Session][]*op{}
	for _, c := range claims {
		c.mu.Lock()
		released := c.released
		c.released = true
		c.mu.Unlock()
		if released {
			continue
		}
		o := c.s.releaseOp(c.keys.claim, c.epoch)
		ps = append(ps, pending{c: c, o: o})
		bySession[c.s] = append(bySession[c.s], o)
	}
	queued := map[*Session]bool{}
	for rs, ops := range bySession {
		queued[rs] = rs.enqueue(ops...)
	}
	var errs []error
	for _, p := range ps {
		res := opResult{err: errNotAlive}
		if queued[p.c.s] {
			res = p.c.s.await(ctx, p.o)
		}
		if errors.Is(res.err, errNotAlive) {
			_, res.err = p.c.s.c.cli.Txn(ctx).If(p.c.owned()...).Then(clientv3.OpDelete(p.c.keys.claim)).Commit()
		}
		p.c.markLost()
		if res.err != nil {
			errs = append(errs, fmt.Errorf("release %s: %w", p.c.p, res.err))
			continue
		}
		p.c.log.Debug("released")
	}
	return errors.Join(errs...)
}

// releaseOp is the contract's release: If Value(claim) == id AND
// CreateRevision(claim) == epoch Then Delete(claim).
// ReleaseStray deletes a claim key of this session that no Claim stands
// for (a claim whose answer was lost, or whose release failed), if it is
// still of that epoch, so that the partition can be claimed again.
func (s *Session) ReleaseStray(ctx context.Context, p sinks.Partition, epoch int64) error {
	res := s.do(ctx, s.releaseOp(s.c.keys.Claim(p), epoch))
	if res.err != nil {
		return fmt.Errorf("release stray claim %s at epoch %d: %w", p, epoch, res.err)
	}
	return nil
}

func (s *Session) releaseOp(claimKey string, epoch int64) *op {
	o := newOp(claimKey, s.owned(claimKey, epoch), []clientv3.Op{clientv3.OpDelete(claimKey)}, nil)
	o.needsAlive = false
	return o
}

// mvccKV is a key-value as etcd returns it.
type mvccKV = mvccpb.KeyValue
