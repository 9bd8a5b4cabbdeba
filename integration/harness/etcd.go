// Package harness provides shared fixtures for the integration tests of
// every package, such as an in-process etcd cluster (Etcd) and a
// fault-injecting TCP proxy (Proxy). Everything listens on 127.0.0.1 only and
// is torn down in t.Cleanup.
package harness

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Timing of the embedded cluster. Elections are short so that a re-election
// after StopMember of the leader takes well under a second, yet not so short
// that a loaded -race test run makes leadership flap.
const (
	etcdTickMs       = 20
	etcdElectionMs   = 300
	etcdReadyTimeout = 20 * time.Second
	etcdStartTries   = 5
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
	t      testing.TB
	logOut *tbWriter
	closes sync.WaitGroup // background embed.Etcd.Close calls

	mu      sync.Mutex
	members []*etcdMember

	tls *EtcdTLS // nil: plain HTTP; see StartEtcdTLS
}

type etcdMember struct {
	name     string
	dir      string
	listen   url.URL // client URL etcd binds
	peerURL  url.URL // peer URL etcd binds
	front    *Proxy  // clients' way in, advertised as the client URL
	peer     *Proxy  // peers' way in, advertised as the peer URL
	initial  string  // InitialCluster
	token    string
	server   *embed.Etcd   // nil while stopped
	shutdown chan struct{} // closed once the last stopped server fully closed
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
	e := &Etcd{t: t, logOut: &tbWriter{t: t}, tls: tls}
	t.Cleanup(e.stopAll)

	// Free ports are picked by binding :0 and closing, so another process can
	// grab one before etcd binds it; start again on fresh ports if so.
	var err error
	for try := 0; try < etcdStartTries; try++ {
		if err = e.startFresh(members); err == nil {
			break
		}
		e.stopMembers()
		if !isAddrInUse(err) {
			break
		}
	}
	if err != nil {
		t.Fatalf("etcd: start cluster: %v", err)
	}
	for i := range e.members {
		e.waitReady(i)
	}
	return e
}

// Members is the number of members of the cluster, running or stopped.
func (e *Etcd) Members() int { return len(e.members) }

// Endpoints lists the client URLs of the members that are running now.
func (e *Etcd) Endpoints() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var eps []string
	for i, m := range e.members {
		if m.server != nil {
			eps = append(eps, e.Endpoint(i))
		}
	}
	return eps
}

// Endpoint is the client URL of member i; it stays the same across
// StopMember and RestartMember.
func (e *Etcd) Endpoint(i int) string { return e.clientScheme() + "://" + e.Addr(i) }

// Addr is member i's client address as host:port, the target for a Proxy.
func (e *Etcd) Addr(i int) string { return e.members[i].front.Addr() }

