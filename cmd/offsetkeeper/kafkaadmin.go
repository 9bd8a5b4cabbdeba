package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
)

// kafkaAdmin asks Kafka the few questions the operator commands have: which
// partitions a topic has, where each partition's log starts and ends, and
// which offset a time corresponds to. Log ends are read_committed: the last
// stable offset, where a replica's reading ends.
type kafkaAdmin struct {
	brokers   []string
	addr      net.Addr
	transport *kafkago.Transport
	client    *kafkago.Client
	stop      context.CancelFunc
}

func newKafkaAdmin(brokers []string, timeout time.Duration, topics []string, auth kafkaAuth) *kafkaAdmin {
	bg, stop := context.WithCancel(context.Background())
	t := &kafkago.Transport{
		DialTimeout:    timeout,
		ClientID:       "offsetkeeper-cli",
		MetadataTopics: topics,
		Context:        bg,
	}
	auth.apply(t) // TLS and SASL (security.go)
	return &kafkaAdmin{
		brokers:   brokers,
		addr:      kafkago.TCP(brokers...),
		transport: t,
		client:    &kafkago.Client{Transport: t, Timeout: timeout},
		stop:      stop,
	}
}

// Close ends the connections and the transport's goroutines.
func (k *kafkaAdmin) Close() {
	k.stop()
	k.transport.CloseIdleConnections()
}

// errKafkaUnreachable marks a failure to talk to Kafka at all, as opposed to
// an answer that refuses something.
var errKafkaUnreachable = errors.New("kafka unreachable")

func (k *kafkaAdmin) unreachable(err error) error {
	return fmt.Errorf("%w at %s: %w", errKafkaUnreachable, strings.Join(k.brokers, ","), err)
}

// partitions returns the partition ids of each topic Kafka knows, sorted,
// and the topics it does not know.
func (k *kafkaAdmin) partitions(ctx context.Context, topics []string) (map[string][]int, []string, error) {
	found := map[string][]int{}
	if len(topics) == 0 {
		return found, nil, nil
	}
	res, err := k.client.Metadata(ctx, &kafkago.MetadataRequest{Addr: k.addr, Topics: topics})
	if err != nil {
		return nil, nil, k.unreachable(err)
	}
	for _, t := range res.Topics {
		if !slices.Contains(topics, t.Name) {
			continue
		}
		if t.Error != nil {
			if errors.Is(t.Error, kafkago.UnknownTopicOrPartition) {
				continue
			}
			return nil, nil, fmt.Errorf("partitions of topic %q: %w", t.Name, t.Error)
		}
		ids := make([]int, len(t.Partitions))
		for i, p := range t.Partitions {
			ids[i] = p.ID
		}
		slices.Sort(ids)
		found[t.Name] = ids
	}
	var missing []string
	for _, t := range topics {
		if _, ok := found[t]; !ok {
			missing = append(missing, t)
		}
	}
	return found, missing, nil
}

// logBounds is where a partition's log starts and where it ends for a
// read_committed reader.
type logBounds struct{ earliest, end int64 }

// bounds returns the log bounds of every partition in ps.
func (k *kafkaAdmin) bounds(ctx context.Context, ps []coordinator.Partition) (map[coordinator.Partition]logBounds, error) {
	out := make(map[coordinator.Partition]logBounds, len(ps))
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
		out[p] = logBounds{earliest: earliest[p], end: end[p]}
	}
	return out, nil
}

// offsetsAt returns, for every partition in ps, the first offset whose
// record timestamp is at or after t, or -1 where there is none (t is after
// the last record).
func (k *kafkaAdmin) offsetsAt(ctx context.Context, ps []coordinator.Partition, t time.Time) (map[coordinator.Partition]int64, error) {
	if len(ps) == 0 {
		return map[coordinator.Partition]int64{}, nil
	}
	return k.listOffsets(ctx, ps, t.UnixMilli(), "offset at "+t.Format(time.RFC3339))
}

// listOffsets asks, with one request per broker, for the offset of every
// partition in ps at ts (kafka.ListEarliest, kafka.ListLatest or a time in
// milliseconds), read_committed. what names the offset in errors.
func (k *kafkaAdmin) listOffsets(ctx context.Context, ps []coordinator.Partition, ts int64, what string) (map[coordinator.Partition]int64, error) {
	tps := make([]kafka.TopicPartition, len(ps))
	for i, p := range ps {
		tps[i] = kafka.TopicPartition{Topic: p.Topic, Partition: p.Partition}
	}
	got, errs, err := kafka.ListOffsets(ctx, k.transport, k.brokers, "offsetkeeper-cli", kafka.ReadCommitted, ts, tps)
	if err != nil {
		return nil, k.unreachable(err)
	}
	out := make(map[coordinator.Partition]int64, len(ps))
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
