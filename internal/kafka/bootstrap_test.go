package kafka

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// A bootstrap broker that accepts the connection and answers nothing is
// passed over for one that answers: every new client gets the metadata
// within one metadata attempt, whichever broker it happens to ask first.
// (kafka-go alone keeps the silent broker's connection until the dial
// timeout and answers nothing.)
func TestBootstrapPassesOverABrokerThatDoesNotAnswer(t *testing.T) {
	k := harness.StartKafka(t)
	k.CreateTopic(t, "boot", 3)
	cfg := Config{Brokers: []string{harness.Blackhole(t), k.Brokers()[0]}, DialTimeout: 5 * time.Second}
	for i := range 6 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		start := time.Now()
		parts, err := listPartitions(ctx, cfg, "boot")
		cancel()
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		if got := parts["boot"]; len(got) != 3 {
			t.Fatalf("client %d: partitions %v, want 3", i, got)
		}
		t.Logf("client %d: metadata after %v", i, time.Since(start).Round(time.Millisecond))
	}
}

// When no bootstrap broker answers, the error says so and names them, once
// the metadata attempt is up rather than never.
func TestBootstrapNoneAnswers(t *testing.T) {
	a, b := harness.Blackhole(t), harness.Blackhole(t)
	cfg := Config{Brokers: []string{a, b}, DialTimeout: 2 * time.Second, RequestTimeout: 2 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := listPartitions(ctx, cfg, "boot")
	if err == nil {
		t.Fatal("metadata from brokers that never answer: no error")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("gave up after %v", took)
	}
	if msg := err.Error(); !strings.Contains(msg, a) || !strings.Contains(msg, b) || !strings.Contains(msg, "no answer") {
		t.Errorf("error %q: want it to name %s and %s and say they gave no answer", msg, a, b)
	}
}

// The dialer asks the broker that answered last first and those that
// failed last, the one that failed longest ago before the others.
func TestBootstrapOrder(t *testing.T) {
	b := newBootstrap([]string{"a", "b", "c", "d"})
	now := time.Now()
	b.failedAt("a", now)
	b.failedAt("c", now.Add(-time.Minute))
	b.answered("d")
	for range 20 {
		got := b.order()
		if got[0] != "d" || got[1] != "b" || !slices.Equal(got[2:], []string{"c", "a"}) {
			t.Fatalf("order %v, want d b c a", got)
		}
	}
	b.failedAt("d", now.Add(time.Second))
	if got := b.order(); got[0] != "b" || got[3] != "d" {
		t.Fatalf("after d failed: order %v, want b first and d last", got)
	}
	if name := newBootstrapAddr([]string{"h:1", "h:2"}).String(); strings.Contains(name, ",") {
		t.Errorf("bootstrap name %q has a comma: kafka-go would dial its parts itself", name)
	}
}

// listPartitions lists the partitions of topics with a client of its own,
// which it closes.
func listPartitions(ctx context.Context, cfg Config, topics ...string) (map[string][]int, error) {
	c, err := NewClient(cfg, topics...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.AllPartitions(ctx, topics...)
}
