package replica_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

// A running replica compacts etcd's history every CompactInterval, to the
// revision of one interval before, and reports etcd's database size; with
// NoCompaction it compacts nothing.
func TestReplicaCompactsEtcd(t *testing.T) {
	for _, tt := range []struct {
		name      string
		noCompact bool
	}{{"compacts", false}, {"left to etcd", true}} {
		t.Run(tt.name, func(t *testing.T) {
			cli, brokers, stop := startEtcdAndKafka("compacted", 1)
			defer stop()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			first, err := cli.Put(ctx, "/before", "x")
			if err != nil {
				t.Fatal(err)
			}
			r, err := replica.New(replica.Config{
				Group:           "compacted",
				Topics:          []string{"compacted"},
				Kafka:           kafkaconf.Config{Brokers: brokers, FetchMaxWait: 100 * time.Millisecond},
				LeaseTTL:        2 * time.Second,
				RebalanceDelay:  10 * time.Millisecond,
				CompactInterval: 200 * time.Millisecond,
				NoCompaction:    tt.noCompact,
			}, cli, discard.New(), nil)
			if err != nil {
				t.Fatal(err)
			}
			rctx, stopRun := context.WithCancel(ctx)
			ran := make(chan error, 1)
			go func() { ran <- r.Run(rctx) }()
			compacted := func() bool {
				if _, err := cli.Put(ctx, "/tick", "x"); err != nil {
					t.Fatal(err)
				}
				_, err := cli.Get(ctx, "/before", clientv3.WithRev(first.Header.Revision))
				return errors.Is(err, rpctypes.ErrCompacted)
			}
			harness.Await(t, 20*time.Second, "etcd's size read", func() bool { size, _, _, _ := r.Etcd(); return size > 0 })
			if tt.noCompact {
				// Several intervals pass: nothing is compacted.
				deadline := time.Now().Add(time.Second)
				for time.Now().Before(deadline) {
					if compacted() {
						t.Fatal("etcd's history compacted with NoCompaction")
					}
					time.Sleep(50 * time.Millisecond)
				}
			} else {
				harness.Await(t, 20*time.Second, "etcd's history compacted", compacted)
			}
			stopRun()
			if err := <-ran; err != nil {
				t.Fatal(err)
			}
			size, inUse, quota, compactions := r.Etcd()
			if (compactions > 0) == tt.noCompact || size <= 0 || inUse <= 0 || quota <= 0 {
				t.Errorf("Etcd() = size %d, in use %d, quota %d, %d compactions", size, inUse, quota, compactions)
			}
		})
	}
}
