//go:build !nodev

package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/offsetkeeper/offsetkeeper/dev"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// reportLine is dev's last line of stdout when all of produced records
// were delivered, none lost, none set aside, and each record compared in
// the sink is Kafka's (or, with compared false, none could be compared).
func reportLine(produced int, compared bool) *regexp.Regexp {
	n := strconv.Itoa(produced)
	mismatched := "n/a"
	if compared {
		mismatched = "0"
	}
	return regexp.MustCompile(`^produced=` + n + ` delivered=` + n + ` lost=0 duplicates=\d+ mismatched=` + mismatched + ` dead_letters=0$`)
}

// devRun runs `offsetkeeper dev` with args and checks that it exits 0 with
// the report of produced records, none lost, each compared with Kafka's,
// as the last line of stdout, and that it left nothing in the temporary
// folder.
func devRun(t *testing.T, bound time.Duration, produced int, args ...string) cliResult {
	t.Helper()
	tmp := devTempDir(t)
	r := devExec(t, bound, args...)
	if r.code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	last := lastLine(r.stdout)
	if !reportLine(produced, true).MatchString(last) {
		t.Fatalf("last line of stdout %q, want produced=%d delivered=%d lost=0 duplicates=N mismatched=0 dead_letters=0\nstderr:\n%s",
			last, produced, produced, r.stderr)
	}
	want := "records compared with Kafka's (key, value, timestamp)"
	if v := verdictLine(t, r); !strings.HasPrefix(v, "audit of ") || !strings.Contains(v, strconv.Itoa(produced)+" "+want) {
		t.Fatalf("verdict %q, want an audit with %d %s", v, produced, want)
	}
	t.Logf("%s", last)
	checkEmpty(t, tmp)
	return r
}

// devTempDir points dev's temporary folder (os.MkdirTemp) at a folder of
// the test's own, and returns it.
func devTempDir(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	return tmp
}

