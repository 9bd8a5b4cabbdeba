package replica_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// asideSink stores the records of even offsets and sets aside the odd ones,
// as a sink sets aside what its table refuses.
type asideSink struct {
	mu     sync.Mutex
	stored int
}

func (s *asideSink) Write(_ context.Context, b *sinks.Block) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range b.Records {
		if r.Offset%2 == 1 {
			b.SetAside++
		} else {
			s.stored++
		}
	}
	return nil
}

func (s *asideSink) Close() error { return nil }

// TestSetAsideRecordsAreNotWritten: records a sink sets aside (dead
// letters) are delivered and committed past, but not counted as written:
// a table that refuses every record showed a healthy written rate.
func TestSetAsideRecordsAreNotWritten(t *testing.T) {
	cli, cluster := etcdAndKfake(t, "aside", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("aside"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var rs []*kgo.Record
	for i := range 100 {
		rs = append(rs, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)})
	}
	if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	sink := &asideSink{}
	r, err := replica.New(replica.Config{Group: "aside", Topics: []string{"aside"},
		Kafka:    kafkaconf.Config{Brokers: cluster.ListenAddrs(), FetchMaxWait: 50 * time.Millisecond},
		LeaseTTL: 2 * time.Second, RebalanceDelay: 10 * time.Millisecond}, cli, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stop := runReplica(ctx, r)
	for r.Stats().Records < 100 {
		if ctx.Err() != nil {
			t.Fatalf("delivered %d of 100", r.Stats().Records)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if st.Records != 100 || st.Stored != 50 {
		t.Errorf("delivered %d, stored %d: want 100 delivered, 50 stored (the sink set 50 aside)", st.Records, st.Stored)
	}
}
