//go:build !nodev

package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// reportLine is dev's last line of stdout when all of produced records
// were delivered and none lost.
func reportLine(produced int) *regexp.Regexp {
	n := strconv.Itoa(produced)
	return regexp.MustCompile(`^produced=` + n + ` delivered=` + n + ` lost=0 duplicates=\d+$`)
}

// devRun runs `offsetkeeper dev` with args and checks that it exits 0 with
// the report of produced records, none lost, as the last line of stdout.
func devRun(t *testing.T, bound time.Duration, produced int, args ...string) cliResult {
	t.Helper()
	// dev makes its etcd folder and its default file sink with
	// os.MkdirTemp: keep them in the test's own folder.
	t.Setenv("TMPDIR", t.TempDir())
	start := time.Now()
	r := runCLI(t, bound, append([]string{"dev"}, args...)...)
	t.Logf("offsetkeeper dev %s: exit %d after %s", strings.Join(args, " "), r.code, time.Since(start).Round(time.Millisecond))
	if r.code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	last := lines[len(lines)-1]
	if !reportLine(produced).MatchString(last) {
		t.Fatalf("last line of stdout %q, want produced=%d delivered=%d lost=0 duplicates=N\nstderr:\n%s", last, produced, produced, r.stderr)
	}
	t.Logf("%s", last)
	return r
}

func TestDevDeliversEverything(t *testing.T) {
	devRun(t, 2*time.Minute, 2000, "--messages", "2000", "--replicas", "1")
}

// The requirement: a chaos run of 50,000 records loses none.
func TestDevChaosLosesNothing(t *testing.T) {
	r := devRun(t, 4*time.Minute, 50000, "--chaos", "--messages", "50000", "--rate", "20000")
	// Producing takes 2.5s at --rate 20000 and the first crash comes at
	// --chaos-every (2s), while records are still on their way.
	m := regexp.MustCompile(`(?m)^elapsed=\S+ crashes=(\d+) `).FindStringSubmatch(r.stderr)
	if m == nil || m[1] == "0" {
		t.Fatalf("no crash reported (%q), want at least one with --chaos\nstderr:\n%s", m, r.stderr)
	}
	t.Logf("%s crashes", m[1])
}

// The PostgreSQL sink's issue: `dev --sink postgres://...` works, twice in a
// row on the same database (each run keys its offsets by a group of its
// own, so the first run's epochs cannot fence the second).
func TestDevWithPostgresSink(t *testing.T) {
	pg := harness.StartPostgres(t)
	url := pg.NewDatabase(t)
	for range 2 {
		devRun(t, 2*time.Minute, 2000, "--messages", "2000", "--replicas", "2", "--sink", url)
	}
	rows := 0
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM offsetkeeper_records`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	// Both runs wrote offsets 0..249 of each of 8 partitions of one
	// topic; the table's key (topic, partition, offset) keeps one copy.
	if rows != 2000 {
		t.Fatalf("%d rows in the table, want 2000", rows)
	}
}
