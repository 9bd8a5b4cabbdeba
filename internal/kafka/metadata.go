package kafka

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Cluster metadata is asked for here, from a broker, every time: kafka-go's
// Transport answers metadata requests from a cache it refreshes every
// MetadataTTL, and forcing it to reload means closing every connection of
// the pool. The request never creates a topic (a broker's
// auto.create.topics.enable is true by default) and asks for the leader
// epochs and topic ids, which tell a moved leader and a re-created topic.

// TopicID is a topic's id (KIP-516): a re-created topic has a new one.
type TopicID [16]byte

// String returns the id as Kafka prints it: URL-safe base64, unpadded.
func (id TopicID) String() string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// IsZero tells an unknown id (a broker before Kafka 2.8 gives none).
func (id TopicID) IsZero() bool { return id == TopicID{} }

// ParseTopicID parses what String returns.
func ParseTopicID(s string) (TopicID, error) {
	var id TopicID
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("topic id %q: not 22 characters of URL-safe base64", s)
	}
	copy(id[:], b)
	return id, nil
}

// partitionMeta is what the metadata says of one partition.
type partitionMeta struct {
	leader int32 // -1 when it has none
	epoch  int32 // the leader epoch; -1 when the broker does not say
	err    error // the broker's error for the partition
}

// topicMeta is what the metadata says of one topic.
type topicMeta struct {
	id       TopicID
	internal bool  // Kafka's own (__consumer_offsets, __transaction_state)
	err      error // the broker's error for the topic: UnknownTopicOrPartition when it does not exist
	parts    map[int]partitionMeta
}

// clusterMeta is one metadata answer.
type clusterMeta struct {
	brokers []int32
	topics  map[string]*topicMeta
}

// partition returns what the answer says of tp; ok is false when the answer
// does not hold it (or holds an error for its topic).
func (m *clusterMeta) partition(tp sinks.Partition) (partitionMeta, bool) {
	t := m.topics[tp.Topic]
	if t == nil || t.err != nil {
		return partitionMeta{}, false
	}
	p, ok := t.parts[tp.Partition]
	return p, ok
}

// metadataAttempt bounds one broker's answer to a metadata request: a
// broker that is up answers at once, one that is paused or cut off never,
// and the next one is asked.
func (c *Client) metadataAttempt() time.Duration {
	return max(time.Second, c.cfg.RequestTimeout/4)
}

