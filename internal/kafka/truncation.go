package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Log truncation (KIP-320). A leader that takes over without every record
// of the old one (an unclean election, or a leader that lost acknowledged
// records) truncates the log: offsets that were read may then hold other
// records, or none yet. Every batch carries the leader epoch it was written
// in; a reader keeps the epoch of the record before its position, and asks
// the leader where its log of that epoch ends (OffsetForLeaderEpoch)
// whenever the position may have gone stale: when a claim seeks to a
// committed offset, when the partition's leader epoch changes, and when an
// offset is out of range. An end below the position is the point where the
// logs diverge: what was read from there on is not in Kafka any more.

// Truncation reports that Kafka's log of a partition diverges from what a
// reader read, at To, below the highest offset the reader had been given
// since its last commit (From). Records the reader had in [To, From) are not
// the log's any more: it may hold other records at those offsets.
type Truncation struct {
	From int64 // past the highest offset read since the last commit
	To   int64 // where the leader's log diverges: the first offset to read again
	// Epoch is the leader epoch of the record before To, as the leader's
	// log has it.
	Epoch int32
	// Cause says what made the reader look: CauseSeek, CauseLeaderChanged
	// or CauseOutOfRange.
	Cause string
}

// What made a reader validate its position (Truncation.Cause).
const (
	CauseSeek          = "seek"           // a seek to a committed offset with its epoch (a claim)
	CauseLeaderChanged = "leader changed" // the partition's leader epoch changed
	CauseOutOfRange    = "out of range"   // the leader refused the offset
)

func (t *Truncation) String() string {
	return fmt.Sprintf("log diverges at %d below %d (%s)", t.To, t.From, t.Cause)
}

// LeaderEpoch returns the leader epoch of the batch that holds the record
// before b.Next: what a reader stores with Next to validate it later. ok is
// false when the batch held no v2 batch (an empty fetch, an old format).
func (b PolledBatch) LeaderEpoch() (epoch int32, ok bool) { return b.epoch, b.epochKnown }

// epochAsk is one partition of an OffsetForLeaderEpoch request.
type epochAsk struct {
	tp      sinks.Partition
	current int32 // the leader epoch the metadata gave: a stale leader refuses
	epoch   int32 // the epoch whose end is asked
}

// epochEnd is the leader's answer for one partition: the largest epoch at
// most the one asked that its log has, and the offset where that epoch
// ends (the next epoch's first offset, or the log end for the current
// one). Both are -1 when the leader knows no such epoch.
type epochEnd struct {
	epoch int32
	end   int64
	err   error
}

// epochEnds asks broker leader where its log of each epoch asked ends.
func (c *Client) epochEnds(ctx context.Context, leader int32, asks []epochAsk) (map[sinks.Partition]epochEnd, error) {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	for _, a := range asks {
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition = int32(a.tp.Partition)
		rp.CurrentLeaderEpoch = a.current
		rp.LeaderEpoch = a.epoch
		if n := len(req.Topics) - 1; n >= 0 && req.Topics[n].Topic == a.tp.Topic {
			req.Topics[n].Partitions = append(req.Topics[n].Partitions, rp)
			continue
		}
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = a.tp.Topic
		rt.Partitions = []kmsg.OffsetForLeaderEpochRequestTopicPartition{rp}
		req.Topics = append(req.Topics, rt)
	}
	// v2 carries the current leader epoch (a stale leader refuses), v3 the
	// replica id of a consumer; Kafka 4 serves v2 to v4.
	m, err := c.request(ctx, leader, req, 2, 4)
	if err != nil {
		return nil, fmt.Errorf("offset for leader epoch at broker %d: %w", leader, err)
	}
	out := make(map[sinks.Partition]epochEnd, len(asks))
	for _, t := range m.(*kmsg.OffsetForLeaderEpochResponse).Topics {
		for _, p := range t.Partitions {
			e := epochEnd{epoch: p.LeaderEpoch, end: p.EndOffset}
			if p.ErrorCode != 0 {
				e.err = kafkago.Error(p.ErrorCode)
			}
			out[sinks.Partition{Topic: t.Topic, Partition: int(p.Partition)}] = e
		}
	}
	return out, nil
}

