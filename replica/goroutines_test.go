package replica_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/replica"
)

// TestPartitionsCostAGoroutineEach: a claimed partition runs in one
// goroutine. Its claim's loss and its stop reach it through
// context.AfterFunc registrations; two watcher goroutines each had made
// 30,000 goroutines of 10,000 partitions. The stop still ends its idle long
// polls at once: Run returns long before the shutdown timeout would cut
// them. And once Run has returned, none of its goroutines are left.
func TestPartitionsCostAGoroutineEach(t *testing.T) {
	const parts = 400
	cli, cluster := etcdAndKfake(t, "many", parts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("many"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	rs := make([]*kgo.Record, parts)
	for p := range rs {
		rs[p] = &kgo.Record{Partition: int32(p), Value: fmt.Append(nil, p)}
	}
	if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	prod.Close()

	sink := &sumSink{want: parts, done: make(chan struct{})}
	r, err := replica.New(replica.Config{
		Group:  "many",
		Topics: []string{"many"},
		// Long polls that only a stop ends, before the shutdown timeout.
		Kafka:           replica.Kafka{Brokers: cluster.ListenAddrs(), FetchMaxWait: 20 * time.Second},
		LeaseTTL:        5 * time.Second,
		RebalanceDelay:  10 * time.Millisecond,
		ShutdownTimeout: 40 * time.Second,
	}, cli, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stopRun := runReplica(ctx, r)
	select {
	case <-sink.done: // each partition wrote its record: every one is past its start
	case <-ctx.Done():
		t.Fatalf("the sink got %d of %d records", sink.records, parts)
	}
	if n := len(r.Owned()); n != parts {
		t.Fatalf("the replica owns %d partitions, want %d", n, parts)
	}
	// Besides a goroutine a partition, the replica's own (Run, session,
	// rounds, watches, broker loops): far fewer than another a partition.
	running := ourGoroutines()
	if running > parts+parts/10 {
		t.Fatalf("%d goroutines run offsetkeeper's code, for %d partitions: want at most %d", running, parts, parts+parts/10)
	}
	if running < parts {
		t.Fatalf("%d goroutines run offsetkeeper's code, for %d partitions: the test counts wrong", running, parts)
	}

	began := time.Now()
	if err := stopRun(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("Run took %s to return: the stop did not end the partitions' long polls", took)
	}
	for ourGoroutines() > 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d goroutines still run offsetkeeper's code after Run returned:\n%s", ourGoroutines(), stacks())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ourGoroutines counts the goroutines with a frame of offsetkeeper's
// packages (tests' frames aside), so that kfake's, etcd's and the test's
// own are not counted. Nor are kafka-go's connections' own: one with a
// long poll in flight when Run returned ends when the broker answers it,
// within Kafka.FetchMaxWait.
func ourGoroutines() int {
	n := 0
	for _, g := range strings.Split(stacks(), "\n\n") {
		if strings.Contains(g, "kafka-go.(*conn).run(") {
			continue
		}
		for _, line := range strings.Split(g, "\n") {
			if strings.HasPrefix(line, "github.com/offsetkeeper/offsetkeeper/") && !strings.Contains(line, "_test.") {
				n++
				break
			}
		}
	}
	return n
}

func stacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}
