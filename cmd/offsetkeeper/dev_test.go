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
	r := devRun(t, 4*time.Minute, 50000, "--chaos", "--faults", "kill", "--duration", "5s", "--messages", "50000", "--rate", "20000")
	// Producing takes 2.5s at --rate 20000 and the first crash comes at
	// --chaos-every (2s), while records are still on their way.
	counts := faultCounts(t, r)
	if counts[faultKill] == 0 {
		t.Fatalf("no crash reported (%v), want at least one with --chaos\nstderr:\n%s", counts, r.stderr)
	}
	t.Logf("%d crashes", counts[faultKill])
}

// faultCounts reads the "faults:  kill=N zombie=N ..." line of a chaos run.
func faultCounts(t *testing.T, r cliResult) map[string]int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^faults:\s+(.*)$`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no faults: line\nstderr:\n%s", r.stderr)
	}
	counts := map[string]int{}
	for _, kv := range strings.Fields(m[1]) {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("faults: line %q: %v", m[0], err)
		}
		counts[k] = n
	}
	return counts
}

// devChaosAll runs every fault for 20s over 3,000 records and checks that
// each kind happened at least once, and that nothing was lost (devRun).
func devChaosAll(t *testing.T, args ...string) cliResult {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: a 20s chaos run")
	}
	r := devRun(t, 3*time.Minute, 3000, append([]string{"--chaos", "--faults", "all", "--duration", "20s",
		"--chaos-every", "1s", "--messages", "3000"}, args...)...)
	counts := faultCounts(t, r)
	for _, f := range allFaults {
		if counts[f] == 0 {
			t.Errorf("fault %s never happened (%v)", f, counts)
		}
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", r.stderr)
	}
	t.Logf("faults: %v", counts)
	// The zombie is paused in the middle of a block (its sink write held),
	// so that its write lands late, after its lease expired.
	m := regexp.MustCompile(`(?m)^zombies: (\d+) late writes.*$`).FindStringSubmatch(r.stderr)
	if m == nil || m[1] == "0" {
		t.Errorf("no late write of a zombie (%q)\nstderr:\n%s", m, r.stderr)
	} else {
		t.Log(m[0])
	}
	return r
}

// Every fault of a real deployment, with the file sink: nothing lost
// (duplicates are allowed: the reset delivers records again).
func TestDevChaosAllFaults(t *testing.T) {
	devChaosAll(t)
}

// Every fault with PostgreSQL: nothing lost and, the sink being
// exactly-once, no duplicates: a zombie's late writes and a live reset's
// re-deliveries must leave one row per record.
func TestDevChaosAllFaultsPostgres(t *testing.T) {
	pg := harness.StartPostgres(t)
	r := devChaosAll(t, "--sink", pg.NewDatabase(t))
	if !strings.HasSuffix(strings.TrimRight(r.stdout, "\n"), " duplicates=0") {
		t.Fatalf("stdout %q, want duplicates=0 with postgres", r.stdout)
	}
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
