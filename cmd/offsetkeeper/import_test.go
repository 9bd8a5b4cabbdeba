package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// TestOffsetsImport: `offsets import --from-group` takes every topic a Kafka
// consumer group committed offsets for (orders and payments here) without
// --topic, prints the plan and changes nothing unless --execute; it refuses
// a source group that still has a consumer (its offsets still move) and a
// group whose replicas run, naming them, unless --live; --from-file takes
// a plan file.
func TestOffsetsImport(t *testing.T) {
	e := newOpsEnv(t, "orders", 2)
	e.kafka.CreateTopic(t, "payments", 1)
	for p := range 2 {
		e.produce("orders", p, 10, nil)
	}
	e.produce("payments", 0, 10, nil)
	commitGroup(t, e.kafka.Brokers(), "engine", map[string]map[int32]int64{"orders": {0: 4, 1: 6}, "payments": {0: 9}})

	type plan struct {
		Executed   bool `json:"executed"`
		Partitions []struct {
			Topic     string `json:"topic"`
			Partition int    `json:"partition"`
			New       int64  `json:"new"`
		} `json:"partitions"`
	}
	read := func(r opsResult) plan {
		t.Helper()
		var p plan
		if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
			t.Fatalf("%v\n%s", err, r.stdout)
		}
		return p
	}
	r := e.run("offsets", "import", "--from-group", "engine", "-o", "json")
	if r.code != 0 {
		t.Fatalf("import: %s", r)
	}
	got := map[string]int64{}
	for _, p := range read(r).Partitions {
		got[sinks.Partition{Topic: p.Topic, Partition: p.Partition}.String()] = p.New
	}
	want := map[string]int64{"orders/0": 4, "orders/1": 6, "payments/0": 9}
	if len(got) != len(want) || got["orders/0"] != 4 || got["orders/1"] != 6 || got["payments/0"] != 9 {
		t.Errorf("plan %v, want %v", got, want)
	}
	if !strings.Contains(r.stderr, "committed offsets of orders, payments") || !strings.Contains(r.stderr, "dry run") {
		t.Errorf("stderr %q: want the source's topics and that nothing changed", r.stderr)
	}
	if len(e.snapshot().Offsets) != 0 {
		t.Fatal("a dry run wrote offsets")
	}

	// A consumer still in the source group: refused, then --live. (Its
	// offsets are committed before it joins: a group with members refuses
	// a commit from outside them.)
	commitGroup(t, e.kafka.Brokers(), "busy", map[string]map[int32]int64{"orders": {0: 1}})
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Brokers()...), kgo.ConsumerGroup("busy"), kgo.ConsumeTopics("orders"),
		kgo.ClientID("engine-consumer"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	awaitCond(t, 20*time.Second, "the consumer to join group busy", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		cl.PollFetches(ctx)
		r := e.run("offsets", "import", "--from-group", "busy")
		return r.code == 2 && strings.Contains(r.stderr, "still consuming (engine-consumer@")
	})
	if r := e.run("offsets", "import", "--from-group", "busy", "--live"); r.code != 0 {
		t.Errorf("import --live from a group with a consumer: %s", r)
	}

	// The group runs: refused, naming the replica.
	s, err := e.coord.Join(context.Background(), coordinator.Member{ID: "replica-7"}, coordinator.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r = e.run("offsets", "import", "--from-group", "engine", "--execute")
	if r.code != 2 || !strings.Contains(r.stderr, "group g is running: 1 replicas hold member keys (replica-7)") {
		t.Errorf("import into a running group: %s", r)
	}
	if len(e.snapshot().Offsets) != 0 {
		t.Fatal("a refused import wrote offsets")
	}
	_ = s.Close(context.Background())
	awaitCond(t, 10*time.Second, "the member key to go", func() bool { return len(e.snapshot().Members) == 0 })

	if r := e.run("offsets", "import", "--from-group", "engine", "--execute", "-o", "json"); r.code != 0 || !read(r).Executed {
		t.Fatalf("import --execute: %s", r)
	}
	snap := e.snapshot()
	for p, want := range map[sinks.Partition]int64{{Topic: "orders", Partition: 0}: 4, {Topic: "orders", Partition: 1}: 6,
		{Topic: "payments", Partition: 0}: 9} {
		if got := snap.Offsets[p].Next; got != want {
			t.Errorf("%s in etcd at %d, want %d", p, got, want)
		}
	}

	for _, bad := range [][]string{
		{"offsets", "import"},
		{"offsets", "import", "--from-group", "engine", "--from-file", "x.csv"},
		{"offsets", "import", "--from-group", "nobody"},
	} {
		if r := e.run(bad...); r.code != 2 {
			t.Errorf("%v: %s, want exit 2", bad, r)
		}
	}
}
