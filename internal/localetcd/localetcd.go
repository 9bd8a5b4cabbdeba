// Package localetcd runs an etcd cluster inside the process: members of
// go.etcd.io/etcd/server/v3/embed on free loopback ports, with their data
// under one directory. The dev command runs its etcd with it and the
// integration harness its test clusters; `run` always talks to a real
// cluster.
package localetcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
)

const (
	// startTries is how many times Start picks fresh ports when one it
	// picked was taken before etcd bound it.
	startTries = 5
	// restartPortWait bounds how long Restart waits for its old ports to be
	// free again.
	restartPortWait = 5 * time.Second
	// defaultName is the prefix of member names when Config.Name is empty.
	defaultName = "m"
)

// Config describes a cluster. Only Dir is required.
type Config struct {
	// Dir holds one data directory per member, named after it; they must
	// not exist yet (or be empty). Required.
	Dir string
	// Members is the number of members; default 1.
	Members int
	// Name names the members: Name alone for a single member, Name0,
	// Name1, ... for several. Default "m".
	Name string
	// ClientTLS, unless empty, makes the members serve clients over TLS
	// only (https:// client URLs); peers always talk plain HTTP. Default:
	// plain HTTP.
	ClientTLS transport.TLSInfo
	// Advertise, if set, is called for member i with the loopback addresses
	// (host:port) it will listen on for clients and peers, every time Start
	// picks fresh ports, and returns the addresses to advertise instead: a
	// proxy in front of each, say. Default: the listen addresses.
	Advertise func(i int, client, peer string) (advClient, advPeer string, err error)
	// Configure, if set, adjusts a member's configuration (timing, logging,
	// compaction, fsync) before every start and restart. Without it a member
	// logs nothing and keeps etcd's defaults.
	Configure func(name string, cfg *embed.Config)
}

// Cluster is a running cluster. Its methods may be called concurrently.
type Cluster struct {
	cfg    Config
	token  string
	closes sync.WaitGroup // background embed.Etcd.Close calls

	mu      sync.Mutex
	members []*member
}

type member struct {
	name         string
	dir          string
	listenClient url.URL // client URL etcd binds
	listenPeer   url.URL // peer URL etcd binds
	client       url.URL // advertised client URL
	peer         url.URL // advertised peer URL
	initial      string  // InitialCluster
	server       *embed.Etcd
	shutdown     chan struct{} // closed once the last stopped server fully closed
}

// Start starts a new cluster and waits until every member is ready; ctx
// bounds the wait. Free ports are picked by binding port 0 and closing, so
// another process can take one before etcd binds it: Start then tries
// again on fresh ports, a few times.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("local etcd: no data directory")
	}
	if cfg.Members == 0 {
		cfg.Members = 1
	}
	if cfg.Members < 0 {
		return nil, fmt.Errorf("local etcd: %d members, want 1 or more", cfg.Members)
	}
	if cfg.Name == "" {
		cfg.Name = defaultName
	}
	var err error
	for try := 0; try < startTries; try++ {
		c := &Cluster{cfg: cfg, token: fmt.Sprintf("localetcd-%d", time.Now().UnixNano())}
		if err = c.startFresh(); err == nil {
			if err = c.waitAll(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		}
		c.Close()
		c.removeData()
		if !isAddrInUse(err) {
			break
		}
	}
	return nil, fmt.Errorf("local etcd: start: %w", err)
}

// Members is the number of members, running or stopped.
func (c *Cluster) Members() int { return len(c.members) }

// ClientURL is the advertised client URL of member i; it stays the same
// across Stop and Restart.
func (c *Cluster) ClientURL(i int) string { return c.members[i].client.String() }

// ClientURLs lists the advertised client URLs of all members, running or
// stopped.
func (c *Cluster) ClientURLs() []string {
	urls := make([]string, len(c.members))
	for i := range c.members {
		urls[i] = c.ClientURL(i)
	}
	return urls
}

// Running lists the members that are running, in order.
func (c *Cluster) Running() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var running []int
	for i, m := range c.members {
		if m.server != nil {
			running = append(running, i)
		}
	}
	return running
}

// IsRunning reports whether member i is running.
func (c *Cluster) IsRunning(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].server != nil
}

// Stop crashes member i (no-op if it is stopped): its raft node stops
// without handing over leadership, so the others must elect a new leader.
// It returns at once; the member finishes closing in the background, which
// Restart and Close wait for.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	m := c.members[i]
	srv := m.server
	m.server = nil
	var done chan struct{}
	if srv != nil {
		done = make(chan struct{})
		m.shutdown = done
	}
	c.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Server.HardStop() // unlike Close, does not transfer leadership first
	c.closes.Add(1)
	go func() {
		defer c.closes.Done()
		defer close(done)
		srv.Close()
	}()
}

