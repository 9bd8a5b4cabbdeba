package localetcd_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/localetcd"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  localetcd.Config
		want string
	}{
		{"no dir", localetcd.Config{}, "no data directory"},
		{"negative members", localetcd.Config{Dir: t.TempDir(), Members: -1}, "-1 members"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := localetcd.Start(context.Background(), tc.cfg)
			if err == nil {
				c.Close()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestSingleMemberStopRestartKeepsData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	c, err := localetcd.Start(ctx, localetcd.Config{Dir: dir, Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Members(); got != 1 {
		t.Fatalf("Members() = %d, want 1", got)
	}
	u := c.ClientURL(0)
	if !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Fatalf("ClientURL(0) = %q, want http://127.0.0.1:port", u)
	}
	if got, err := filepath.Glob(filepath.Join(dir, "dev", "member")); err != nil || len(got) != 1 {
		t.Fatalf("no data directory %s/dev/member (%v)", dir, err)
	}
	if l := c.Leader(); l != 0 {
		t.Fatalf("Leader() = %d, want 0", l)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: c.ClientURLs(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}

	c.Stop(0)
	if c.IsRunning(0) || len(c.Running()) != 0 || c.Leader() != -1 {
		t.Fatalf("after Stop: IsRunning %v, Running %v, Leader %d; want false, [], -1", c.IsRunning(0), c.Running(), c.Leader())
	}
	if err := c.WaitReady(ctx, 0); err == nil {
		t.Fatal("WaitReady of a stopped member succeeded")
	}
	if err := c.Restart(ctx, 0); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if err := c.WaitReady(ctx, 0); err != nil {
		t.Fatalf("WaitReady after Restart: %v", err)
	}
	if got := c.ClientURL(0); got != u {
		t.Fatalf("ClientURL(0) after Restart = %q, want %q", got, u)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get after restart = %v, want v", resp.Kvs)
	}
}
