package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// TestResetFromKafkaGroup: a Kafka consumer group (as ClickHouse's Kafka
// engine leaves one) committed offsets 3 and 7 of two of three partitions;
// `offsets reset --from-group` plans exactly those, leaves the third out
// with a warning, and --execute puts them in etcd for a group that had no
// key there yet, where its replicas start from.
func TestResetFromKafkaGroup(t *testing.T) {
	e := newOpsEnv(t, "orders", 3)
	for p := range 3 {
		e.produce("orders", p, 10, nil)
	}
	commitGroup(t, e.kafka.Brokers(), "engine", map[string]map[int32]int64{"orders": {0: 3, 2: 7}})

	r := e.run("offsets", "reset", "--topic", "orders", "--from-group", "engine", "-o", "json")
	if r.code != 0 {
		t.Fatalf("reset --from-group: %s", r)
	}
	var plan struct {
		Partitions []struct {
			Partition int   `json:"partition"`
			New       int64 `json:"new"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(plan.Partitions) != 2 || plan.Partitions[0].New != 3 || plan.Partitions[1].New != 7 || plan.Partitions[1].Partition != 2 {
		t.Errorf("plan %+v, want orders/0 at 3 and orders/2 at 7", plan.Partitions)
	}
	if !strings.Contains(r.stderr, "orders/1: Kafka consumer group engine committed no offset") {
		t.Errorf("stderr %q: want a warning naming orders/1", r.stderr)
	}
	if r := e.run("offsets", "reset", "--topic", "orders", "--from-group", "engine", "--execute"); r.code != 0 {
		t.Fatalf("reset --from-group --execute: %s", r)
	}
	snap := e.snapshot()
	for p, want := range map[int]int64{0: 3, 2: 7} {
		if got := snap.Offsets[sinks.Partition{Topic: "orders", Partition: p}].Next; got != want {
			t.Errorf("orders/%d in etcd at %d, want %d", p, got, want)
		}
	}
	if _, ok := snap.Offsets[sinks.Partition{Topic: "orders", Partition: 1}]; ok {
		t.Error("orders/1 got an offset the group never committed")
	}
	if r := e.run("offsets", "reset", "--topic", "orders", "--from-group", " "); r.code != 2 || !strings.Contains(r.stderr, "--from-group is empty") {
		t.Errorf("an empty --from-group: %s", r)
	}
}

// commitGroup commits offsets for Kafka consumer group group, as a Java
// consumer of Kafka 3 does (by topic name, not id), without joining it.
func commitGroup(t *testing.T, brokers []string, group string, offsets map[string]map[int32]int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MaxVersions(kversion.V3_0_0()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = group, -1
	for topic, offs := range offsets {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topic
		for p, off := range offs {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = p, off
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				t.Fatalf("commit %s/%d: error %d", rt.Topic, rp.Partition, rp.ErrorCode)
			}
		}
	}
}
