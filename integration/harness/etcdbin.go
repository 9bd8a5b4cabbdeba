package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdBinary is an etcd server run as a process from a binary of another
// version than the embedded one (Debian's etcd-server is 3.4): one member
// on loopback ports, its data in a temporary directory, stopped in
// t.Cleanup.
type EtcdBinary struct {
	Version  string
	endpoint string
	proc     *Process
}

// etcdVersionRE finds the version in `etcd --version`.
var etcdVersionRE = regexp.MustCompile(`etcd Version: (\S+)`)

// StartEtcdBinary starts the etcd binary at path and waits until it answers.
func StartEtcdBinary(t testing.TB, path string) *EtcdBinary {
	t.Helper()
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", path, err, out)
	}
	m := etcdVersionRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("%s --version says no version:\n%s", path, out)
	}
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	e := &EtcdBinary{Version: string(m[1]), endpoint: client}
	e.proc = StartProcess(t, "etcd-"+e.Version, path,
		"--name", "m0", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "m0="+peer, "--initial-cluster-state", "new",
		"--heartbeat-interval", "20", "--election-timeout", "300", "--log-level", "warn")
	// Debian's etcd reads ETCD_* variables of /etc/default/etcd only
	// through its unit; the process gets none.
	cli := e.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		if _, err := cli.Status(ctx, client); err == nil {
			return e
		}
		if ctx.Err() != nil || e.proc.Exited() {
			t.Fatalf("etcd %s at %s did not answer:\n%s", e.Version, client, e.proc.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Endpoint is the member's client URL.
func (e *EtcdBinary) Endpoint() string { return e.endpoint }

// Client returns a client of the member, closed in t.Cleanup.
func (e *EtcdBinary) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.endpoint}, DialTimeout: etcdDialTimeout, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// EtcdBinaryPath is the etcd binary of another version the tests run
// against: $OFFSETKEEPER_ETCD_BIN, else Debian's /usr/bin/etcd; "" when
// there is none.
func EtcdBinaryPath() string {
	if p := os.Getenv("OFFSETKEEPER_ETCD_BIN"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd"
	}
	return ""
}
