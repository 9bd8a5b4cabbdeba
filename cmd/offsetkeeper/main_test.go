package main

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/goleak"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, harness.GoleakOptions()...)
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of loggers
// and progress lines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cliResult is what one execute call gave.
// skipDevWithoutDev skips a case of the dev command in a build without it
// (-tags nodev), where dev only says it is not there (nodev_test.go).
func skipDevWithoutDev(t *testing.T, args []string) {
	if !hasDev && len(args) > 0 && args[0] == "dev" {
		t.Skip("dev is not in a -tags nodev build")
	}
}

// checkUsageError checks what bad input prints: nothing on stdout, one
// error on stderr that mentions every want and none of not.
func checkUsageError(t *testing.T, r cliResult, want, not []string) {
	t.Helper()
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	if !strings.HasPrefix(r.stderr, "Error: ") || strings.Count(r.stderr, "Error: ") != 1 {
		t.Errorf("stderr %q, want one error starting with \"Error: \"", r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("error %q does not mention %q", strings.TrimSpace(r.stderr), w)
		}
	}
	for _, w := range not {
		if strings.Contains(r.stderr, w) {
			t.Errorf("error %q mentions %q", strings.TrimSpace(r.stderr), w)
		}
	}
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI calls execute with args, failing the test if it has not returned
// within d.
func runCLI(t *testing.T, d time.Duration, args ...string) cliResult {
	t.Helper()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- execute(args, &stdout, &stderr) }()
	select {
	case code := <-done:
		return cliResult{code, stdout.String(), stderr.String()}
	case <-time.After(d):
		t.Fatalf("offsetkeeper %s: still running after %s\nstderr:\n%s", strings.Join(args, " "), d, stderr.String())
		return cliResult{}
	}
}