// Client returns a client over the endpoints of all members (stopped ones
// included, so it keeps working across restarts), closed in t.Cleanup.
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	eps := make([]string, len(e.members))
	for i := range e.members {
		eps[i] = e.Endpoint(i)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
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
	e.mu.Lock()
	m := e.members[i]
	srv := m.server
	m.server = nil
	var done chan struct{}
	if srv != nil {
		done = make(chan struct{})
		m.shutdown = done
	}
	e.mu.Unlock()
	if srv == nil {
		return
	}
	for _, p := range []*Proxy{m.front, m.peer} {
		p.Refuse(true)
		p.Cut()
	}
	srv.Server.HardStop() // unlike Close, does not transfer leadership first
	e.closes.Add(1)
	go func() {
		defer e.closes.Done()
		defer close(done)
		srv.Close()
	}()
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
	e.mu.Lock()
	m := e.members[i]
	shutdown := m.shutdown
	e.mu.Unlock()
	select {
	case <-shutdown:
	case <-time.After(etcdReadyTimeout):
		e.t.Fatalf("etcd: member %d still shutting down after %v", i, etcdReadyTimeout)
	}

	// The old ports are free again, but an outgoing connection may have been
	// given one as its local port in the meantime: retry for a while.
	deadline := time.Now().Add(5 * time.Second)
	for {
		srv, err := embed.StartEtcd(e.memberConfig(m, embed.ClusterStateFlagExisting))
		if err == nil {
			e.mu.Lock()
			m.server = srv
			e.mu.Unlock()
			break
		}
		if !isAddrInUse(err) || time.Now().After(deadline) {
			e.t.Fatalf("etcd: restart member %d: %v", i, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.front.Refuse(false)
	m.peer.Refuse(false)

	// A member only becomes ready once it is part of a quorum.
	e.mu.Lock()
	var running []int
	for j, m := range e.members {
		if m.server != nil {
			running = append(running, j)
		}
	}
	e.mu.Unlock()
	if len(running) <= len(e.members)/2 {
		return
	}
	for _, j := range running {
		e.waitReady(j)
	}
}

// Leader is the index of the running member that a majority of the cluster
// currently recognises as leader, or -1 if there is none (e.g. during an
// election). WaitLeader blocks until there is one.
func (e *Etcd) Leader() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	votes := make(map[uint64]int)
	for _, m := range e.members {
		if m.server != nil {
			if id := uint64(m.server.Server.Leader()); id != 0 {
				votes[id]++
			}
		}
	}
	for i, m := range e.members {
		if m.server != nil && votes[uint64(m.server.Server.MemberID())] > len(e.members)/2 {
			return i
		}
	}
	return -1
}

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

// startFresh creates all members on fresh ports and directories and starts
// them.
func (e *Etcd) startFresh(n int) error {
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	token := fmt.Sprintf("harness-%d", time.Now().UnixNano())
	members := make([]*etcdMember, n)
	peers := make([]string, n)
	for i := range members {
		m := &etcdMember{
			name:    fmt.Sprintf("m%d", i),
			dir:     e.t.TempDir(),
			listen:  url.URL{Scheme: e.clientScheme(), Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])},
			peerURL: url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])},
			token:   token,
		}
		members[i] = m
	}
	e.mu.Lock()
	e.members = members
	e.mu.Unlock()
	for i, m := range members {
		if m.front, err = newProxy(m.listen.Host); err != nil {
			return fmt.Errorf("client proxy: %w", err)
		}
		if m.peer, err = newProxy(m.peerURL.Host); err != nil {
			return fmt.Errorf("peer proxy: %w", err)
		}
		peers[i] = m.name + "=http://" + m.peer.Addr()
	}
	for _, m := range members {
		m.initial = strings.Join(peers, ",")
	}

	// Start one after the other: a new member asks its peers whether it was
	// already bootstrapped, which is quick when each peer either refuses the
	// connection or answers, but takes a 1 s timeout per peer that is still
	// starting (concurrent starts took over 2 s).
	for i, m := range members {
		srv, err := embed.StartEtcd(e.memberConfig(m, embed.ClusterStateFlagNew))
		if err != nil {
			return fmt.Errorf("member %d: %w", i, err)
		}
		e.mu.Lock()
		m.server = srv
		e.mu.Unlock()
	}
	return nil
}

func (e *Etcd) memberConfig(m *etcdMember, state string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls = []url.URL{m.listen}
	cfg.AdvertiseClientUrls = []url.URL{{Scheme: e.clientScheme(), Host: m.front.Addr()}}
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: m.peer.Addr()}}
	cfg.InitialCluster = m.initial
	cfg.InitialClusterToken = m.token
	cfg.ClusterState = state
	cfg.TickMs = etcdTickMs
	cfg.ElectionMs = etcdElectionMs
	cfg.AutoCompactionMode = embed.CompactorModeRevision
	cfg.AutoCompactionRetention = "1000"
	// Data only has to survive in-process restarts, never a machine crash.
	cfg.UnsafeNoFsync = true
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(e.logger(m.name))
	e.tls.configure(cfg) // no-op without TLS
	return cfg
}

// waitReady waits for member i to join the cluster and serve clients.
func (e *Etcd) waitReady(i int) {
	e.t.Helper()
	e.mu.Lock()
	srv := e.members[i].server
	e.mu.Unlock()
	if srv == nil {
		e.t.Fatalf("etcd: member %d is not running", i)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		e.t.Fatalf("etcd: member %d failed while starting: %v", i, err)
	case <-time.After(etcdReadyTimeout):
		e.t.Fatalf("etcd: member %d not ready after %v", i, etcdReadyTimeout)
	}
}

// stopAll is the t.Cleanup hook: stop everything, then silence logging.
func (e *Etcd) stopAll() {
	e.stopMembers()
	e.logOut.stop()
}

// stopMembers stops every member and its client proxy and waits until all
// are closed.
func (e *Etcd) stopMembers() {
	for i := range e.members {
		e.StopMember(i)
	}
	e.closes.Wait()
	for _, m := range e.members {
		for _, p := range []*Proxy{m.front, m.peer} {
			if p != nil {
				p.Close()
			}
		}
	}
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

// freePorts finds n distinct free loopback ports by listening on them all at
// once, then releases them for etcd to bind.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve port: %w", err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// isAddrInUse reports whether err comes from binding a port already taken.
func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}
