// Package harness provides shared fixtures for the integration tests of
// every package, such as an in-process etcd cluster (Etcd) and a
// fault-injecting TCP proxy (Proxy). Everything listens on 127.0.0.1 only and
// is torn down in t.Cleanup.
package harness

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/offsetkeeper/offsetkeeper/internal/localetcd"
)

// Timing of the embedded cluster. Elections are short so that a re-election
// after StopMember of the leader takes well under a second, yet not so short
// that a loaded -race test run makes leadership flap.
const (
	etcdTickMs       = 20
	etcdElectionMs   = 300
	etcdReadyTimeout = 20 * time.Second
	etcdDialTimeout  = 3 * time.Second
)

// Etcd is a running in-process etcd cluster of one or three members, each on
// its own loopback ports and data directory. Members can be stopped and
// restarted to test failover. It is stopped in t.Cleanup.
//
// Clients reach member i through a private Proxy at Endpoint(i), its
// advertised client URL, and peers reach it through another one at its
// advertised peer URL. That lets StopMember behave like a crash: all its
// connections are cut at once (etcd itself would drain watch and keep-alive
// streams for several seconds and leave peer connections lingering), and
// while it is down new connections are reset, as if refused.
type Etcd struct {
	t       testing.TB
	logOut  *tbWriter
	cluster *localetcd.Cluster // nil until started
	fronts  []*Proxy           // clients' way in to member i, advertised as its client URL
	peers   []*Proxy           // peers' way in to member i, advertised as its peer URL

	tls *EtcdTLS // nil: plain HTTP; see StartEtcdTLS
}

// StartEtcd starts a cluster of members (1 or 3) etcd members and waits until
// every member is ready; it fails the test if that takes more than 20 s.
// Methods of Etcd that can fail report to t, so call them from t's goroutine.
func StartEtcd(t testing.TB, members int) *Etcd {
	t.Helper()
	return startEtcd(t, members, nil)
}

func startEtcd(t testing.TB, members int, tls *EtcdTLS) *Etcd {
	t.Helper()
	if members != 1 && members != 3 {
		t.Fatalf("etcd: members must be 1 or 3, got %d", members)
	}
	e := &Etcd{
		t:      t,
		logOut: &tbWriter{t: t},
		fronts: make([]*Proxy, members),
		peers:  make([]*Proxy, members),
		tls:    tls,
	}
	t.Cleanup(e.stopAll)
	ctx, cancel := context.WithTimeout(context.Background(), etcdReadyTimeout)
	defer cancel()
	c, err := localetcd.Start(ctx, localetcd.Config{
		Dir:       t.TempDir(),
		Members:   members,
		ClientTLS: tls.serverInfo(), // empty without TLS
		Advertise: e.advertise,
		Configure: e.configure,
	})
	if err != nil {
		t.Fatalf("etcd: start cluster: %v", err)
	}
	e.cluster = c
	return e
}

// Members is the number of members of the cluster, running or stopped.
func (e *Etcd) Members() int { return e.cluster.Members() }

// Endpoints lists the client URLs of the members that are running now.
func (e *Etcd) Endpoints() []string {
	var eps []string
	for _, i := range e.cluster.Running() {
		eps = append(eps, e.Endpoint(i))
	}
	return eps
}

// Endpoint is the client URL of member i; it stays the same across
// StopMember and RestartMember.
func (e *Etcd) Endpoint(i int) string { return e.cluster.ClientURL(i) }

// Addr is member i's client address as host:port, the target for a Proxy.
func (e *Etcd) Addr(i int) string { return e.fronts[i].Addr() }

