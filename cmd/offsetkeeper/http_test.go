package main

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// runArgs is a run command line that passes validation but for what a
// test adds; the etcd endpoint is a closed loopback port, never reached.
func runArgs(extra ...string) []string {
	return append([]string{"run", "--etcd-endpoints", "127.0.0.1:1", "--brokers", "127.0.0.1:1",
		"--group", "g", "--topics", "t", "--sink", "discard:"}, extra...)
}

// execCLI calls execute with args, failing the test if it has not returned
// within d.
func execCLI(t *testing.T, d time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errs syncBuffer
	done := make(chan int, 1)
	go func() { done <- execute(args, &out, &errs) }()
	select {
	case code = <-done:
		return code, out.String(), errs.String()
	case <-time.After(d):
		t.Fatalf("offsetkeeper %s: still running after %s\nstderr:\n%s", strings.Join(args, " "), d, errs.String())
		return 0, "", ""
	}
}

func TestHTTPFlagsValidate(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"no port", runArgs("--http-addr", "localhost"), []string{"--http-addr", `"localhost"`, "host:port", ":9464", "empty to disable"}},
		{"bad port", runArgs("--http-addr", ":http-ish"), []string{"--http-addr", `"http-ish"`, "0 to 65535"}},
		{"port out of range", runArgs("--http-addr", ":70000"), []string{"--http-addr", `"70000"`}},
		{"zero mirror interval", runArgs("--mirror-interval", "0s"), []string{"--mirror-interval 0s", "positive"}},
		{"bad mirror flag", runArgs("--mirror-offsets=maybe"), []string{"--mirror-offsets", "maybe"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := execCLI(t, 10*time.Second, tc.args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d\nstderr: %s", code, exitUsage, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("error %q does not mention %q", strings.TrimSpace(stderr), w)
				}
			}
		})
	}
}

func TestRunHelpNamesOpsFlags(t *testing.T) {
	_, stdout, _ := execCLI(t, 10*time.Second, "run", "--help")
	for _, w := range []string{"--http-addr", ":9464", "empty disables", "--mirror-offsets", "(default true)", "--mirror-interval", "5s"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("run --help does not mention %q", w)
		}
	}
}

func TestRunFailsWhenHTTPAddrIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, stderr := execCLI(t, 20*time.Second, runArgs("--http-addr", ln.Addr().String())...)
	if code != exitError {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitError, stderr)
	}
	// The hint for the usual cause: a second replica on one host.
	for _, w := range []string{"--http-addr", ln.Addr().String(), "address already in use", "a second replica on this host", "an --http-addr of its own"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("error %q does not mention %q", strings.TrimSpace(stderr), w)
		}
	}
}

func TestAdvertisedHTTPAddress(t *testing.T) {
	host, _ := os.Hostname()
	tests := []struct {
		listen string
		host   string // want, "" for the host name
	}{
		{"127.0.0.1:0", "127.0.0.1"},
		{":0", host},
		{"0.0.0.0:0", host},
	}
	for _, tc := range tests {
		o, err := runOpsFlags{httpAddr: tc.listen}.listen(zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		got := o.Advertised()
		o.Stop()
		h, port, err := net.SplitHostPort(got)
		if err != nil || h != tc.host || port == "0" || port == "" {
			t.Errorf("listening on %s advertises %q, want %s:<bound port>", tc.listen, got, tc.host)
		}
	}
	o, err := runOpsFlags{}.listen(zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if got := o.Advertised(); got != "" {
		t.Errorf("disabled http advertises %q, want nothing", got)
	}
	o.Stop()
}

// TestProfilesOnlyOnLoopbackOrAsked: /debug/pprof/ is served when
// --http-addr listens on loopback alone, or when --pprof asks; not on every
// interface (the default, :9464), where a heap profile's records and
// credentials would be reachable by whoever reaches the port.
func TestProfilesOnlyOnLoopbackOrAsked(t *testing.T) {
	for _, tt := range []struct {
		addr  string
		pprof bool
		want  bool
	}{
		{"127.0.0.1:0", false, true},
		{"[::1]:0", false, true},
		{":0", false, false},
		{"0.0.0.0:0", false, false},
		{":0", true, true},
	} {
		o, err := runOpsFlags{httpAddr: tt.addr, pprof: tt.pprof}.listen(zap.NewNop())
		if err != nil {
			if strings.HasPrefix(tt.addr, "[::1]") {
				continue // a host without IPv6
			}
			t.Fatal(err)
		}
		if got := o.Profiles(); got != tt.want {
			t.Errorf("--http-addr %s --pprof=%v: profiles %v, want %v", tt.addr, tt.pprof, got, tt.want)
		}
		o.Stop()
	}
}
