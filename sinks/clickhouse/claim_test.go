package clickhouse_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
)

// TestClaimDestination: the first group to claim a topic of a table is
// recorded; another group's claim is refused naming the table, both groups
// and how to forget the first, and records nothing; with shared the free
// topics are recorded; groups claiming at once on one server: one wins.
func TestClaimDestination(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, _ := sinkURL(chs, "")
	url = strings.Replace(url, "group=g&", "", 1)
	ctx := harness.Context(t, time.Minute)
	blue := open(t, url, clickhouse.WithGroup("blue"))
	if err := blue.ClaimDestination(ctx, "blue", []string{"orders", "payments"}, false); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if err := blue.ClaimDestination(ctx, "blue", []string{"orders"}, false); err != nil {
		t.Fatalf("the same group again: %v", err)
	}
	green := open(t, url, clickhouse.WithGroup("green"))
	err := green.ClaimDestination(ctx, "green", []string{"orders", "refunds"}, false)
	if !errors.Is(err, sinks.ErrDestinationClaimed) {
		t.Fatalf("another group's claim: %v, want sinks.ErrDestinationClaimed", err)
	}
	for _, want := range []string{"topic orders", `group "blue"`, `group "green"`, "ALTER TABLE", clickhouse.GroupsTable} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Nothing recorded by the refused claim: refunds is free for a third.
	third := open(t, url, clickhouse.WithGroup("third"))
	if err := third.ClaimDestination(ctx, "third", []string{"refunds"}, false); err != nil {
		t.Errorf("refunds after a refused claim named it: %v", err)
	}
	if err := green.ClaimDestination(ctx, "green", []string{"orders", "audits"}, true); err != nil {
		t.Fatalf("a shared claim: %v", err)
	}
	if err := third.ClaimDestination(ctx, "third", []string{"audits"}, false); !errors.Is(err, sinks.ErrDestinationClaimed) {
		t.Errorf("audits, recorded by the shared claim: %v, want refused", err)
	}

	const n = 6
	racers := make([]*clickhouse.Sink, n)
	for i := range racers {
		racers[i] = open(t, url, clickhouse.WithGroup(string(rune('a'+i))))
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, s := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.ClaimDestination(ctx, string(rune('a'+i)), []string{"race"}, false)
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, sinks.ErrDestinationClaimed):
			t.Errorf("group %c: %v", 'a'+i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d of %d claims at once won, want 1 (one server)", won, n)
	}

	// The operator forgets the winner, as the error says: the next group
	// claims the topic, though its token was seen, and holds it.
	chs.Exec(t, `ALTER TABLE `+clickhouse.GroupsTable+` DELETE WHERE topic = 'race' SETTINGS mutations_sync = 1`)
	if err := third.ClaimDestination(ctx, "third", []string{"race"}, false); err != nil {
		t.Fatalf("a claim after the row was deleted: %v", err)
	}
	if err := green.ClaimDestination(ctx, "green", []string{"race"}, false); !errors.Is(err, sinks.ErrDestinationClaimed) || !strings.Contains(err.Error(), `group "third"`) {
		t.Errorf("a claim after third's: %v, want refused naming third", err)
	}
}
