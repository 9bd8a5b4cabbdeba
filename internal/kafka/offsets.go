package kafka

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/listoffsets"
)

// kafka-go's Client.ListOffsets sends one request per partition and offset
// asked (and finds each one's leader by walking the topic's partitions), so
// start offsets for a thousand partitions cost two thousand requests. Here
// one request per broker asks for all the partitions it leads.

// Timestamps of ListOffsets: the log start and the log end.
const (
	ListEarliest = -2
	ListLatest   = -1
)

// StartOffsets returns where the start policy puts each partition (its log
// start, or its log end: under read_committed the last stable offset), with
// one ListOffsets request per broker. A partition missing from the result
// (its leader unknown, or an error for it) is left to find its own.
func (c *Consumer) StartOffsets(ctx context.Context, tps []TopicPartition) (map[TopicPartition]int64, error) {
	ts := int64(ListEarliest)
	if c.cfg.StartPolicy == StartLatest {
		ts = ListLatest
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	out, _, err := ListOffsets(rctx, c.transport, c.cfg.Brokers, c.cfg.ClientID, c.cfg.IsolationLevel, ts, tps)
	if err != nil {
		return nil, fmt.Errorf("start offsets of %d partitions: %w", len(tps), err)
	}
	return out, nil
}

// ListOffsets returns the offset of each partition at ts: ListEarliest,
// ListLatest (under read_committed the last stable offset) or a time in
// milliseconds (the first offset whose record is at or after it, -1 where
// there is none), with one request per broker that leads any of them.
// kafka-go's Client.ListOffsets sends one request per partition and offset,
// so a thousand partitions cost two thousand. A partition the brokers
// answered with an error has it in errs; one without a known leader is in
// neither map. err is set only when no broker answered.
func ListOffsets(ctx context.Context, rt kafkago.RoundTripper, brokers []string, clientID string, level IsolationLevel,
	ts int64, tps []TopicPartition) (offsets map[TopicPartition]int64, errs map[TopicPartition]error, err error) {
	if len(tps) == 0 {
		return nil, nil, nil
	}
	var names []string
	for _, tp := range tps {
		if !slices.Contains(names, tp.Topic) {
			names = append(names, tp.Topic)
		}
	}
	addr := kafkago.TCP(brokers...)
	meta, err := (&kafkago.Client{Transport: rt}).Metadata(ctx, &kafkago.MetadataRequest{Addr: addr, Topics: names})
	if err != nil {
		return nil, nil, fmt.Errorf("metadata: %w", err)
	}
	leaders := map[TopicPartition]int32{}
	for _, t := range meta.Topics {
		for _, p := range t.Partitions {
			if p.Error == nil && p.Leader.Host != "" {
				leaders[TopicPartition{t.Name, p.ID}] = int32(p.Leader.ID)
			}
		}
	}
	byBroker := map[int32]*rawListOffsetsRequest{}
	for _, tp := range tps {
		id, ok := leaders[tp]
		if !ok {
			continue
		}
		r := byBroker[id]
		if r == nil {
			r = &rawListOffsetsRequest{broker: id, clientID: clientID,
				req: listoffsets.Request{ReplicaID: -1, IsolationLevel: int8(level.kafka())}}
			byBroker[id] = r
		}
		rp := listoffsets.RequestPartition{Partition: int32(tp.Partition), CurrentLeaderEpoch: -1, Timestamp: ts}
		if n := len(r.req.Topics) - 1; n >= 0 && r.req.Topics[n].Topic == tp.Topic {
			r.req.Topics[n].Partitions = append(r.req.Topics[n].Partitions, rp)
		} else {
			r.req.Topics = append(r.req.Topics, listoffsets.RequestTopic{Topic: tp.Topic, Partitions: []listoffsets.RequestPartition{rp}})
		}
	}
	var (
		mu       sync.Mutex
		first    error
		answered bool
		wg       sync.WaitGroup
	)
	offsets = make(map[TopicPartition]int64, len(tps))
	errs = map[TopicPartition]error{}
	for id, r := range byBroker {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := rt.RoundTrip(ctx, addr, r)
			mu.Lock()
			defer mu.Unlock()
			res, ok := m.(*listoffsets.Response)
			if err == nil && !ok {
				err = fmt.Errorf("unexpected response %T", m)
			}
			if err != nil {
				if first == nil {
					first = fmt.Errorf("list offsets at broker %d: %w", id, err)
				}
				return
			}
			answered = true
			for _, t := range res.Topics {
				for _, p := range t.Partitions {
					tp := TopicPartition{t.Topic, int(p.Partition)}
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
		return nil, nil, first
	}
	return offsets, errs, nil
}

// rawListOffsetsRequest is a ListOffsets request of many partitions sent
// whole to one broker: kafka-go would split it into one request per
// partition (listoffsets.Request is a protocol.Splitter), so it is written
// and read here through the RawExchanger hook, like rawFetchRequest.
type rawListOffsetsRequest struct {
	req      listoffsets.Request // not embedded: its Split must not show
	clientID string
	broker   int32
	version  int16
}

// maxListOffsetsVersion is the newest version kafka-go encodes.
const maxListOffsetsVersion = 5

// ApiKey implements protocol.Message.
func (r *rawListOffsetsRequest) ApiKey() protocol.ApiKey { return protocol.ListOffsets }

// Broker implements protocol.BrokerMessage.
func (r *rawListOffsetsRequest) Broker(cluster protocol.Cluster) (protocol.Broker, error) {
	return brokerOf(cluster, r.broker)
}

// Required implements protocol.RawExchanger.
func (r *rawListOffsetsRequest) Required(versions map[protocol.ApiKey]int16) bool {
	r.version = min(versions[protocol.ListOffsets], maxListOffsetsVersion)
	return true
}

// RawExchange implements protocol.RawExchanger.
func (r *rawListOffsetsRequest) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	if r.version < 1 {
		return nil, fmt.Errorf("list offsets: the broker offers v%d, v1 or later is needed", r.version)
	}
	id := rawCorrelationID.Add(1)
	if err := protocol.WriteRequest(rw, r.version, id, r.clientID, &r.req); err != nil {
		return nil, err
	}
	got, m, err := protocol.ReadResponse(rw, protocol.ListOffsets, r.version)
	if err != nil {
		return nil, err
	}
	if got != id {
		return nil, fmt.Errorf("list offsets response: correlation id mismatch (expected=%d, found=%d)", id, got)
	}
	return m, nil
}
