package replica

import (
	"context"
	"errors"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

func TestReadyWithoutSession(t *testing.T) {
	r, err := New(Config{Group: "orders", ReplicaID: "r1", Topics: []string{"t"}, Kafka: kafkaconf.Config{Brokers: []string{"127.0.0.1:1"}}},
		nil, discard.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = r.Ready(context.Background())
	if !errors.Is(err, ErrNotReady) {
		t.Fatalf("Ready of a replica that never joined: %v, want ErrNotReady", err)
	}
}
