package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
	"github.com/offsetkeeper/offsetkeeper/sinks/sinktest"
)

// TestNewWaitsForTheServer: a sink opened while PostgreSQL is down (a
// replica restarted during a failover) waits for it within retry_timeout
// instead of failing, and opens once it is back; without a server for
// longer it gives up saying so; a cancelled ctx (a stop) ends the wait at
// once.
func TestNewWaitsForTheServer(t *testing.T) {
	pg := harness.StartPostgres(t)
	url, _ := sinkURL(pg, "retry_timeout=60s")
	pg.Stop()

	opened := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		s, err := postgres.New(ctx, url)
		if err == nil {
			err = s.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		t.Fatalf("New returned while the server was down: %v", err)
	case <-time.After(2 * time.Second):
	}
	pg.Start()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatalf("New after the server came back: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("New did not return within 30s of the server coming back")
	}

	pg.Stop()
	defer pg.Start()
	short, _ := sinkURL(pg, "retry_timeout=1s")
	start := time.Now()
	_, err := postgres.New(context.Background(), short)
	if took := time.Since(start); err == nil || took > 5*time.Second || !strings.Contains(err.Error(), "still unreachable after retry_timeout=1s") {
		t.Errorf("New with the server down and retry_timeout=1s: %v after %s, want \"still unreachable after retry_timeout=1s\" within seconds", err, took)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start = time.Now()
	_, err = postgres.New(ctx, url)
	if took := time.Since(start); !errors.Is(err, context.Canceled) || took > 300*time.Millisecond+time.Second {
		t.Errorf("New cancelled while waiting: %v after %s, want context.Canceled within a second of the cancel", err, took)
	}
}

// TestNewFailsAtOnceOnWhatWaitingCannotMend: a database or a role that
// does not exist, a columns table that does not exist: New fails at once,
// not after retry_timeout.
func TestNewFailsAtOnceOnWhatWaitingCannotMend(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, "CREATE ROLE "+harness.PasswordUser+" LOGIN PASSWORD 'right'")
	base, _ := sinkURL(pg, "retry_timeout=60s")
	for _, tc := range []struct{ name, url, says string }{
		{"no such database", strings.Replace(base, "/postgres?", "/nosuchdb?", 1), "nosuchdb"},
		{"no such role", strings.Replace(base, "postgres://postgres@", "postgres://nosuchrole@", 1), "nosuchrole"},
		{"no such table", base + "&mode=columns", "rows_"},
		{"a wrong password", strings.Replace(base, "postgres://postgres@", "postgres://"+harness.PasswordUser+":wrong@", 1), "$PGPASSWORD"},
		{"no password", strings.Replace(base, "postgres://postgres@", "postgres://"+harness.PasswordUser+"@", 1), "postgres://USER:PASSWORD@"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.url == base {
				t.Fatalf("the URL did not change: %s", tc.url)
			}
			start := time.Now()
			_, err := postgres.New(context.Background(), tc.url)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("New: %v, want an error naming %s", err, tc.says)
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("New took %s: waiting cannot mend %v", took, err)
			}
			if strings.Contains(err.Error(), "wrong") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// TestCancelledWriteCancelsOnServer: a write waiting for a lock (a
// migration's LOCK TABLE) whose ctx ends (the replica's --write-timeout)
// returns within the bound, and its statement stops waiting on the server
// too, not only on the client's side; once the lock is gone nothing of the
// cancelled write is in the tables, and the next write goes through.
func TestCancelledWriteCancelsOnServer(t *testing.T) {
	pg := harness.StartPostgres(t)
	url, n := sinkURL(pg, "application_name=cancelled")
	s := open(t, url)
	conn := db(t, pg)
	lock, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(context.Background())
	if _, err := lock.Exec(context.Background(), fmt.Sprintf(`LOCK TABLE rows_%d IN ACCESS EXCLUSIVE MODE`, n)); err != nil {
		t.Fatal(err)
	}

	const bound = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	start := time.Now()
	err = s.Write(ctx, block("orders", 0, 1, 0, 50, sinktest.Seq(0, 50)...))
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Write behind the lock: %v, want context.DeadlineExceeded", err)
	}
	if took > bound+1500*time.Millisecond {
		t.Errorf("Write behind the lock returned after %s, want within %s of its deadline", took, 1500*time.Millisecond)
	}
	// Still under the lock: the sink's statement must stop waiting for it
	// on the server (pgx's cancel request), not only on the client's side,
	// where it would hold its place in the lock's queue until the lock
	// went.
	other := db(t, pg)
	harness.Await(t, 2*time.Second, "the cancelled write's statement to stop waiting for the lock on the server", func() bool {
		return queryInt(t, other, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'cancelled' AND wait_event_type = 'Lock'`) == 0
	})
	if err := lock.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, other, fmt.Sprintf(`SELECT count(*) FROM rows_%d`, n)); got != 0 {
		t.Errorf("%d rows of the cancelled write in the table", got)
	}
	if _, _, ok := resume(t, s, "orders", 0); ok {
		t.Error("the cancelled write's offsets row is in the offsets table")
	}
	write(t, s, block("orders", 0, 1, 0, 50, sinktest.Seq(0, 50)...))
	if got := queryInt(t, other, fmt.Sprintf(`SELECT count(*) FROM rows_%d`, n)); got != 50 {
		t.Errorf("%d rows after the write that followed, want 50", got)
	}
}

// TestClaimDestination: the first group to claim a topic of a table is
// recorded; another group's claim is refused naming the table, both groups
// and how to forget the first, and records nothing; two spellings of one
// table are one table; with shared the free topics are recorded.
func TestClaimDestination(t *testing.T) {
	pg := harness.StartPostgres(t)
	url, n := sinkURL(pg, "")
	url = strings.Replace(url, "&group=g", "", 1)
	ctx := context.Background()
	blue := open(t, url, postgres.WithGroup("blue"))
	if err := blue.ClaimDestination(ctx, "blue", []string{"orders", "payments"}, false); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if err := blue.ClaimDestination(ctx, "blue", []string{"orders"}, false); err != nil {
		t.Fatalf("the same group again: %v", err)
	}
	// The same table spelt with its schema.
	green := open(t, strings.Replace(url, fmt.Sprintf("table=rows_%d", n), fmt.Sprintf("table=public.rows_%d", n), 1), postgres.WithGroup("green"))
	err := green.ClaimDestination(ctx, "green", []string{"orders", "refunds"}, false)
	if !errors.Is(err, sinks.ErrDestinationClaimed) {
		t.Fatalf("another group's claim: %v, want sinks.ErrDestinationClaimed", err)
	}
	for _, want := range []string{fmt.Sprintf("public.rows_%d", n), "topic orders", `group "blue"`, `group "green"`, "DELETE FROM", postgres.GroupsTable} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	conn := db(t, pg)
	recorded := func(topic string) string {
		t.Helper()
		var g string
		err := conn.QueryRow(ctx, `SELECT coalesce(max(group_name), '') FROM `+postgres.GroupsTable+` WHERE table_name = $1 AND topic = $2`,
			fmt.Sprintf("public.rows_%d", n), topic).Scan(&g)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	if g := recorded("refunds"); g != "" {
		t.Errorf("the refused claim recorded refunds for %q", g)
	}
	if err := green.ClaimDestination(ctx, "green", []string{"orders", "refunds"}, true); err != nil {
		t.Fatalf("a shared claim: %v", err)
	}
	for topic, want := range map[string]string{"orders": "blue", "payments": "blue", "refunds": "green"} {
		if g := recorded(topic); g != want {
			t.Errorf("%s recorded for %q, want %q", topic, g, want)
		}
	}
	// Another table is another destination.
	other, _ := sinkURL(pg, "")
	if err := open(t, other).ClaimDestination(ctx, "green", []string{"orders"}, false); err != nil {
		t.Errorf("claim of another table: %v", err)
	}
}

// TestClaimDestinationRace: groups claiming one topic of one table at once:
// exactly one wins.
func TestClaimDestinationRace(t *testing.T) {
	pg := harness.StartPostgres(t)
	url, _ := sinkURL(pg, "")
	url = strings.Replace(url, "&group=g", "", 1)
	const n = 6
	ss := make([]*postgres.Sink, n)
	for i := range ss {
		ss[i] = open(t, url, postgres.WithGroup(fmt.Sprintf("g%d", i)))
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.ClaimDestination(context.Background(), fmt.Sprintf("g%d", i), []string{"orders"}, false)
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, sinks.ErrDestinationClaimed):
			t.Errorf("g%d: %v", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d claims won, want 1", won)
	}
}
