package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// kafkaAdmin asks Kafka the few questions the operator commands have: which
// partitions a topic has, where each partition's log starts and ends, and
// which offset a time corresponds to. Log ends are read_committed: the last
// stable offset, where a replica's reading ends.
type kafkaAdmin struct {
	brokers []string
	client  *kafka.Client
	err     error // why there is no client: every question returns it
}

func newKafkaAdmin(brokers []string, timeout time.Duration, topics []string, auth kafkaAuth) *kafkaAdmin {
	cfg := kafka.Config{Brokers: brokers, DialTimeout: timeout, RequestTimeout: timeout, ClientID: "offsetkeeper-cli"}
	auth.apply(&cfg) // TLS and SASL (sasl.go)
	c, err := kafka.NewClient(cfg, topics...)
	return &kafkaAdmin{brokers: brokers, client: c, err: err}
}

// Close ends the connections and the transport's goroutines.
func (k *kafkaAdmin) Close() {
	if k.client != nil {
		_ = k.client.Close()
	}
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
	tps := make([]sinks.Partition, len(ps))
	for i, p := range ps {
		tps[i] = sinks.Partition{Topic: p.Topic, Partition: p.Partition}
	}
	if k.err != nil {
		return nil, k.err
	}
	got, errs, err := k.client.ListOffsets(ctx, kafka.ReadCommitted, ts, tps)
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
