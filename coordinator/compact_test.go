package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// Two compactors (two replicas, of two groups perhaps) on one etcd while
// keys are written: etcd's history is compacted, a read at a revision from
// before is refused as compacted, and the rounds are taken in turn: each
// compaction follows an election on CompactKey, so there are never more
// compactions than elections. What is current stays readable, and a watch
// started meanwhile sees every write.
func TestCompactorsKeepHistoryBounded(t *testing.T) {
	etcd := harness.StartEtcd(t, 1)
	cli := etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := cli.Put(ctx, "/x", "0")
	if err != nil {
		t.Fatal(err)
	}
	const every = 100 * time.Millisecond
	a, b := coordinator.NewCompactor(cli, every, nil), coordinator.NewCompactor(etcd.Client(t), every, nil)
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range []*coordinator.Compactor{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); c.Run(rctx) }()
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watch := cli.Watch(wctx, "/x")
	i := 0
	harness.Await(t, 20*time.Second, "the history before the first write compacted", func() bool {
		i++
		if _, err := cli.Put(ctx, "/x", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		_, err := cli.Get(ctx, "/x", clientv3.WithRev(first.Header.Revision))
		return errors.Is(err, rpctypes.ErrCompacted)
	})
	stop()
	wg.Wait()
	got, err := cli.Get(ctx, "/x")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != fmt.Sprint(i) {
		t.Fatalf("the current value after compactions: %v, %v; want %d", got, err, i)
	}
	seen := 0
	for timeout := time.After(10 * time.Second); seen < i; {
		select {
		case wr := <-watch:
			if err := wr.Err(); err != nil {
				t.Fatalf("the watch after %d events: %v", seen, err)
			}
			seen += len(wr.Events)
		case <-timeout:
			t.Fatalf("a watch started before the compactions saw %d of the %d writes", seen, i)
		}
	}
	if seen != i {
		t.Errorf("a watch started before the compactions saw %d of the %d writes", seen, i)
	}
	key, err := cli.Get(ctx, coordinator.CompactKey)
	if err != nil || len(key.Kvs) != 1 {
		t.Fatalf("%s: %v, %v", coordinator.CompactKey, key, err)
	}
	n := a.Compactions() + b.Compactions()
	if n < 1 || n > key.Kvs[0].Version {
		t.Errorf("%d compactions for %d elections: want at least one, and no more than the elections", n, key.Kvs[0].Version)
	}
	st, err := coordinator.Status(ctx, cli)
	if err != nil || st.DBSize <= 0 || st.DBSizeInUse <= 0 || st.DBSizeInUse > st.DBSize {
		t.Errorf("Status: %+v, %v; want the database's sizes", st, err)
	}
	t.Logf("%d writes, %d compactions (%d and %d), %d elections; %+v", i, n, a.Compactions(), b.Compactions(), key.Kvs[0].Version, st)
}
