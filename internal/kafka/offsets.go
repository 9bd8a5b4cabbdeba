package kafka

import (
	"context"
	"fmt"
	"io"
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
	listEarliest = -2
	listLatest   = -1
)

// StartOffsets returns where the start policy puts each partition (its log
// start, or its log end: under read_committed the last stable offset), with
// one ListOffsets request per broker. A partition missing from the result
// (its leader unknown, or an error for it) is left to find its own.
func (c *Consumer) StartOffsets(ctx context.Context, tps []TopicPartition) (map[TopicPartition]int64, error) {
	if len(tps) == 0 {
		return nil, nil
	}
	ts := int64(listEarliest)
	if c.cfg.StartPolicy == StartLatest {
		ts = listLatest
	}
	topics := map[string]bool{}
	for _, tp := range tps {
		topics[tp.Topic] = true
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	meta, err := c.client.Metadata(rctx, &kafkago.MetadataRequest{Addr: kafkago.TCP(c.cfg.Brokers...), Topics: names})
	if err != nil {
		return nil, fmt.Errorf("start offsets of %d partitions: metadata: %w", len(tps), err)
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
			r = &rawListOffsetsRequest{broker: id, clientID: c.cfg.ClientID,
				req: listoffsets.Request{ReplicaID: -1, IsolationLevel: int8(c.cfg.IsolationLevel.kafka())}}
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
		mu    sync.Mutex
		out   = make(map[TopicPartition]int64, len(tps))
		first error
		wg    sync.WaitGroup
	)
	for id, r := range byBroker {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := c.transport.RoundTrip(rctx, kafkago.TCP(c.cfg.Brokers...), r)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("list offsets at broker %d: %w", id, err)
				}
				return
			}
			res, ok := m.(*listoffsets.Response)
			if !ok {
				return
			}
			for _, t := range res.Topics {
				for _, p := range t.Partitions {
					if p.ErrorCode == 0 {
						out[TopicPartition{t.Topic, int(p.Partition)}] = p.Offset
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(out) == 0 && first != nil {
		return nil, first
	}
	return out, nil
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
	b, ok := cluster.Brokers[r.broker]
	if !ok {
		return protocol.Broker{ID: -1}, fmt.Errorf("broker %d not in the metadata: %w", r.broker, protocol.ErrNoLeader)
	}
	return b, nil
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
