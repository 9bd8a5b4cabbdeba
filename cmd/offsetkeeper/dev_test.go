package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
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