// diverged judges a leader's answer for a position read up to at, in the
// epoch asked: the truncation it shows, or nil when the log still holds
// everything before at. An epoch older than every one the leader knows
// (-1: retention removed every batch of it and before) tells nothing: the
// position is then below the log start, which an out-of-range answer says.
func (e epochEnd) diverged(at int64, cause string) *Truncation {
	switch {
	case e.epoch < 0 || e.end < 0:
		return nil
	case e.end < at:
		return &Truncation{From: at, To: e.end, Epoch: e.epoch, Cause: cause}
	}
	return nil
}

// unsupported tells a broker that cannot answer OffsetForLeaderEpoch v2 or
// later (before Kafka 2.1): positions are then left unvalidated, as Kafka's
// own consumer leaves them.
func unsupported(err error) bool {
	var uv *UnsupportedVersionError
	return errors.As(err, &uv) || errors.Is(err, kafkago.UnsupportedVersion)
}

// validateDelay bounds how long the validation loop gathers cursors before
// it asks: cursors opened or moved together go in one request per broker.
const validateDelay = 5 * time.Millisecond

// askValidate flags cur's position for validation against its leader, and
// wakes the validation loop. c.mu is held.
func (cur *Cursor) askValidate() {
	c := cur.c
	if !cur.validate {
		cur.validate = true
		c.toValidate = append(c.toValidate, cur)
	}
	select {
	case c.validateWake <- struct{}{}:
	default:
	}
}

// validations validates the positions of the cursors flagged by
// askValidate, one OffsetForLeaderEpoch per leader for all of them, until
// the consumer closes. A cursor flagged is not fetched until its position
// is validated (Cursor.ready). A failed request is asked again after a
// backoff; a broker that does not serve the request (before Kafka 2.1)
// leaves positions unvalidated, as Kafka's own consumer does.
func (c *Consumer) validations() {
	defer c.wg.Done()
	var retry <-chan time.Time
	attempt := 0
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.validateWake:
		case <-retry:
		}
		retry = nil
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(validateDelay):
		}
		if failed := c.validateFlagged(c.ctx); failed {
			d := backoff(c.cfg, attempt)
			attempt++
			retry = time.After(d)
			continue
		}
		attempt = 0
	}
}

// validateFlagged sends the validations of the flagged cursors; failed is
// set when some must be asked again.
func (c *Consumer) validateFlagged(ctx context.Context) (failed bool) {
	type asked struct {
		cur  *Cursor
		seq  uint64
		at   int64
		ask  epochAsk
		lead int32
	}
	byLeader := map[int32][]asked{}
	c.mu.Lock()
	queue := c.toValidate
	c.toValidate = nil
	var keep []*Cursor
	for _, cur := range queue {
		switch {
		case cur.closed || !cur.validate:
			continue
		case cur.validating:
			keep = append(keep, cur)
			continue
		case cur.fetchAt == unset || cur.loop == nil:
			// Not positioned yet, or its leader is unknown: a seek, or the
			// lookup that places it, asks again.
			keep = append(keep, cur)
			continue
		case cur.fetchEpoch < 0:
			// Nothing known of the epoch of what was read (an old record
			// format, or a position given without one): nothing to check.
			cur.validate = false
			cur.wakeLoop()
			continue
		}
		cur.validating = true
		byLeader[cur.leader] = append(byLeader[cur.leader], asked{cur: cur, seq: cur.seq, at: cur.fetchAt, lead: cur.leader,
			ask: epochAsk{tp: cur.tp, current: cur.epoch, epoch: cur.fetchEpoch}})
	}
	c.toValidate = append(c.toValidate, keep...)
	c.mu.Unlock()
	if len(byLeader) == 0 {
		return false
	}
	type answer struct {
		asks []asked
		ends map[sinks.Partition]epochEnd
		err  error
	}
	answers := make(chan answer, len(byLeader))
	for leader, asks := range byLeader {
		go func() {
			rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
			defer cancel()
			req := make([]epochAsk, len(asks))
			for i, a := range asks {
				req[i] = a.ask
			}
			ends, err := c.kc.epochEnds(rctx, leader, req)
			answers <- answer{asks: asks, ends: ends, err: err}
		}()
	}
	relookup := false
	for range byLeader {
		a := <-answers
		c.validated.Add(int64(len(a.asks)))
		c.mu.Lock()
		for _, x := range a.asks {
			cur := x.cur
			cur.validating = false
			if cur.closed || !cur.validate {
				continue
			}
			if cur.seq != x.seq || cur.fetchAt != x.at || cur.leader != x.lead {
				// Moved meanwhile: its new position is asked again.
				c.toValidate = append(c.toValidate, cur)
				failed = true
				continue
			}
			e, ok := a.ends[cur.tp]
			err := a.err
			if err == nil && !ok {
				err = fmt.Errorf("no answer for %s", cur.tp)
			}
			if err == nil {
				err = e.err
			}
			switch {
			case unsupported(err):
				if c.unvalidated.Swap(true) {
					cur.validate = false
					cur.wakeLoop()
					continue // said once: at 10,000 partitions, one line each
				}
				c.log.Warn("the broker cannot tell where a leader epoch ends (OffsetForLeaderEpoch v2 or later): "+
					"the position is not checked against log truncation", zap.Stringer("partition", cur.tp), zap.Error(err))
				cur.validate = false
				cur.wakeLoop()
			case err != nil:
				var ke kafkago.Error
				if errors.As(err, &ke) && (leaderMoved(ke) || unknownTopic(ke)) {
					relookup = true
				}
				c.toValidate = append(c.toValidate, cur)
				failed = true
				c.log.Debug("validating the position failed; asking again", zap.Stringer("partition", cur.tp), zap.Error(err))
			default:
				cur.validate = false
				if t := e.diverged(x.at, cur.validateCause); t != nil {
					cur.truncation = t
					cur.notify()
				} else {
					cur.wakeLoop()
				}
			}
		}
		c.mu.Unlock()
	}
	if relookup {
		c.askLeaders()
	}
	return failed
}