// Client returns a client over the endpoints of all members (stopped ones
// included, so it keeps working across restarts), closed in t.Cleanup.
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   e.cluster.ClientURLs(),
		DialTimeout: etcdDialTimeout,
		Logger:      zap.NewNop(),
		TLS:         e.tls.rootConfig(), // nil without TLS
	})
	if err != nil {
		t.Fatalf("etcd: new client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// StopMember crashes member i (no-op if already stopped): its client
// connections are cut, later ones are reset, and its raft node stops without
// handing over leadership, so the others must elect a new leader. It returns
// at once; the member finishes closing in the background, which
// RestartMember and the cleanup wait for.
func (e *Etcd) StopMember(i int) {
	if !e.cluster.IsRunning(i) {
		return
	}
	for _, p := range []*Proxy{e.fronts[i], e.peers[i]} {
		p.Refuse(true)
		p.Cut()
	}
	e.cluster.Stop(i)
}

// RestartMember starts member i again, stopping it first if it is running,
// with the same name, ports and data directory, and waits until it is ready.
// A member cannot be ready without a quorum: if the cluster still lacks one
// after this restart (e.g. the first of two stopped members of three), it
// returns without waiting, and the restart that restores the quorum waits
// for all running members.
func (e *Etcd) RestartMember(i int) {
	e.t.Helper()
	e.StopMember(i)
	ctx, cancel := context.WithTimeout(context.Background(), etcdReadyTimeout)
	defer cancel()
	if err := e.cluster.Restart(ctx, i); err != nil {
		e.t.Fatalf("etcd: %v", err)
	}
	e.fronts[i].Refuse(false)
	e.peers[i].Refuse(false)

	// A member only becomes ready once it is part of a quorum.
	running := e.cluster.Running()
	if len(running) <= e.Members()/2 {
		return
	}
	for _, j := range running {
		if err := e.cluster.WaitReady(ctx, j); err != nil {
			e.t.Fatalf("etcd: %v", err)
		}
	}
}

// Leader is the index of the running member that a majority of the cluster
// currently recognises as leader, or -1 if there is none (e.g. during an
// election). WaitLeader blocks until there is one.
func (e *Etcd) Leader() int { return e.cluster.Leader() }

// WaitLeader waits up to 10 s for Leader to return a member and returns it,
// failing the test otherwise. Call it from the test goroutine.
func (e *Etcd) WaitLeader(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l := e.Leader(); l >= 0 {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd: no leader after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// GoleakOptions returns the options that packages using this harness should
// pass to goleak.VerifyTestMain. The cleanups of StartEtcd, Client and
// NewProxy stop every goroutine of embedded etcd, its clients and the proxies
// (peer and client connections are cut rather than left to time out), so no
// ignores are needed today; the list exists so that one can be added in a
// single place should a dependency upgrade require it.
func GoleakOptions() []goleak.Option {
	return nil
}

// advertise puts a fresh pair of proxies in front of member i's client and
// peer addresses (localetcd.Config.Advertise), closing those of an earlier
// try to start.
func (e *Etcd) advertise(i int, client, peer string) (string, string, error) {
	e.closeProxies(i)
	var err error
	if e.fronts[i], err = newProxy(client); err != nil {
		return "", "", fmt.Errorf("client proxy: %w", err)
	}
	if e.peers[i], err = newProxy(peer); err != nil {
		return "", "", fmt.Errorf("peer proxy: %w", err)
	}
	return e.fronts[i].Addr(), e.peers[i].Addr(), nil
}

// configure sets the harness's timing and logging on a member
// (localetcd.Config.Configure).
func (e *Etcd) configure(name string, cfg *embed.Config) {
	cfg.TickMs = etcdTickMs
	cfg.ElectionMs = etcdElectionMs
	cfg.AutoCompactionMode = embed.CompactorModeRevision
	cfg.AutoCompactionRetention = "1000"
	// Data only has to survive in-process restarts, never a machine crash.
	cfg.UnsafeNoFsync = true
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(e.logger(name))
	e.tls.configure(cfg) // no-op without TLS
}

// stopAll is the t.Cleanup hook: stop everything, then silence logging.
func (e *Etcd) stopAll() {
	if e.cluster != nil {
		e.cluster.Close()
	}
	for i := range e.fronts {
		e.closeProxies(i)
	}
	e.logOut.stop()
}

// closeProxies closes member i's proxies, if it has any.
func (e *Etcd) closeProxies(i int) {
	for _, p := range []*Proxy{e.fronts[i], e.peers[i]} {
		if p != nil {
			p.Close()
		}
	}
	e.fronts[i], e.peers[i] = nil, nil
}

// logger builds an error-level logger for one member that writes to the test
// log (shown with -v or on failure) until the cluster is stopped.
func (e *Etcd) logger(name string) *zap.Logger {
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	core := zapcore.NewCore(enc, zapcore.AddSync(e.logOut), zapcore.ErrorLevel)
	return zap.New(core).Named("etcd-" + name)
}

// benignEtcdErrors are error-level log messages embedded etcd emits on every
// normal start or stop; they are not worth a line in the test log.
var benignEtcdErrors = []string{
	"setting up serving from embedded etcd failed",
	"failed to update storage version",
}

// tbWriter forwards log lines to t.Log, and drops them once stopped: logging
// through t after the test ended panics.
type tbWriter struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	for _, b := range benignEtcdErrors {
		if strings.Contains(line, b) {
			return len(p), nil
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Log(line)
	}
	return len(p), nil
}

func (w *tbWriter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}
