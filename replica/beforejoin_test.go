package replica_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
)

// BeforeJoin runs once the topics are found, before the replica joins: its
// error ends Run (the CLI refuses a destination another group writes), and
// a replica that refuses to start for a missing topic never runs it (so
// it claims nothing).
func TestBeforeJoin(t *testing.T) {
	cli, brokers, stop := startEtcdAndKafka("present", 0)
	defer stop()
	run := func(topic string, hook func(context.Context) error) error {
		r, err := replica.New(replica.Config{
			Group: "g", Topics: []string{topic},
			Kafka:      kafkaconf.Config{Brokers: brokers, FetchMaxWait: 100 * time.Millisecond},
			LeaseTTL:   2 * time.Second,
			BeforeJoin: hook,
		}, cli, &sumSink{done: make(chan struct{})}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return r.Run(ctx)
	}
	refused := errors.New("the destination is another group's")
	var calls atomic.Int32
	err := run("present", func(context.Context) error { calls.Add(1); return refused })
	if !errors.Is(err, refused) || calls.Load() != 1 {
		t.Fatalf("Run = %v after %d calls of BeforeJoin, want its refusal after one", err, calls.Load())
	}
	resp, err := cli.Get(context.Background(), "/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("%d keys in etcd after a refusal before joining, want none", resp.Count)
	}

	calls.Store(0)
	err = run("absent", func(context.Context) error { calls.Add(1); return nil })
	if !errors.As(err, new(*replica.MissingTopicError)) || calls.Load() != 0 {
		t.Fatalf("Run = %v after %d calls of BeforeJoin, want a MissingTopicError and none", err, calls.Load())
	}
}
