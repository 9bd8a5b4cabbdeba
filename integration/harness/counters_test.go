package harness

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestCountRequestsSeesFetchesAndPassesThemOn(t *testing.T) {
	k := StartKafka(t, SeedTopics(1, "t"))
	fetches := k.CountRequests(kmsg.Fetch.Int16())
	k.ProduceValues(t, "t", 0, "a", "b")
	if got := consumePartition(t, k, "t", 0, 0, 2, false); len(got) != 2 {
		t.Fatalf("consumed %d records, want 2", len(got))
	}
	if n := fetches.Load(); n < 1 {
		t.Fatalf("counted %d fetches, want at least 1", n)
	}
}

func TestEtcdRevisionCountsWrites(t *testing.T) {
	e := StartEtcd(t, 1)
	cli := e.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := EtcdRevision(t, cli)
	for _, k := range []string{"/a/1", "/a/2", "/b"} {
		if _, err := cli.Put(ctx, k, "v"); err != nil {
			t.Fatal(err)
		}
	}
	if got := EtcdRevision(t, cli) - before; got != 3 {
		t.Fatalf("revision rose by %d over 3 puts, want 3", got)
	}
	if n := EtcdCount(t, cli, "/a/"); n != 2 {
		t.Fatalf("%d keys below /a/, want 2", n)
	}
}