// truncated hands the reader a truncation its cursor's validation found;
// c.mu is held, and released. ok is false when nothing the reader was
// given is past the divergence: only batches fetched ahead were, which are
// dropped, and fetching goes on from the reader's position. Otherwise the
// batch reports the truncation and the reader continues from the
// divergence point, or from its own position if that is lower.
func (cur *Cursor) truncated(t Truncation) (PolledBatch, bool) {
	c, f := cur.c, cur.f
	defer c.mu.Unlock()
	high := max(cur.readHigh, f.offset)
	if t.To >= high {
		cur.expect = unset // fetched ahead from the old log: drop it
		cur.align(f.offset)
		c.log.Info("the leader's log diverges past what was read; fetching again from the position",
			zap.Stringer("partition", cur.tp), zap.Int64("position", f.offset), zap.Int64("diverges_at", t.To), zap.String("cause", t.Cause))
		return PolledBatch{}, false
	}
	t.From = high
	from := f.offset
	to, epoch := t.To, t.Epoch
	if to > from {
		to, epoch = from, cur.epochAt(from)
	}
	cur.readAt, cur.readEpoch, cur.readHigh = to, epoch, to
	cur.expect = unset
	f.SeekTo(to)
	cur.align(to)
	return PolledBatch{From: from, Next: to, HighWatermark: cur.hw, LastStable: cur.lso, Truncation: &t}, true
}

// validate asks the partition's leader, as the metadata names it now,
// whether its log still holds the record before at, written in leader
// epoch epoch: the truncation it finds, or nil.
func (f *Fetcher) validate(ctx context.Context, at int64, epoch int32, cause string) (*Truncation, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.RequestTimeout)
	defer cancel()
	m, err := f.kc.metadata(ctx, []string{f.topic})
	if err != nil {
		return nil, err
	}
	tp := sinks.Partition{Topic: f.topic, Partition: f.partition}
	pm, ok := m.partition(tp)
	if !ok || pm.leader < 0 {
		return nil, errNoLeader
	}
	ends, err := f.kc.epochEnds(ctx, pm.leader, []epochAsk{{tp: tp, current: pm.epoch, epoch: epoch}})
	if err != nil {
		return nil, err
	}
	e, ok := ends[tp]
	if !ok {
		return nil, fmt.Errorf("offset for leader epoch: no answer for %s", tp)
	}
	if e.err != nil {
		return nil, e.err
	}
	return e.diverged(at, cause), nil
}
