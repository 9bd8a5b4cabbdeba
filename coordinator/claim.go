package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
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
	p     Partition
	epoch int64
	keys  claimKeys
	log   *zap.Logger

	mu       sync.Mutex
	offsets  Offsets // last seen; ModRevision is the commit condition
	intent   *Intent // found when claimed
	released bool

	lostOnce sync.Once
	lost     chan struct{}
}

type claimKeys struct{ claim, offsets, intent string }

// Claim takes p if no one holds it, in one Txn that also reads its offsets
// and intent. It returns ErrClaimed when another claim exists.
func (s *Session) Claim(ctx context.Context, p Partition) (*Claim, error) {
	if !s.Alive() {
		return nil, leaseLost("claim " + p.String())
	}
	k := claimKeys{claim: s.c.keys.Claim(p), offsets: s.c.keys.Offsets(p), intent: s.c.keys.Intent(p)}
	resp, err := s.c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.claim), "=", 0)).
		Then(
			clientv3.OpPut(k.claim, s.member.ID, clientv3.WithLease(s.lease)),
			clientv3.OpGet(k.offsets),
			clientv3.OpGet(k.intent),
		).
		Else(clientv3.OpGet(k.claim)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", p, err)
	}
	if !resp.Succeeded {
		owner := "?"
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			owner = string(kvs[0].Value)
		}
		return nil, fmt.Errorf("claim %s: %w by %s", p, ErrClaimed, owner)
	}
	c := &Claim{
		s:     s,
		p:     p,
		epoch: resp.Header.Revision, // the put's revision is the key's CreateRevision
		keys:  k,
		log:   s.log.With(zap.String("topic", p.Topic), zap.Int("partition", p.Partition)),
		lost:  make(chan struct{}),
	}
	c.log = c.log.With(zap.Int64("epoch", c.epoch))
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		o, err := decodeOffsets(kvs[0].Value, kvs[0].ModRevision)
		if err != nil {
			// The key exists: keep its revision so a commit cannot silently
			// overwrite what an operator may have to look at.
			c.log.Error("offsets unreadable; committing will overwrite them", zap.Error(err))
			o = Offsets{ModRevision: kvs[0].ModRevision}
		}
		c.offsets = o
	}
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
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
func (c *Claim) Partition() Partition { return c.p }

// Epoch is the claim key's CreateRevision: the fencing token.
func (c *Claim) Epoch() int64 { return c.epoch }

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

// Owned is the Txn condition that the claim is still this one.
func (c *Claim) owned() []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(c.keys.claim), "=", c.s.member.ID),
		clientv3.Compare(clientv3.CreateRevision(c.keys.claim), "=", c.epoch),
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
// one Txn with the claim check. It returns ErrFenced if the claim is gone.
func (c *Claim) PutIntent(ctx context.Context, from, next int64) error {
	what := fmt.Sprintf("intent %s [%d, %d)", c.p, from, next)
	if err := c.usable(what); err != nil {
		return err
	}
	v, _ := json.Marshal(Intent{From: from, Next: next, Epoch: c.epoch})
	resp, err := c.s.c.cli.Txn(ctx).If(c.owned()...).Then(clientv3.OpPut(c.keys.intent, string(v))).Commit()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !resp.Succeeded {
		c.markLost()
		return fmt.Errorf("%s: %w", what, ErrFenced)
	}
	return nil
}

// Commit stores next (and the rows of the block) in one Txn conditioned on
// the claim and on the offsets not having changed since they were last seen.
// It deletes the intent in the same Txn.
//
//   - claim gone or of another epoch: ErrFenced; never retried.
//   - offsets written by someone else: ErrOffsetsChanged; Offsets() then holds
//     what they wrote.
//   - etcd not answering: retried, at most commitAttempts times within the
//     TTL; a request whose outcome is unknown is resolved by reading the keys
//     back, never by sending it again blindly. When all fail: *CommitError.
func (c *Claim) Commit(ctx context.Context, next, rows int64) error {
	what := fmt.Sprintf("commit %s at %d", c.p, next)
	if err := c.usable(what); err != nil {
		return err
	}
	c.mu.Lock()
	seen := c.offsets
	c.mu.Unlock()
	want := Offsets{
		Next:       next,
		Epoch:      c.epoch,
		Replica:    c.s.member.ID,
		At:         time.Now().UTC(),
		Rows:       rows,
		Generation: seen.Generation,
	}
	value, _ := json.Marshal(want)

	ttl := c.s.ttl
	attemptTimeout := ttl / 8
	backoff := ttl / 50
	var lastErr error
	for attempt := 1; attempt <= commitAttempts; attempt++ {
		if attempt > 1 {
			select {
			case <-ctx.Done():
				return c.commitFailed(next, attempt-1, ctx.Err())
			case <-time.After(backoff):
			}
			backoff *= 2
			if !c.s.Alive() {
				c.markLost()
				return c.commitFailed(next, attempt-1, leaseLost(what))
			}
		}
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		resp, err := c.s.c.cli.Txn(actx).
			If(append(c.owned(), clientv3.Compare(clientv3.ModRevision(c.keys.offsets), "=", seen.ModRevision))...).
			Then(clientv3.OpPut(c.keys.offsets, string(value)), clientv3.OpDelete(c.keys.intent)).
			Else(clientv3.OpGet(c.keys.claim), clientv3.OpGet(c.keys.offsets)).
			Commit()
		cancel()
		if err == nil {
			if resp.Succeeded {
				want.ModRevision = resp.Header.Revision
				c.setOffsets(want)
				return nil
			}
			return c.judge(what, want, resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs)
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
		// The outcome is unknown: the request may have reached etcd. Read
		// the keys back and decide from what they hold.
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
func (c *Claim) Release(ctx context.Context) error {
	c.mu.Lock()
	if c.released {
		c.mu.Unlock()
		return nil
	}
	c.released = true
	c.mu.Unlock()
	defer c.markLost()
	_, err := c.s.c.cli.Txn(ctx).If(c.owned()...).Then(clientv3.OpDelete(c.keys.claim)).Commit()
	if err != nil {
		return fmt.Errorf("release %s: %w", c.p, err)
	}
	c.log.Debug("released")
	return nil
}

// mvccKV is a key-value as etcd returns it.
type mvccKV = mvccpb.KeyValue
