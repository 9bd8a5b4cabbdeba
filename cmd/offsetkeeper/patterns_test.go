package main

import (
	"strings"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// TestOperatorCommandsTakePatterns: with offsets of orders.eu, orders.us
// and payments in etcd, `offsets describe --topics-regex` shows only the
// matching topics and `--by-topic` sums them a row each; `offsets reset
// --topics-regex` plans every partition of the matching topics and none
// of the others; a pattern that does not compile, or matches no topic of
// the group, exits 2 naming it, in audit too.
func TestOperatorCommandsTakePatterns(t *testing.T) {
	e := newOpsEnv(t, "orders.eu", 2)
	e.kafka.CreateTopic(t, "orders.us", 3)
	e.kafka.CreateTopic(t, "payments", 1)
	for _, tp := range []struct {
		topic string
		parts int
	}{{"orders.eu", 2}, {"orders.us", 3}, {"payments", 1}} {
		for p := range tp.parts {
			e.produce(tp.topic, p, 10, nil)
			e.commit(sinks.Partition{Topic: tp.topic, Partition: p}, 4)
		}
	}

	var d describeJSON
	r := e.run("offsets", "describe", "--topics-regex", `orders\..*`, "-o", "json")
	if r.code != 0 {
		t.Fatalf("describe --topics-regex: %s", r)
	}
	decodeStrict(t, r.stdout, &d)
	seen := map[string]int{}
	for _, p := range d.Partitions {
		seen[p.Topic]++
	}
	if seen["orders.eu"] != 2 || seen["orders.us"] != 3 || len(seen) != 2 {
		t.Errorf("describe --topics-regex 'orders\\..*' showed %v, want orders.eu's 2 and orders.us's 3 partitions", seen)
	}

	var byTopic struct {
		Group          string `json:"group"`
		Revision       int64  `json:"revision"`
		KafkaReachable bool   `json:"kafka_reachable"`
		Topics         []struct {
			Topic       string `json:"topic"`
			Partitions  int    `json:"partitions"`
			Lag         *int64 `json:"lag"`
			MaxLag      *int64 `json:"max_lag"`
			Uncommitted int    `json:"uncommitted"`
			Unowned     int    `json:"unowned"`
			Owners      int    `json:"owners"`
			InFlight    int    `json:"in_flight"`
		} `json:"topics"`
	}
	r = e.run("offsets", "describe", "--by-topic", "-o", "json")
	if r.code != 0 {
		t.Fatalf("describe --by-topic: %s", r)
	}
	decodeStrict(t, r.stdout, &byTopic)
	if len(byTopic.Topics) != 3 {
		t.Fatalf("describe --by-topic: %d topics, want 3:\n%s", len(byTopic.Topics), r.stdout)
	}
	for _, tp := range byTopic.Topics {
		n := map[string]int{"orders.eu": 2, "orders.us": 3, "payments": 1}[tp.Topic]
		if tp.Partitions != n || tp.Lag == nil || *tp.Lag != int64(6*n) || *tp.MaxLag != 6 || tp.Unowned != n || tp.Owners != 0 {
			t.Errorf("topic %s: %d partitions, lag %v, max %v, %d unowned; want %d, %d, 6, %d", tp.Topic, tp.Partitions, tp.Lag, tp.MaxLag, tp.Unowned, n, 6*n, n)
		}
	}
	r = e.run("offsets", "describe", "--by-topic")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "TOPIC") || !strings.Contains(r.stdout, "MAX-LAG") || strings.Count(r.stdout, "\n") != 4 {
		t.Errorf("describe --by-topic as a table: want a header and 3 rows:\n%s", r)
	}

	r = e.run("offsets", "reset", "--topics-regex", `orders\.us|payments`, "--to-earliest", "-o", "json")
	if r.code != 0 {
		t.Fatalf("reset --topics-regex: %s", r)
	}
	if strings.Count(r.stdout, `"topic": "orders.us"`) != 3 || strings.Count(r.stdout, `"topic": "payments"`) != 1 || strings.Contains(r.stdout, "orders.eu") {
		t.Errorf("reset --topics-regex 'orders\\.us|payments' planned:\n%s\nwant orders.us's 3 partitions and payments' 1", r.stdout)
	}

	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"offsets", "describe", "--topics-regex", "orders("}, `--topics-regex: topics regex "orders("`},
		{[]string{"offsets", "reset", "--topics-regex", "refunds.*", "--to-earliest"}, `--topics-regex "refunds.*" matches no topic of group g`},
		{[]string{"offsets", "reset", "--topics-regex", "orders.*", "--all-topics", "--to-earliest"}, "conflict"},
		{[]string{"audit", "--sink", "file://" + t.TempDir(), "--topics-regex", "refunds.*"}, `--topics-regex "refunds.*" matches no topic of group g`},
		{[]string{"audit", "--sink", "file://" + t.TempDir(), "--topics-regex", "("}, `--topics-regex: topics regex "("`},
	} {
		r := e.run(c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.says) {
			t.Errorf("%s: %s\nwant exit 2 saying %q", strings.Join(c.args, " "), r, c.says)
		}
	}
}
