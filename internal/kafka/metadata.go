package kafka

import (
	"context"
	"fmt"
	"slices"
	"strings"

	kafkago "github.com/segmentio/kafka-go"
)

// Partitions returns the partition ids of each topic, sorted. A topic the
// cluster does not know is an error naming it.
func Partitions(ctx context.Context, cfg Config, topics ...string) (map[string][]int, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	cfg = cfg.WithDefaults()
	t := cfg.transport(topics...)
	defer t.CloseIdleConnections()
	c := &kafkago.Client{Transport: t, Timeout: cfg.RequestTimeout}
	res, err := c.Metadata(ctx, &kafkago.MetadataRequest{Addr: kafkago.TCP(cfg.Brokers...), Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", strings.Join(topics, ", "), err)
	}
	out := make(map[string][]int, len(topics))
	for _, t := range res.Topics {
		if !slices.Contains(topics, t.Name) {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("list partitions of topic %q: %w", t.Name, t.Error)
		}
		ids := make([]int, len(t.Partitions))
		for i, p := range t.Partitions {
			ids[i] = p.ID
		}
		slices.Sort(ids)
		out[t.Name] = ids
	}
	for _, name := range topics {
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("list partitions of topic %q: %w", name, kafkago.UnknownTopicOrPartition)
		}
	}
	return out, nil
}
