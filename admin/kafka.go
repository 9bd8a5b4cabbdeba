package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/describegroups"

	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Kafka asks Kafka the few questions the operator commands have: which
// partitions a topic has, where each partition's log starts and ends, and
// which offset a time corresponds to. Log ends are read_committed: the last
// stable offset, where a replica's reading ends.
type Kafka struct {
	brokers []string
	client  *kafka.Client
	err     error // why there is no client: every question returns it
}

// NewKafka returns the questions' client of the brokers in cfg, which
// keeps the metadata of topics; it connects lazily. An error of cfg is
// the answer to every question.
func NewKafka(cfg kafkaconf.Config, topics ...string) *Kafka {
	c, err := kafka.NewClient(cfg, topics...)
	return &Kafka{brokers: cfg.Brokers, client: c, err: err}
}

// Close ends the connections and the transport's goroutines.
func (k *Kafka) Close() {
	if k.client != nil {
		_ = k.client.Close()
	}
}

// ErrKafkaUnreachable marks a failure to talk to Kafka at all, as opposed to
// an answer that refuses something.
var ErrKafkaUnreachable = errors.New("kafka unreachable")

func (k *Kafka) unreachable(err error) error {
	return fmt.Errorf("%w at %s: %w", ErrKafkaUnreachable, strings.Join(k.brokers, ","), err)
}

// Partitions returns the partition ids of each topic Kafka knows, sorted,
// and the topics it does not know.
func (k *Kafka) Partitions(ctx context.Context, topics []string) (map[string][]int, []string, error) {
	if k.err != nil {
		return nil, nil, k.err
	}
	found, missing, err := k.client.Partitions(ctx, topics...)
	if err != nil {
		var kerr kafkago.Error
		if errors.As(err, &kerr) {
			return nil, nil, err // an answer: an error of a topic
		}
		return nil, nil, k.unreachable(err)
	}
	return found, missing, nil
}

// LogBounds is where a partition's log starts and where it ends for a
// read_committed reader.
type LogBounds struct{ Earliest, End int64 }

// Bounds returns the log bounds of every partition in ps.
func (k *Kafka) Bounds(ctx context.Context, ps []sinks.Partition) (map[sinks.Partition]LogBounds, error) {
	out := make(map[sinks.Partition]LogBounds, len(ps))
	if len(ps) == 0 {
		return out, nil
	}
	earliest, err := k.listOffsets(ctx, ps, kafka.ListEarliest, "log start")
	if err != nil {
		return nil, err
	}
	end, err := k.listOffsets(ctx, ps, kafka.ListLatest, "log end")
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		out[p] = LogBounds{Earliest: earliest[p], End: end[p]}
	}
	return out, nil
}

// OffsetsAt returns, for every partition in ps, the first offset whose
// record timestamp is at or after t, or -1 where there is none (t is after
// the last record).
func (k *Kafka) OffsetsAt(ctx context.Context, ps []sinks.Partition, t time.Time) (map[sinks.Partition]int64, error) {
	if len(ps) == 0 {
		return map[sinks.Partition]int64{}, nil
	}
	return k.listOffsets(ctx, ps, t.UnixMilli(), "offset at "+t.Format(time.RFC3339))
}

// listOffsets asks, with one request per broker, for the offset of every
// partition in ps at ts (kafka.ListEarliest, kafka.ListLatest or a time in
// milliseconds), read_committed. what names the offset in errors.
func (k *Kafka) listOffsets(ctx context.Context, ps []sinks.Partition, ts int64, what string) (map[sinks.Partition]int64, error) {
	tps := make([]sinks.Partition, len(ps))
	for i, p := range ps {
		tps[i] = p
	}
	if k.err != nil {
		return nil, k.err
	}
	got, errs, err := k.client.ListOffsets(ctx, kafkaconf.ReadCommitted, ts, tps)
	if err != nil {
		return nil, k.unreachable(err)
	}
	out := make(map[sinks.Partition]int64, len(ps))
	for i, p := range ps {
		if err := errs[tps[i]]; err != nil {
			return nil, fmt.Errorf("%s of %s: %w", what, p, err)
		}
		off, ok := got[tps[i]]
		if !ok {
			return nil, fmt.Errorf("%s of %s: no answer from Kafka", what, p)
		}
		out[p] = off
	}
	return out, nil
}