// metadata asks for the metadata of topics: first the broker that answered
// last, then the other brokers the last answer named, then whichever of the
// bootstrap brokers the transport connects to.
func (c *Client) metadata(ctx context.Context, topics []string) (*clusterMeta, error) {
	c.metaMu.Lock()
	order := slices.Clone(c.metaBrokers)
	if i := slices.Index(order, c.metaGood); i > 0 {
		order[0], order[i] = order[i], order[0]
	}
	c.metaMu.Unlock()
	order = append(order, -1)
	var first error
	for _, id := range order {
		actx, cancel := context.WithTimeout(ctx, c.metadataAttempt())
		m, err := c.metadataFrom(actx, id, topics)
		// A broker that did not answer within the attempt (paused, cut
		// off) is no reason to stop: the next one may.
		overdue := err != nil && actx.Err() != nil && ctx.Err() == nil
		cancel()
		if overdue {
			who := fmt.Sprintf("broker %d", id)
			if id < 0 {
				who = "bootstrap brokers " + strings.Join(c.cfg.Brokers, ", ")
			}
			err = fmt.Errorf("%s: no answer within %s: %w", who, c.metadataAttempt(), err)
		}
		if err == nil {
			c.metaMu.Lock()
			c.metaBrokers, c.metaGood = m.brokers, id
			c.metaMu.Unlock()
			return m, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil || (!overdue && !retriable(err)) {
			break
		}
	}
	what := strings.Join(topics, ", ")
	if topics == nil {
		what = "every topic"
	}
	return nil, fmt.Errorf("metadata of %s: %w", what, first)
}

// metadataFrom asks broker id (-1: any) for the metadata of topics.
func (c *Client) metadataFrom(ctx context.Context, id int32, topics []string) (*clusterMeta, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	req.AllowAutoTopicCreation = false
	m, err := c.request(ctx, id, req, 1, 12)
	if err != nil {
		return nil, err
	}
	res := m.(*kmsg.MetadataResponse)
	out := &clusterMeta{topics: make(map[string]*topicMeta, len(res.Topics))}
	for _, b := range res.Brokers {
		out.brokers = append(out.brokers, b.NodeID)
	}
	for _, t := range res.Topics {
		if t.Topic == nil {
			continue
		}
		tm := &topicMeta{id: t.TopicID, internal: t.IsInternal, parts: make(map[int]partitionMeta, len(t.Partitions))}
		if t.ErrorCode != 0 {
			tm.err = kafkago.Error(t.ErrorCode)
		}
		for _, p := range t.Partitions {
			pm := partitionMeta{leader: p.Leader, epoch: p.LeaderEpoch}
			if res.GetVersion() < 7 {
				pm.epoch = -1
			}
			if p.ErrorCode != 0 {
				pm.err = kafkago.Error(p.ErrorCode)
			}
			tm.parts[int(p.Partition)] = pm
		}
		out.topics[*t.Topic] = tm
	}
	return out, nil
}

// request sends req to broker id (-1: any), at the newest version both the
// broker and offsetkeeper serve between lo and hi, and returns its response.
func (c *Client) request(ctx context.Context, id int32, req kmsg.Request, lo, hi int16) (kmsg.Response, error) {
	m, err := c.transport.RoundTrip(ctx, c.addr, &kmsgRequest{req: req, broker: id, clientID: c.cfg.ClientID, versions: c.versions, minVer: lo, maxVer: hi})
	if err != nil {
		return nil, err
	}
	res, ok := m.(kmsgResponse)
	if !ok {
		return nil, fmt.Errorf("unexpected response %T", m)
	}
	return res.Response, nil
}

// Partitions returns the partition ids of each topic, sorted, and the
// topics the cluster does not know.
func (c *Client) Partitions(ctx context.Context, topics ...string) (found map[string][]int, missing []string, err error) {
	found = make(map[string][]int, len(topics))
	if len(topics) == 0 {
		return found, nil, nil
	}
	m, err := c.metadata(ctx, topics)
	if err != nil {
		return nil, nil, fmt.Errorf("list partitions: %w", err)
	}
	for _, name := range topics {
		t := m.topics[name]
		switch {
		case t == nil || errors.Is(t.err, kafkago.UnknownTopicOrPartition):
			missing = append(missing, name)
			continue
		case t.err != nil:
			return nil, nil, fmt.Errorf("list partitions of topic %q: %w", name, t.err)
		}
		ids := make([]int, 0, len(t.parts))
		for id := range t.parts {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		found[name] = ids
	}
	return found, missing, nil
}

// EveryTopic returns the partition ids of every topic the cluster has,
// sorted, but Kafka's internal topics. A topic the answer holds another
// error for than UnknownTopicOrPartition (one being created, a leader
// election) is in unsettled instead, without partitions: the next answer
// has it right, and a caller keeps what it knew of it meanwhile.
func (c *Client) EveryTopic(ctx context.Context) (topics map[string][]int, unsettled []string, err error) {
	m, err := c.metadata(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("list topics: %w", err)
	}
	topics = make(map[string][]int, len(m.topics))
	for name, t := range m.topics {
		switch {
		case t.internal || errors.Is(t.err, kafkago.UnknownTopicOrPartition):
			continue
		case t.err != nil || len(t.parts) == 0:
			unsettled = append(unsettled, name)
			continue
		}
		ids := make([]int, 0, len(t.parts))
		for id := range t.parts {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		topics[name] = ids
	}
	slices.Sort(unsettled)
	return topics, unsettled, nil
}

// AllPartitions is Partitions where a topic the cluster does not know is an
// error naming it.
func (c *Client) AllPartitions(ctx context.Context, topics ...string) (map[string][]int, error) {
	found, missing, err := c.Partitions(ctx, topics...)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("list partitions of topic %q: %w", missing[0], kafkago.UnknownTopicOrPartition)
	}
	return found, nil
}

// TopicIDs returns the id of each topic the cluster knows; a broker before
// Kafka 2.8 gives none.
func (c *Client) TopicIDs(ctx context.Context, topics ...string) (map[string]TopicID, error) {
	m, err := c.metadata(ctx, topics)
	if err != nil {
		return nil, err
	}
	out := make(map[string]TopicID, len(topics))
	for name, t := range m.topics {
		if t.err == nil && !t.id.IsZero() {
			out[name] = t.id
		}
	}
	return out, nil
}
