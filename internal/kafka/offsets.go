package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	retrypolicy "github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// ListOffsets asks each partition's leader, one request per broker, for many
// partitions at once: kafka-go's Client.ListOffsets sends one request per
// partition and offset asked, so a thousand partitions cost two thousand.

// Timestamps of ListOffsets: the log start and the log end.
const (
	ListEarliest = -2
	ListLatest   = -1
)

// errNoLeader is a partition whose leader the metadata does not name.
var errNoLeader = errors.New("no leader known")

// missingTopicError is a topic the cluster's metadata does not hold: asking
// again soon does not help.
type missingTopicError struct{ topic string }

func (e *missingTopicError) Error() string {
	return fmt.Sprintf("topic %q: %v", e.topic, kafkago.UnknownTopicOrPartition)
}

func (e *missingTopicError) Unwrap() error { return kafkago.UnknownTopicOrPartition }

// StartOffsets returns where the start policy puts each partition (its log
// start, or its log end: under read_committed the last stable offset), with
// one ListOffsets request per broker. A partition missing from the result
// (its leader unknown, or an error for it) is left to find its own.
func (c *Consumer) StartOffsets(ctx context.Context, tps []sinks.Partition) (map[sinks.Partition]int64, error) {
	ts := int64(ListEarliest)
	if c.cfg.StartPolicy == StartLatest {
		ts = ListLatest
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	out, _, err := c.kc.ListOffsets(rctx, c.cfg.IsolationLevel, ts, tps)
	if err != nil {
		return nil, fmt.Errorf("start offsets of %d partitions: %w", len(tps), err)
	}
	return out, nil
}

// ListOffsets returns the offset of each partition at ts: ListEarliest,
// ListLatest (under read_committed the last stable offset) or a time in
// milliseconds (the first offset whose record is at or after it, -1 where
// there is none), with one request per broker that leads any of them.
// Errors that pass (a leader moving, an offset not yet available after an
// election) are retried with fresh metadata and a backoff until ctx ends;
// a partition that still has one then, or that has another, has it in
// errs. err is set only when no broker answered at all.
func (c *Client) ListOffsets(ctx context.Context, level IsolationLevel, ts int64, tps []sinks.Partition) (offsets map[sinks.Partition]int64, errs map[sinks.Partition]error, err error) {
	offsets = make(map[sinks.Partition]int64, len(tps))
	errs = map[sinks.Partition]error{}
	pending := slices.Clone(tps)
	answered := false
	for attempt := 0; len(pending) > 0; attempt++ {
		got, gotErrs, err := c.listOffsetsOnce(ctx, level, ts, pending)
		if err != nil && !answered && (ctx.Err() != nil || !retriable(err)) {
			return nil, nil, err
		}
		answered = answered || err == nil
		var again []sinks.Partition
		for _, tp := range pending {
			if off, ok := got[tp]; ok {
				offsets[tp] = off
				delete(errs, tp)
				continue
			}
			e := gotErrs[tp]
			if e == nil {
				e = err
			}
			errs[tp] = e
			var missing *missingTopicError
			if e == nil || (retriable(e) && !errors.As(e, &missing)) {
				again = append(again, tp)
			}
		}
		pending = again
		if len(pending) == 0 || retrypolicy.Sleep(ctx, backoff(c.cfg, attempt)) != nil {
			break
		}
	}
	if !answered {
		return nil, nil, ctx.Err()
	}
	return offsets, errs, nil
}

// listOffsetsOnce asks once: the leaders from the metadata, then each
// leader for its partitions.
func (c *Client) listOffsetsOnce(ctx context.Context, level IsolationLevel, ts int64, tps []sinks.Partition) (map[sinks.Partition]int64, map[sinks.Partition]error, error) {
	var names []string
	for _, tp := range tps {
		if !slices.Contains(names, tp.Topic) {
			names = append(names, tp.Topic)
		}
	}
	meta, err := c.metadata(ctx, names)
	if err != nil {
		return nil, nil, err
	}
	offsets := make(map[sinks.Partition]int64, len(tps))
	errs := map[sinks.Partition]error{}
	byBroker := map[int32]*kmsg.ListOffsetsRequest{}
	for _, tp := range tps {
		pm, ok := meta.partition(tp)
		switch {
		case !ok:
			if t := meta.topics[tp.Topic]; t != nil && t.err != nil && !errors.Is(t.err, kafkago.UnknownTopicOrPartition) {
				errs[tp] = t.err
			} else {
				errs[tp] = &missingTopicError{tp.Topic}
			}
			continue
		case pm.err != nil && !errors.Is(pm.err, kafkago.ReplicaNotAvailable):
			errs[tp] = pm.err
			continue
		case pm.leader < 0:
			errs[tp] = errNoLeader
			continue
		}
		req := byBroker[pm.leader]
		if req == nil {
			req = kmsg.NewPtrListOffsetsRequest()
			req.ReplicaID = -1
			req.IsolationLevel = int8(wireIsolation(level))
			byBroker[pm.leader] = req
		}
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = int32(tp.Partition)
		rp.CurrentLeaderEpoch = pm.epoch
		rp.Timestamp = ts
		if n := len(req.Topics) - 1; n >= 0 && req.Topics[n].Topic == tp.Topic {
			req.Topics[n].Partitions = append(req.Topics[n].Partitions, rp)
		} else {
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = tp.Topic
			rt.Partitions = []kmsg.ListOffsetsRequestTopicPartition{rp}
			req.Topics = append(req.Topics, rt)
		}
	}
	var (
		mu       sync.Mutex
		first    error
		answered bool
		wg       sync.WaitGroup
	)
	for id, req := range byBroker {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each broker within an attempt's time: a paused one must not
			// hold the answer past the moment Kafka moves its leaders.
			actx, cancel := context.WithTimeout(ctx, c.metadataAttempt())
			m, err := c.request(actx, id, req, 1, 11)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
					err = fmt.Errorf("no answer within %s: %w", c.metadataAttempt(), err)
				}
				err = fmt.Errorf("list offsets at broker %d: %w", id, err)
				if first == nil {
					first = err
				}
				for _, rt := range req.Topics {
					for _, rp := range rt.Partitions {
						errs[sinks.Partition{Topic: rt.Topic, Partition: int(rp.Partition)}] = err
					}
				}
				return
			}
			answered = true
			for _, t := range m.(*kmsg.ListOffsetsResponse).Topics {
				for _, p := range t.Partitions {
					tp := sinks.Partition{Topic: t.Topic, Partition: int(p.Partition)}
					if p.ErrorCode != 0 {
						errs[tp] = kafkago.Error(p.ErrorCode)
						continue
					}
					offsets[tp] = p.Offset
				}
			}
		}()
	}
	wg.Wait()
	if !answered && first != nil {
		return nil, errs, first
	}
	return offsets, errs, nil
}
