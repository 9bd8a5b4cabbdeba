package kafka

import (
	"context"
	"fmt"
)

// Partitions returns the partition ids of each topic, sorted, with a client
// of its own that it closes. A topic the cluster does not know is an error
// naming it. A fresh client reads fresh metadata: a transport's is cached
// for Config.MetadataTTL.
func Partitions(ctx context.Context, cfg Config, topics ...string) (map[string][]int, error) {
	c, err := NewClient(cfg, topics...)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	defer c.Close()
	return c.AllPartitions(ctx, topics...)
}
