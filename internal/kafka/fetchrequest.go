package kafka

// One fetch request of a broker loop: what it carries, how it is sent and
// how its answer is decoded, partition by partition (broker.go picks its
// parts, answer.go hands the answer to the cursors).

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// fetchRequest is one request in flight and, once back, its outcome.
type fetchRequest struct {
	parts   []*fetchPart
	reserve int64 // budget bytes set aside for the answer
	// bound is the request's MaxBytes: the request's byte limit (the
	// budget left, at most MaxRequestBytes), not reserve. The parts'
	// own limits already bound the answer to reserve; a broker that
	// counts a batch it skipped for a partition's limit toward MaxBytes
	// (kfake counts it whole) cut answers of 8 partitions to 4 when
	// MaxBytes was their sum.
	bound  int64
	quiet  bool // it carries quiet cursors
	big    bool // its first part is a batch larger than its limit
	beside bool // it was picked beside a long poll: it carries no quiet cursor
	sent   time.Time

	// The parts it lists: all of them, but in a fetch session only those
	// whose fetch the broker's session does not hold; and the partitions
	// the session is to forget (session.go).
	listed    []*fetchPart
	forgotten []sinks.Partition
	session   bool // it is a request of the loop's fetch session
	// Its session id and epoch; outside a session 0 and -1.
	sessionID, sessionEpoch int32

	got        int64         // the record bytes of the answer
	err        error         // the request as a whole failed
	sessionErr int16         // the answer's session error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH)
	answerID   int32         // the answer's session id
	throttle   time.Duration // the broker mutes the connection this long (KIP-219)
}

// fetchPart is one cursor's part of a request.
type fetchPart struct {
	cur   *Cursor
	seq   uint64
	from  int64
	limit int32 // the bytes the cursor may take in a response
	max   int32 // the limit sent: limit, or 1 for a big batch first in the request
	epoch int32

	raw     *rawFetchPartition // its part of the response, until decoded
	batch   PolledBatch
	err     error // decoding failed
	code    int16 // the broker's error code for the partition
	present bool  // the response held the partition
	// redirect is set when the broker named another replica to fetch the
	// partition from (KIP-392, preferred_read_replica): preferred.
	redirect  bool
	preferred int32
	hw, lso   int64
}

// fetch sends one request and decodes what each partition got. It runs on
// a goroutine of its own, so decoding overlaps the other request in flight
// and the delivery of earlier batches.
func (b *brokerLoop) fetch(ctx context.Context, r *fetchRequest) *fetchRequest {
	c := b.c
	wait := c.cfg.FetchMaxWait
	if !r.quiet {
		// Only the long poll, which carries the quiet partitions, waits.
		// The others are for partitions that may have records now (or
		// were never asked): one that has none is quiet from its answer
		// on and joins the long poll, rather than make this request a
		// second one (10,000 new partitions, 625 a request, took 16 long
		// polls to all be asked once).
		wait = 0
	}
	req := &rawFetchRequest{clientID: c.cfg.ClientID, broker: b.id, direct: true, versions: c.kc.versions, Request: fetchapi.Request{
		ReplicaID:      -1,
		MaxWaitTime:    int32(wait / time.Millisecond),
		MinBytes:       int32(c.cfg.FetchMinBytes),
		MaxBytes:       int32(min(max(r.bound, r.reserve), 1<<31-1)),
		IsolationLevel: int8(wireIsolation(c.cfg.IsolationLevel)),
		SessionID:      r.sessionID,
		SessionEpoch:   r.sessionEpoch,
		RackID:         c.cfg.Rack,
	}, sent: &c.requestBytes}
	for _, p := range r.listed {
		rp := fetchapi.RequestPartition{
			Partition:          int32(p.cur.tp.Partition),
			CurrentLeaderEpoch: p.epoch,
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
	for _, tp := range r.forgotten { // sorted
		if t := len(req.ForgottenTopics) - 1; t >= 0 && req.ForgottenTopics[t].Topic == tp.Topic {
			req.ForgottenTopics[t].Partitions = append(req.ForgottenTopics[t].Partitions, int32(tp.Partition))
		} else {
			req.ForgottenTopics = append(req.ForgottenTopics, fetchapi.RequestForgottenTopic{Topic: tp.Topic, Partitions: []int32{int32(tp.Partition)}})
		}
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.FetchMaxWait+c.cfg.RequestTimeout)
	defer cancel()
	c.requests.Add(1)
	if r.sessionEpoch > 0 {
		c.incrementalFetches.Add(1)
	} else {
		c.fullFetches.Add(1)
	}
	m, err := c.transport.RoundTrip(rctx, c.kc.addr, req)
	if err != nil {
		r.err = err
		return r
	}
	res, ok := m.(*rawFetchResponse)
	if !ok {
		r.err = fmt.Errorf("unexpected response %T", m)
		return r
	}
	r.throttle = time.Duration(res.ThrottleMs) * time.Millisecond
	r.answerID = res.SessionID
	switch err := kafkago.Error(res.ErrorCode); {
	case res.ErrorCode == 0:
	case r.session && (errors.Is(err, kafkago.FetchSessionIDNotFound) || errors.Is(err, kafkago.InvalidFetchSessionEpoch)):
		r.sessionErr = res.ErrorCode
		return r
	default:
		r.err = err
		return r
	}
	got := make(map[sinks.Partition]*rawFetchPartition, len(r.parts))
	for i := range res.Topics {
		t := &res.Topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			got[sinks.Partition{Topic: t.Topic, Partition: int(p.Partition)}] = p
		}
	}
	var work []*fetchPart
	found := 0
	for _, part := range r.parts {
		if found == len(got) {
			// The rest are not in the answer: an idle long poll in a
			// session is answered with no partition, and at 10,000
			// partitions looking each up was a tenth of the idle
			// replica's CPU.
			break
		}
		p, ok := got[part.cur.tp]
		if !ok {
			// Nothing for it: a broker answering in a fetch session
			// leaves out the partitions without records or news
			// (session.go). handle takes it for an empty answer, with
			// the high watermark last seen. (Kafka leaves out one
			// whose last stable offset alone moved: then no record
			// at its offset became readable either.)
			continue
		}
		found++
		part.present = true
		if rr := p.PreferredReadReplica; rr >= 0 && rr != b.id {
			part.redirect, part.preferred = true, rr
		}
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
		r.got += int64(len(p.Records))
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
				c.fetched.Add(int64(len(part.raw.Records)))
				part.batch, part.err = part.cur.f.decodePartition(part.from, part.raw)
				c.wasted.Add(int64(part.batch.wasted))
				part.raw = nil
			}
		}()
	}
	wg.Wait()
	return r
}