// GroupOffsets is what Kafka consumer group group (ClickHouse's Kafka
// engine's, Kafka Connect's connect-NAME, any Java consumer's) committed
// for parts: the next offset each would read. A partition it committed
// nothing for is absent.
func (k *Kafka) GroupOffsets(ctx context.Context, group string, parts []sinks.Partition) (map[sinks.Partition]int64, error) {
	if k.err != nil {
		return nil, k.err
	}
	ask := map[string][]int{}
	for _, p := range parts {
		ask[p.Topic] = append(ask[p.Topic], p.Partition)
	}
	resp, err := k.client.Kafka().OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: group, Topics: ask})
	if err != nil {
		return nil, k.unreachable(err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("the offsets of Kafka consumer group %s: %w", group, resp.Error)
	}
	out := map[sinks.Partition]int64{}
	for topic, ps := range resp.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return nil, fmt.Errorf("the offset of %s/%d in Kafka consumer group %s: %w", topic, p.Partition, group, p.Error)
			}
			if p.CommittedOffset >= 0 {
				out[sinks.Partition{Topic: topic, Partition: p.Partition}] = p.CommittedOffset
			}
		}
	}
	return out, nil
}

// SourceGroup is a Kafka consumer group whose offsets a group imports:
// the topics it committed offsets for, and who consumes in it now.
type SourceGroup struct {
	Name   string
	State  string   // Kafka's: Empty, Stable, PreparingRebalance, Dead...
	Topics []string // sorted
	// Members are its consumers' client ids and hosts, "client-id@host":
	// a group with members still commits, so its offsets still move.
	Members []string
}

// DescribeSource reads what Kafka knows of consumer group group: its
// committed topics (an OffsetFetch of every topic) and its members.
func (k *Kafka) DescribeSource(ctx context.Context, group string) (SourceGroup, error) {
	src := SourceGroup{Name: group}
	if k.err != nil {
		return src, k.err
	}
	resp, err := k.client.Kafka().OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: group})
	if err != nil {
		return src, k.unreachable(err)
	}
	if errors.Is(resp.Error, kafkago.GroupIdNotFound) {
		return src, nil // a group never known: no offsets (as Kafka answers; some brokers say so)
	}
	if resp.Error != nil {
		return src, fmt.Errorf("the offsets of Kafka consumer group %s: %w", group, resp.Error)
	}
	for topic, ps := range resp.Topics {
		for _, p := range ps {
			if p.Error == nil && p.CommittedOffset >= 0 {
				src.Topics = append(src.Topics, topic)
				break
			}
		}
	}
	slices.Sort(src.Topics)
	// The protocol's own message: kafka-go's DescribeGroups decodes the
	// members' subscriptions, and fails on those of newer clients.
	cl := k.client.Kafka()
	msg, err := cl.Transport.RoundTrip(ctx, cl.Addr, &describegroups.Request{Groups: []string{group}})
	if err != nil {
		return src, k.unreachable(err)
	}
	desc, ok := msg.(*describegroups.Response)
	if !ok {
		return src, fmt.Errorf("describe Kafka consumer group %s: an answer of type %T", group, msg)
	}
	for _, g := range desc.Groups {
		if g.ErrorCode != 0 {
			return src, fmt.Errorf("describe Kafka consumer group %s: %w", group, kafkago.Error(g.ErrorCode))
		}
		src.State = g.GroupState
		for _, m := range g.Members {
			src.Members = append(src.Members, m.ClientID+"@"+strings.TrimPrefix(m.ClientHost, "/"))
		}
	}
	return src, nil
}
