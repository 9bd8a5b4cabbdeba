package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/integration/memsink"
	"github.com/offsetkeeper/offsetkeeper/sinks/builtin"
)

// TestSinkAddedToTheTable: a sink from a package outside sinks/ and cmd/
// (memsink, mem://NAME), added to the table the CLI is given and to
// nothing else, is a sink of run, audit and dev: run writes every record
// to it, audit reads it back and finds nothing wrong, dev's verdict is the
// audit's of it, and --help lists it.
func TestSinkAddedToTheTable(t *testing.T) {
	table := builtin.Sinks().With(memsink.Descriptor)
	cli := func(ctx context.Context, d time.Duration, args ...string) (int, string, string) {
		t.Helper()
		var out, errs syncBuffer
		done := make(chan int, 1)
		go func() { done <- executeWith(ctx, table, args, &out, &errs) }()
		select {
		case code := <-done:
			return code, out.String(), errs.String()
		case <-time.After(d):
			t.Fatalf("offsetkeeper %s: still running after %s\nstderr:\n%s", strings.Join(args, " "), d, errs.String())
			return 0, "", ""
		}
	}

	_, help, _ := cli(context.Background(), 10*time.Second, "run", "--help")
	if !strings.Contains(help, "mem://NAME (kept in memory, for tests)") {
		t.Errorf("run --help does not list the added sink:\n%s", help)
	}
	if code, _, _ := cli(context.Background(), 10*time.Second, "run", "--topics", "orders", "--group", "g", "--sink", "mem://a/b"); code != exitUsage {
		t.Errorf("a mem:// URL the sink refuses: exit %d, want %d", code, exitUsage)
	}

	etcd := harness.StartEtcd(t, 1)
	kf := harness.StartKafka(t, harness.SeedTopics(2, "orders"))
	const perPartition = 50
	for p := range 2 {
		values := make([]string, perPartition)
		for i := range values {
			values[i] = fmt.Sprintf(`{"p":%d,"i":%d}`, p, i)
		}
		kf.ProduceValues(t, "orders", p, values...)
	}
	cluster := []string{"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--brokers", strings.Join(kf.Brokers(), ","), "--group", "g"}

	// run, until the sink holds every record and the audit finds them
	// committed.
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan int, 1)
	var runErr syncBuffer
	go func() {
		ran <- executeWith(ctx, table, append([]string{"run", "--topics", "orders", "--sink", "mem://tablesink", "--http-addr", "",
			"--flush-interval", "50ms"}, cluster...), &syncBuffer{}, &runErr)
	}()
	store := memsink.Store("tablesink")
	var report struct {
		Partitions []struct {
			Delivered int64 `json:"delivered"`
			Committed int64 `json:"committed"`
		} `json:"partitions"`
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if store.Len() == 2*perPartition {
			code, out, errs := cli(context.Background(), 60*time.Second, append([]string{"audit", "--sink", "mem://tablesink", "-o", "json"}, cluster...)...)
			if code == exitOK {
				if err := json.Unmarshal([]byte(out), &report); err != nil {
					t.Fatalf("audit -o json: %v\n%s", err, out)
				}
				committed := int64(0)
				for _, p := range report.Partitions {
					committed += p.Committed
				}
				if committed == 2*perPartition {
					break
				}
			} else if code != exitError {
				t.Fatalf("audit: exit %d\n%s", code, errs)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s the sink holds %d of %d records\nrun's stderr:\n%s", store.Len(), 2*perPartition, runErr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	select {
	case code := <-ran:
		if code != exitOK {
			t.Errorf("run: exit %d after its context ended\n%s", code, runErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop within 30s of its context ending")
	}
	if len(report.Partitions) != 2 {
		t.Fatalf("audit reported %d partitions, want 2", len(report.Partitions))
	}
	for i, p := range report.Partitions {
		if p.Delivered != perPartition {
			t.Errorf("partition %d: audit found %d delivered, want %d", i, p.Delivered, perPartition)
		}
	}
	for p := range 2 {
		recs := store.Records("orders", p)
		if len(recs) != perPartition || string(recs[perPartition-1].Value) != fmt.Sprintf(`{"p":%d,"i":%d}`, p, perPartition-1) {
			t.Errorf("orders/%d: the sink holds %d records, the last %q", p, len(recs), recs[len(recs)-1].Value)
		}
	}

	// dev, whose verdict is the audit's of the added sink (a -tags nodev
	// build has no dev).
	if !hasDev {
		return
	}
	code, out, errs := cli(context.Background(), 120*time.Second, "dev", "--sink", "mem://tabledev", "--messages", "300", "--replicas", "2")
	if code != exitOK {
		t.Fatalf("dev: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, w := range []string{"produced=300 delivered=300 lost=0 duplicates=0", "audit of mem://tabledev"} {
		if !strings.Contains(out+errs, w) {
			t.Errorf("dev does not say %q:\nstdout:\n%s\nstderr:\n%s", w, out, errs)
		}
	}
	if n := memsink.Store("tabledev").Len(); n != 300 {
		t.Errorf("dev's sink holds %d records, want 300", n)
	}
}