// Restart starts member i again, stopping it first if it is running, with
// the same name, ports and data directory. It does not wait until the
// member is ready, which it cannot be without a quorum: see WaitReady. ctx
// bounds the wait for the old server to close and its ports to be free.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	c.Stop(i)
	c.mu.Lock()
	m := c.members[i]
	shutdown := m.shutdown
	c.mu.Unlock()
	if shutdown != nil {
		select {
		case <-shutdown:
		case <-ctx.Done():
			return fmt.Errorf("local etcd: member %d still shutting down: %w", i, ctx.Err())
		}
	}

	// The old ports are free again, but an outgoing connection may have been
	// given one as its local port in the meantime: retry for a while.
	ctx, cancel := context.WithTimeout(ctx, restartPortWait)
	defer cancel()
	wait := backoff.Backoff{Min: 20 * time.Millisecond, Max: 100 * time.Millisecond}
	for {
		srv, err := embed.StartEtcd(c.memberConfig(m, embed.ClusterStateFlagExisting))
		if err == nil {
			c.mu.Lock()
			m.server = srv
			c.mu.Unlock()
			return nil
		}
		if !isAddrInUse(err) {
			return fmt.Errorf("local etcd: restart member %d: %w", i, err)
		}
		if werr := wait.Wait(ctx); werr != nil {
			return fmt.Errorf("local etcd: restart member %d: %w", i, err)
		}
	}
}

// WaitReady waits until member i has joined the cluster and serves clients,
// or ctx ends. A member only becomes ready once it is part of a quorum.
func (c *Cluster) WaitReady(ctx context.Context, i int) error {
	c.mu.Lock()
	srv := c.members[i].server
	c.mu.Unlock()
	if srv == nil {
		return fmt.Errorf("local etcd: member %d is not running", i)
	}
	select {
	case <-srv.Server.ReadyNotify():
		return nil
	case err := <-srv.Err():
		return fmt.Errorf("local etcd: member %d failed while starting: %w", i, err)
	case <-ctx.Done():
		return fmt.Errorf("local etcd: member %d not ready: %w", i, ctx.Err())
	}
}

// Leader is the index of the running member that a majority of the cluster
// currently recognises as leader, or -1 if there is none (e.g. during an
// election).
func (c *Cluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	votes := make(map[uint64]int)
	for _, m := range c.members {
		if m.server != nil {
			if id := uint64(m.server.Server.Leader()); id != 0 {
				votes[id]++
			}
		}
	}
	for i, m := range c.members {
		if m.server != nil && votes[uint64(m.server.Server.MemberID())] > len(c.members)/2 {
			return i
		}
	}
	return -1
}

// Close stops every member and waits until all are closed. The data stays
// in Dir. A second Close does nothing.
func (c *Cluster) Close() {
	for i := range c.members {
		c.Stop(i)
	}
	c.closes.Wait()
}

// startFresh creates all members on fresh ports and starts them.
func (c *Cluster) startFresh() error {
	n := c.cfg.Members
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	scheme := "http"
	if !c.cfg.ClientTLS.Empty() {
		scheme = "https"
	}
	members := make([]*member, n)
	peers := make([]string, n)
	for i := range members {
		name := c.cfg.Name
		if n > 1 {
			name = fmt.Sprintf("%s%d", name, i)
		}
		m := &member{
			name:         name,
			dir:          filepath.Join(c.cfg.Dir, name),
			listenClient: url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])},
			listenPeer:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])},
		}
		m.client, m.peer = m.listenClient, m.listenPeer
		if c.cfg.Advertise != nil {
			client, peer, err := c.cfg.Advertise(i, m.listenClient.Host, m.listenPeer.Host)
			if err != nil {
				return fmt.Errorf("member %d: advertise: %w", i, err)
			}
			m.client.Host, m.peer.Host = client, peer
		}
		members[i] = m
		peers[i] = m.name + "=" + m.peer.String()
	}
	for _, m := range members {
		m.initial = strings.Join(peers, ",")
	}
	c.mu.Lock()
	c.members = members
	c.mu.Unlock()

	// Start one after the other: a new member asks its peers whether it was
	// already bootstrapped, which is quick when each peer either refuses the
	// connection or answers, but takes a 1 s timeout per peer that is still
	// starting (concurrent starts took over 2 s).
	for i, m := range c.members {
		srv, err := embed.StartEtcd(c.memberConfig(m, embed.ClusterStateFlagNew))
		if err != nil {
			return fmt.Errorf("member %d: %w", i, err)
		}
		c.mu.Lock()
		m.server = srv
		c.mu.Unlock()
	}
	return nil
}

// waitAll waits until every member is ready.
func (c *Cluster) waitAll(ctx context.Context) error {
	for i := range c.members {
		if err := c.WaitReady(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// removeData removes what a failed start left in the members' directories.
func (c *Cluster) removeData() {
	for _, m := range c.members {
		_ = os.RemoveAll(m.dir)
	}
}

func (c *Cluster) memberConfig(m *member, state string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls = []url.URL{m.listenClient}
	cfg.AdvertiseClientUrls = []url.URL{m.client}
	cfg.ListenPeerUrls = []url.URL{m.listenPeer}
	cfg.AdvertisePeerUrls = []url.URL{m.peer}
	cfg.InitialCluster = m.initial
	cfg.InitialClusterToken = c.token
	cfg.ClusterState = state
	cfg.ClientTLSInfo = c.cfg.ClientTLS
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if c.cfg.Configure != nil {
		c.cfg.Configure(m.name, cfg)
	}
	return cfg
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