func TestHelp(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"run", "dev", "OFFSETKEEPER_", "--etcd-endpoints", "Exit status: 0 success, 1 failure, 2 bad usage", "offsetkeeper dev"}},
		{[]string{"run", "--help"}, []string{
			"--etcd-endpoints", "--brokers", "--group", "--topics", "--sink", "--replica-id", "--lease-ttl",
			"--max-block-rows", "--flush-interval", "--max-empty-polls", "--commit-mode", "--start-from",
			"--fetch-max-wait", "--shutdown-timeout", "--log-level", "--log-format",
			"file:///DIR", "after-write", "every-batch", "SIGTERM",
			"offsetkeeper run --etcd-endpoints", "OFFSETKEEPER_GROUP=orders",
		}},
		{[]string{"run", "-h"}, []string{"--group", "--sink"}},
		{[]string{"help", "run"}, []string{"--group", "--sink"}},
		{[]string{"dev", "--help"}, []string{
			"--replicas", "--partitions", "--messages", "--rate", "--chaos", "--chaos-every", "--sink", "--hold",
			"--timeout", "--seed", "produced=N delivered=N lost=L duplicates=D",
			"offsetkeeper dev --chaos --messages 50000",
			"--faults", "--duration", "kill", "zombie", "leader", "etcd-cut", "kafka-cut", "reset", "release", "drain",
		}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			skipDevWithoutDev(t, tc.args)
			r := runCLI(t, 10*time.Second, tc.args...)
			if r.code != exitOK {
				t.Fatalf("exit %d, want 0; stderr: %s", r.code, r.stderr)
			}
			if r.stderr != "" {
				t.Errorf("stderr %q, want help on stdout only", r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("help does not mention %q:\n%s", w, r.stdout)
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	r := runCLI(t, 10*time.Second, "--version")
	if r.code != exitOK || !strings.Contains(r.stdout, version) {
		t.Fatalf("--version: exit %d, stdout %q", r.code, r.stdout)
	}
}

// validRun is a run command line that passes validation but for what a test
// adds; the etcd endpoint is a closed loopback port, never reached.
func validRun(extra ...string) []string {
	return append([]string{"run", "--etcd-endpoints", "127.0.0.1:1", "--brokers", "127.0.0.1:1",
		"--group", "g", "--topics", "t", "--sink", "discard:"}, extra...)
}

func TestBadInputExits2(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // in the error message: the value and what is accepted
	}{
		{"run without --group", []string{"run", "--topics", "t", "--sink", "discard:"}, []string{"--group is required", "--group orders"}},
		{"run bad --group", validRun("--group", "a/b"), []string{`"a/b"`, "A-Z a-z 0-9 . _ -"}},
		{"run without --sink", []string{"run", "--group", "g", "--topics", "t"}, []string{"--sink is required", "file:///DIR", "stdout:", "discard:"}},
		{"run bad --sink scheme", validRun("--sink", "ftp://x"), []string{`"ftp://x"`, `"ftp"`, "file:///DIR", "stdout:", "discard:"}},
		{"run --sink without scheme", validRun("--sink", "/var/data"), []string{`"/var/data"`, "file:///DIR"}},
		{"run unknown --commit-mode", validRun("--commit-mode", "sometimes"), []string{"--commit-mode", `"sometimes"`, "after-write", "every-batch"}},
		{"run unknown --start-from", validRun("--start-from", "middle"), []string{"--start-from", `"middle"`, "earliest", "latest"}},
		{"run --lease-ttl 1s", validRun("--lease-ttl", "1s"), []string{"1s", "at least 2s"}},
		{"run --lease-ttl 2500ms", validRun("--lease-ttl", "2500ms"), []string{"2.5s", "whole seconds"}},
		{"run --max-block-rows 0", validRun("--max-block-rows", "0"), []string{"--max-block-rows", "positive", ", 0,"}},
		{"run --max-empty-polls 0", validRun("--max-empty-polls", "0"), []string{"--max-empty-polls", "positive"}},
		{"run --flush-interval 0", validRun("--flush-interval", "0s"), []string{"--flush-interval", "positive", ", 0s,"}},
		{"run --max-block-rows abc", validRun("--max-block-rows", "abc"), []string{"--max-block-rows", `"abc"`}},
		{"run bad --log-format", validRun("--log-format", "xml"), []string{"--log-format", `"xml"`, "json or console"}},
		{"run bad --log-level", validRun("--log-level", "loud"), []string{"--log-level", `"loud"`, "debug, info, warn or error"}},
		{"run bad topic", validRun("--topics", "a b"), []string{`"a b"`, "A-Z a-z 0-9 . _ -"}},
		{"run bad broker", validRun("--brokers", "kafka"), []string{`"kafka"`}},
		{"dev --replicas 0", []string{"dev", "--replicas", "0"}, []string{"--replicas 0", "1 to 100"}},
		{"dev --partitions 0", []string{"dev", "--partitions", "0"}, []string{"--partitions 0", "1 to 10000"}},
		{"dev --chaos-every 10ms", []string{"dev", "--chaos-every", "10ms"}, []string{"--chaos-every 10ms", "at least 100ms"}},
		{"dev bad --sink", []string{"dev", "--sink", "ftp://x"}, []string{`"ftp://x"`, "file:///DIR"}},
		{"dev bad --group", []string{"dev", "--group", "a/b"}, []string{`"a/b"`}},
		{"unknown flag of run", validRun("--max-rows", "5"), []string{"unknown flag", "--max-rows"}},
		{"unknown flag of dev", []string{"dev", "--bogus"}, []string{"unknown flag", "--bogus"}},
		{"unknown flag of root", []string{"--bogus"}, []string{"unknown flag", "--bogus"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			skipDevWithoutDev(t, tc.args)
			r := runCLI(t, 10*time.Second, tc.args...)
			if r.code != exitUsage {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, exitUsage, r.stdout, r.stderr)
			}
			checkUsageError(t, r, tc.want, nil)
		})
	}
}

func TestEnvironmentSetsFlags(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want []string // in the error message
		not  string   // not in it
	}{
		{"commit mode from the environment",
			map[string]string{"OFFSETKEEPER_COMMIT_MODE": "bogus"}, validRun(), []string{"--commit-mode", `"bogus"`}, ""},
		{"group from the environment",
			map[string]string{"OFFSETKEEPER_GROUP": "a/b"}, []string{"run", "--topics", "t", "--sink", "discard:"}, []string{`"a/b"`}, ""},
		{"unparsable value names the variable",
			map[string]string{"OFFSETKEEPER_MAX_BLOCK_ROWS": "abc"}, validRun(), []string{"OFFSETKEEPER_MAX_BLOCK_ROWS", `"abc"`}, ""},
		{"sink from the environment",
			map[string]string{"OFFSETKEEPER_SINK": "ftp://x"}, []string{"run", "--group", "g", "--topics", "t"}, []string{`"ftp://x"`}, ""},
		{"dev replicas from the environment",
			map[string]string{"OFFSETKEEPER_REPLICAS": "0"}, []string{"dev"}, []string{"--replicas 0"}, ""},
		// A flag on the command line wins: the environment's bad value is
		// ignored and the next check fails instead.
		{"flag wins over the environment",
			map[string]string{"OFFSETKEEPER_COMMIT_MODE": "bogus"}, validRun("--commit-mode", "every-batch", "--start-from", "middle"), []string{`"middle"`}, "bogus"},
		{"dev flag wins over the environment",
			map[string]string{"OFFSETKEEPER_REPLICAS": "0"}, []string{"dev", "--replicas", "2", "--partitions", "0"}, []string{"--partitions 0"}, "--replicas"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			skipDevWithoutDev(t, tc.args)
			r := usageRun(t, tc.env, tc.args, tc.want...)
			if tc.not != "" && strings.Contains(r.stderr, tc.not) {
				t.Errorf("error %q mentions %q: the environment won over the flag", strings.TrimSpace(r.stderr), tc.not)
			}
		})
	}
}

