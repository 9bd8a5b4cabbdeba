package replica_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

// etcdWithQuota starts an etcd whose backend quota is quota bytes, its
// data in a temporary directory; it stops with the test.
func etcdWithQuota(t *testing.T, quota int64) *clientv3.Client {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	local := []url.URL{{Scheme: "http", Host: "127.0.0.1:0"}}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = local, local
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = local, local
	cfg.InitialCluster = cfg.Name + "=" + local[0].String()
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	cfg.QuotaBackendBytes = quota
	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	select {
	case <-etcd.Server.ReadyNotify():
	case <-time.After(10 * time.Second):
		t.Fatal("etcd did not start")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// churn writes n revisions to etcd, 64 writers over 1,000 keys of 100
// bytes, as commits would, calling at every tenth of them; it returns
// when done or when a write fails (the quota reached).
func churn(ctx context.Context, cli *clientv3.Client, n int, at func(done int)) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	value := strings.Repeat("v", 100)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > n {
					return
				}
				if _, err := cli.Put(ctx, fmt.Sprintf("/churn/%d", i%1000), value); err != nil {
					once.Do(func() { first = err })
					return
				}
				if i%(n/10) == 0 {
					at(i)
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// TestEtcdKeptSmall: 1,000,000 etcd revisions written while a replica
// compacts keep etcd's database in use bounded; with compaction off, the
// replica warns once the database passes 80 % of a small quota, before
// etcd refuses writes.
func TestEtcdKeptSmall(t *testing.T) {
	revisions := 1_000_000
	if os.Getenv("OFFSETKEEPER_ETCD_CHURN") != "" { // fewer, to try it quickly
		fmt.Sscan(os.Getenv("OFFSETKEEPER_ETCD_CHURN"), &revisions)
	}
	t.Run("compacted", func(t *testing.T) {
		// etcd out of this process, where one is installed (Debian's
		// 3.4): a million writes to an embedded one take minutes under
		// the race detector.
		var cli *clientv3.Client
		if path := harness.EtcdBinaryPath(); path != "" {
			e := harness.StartEtcdBinary(t, path)
			cli = e.Client(t)
			t.Logf("etcd %s, as a process", e.Version)
		} else {
			cli = etcdWithQuota(t, 1<<30)
		}
		cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "small"))
		if err != nil {
			t.Fatal(err)
		}
		defer cluster.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		r, err := replica.New(replica.Config{Group: "small", Topics: []string{"small"},
			Kafka:    kafkaconf.Config{Brokers: cluster.ListenAddrs(), FetchMaxWait: 100 * time.Millisecond},
			LeaseTTL: 2 * time.Second, CompactInterval: 250 * time.Millisecond, EtcdStatusInterval: 100 * time.Millisecond}, cli, discard.New(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		stop := runReplica(ctx, r)
		defer stop()
		harness.Await(t, 20*time.Second, "etcd's size read", func() bool { size, _, _, _ := r.Etcd(); return size > 0 })
		var mu sync.Mutex
		var inUse []int64
		start := time.Now()
		if err := churn(ctx, cli, revisions, func(int) {
			_, u, _, _ := r.Etcd()
			mu.Lock()
			inUse = append(inUse, u)
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // a compaction and a status read past the last write
		size, u, _, compactions := r.Etcd()
		inUse = append(inUse, u)
		t.Logf("%d revisions in %s: in use by tenths %v; file %d bytes; %d compactions", revisions, time.Since(start).Round(time.Second), inUse, size, compactions)
		// 1,000 keys of 100 bytes and what a quarter second of history
		// holds: a few MiB. Uncompacted, a million revisions of 100 bytes
		// are above 100 MiB.
		const bound = 8 << 20
		for i, v := range inUse {
			if v > bound {
				t.Errorf("in use %d bytes at tenth %d, above %d: the history is not kept bounded", v, i+1, bound)
			}
		}
		if compactions == 0 {
			t.Error("no compaction")
		}
	})
	t.Run("warned near the quota", func(t *testing.T) {
		const quota = 16 << 20
		cli := etcdWithQuota(t, quota)
		cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "small"))
		if err != nil {
			t.Fatal(err)
		}
		defer cluster.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		core, logs := observer.New(zapcore.WarnLevel)
		r, err := replica.New(replica.Config{Group: "small", Topics: []string{"small"},
			Kafka:    kafkaconf.Config{Brokers: cluster.ListenAddrs(), FetchMaxWait: 100 * time.Millisecond},
			LeaseTTL: 2 * time.Second, NoCompaction: true, EtcdStatusInterval: 50 * time.Millisecond}, cli, discard.New(), zap.New(core))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		stop := runReplica(ctx, r)
		defer stop()
		wctx, wstop := context.WithCancel(ctx)
		defer wstop()
		written := make(chan error, 1)
		go func() { written <- churn(wctx, cli, 10_000_000, func(int) {}) }()
		harness.Await(t, 3*time.Minute, "the warning near the quota", func() bool {
			return logs.FilterMessageSnippet("etcd's database nears its quota").Len() > 0
		})
		wstop()
		<-written
		w := logs.FilterMessageSnippet("etcd's database nears its quota").All()[0].ContextMap()
		size, _ := w["db_size"].(int64)
		if q, _ := w["quota"].(int64); q != quota || size < quota*8/10 || size >= quota {
			t.Errorf("warned at %d bytes of a quota of %v: want past 80 %% of %d and below it", size, w["quota"], quota)
		}
	})
}
