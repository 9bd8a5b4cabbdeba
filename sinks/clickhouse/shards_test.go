package clickhouse_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
)

// Two ClickHouse processes as two shards: each partition's rows go to
// shard partition mod 2 (3 pinned to shard 0 by shard_of=), in one round
// per shard; each partition resumes from its shard; a table over both
// (remote(), the Distributed engine's) reads every row once.
func TestShardsKeepEachPartitionOnItsShard(t *testing.T) {
	one, two := harness.StartClickHouse(t), harness.StartClickHouse(t)
	url, n := sinkURL(one, "insert_interval=0&shards="+two.NativeAddr()+"&shard_of=3:0")
	ctx := context.Background()
	s, err := clickhouse.NewSharded(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	blocks := roundBlocks("r1", 5)
	if err := errors.Join(s.WriteBlocks(ctx, blocks)...); err != nil {
		t.Fatal(err)
	}
	table := fmt.Sprintf("rows_%d", n)
	want := map[*harness.ClickHouse]string{one: "0 2 3 4", two: "1"}
	for ch, parts := range want {
		var got []string
		for _, r := range ch.Query(t, "SELECT DISTINCT kafka_partition FROM "+table+" ORDER BY kafka_partition") {
			got = append(got, fmt.Sprint(r[0]))
		}
		if strings.Join(got, " ") != parts {
			t.Errorf("a shard holds partitions %v, want %s", got, parts)
		}
	}
	for p, b := range blocks {
		if sh := s.ShardOf(p); sh != map[int]int{0: 0, 1: 1, 2: 0, 3: 0, 4: 0}[p] {
			t.Errorf("ShardOf(%d) = %d", p, sh)
		}
		next, _, ok, err := s.Resume(ctx, "orders", p)
		if err != nil || !ok || next != b.Next {
			t.Errorf("Resume orders/%d = %d, %v, %v; want %d from its shard", p, next, ok, err, b.Next)
		}
	}
	// A replay of partition 1's block goes to shard 1, and is dropped there.
	replay := *blocks[1]
	if err := errors.Join(s.WriteBlocks(ctx, []*sinks.Block{&replay})...); err != nil {
		t.Fatal(err)
	}
	all := fmt.Sprintf("remote('%s,%s', '%s', '%s')", one.NativeAddr(), two.NativeAddr(), one.Database(), table)
	if got := one.QueryInt(t, "SELECT count() FROM "+all); got != 15 {
		t.Errorf("%d rows through both shards, want 15", got)
	}
	if got := one.QueryInt(t, "SELECT uniqExact(kafka_partition, kafka_offset) FROM "+all); got != 15 {
		t.Errorf("%d distinct offsets through both shards, want 15", got)
	}

	for _, bad := range []string{"shards=", "shards=" + two.NativeAddr() + "|", "shard_of=3:0", "shards=" + two.NativeAddr() + "&shard_of=3:2",
		"shards=" + two.NativeAddr() + "&shard_of=x"} {
		u, _ := sinkURL(one, bad)
		if err := clickhouse.ValidateURL(u, false); !errors.Is(err, clickhouse.ErrURL) {
			t.Errorf("%s: %v, want an error wrapping ErrURL", bad, err)
		}
	}
	if _, err := clickhouse.ReadAll(ctx, url, "orders", 0); !errors.Is(err, clickhouse.ErrURL) || !strings.Contains(err.Error(), "Distributed") {
		t.Errorf("ReadAll of a sharded URL: %v, want a refusal naming a Distributed table", err)
	}
}