// usageRun runs the CLI with env set and args, and checks that it exits 2
// with an error mentioning every want.
func usageRun(t *testing.T, env map[string]string, args []string, want ...string) cliResult {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	r := runCLI(t, 10*time.Second, args...)
	if r.code != exitUsage {
		t.Fatalf("exit %d, want %d\nstderr: %s", r.code, exitUsage, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("error %q does not mention %q", strings.TrimSpace(r.stderr), w)
		}
	}
	return r
}

func TestBindEnv(t *testing.T) {
	newCmd := func() (*cobra.Command, *struct {
		name  string
		rows  int
		topic []string
		wait  time.Duration
	}) {
		v := &struct {
			name  string
			rows  int
			topic []string
			wait  time.Duration
		}{}
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		fs := cmd.Flags()
		fs.StringVar(&v.name, "replica-id", "default", "")
		fs.IntVar(&v.rows, "max-block-rows", 7, "")
		fs.StringSliceVar(&v.topic, "topics", []string{"x"}, "")
		fs.DurationVar(&v.wait, "fetch-max-wait", time.Second, "")
		return cmd, v
	}
	t.Setenv("OFFSETKEEPER_REPLICA_ID", "from-env")
	t.Setenv("OFFSETKEEPER_MAX_BLOCK_ROWS", "42")
	t.Setenv("OFFSETKEEPER_TOPICS", "a,b")
	t.Setenv("OFFSETKEEPER_FETCH_MAX_WAIT", "250ms")
	t.Setenv("OFFSETKEEPER_HELP", "true") // never bound

	cmd, v := newCmd()
	if err := cmd.ParseFlags([]string{"--max-block-rows", "9"}); err != nil {
		t.Fatal(err)
	}
	if err := bindEnv(cmd); err != nil {
		t.Fatalf("bindEnv: %v", err)
	}
	if v.name != "from-env" || v.rows != 9 || strings.Join(v.topic, ",") != "a,b" || v.wait != 250*time.Millisecond {
		t.Fatalf("after bindEnv: replica-id %q, max-block-rows %d, topics %v, fetch-max-wait %s; want from-env, 9 (the flag), [a b], 250ms",
			v.name, v.rows, v.topic, v.wait)
	}
	if h := cmd.Flags().Lookup("help"); h != nil && h.Changed {
		t.Errorf("--help set from the environment")
	}

	t.Setenv("OFFSETKEEPER_FETCH_MAX_WAIT", "soon")
	cmd, _ = newCmd()
	if err := cmd.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	err := bindEnv(cmd)
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), `OFFSETKEEPER_FETCH_MAX_WAIT="soon"`) {
		t.Fatalf("bindEnv with a bad value: %v, want a usage error naming OFFSETKEEPER_FETCH_MAX_WAIT=\"soon\"", err)
	}

	if got := envName("etcd-endpoints"); got != "OFFSETKEEPER_ETCD_ENDPOINTS" {
		t.Errorf("envName(etcd-endpoints) = %q", got)
	}
}

// TestRootHelpNamesEverySink: the front page of the CLI names every kind
// of sink --sink takes, so that it does not drift behind the sinks.
func TestRootHelpNamesEverySink(t *testing.T) {
	code, stdout, stderr := execCLI(t, 10*time.Second, "--help")
	if code != 0 {
		t.Fatalf("--help exited %d: %s", code, stderr)
	}
	for _, s := range []string{"files", "stdout", "PostgreSQL", "ClickHouse"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("offsetkeeper --help does not name the %s sink:\n%s", s, stdout)
		}
	}
}