// devExec runs `offsetkeeper dev` with args.
func devExec(t *testing.T, bound time.Duration, args ...string) cliResult {
	t.Helper()
	start := time.Now()
	r := runCLI(t, bound, append([]string{"dev"}, args...)...)
	t.Logf("offsetkeeper dev %s: exit %d after %s", strings.Join(args, " "), r.code, time.Since(start).Round(time.Millisecond))
	return r
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// verdictLine is what the "verdict:" line of stderr says.
func verdictLine(t *testing.T, r cliResult) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^verdict: (.*)$`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no verdict: line\nstderr:\n%s", r.stderr)
	}
	return m[1]
}

// checkEmpty fails the test if dir holds anything: dev's temporary folder
// must be gone.
func checkEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("%s left in the temporary folder", filepath.Join(dir, e.Name()))
	}
}

func TestDevDeliversEverything(t *testing.T) {
	r := devRun(t, 2*time.Minute, 2000, "--messages", "2000", "--replicas", "1")
	// Without --hold, the cluster is gone seconds later: the CLI's
	// commands need --hold, and the try: line says so.
	if !strings.Contains(r.stderr, "try:     this cluster ends with the run; add --hold to keep it up") ||
		!strings.Contains(r.stderr, "offsetkeeper offsets describe --etcd-endpoints ") {
		t.Errorf("the try: line does not suggest --hold:\n%s", r.stderr)
	}
}

// The requirement: a chaos run of 50,000 records loses none.
func TestDevChaosLosesNothing(t *testing.T) {
	r := devRun(t, 4*time.Minute, 50000, "--chaos", "--faults", "kill", "--duration", "5s", "--messages", "50000", "--rate", "20000")
	// Producing takes 2.5s at --rate 20000 and the first crash comes at
	// --chaos-every (1.5s), while records are still on their way.
	counts := faultCounts(t, r)
	if counts[dev.FaultKill] == 0 {
		t.Fatalf("no crash reported (%v), want at least one with --chaos\nstderr:\n%s", counts, r.stderr)
	}
	t.Logf("%d crashes", counts[dev.FaultKill])
}

// faultCounts reads the "faults:  kill=N zombie=N ... skipped=N" line of a
// chaos run.
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

// warnLines counts the log lines of stderr at WARN and at ERROR (the
// console format: time, tab, level, tab).
func warnLines(stderr string) (warn, errs int) {
	for _, l := range strings.Split(stderr, "\n") {
		switch {
		case strings.Contains(l, "\tWARN\t"):
			warn++
		case strings.Contains(l, "\tERROR\t"):
			errs++
		}
	}
	return warn, errs
}

// TestDevChaosDefaultDealsEveryFault: the default chaos run (15s, a fault
// every 1.5s, every kind, three replicas) deals every kind at least once
// and skips no slot; what the replicas log because of the faults is
// expected, so a passing run prints no WARN or ERROR line, and the logs:
// line counts what it logged at INFO instead.
func TestDevChaosDefaultDealsEveryFault(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 15s chaos run")
	}
	r := devRun(t, 3*time.Minute, 3000, "--chaos", "--messages", "3000")
	if warn, errs := warnLines(r.stderr); warn+errs > 3 && strings.Contains(r.stderr, "no keepalive acknowledged") {
		// The machine, not the run: a replica under no fault missed its
		// etcd keepalives (two Apache Kafka clusters of other packages'
		// tests on two cores), a real session loss that the lines after it
		// report. Once more; the second run is held to every check below.
		t.Logf("a replica's etcd session starved on this loaded machine (%d WARN, %d ERROR lines); running again once", warn, errs)
		r = devRun(t, 3*time.Minute, 3000, "--chaos", "--messages", "3000")
	}
	counts := faultCounts(t, r)
	for _, f := range dev.Faults() {
		if counts[f] == 0 {
			t.Errorf("fault %s never dealt (%v)", f, counts)
		}
	}
	if counts["skipped"] != 0 || strings.Contains(r.stderr, " skipped: ") {
		t.Errorf("%d slots skipped (%v)", counts["skipped"], counts)
	}
	warn, errs := warnLines(r.stderr)
	m := regexp.MustCompile(`(?m)^logs:\s+(\d+) warnings and errors of replicas under a fault dev injected, expected.*; (\d+) others.*$`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no logs: line\nstderr:\n%s", r.stderr)
	}
	expected, others := atoi(t, m[1]), atoi(t, m[2])
	// The faults' own consequences are there, and logged at INFO.
	if expected == 0 {
		t.Errorf("logs: no warning marked expected in a run of every fault")
	}
	// What is printed at WARN or ERROR, the logs: line's others: none on a
	// quiet machine (0 in every run at a load under 4). A machine
	// loaded past its cores can time out an etcd write of a replica under
	// no fault, which is a real warning, not noise: a few are tolerated,
	// never the 37 to 81 lines a run printed before.
	if others > 3 || warn+errs > 3 {
		t.Errorf("%d WARN and %d ERROR lines in a passing run", warn, errs)
	}
	for _, w := range []string{"replays=", "(record writes that repeated an earlier one", "zombies: ", "(writes a paused replica resumed after losing its claim)"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q", w)
		}
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", r.stderr)
	}
	t.Logf("faults: %v\n%s", counts, m[0])
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
	for _, f := range dev.Faults() {
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
	if !strings.Contains(lastLine(r.stdout), " duplicates=0 ") {
		t.Fatalf("stdout %q, want duplicates=0 with postgres", r.stdout)
	}
}

// docs/postgresql.md's `dev --sink 'postgres://…?table=dev_rows'`, twice on the
// same table (issue 22, row 5): the second run once wrote nothing (its
// rows' keys were the first run's) and reported every record delivered.
// Now each run has a topic of its own, and its audit compares every row
// with Kafka's record; the table holds both runs' records.
func TestDevWithPostgresSink(t *testing.T) {
	pg := harness.StartPostgres(t)
	db := pg.NewDatabase(t)
	url := db + "&table=dev_rows"
	topics := map[string]bool{}
	for range 2 {
		r := devRun(t, 2*time.Minute, 2000, "--messages", "2000", "--replicas", "2", "--sink", url)
		m := regexp.MustCompile(`(?m)^topic:\s+(events-\d{8}-\d{6}-\d{3}) \(8 partitions; this run's own`).FindStringSubmatch(r.stderr)
		if m == nil {
			t.Fatalf("no topic of the run's own printed\nstderr:\n%s", r.stderr)
		}
		topics[m[1]] = true
	}
	if len(topics) != 2 {
		t.Fatalf("topics %v: want one per run", topics)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for topic := range topics {
		var rows int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM dev_rows WHERE topic = $1`, topic).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != 2000 {
			t.Errorf("%d rows of topic %s in the table, want 2000", rows, topic)
		}
	}
}

// Issue 22, row 6: columns mode on a raw-shaped table sends every record
// to the dead-letter table (the table has none of the value's fields and
// NOT NULL columns the records do not fill). dev once printed
// delivered=100 lost=0 and exited 0, with no verdict line. Now the verdict
// says why the table cannot be audited and what was counted instead, and
// the dead letters fail the run, with the table and the first reason.
func TestDevDeadLettersFailTheRun(t *testing.T) {
	pg := harness.StartPostgres(t)
	db := pg.NewDatabase(t)
	devRun(t, 2*time.Minute, 100, "--messages", "100", "--replicas", "1", "--sink", db+"&table=dev_rows")

	tmp := devTempDir(t)
	r := devExec(t, 2*time.Minute, "--messages", "100", "--replicas", "1", "--sink", db+"&table=dev_rows&mode=columns")
	if r.code != exitError {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if last := lastLine(r.stdout); !regexp.MustCompile(`^produced=100 delivered=100 lost=0 duplicates=0 mismatched=n/a dead_letters=100$`).MatchString(last) {
		t.Errorf("last line %q, want 100 dead letters and mismatched=n/a", last)
	}
	v := verdictLine(t, r)
	for _, w := range []string{"not audited (", "no kafka_offset column", "counted from the writes dev made to the sink, not read back"} {
		if !strings.Contains(v, w) {
			t.Errorf("verdict %q lacks %q", v, w)
		}
	}
	for _, w := range []string{"FAILED:  100 records went to the dead-letter table", "offsetkeeper_dead_letters", "the first reason: "} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
	if m := regexp.MustCompile(`(?m)^FAILED: .*$`).FindString(r.stderr); m != "" {
		t.Log(m)
	}
	t.Logf("verdict: %s", v)
	checkEmpty(t, tmp)
}

// Without an audit (stdout: keeps nothing), the verdict says so and why,
// and the report says no record was compared.
func TestDevVerdictSaysWhenItCannotAudit(t *testing.T) {
	tmp := devTempDir(t)
	r := devExec(t, time.Minute, "--messages", "20", "--replicas", "1", "--sink", "discard:")
	if r.code != exitOK {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", r.code, r.stderr)
	}
	if !reportLine(20, false).MatchString(lastLine(r.stdout)) {
		t.Errorf("last line %q, want mismatched=n/a", lastLine(r.stdout))
	}
	if v := verdictLine(t, r); v != "not audited (discard: keeps nothing to read back): counted from the writes dev made to the sink, not read back from it" {
		t.Errorf("verdict %q", v)
	}
	checkEmpty(t, tmp)
}

func TestDevRefusesNoMessages(t *testing.T) {
	r := runCLI(t, 10*time.Second, "dev", "--messages", "0")
	if r.code != exitUsage {
		t.Fatalf("exit %d, want 2\nstderr:\n%s", r.code, r.stderr)
	}
	checkUsageError(t, r, []string{"--messages 0", "want at least 1"}, nil)
}

// TestDevRefusesBadFaults: --faults names the value and what is accepted,
// and wants --chaos.
func TestDevRefusesBadFaults(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--chaos", "--faults", "kill,nope"}, []string{`--faults "kill,nope"`, `unknown fault "nope"`, "want all or a comma list of kill, zombie"}},
		{[]string{"--faults", "kill"}, []string{`--faults "kill"`, "only with --chaos"}},
		{[]string{"--chaos", "--chaos-every", "10ms"}, []string{"--chaos-every 10ms", "want at least 100ms"}},
	} {
		r := runCLI(t, 10*time.Second, append([]string{"dev"}, tc.args...)...)
		if r.code != exitUsage {
			t.Fatalf("dev %v: exit %d, want 2\nstderr:\n%s", tc.args, r.code, r.stderr)
		}
		checkUsageError(t, r, tc.want, nil)
	}
}

// TestDevValueFormat: --value-format protobuf produces Confluent's wire
// format, the schema in dev's embedded registry (the registry: line), and
// the run passes with nothing lost; the verdict says the file sink's
// decoded records were checked by offset, not compared with Kafka's bytes.
func TestDevValueFormat(t *testing.T) {
	tmp := devTempDir(t)
	r := devExec(t, 2*time.Minute, "--value-format", "protobuf", "--messages", "200", "--replicas", "1", "--partitions", "2")
	if r.code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if last := lastLine(r.stdout); !reportLine(200, false).MatchString(last) {
		t.Errorf("last line %q, want 200 delivered, none lost, mismatched=n/a", last)
	}
	if v := verdictLine(t, r); !strings.HasPrefix(v, "audit of file://") || !strings.Contains(v, "records not compared, only their offsets: records decoded through a Schema Registry") {
		t.Errorf("verdict %q, want the audit saying the decoded records were not compared", v)
	}
	if !regexp.MustCompile(`(?m)^registry: http://127\.0\.0\.1:\d+ \(values in protobuf, schema id 1, subject events-value\)$`).MatchString(r.stderr) {
		t.Errorf("no registry: line\nstderr:\n%s", r.stderr)
	}
	checkEmpty(t, tmp)
}

// TestDevRefusesBadValueFormat: --value-format, and its variable, name the
// value and the formats dev can produce.
func TestDevRefusesBadValueFormat(t *testing.T) {
	r := runCLI(t, 10*time.Second, "dev", "--value-format", "json-schema")
	if r.code != exitUsage {
		t.Fatalf("exit %d, want 2\nstderr:\n%s", r.code, r.stderr)
	}
	checkUsageError(t, r, []string{`--value-format "json-schema"`, "want json, avro or protobuf"}, nil)

	t.Setenv("OFFSETKEEPER_VALUE_FORMAT", "xml")
	r = runCLI(t, 10*time.Second, "dev")
	if r.code != exitUsage {
		t.Fatalf("exit %d, want 2\nstderr:\n%s", r.code, r.stderr)
	}
	checkUsageError(t, r, []string{`OFFSETKEEPER_VALUE_FORMAT="xml" (--value-format)`, "want json, avro or protobuf"}, nil)
}

// TestDevHoldRemovesItsFolderOnSIGINT: dev --hold holds until SIGINT, then
// removes its temporary folder (etcd's data and the default file sink);
// while holding, the try: line gives the environment and the commands.
func TestDevHoldRemovesItsFolderOnSIGINT(t *testing.T) {
	tmp := devTempDir(t)
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- execute([]string{"dev", "--hold", "--messages", "100", "--replicas", "1"}, &stdout, &stderr)
	}()
	deadline := time.After(2 * time.Minute)
	for !strings.Contains(stderr.String(), "holding: ") {
		select {
		case code := <-done:
			t.Fatalf("exit %d before holding\nstderr:\n%s", code, stderr.String())
		case <-deadline:
			t.Fatalf("not holding after 2 minutes\nstderr:\n%s", stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if entries, _ := os.ReadDir(tmp); len(entries) == 0 {
		t.Fatal("no temporary folder while holding")
	}
	for _, w := range []string{"try:     export OFFSETKEEPER_ETCD_ENDPOINTS=", "         " + cliName() + " offsets describe\n"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr lacks %q", w)
		}
	}
	// dev's signal handler is registered while it runs (runE), so the
	// test process is not the one interrupted.
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d after SIGINT, want 0\nstderr:\n%s", code, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("still running a minute after SIGINT\nstderr:\n%s", stderr.String())
	}
	checkEmpty(t, tmp)
}

// TestDevKeep: --keep keeps the default file sink, and says where.
func TestDevKeep(t *testing.T) {
	tmp := devTempDir(t)
	r := devExec(t, time.Minute, "--messages", "20", "--replicas", "1", "--keep")
	if r.code != exitOK {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", r.code, r.stderr)
	}
	m := regexp.MustCompile(`(?m)^kept:\s+file://(\S+) \(--keep\)$`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no kept: line\nstderr:\n%s", r.stderr)
	}
	if !strings.HasPrefix(m[1], tmp) {
		t.Fatalf("kept %s, not in the temporary folder %s", m[1], tmp)
	}
	if _, err := os.Stat(filepath.Join(m[1], ".")); err != nil {
		t.Fatalf("the kept sink: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(m[1]), "etcd")); err == nil {
		t.Error("etcd's data kept too; only the sink is worth keeping")
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// TestDevInterruptedExits130: Ctrl-C (SIGINT) during a run of dev, before
// its report, exits 130 with a line saying nothing was checked: a script
// tells it from a pass.
func TestDevInterruptedExits130(t *testing.T) {
	devTempDir(t)
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		// Slow enough to be interrupted: a second's records at 10 a second.
		done <- execute([]string{"dev", "--messages", "1000", "--rate", "10", "--replicas", "1"}, &stdout, &stderr)
	}()
	deadline := time.After(2 * time.Minute)
	for !strings.Contains(stderr.String(), "try:") {
		select {
		case code := <-done:
			t.Fatalf("exit %d before it ran\nstderr:\n%s", code, stderr.String())
		case <-deadline:
			t.Fatalf("not running after 2 minutes\nstderr:\n%s", stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != exitInterrupted || !strings.Contains(stderr.String(), "interrupted: dev ended by SIGINT before its report") {
			t.Fatalf("exit %d after SIGINT, want %d and the line\nstderr:\n%s", code, exitInterrupted, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("still running a minute after SIGINT\nstderr:\n%s", stderr.String())
	}
}

// The try: line calls the CLI as the user can: offsetkeeper when it is on
// PATH; else as go run built it (it suggested a binary go run had not
// installed).
func TestTryLineCallsTheCLIAsItCan(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if got := cliName(); got == "offsetkeeper" {
		t.Errorf("no offsetkeeper on PATH, yet the try: line calls %q", got)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "offsetkeeper"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if got := cliName(); got != "offsetkeeper" {
		t.Errorf("offsetkeeper on PATH, yet the try: line calls %q", got)
	}
}
