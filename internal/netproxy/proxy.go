// Package netproxy holds loopback TCP forwarders that inject network
// faults between a client and a server (etcd, Kafka, a database): Proxy,
// whose modes apply to every connection (latency, a partition, lost
// responses, cut and refused connections); Interceptor, which picks out one
// request; and Dialer, a dialer whose connections can be cut. `offsetkeeper
// dev` uses them for its chaos, and the integration harness for its tests.
// Nothing in production traffic goes through them.
package netproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxyMode says what a Proxy does with the bytes it reads.
type proxyMode int

const (
	modePass proxyMode = iota
	modeDelay
	modeBlackhole
	modeDropResponses
)

// DialTimeout bounds the dial to the target for each accepted connection.
const DialTimeout = 5 * time.Second

// Proxy is a loopback TCP forwarder placed between a client and a server
// (etcd, Kafka, ...) so tests can inject network faults: latency, partitions,
// lost responses and dropped connections. Mode changes apply at once to
// existing and new connections. All its goroutines stop on Close.
//
// Semantics, per direction of each connection, of what happens to a chunk of
// bytes read from one side:
//   - Pass: written to the other side.
//   - Delay(d): written d after it was read. A direction handles one chunk
//     at a time, so bytes arriving meanwhile wait up to 2d, and throughput
//     is at most one read buffer (32 KiB) per d.
//   - Blackhole: held, and nothing more is read, so both peers see silence and
//     TCP back-pressure builds up as in a partition. New connections are
//     accepted, but the target is not dialled until forwarding resumes. When
//     the mode changes back, held bytes are delivered in order: the stream
//     stays intact, as TCP's would once a partition heals.
//   - DropResponses: client→server bytes are written, server→client bytes
//     are discarded. A connection that lost bytes has a corrupt stream, so it
//     is closed when the mode changes away from DropResponses.
//
// Connection closes (EOF or errors on either side) are always propagated by
// closing both sides, whatever the mode. If the target cannot be dialled, the
// client connection is reset.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loop and one goroutine tree per connection

	mu      sync.Mutex
	mode    proxyMode
	delay   time.Duration
	refuse  bool
	changed chan struct{} // closed and replaced on every mode change
	conns   map[*proxyConn]struct{}
	closed  bool

	toServer atomic.Int64
	toClient atomic.Int64
}

// proxyConn is one client connection and, once dialled, its server side.
type proxyConn struct {
	client net.Conn
	ctx    context.Context // done when the connection is closed
	cancel context.CancelFunc

	// tainted is set (under Proxy.mu) once a server→client chunk was discarded.
	tainted bool

	mu     sync.Mutex
	server net.Conn
	closed bool
}

// New starts a proxy on a free 127.0.0.1 port forwarding to target
// (host:port), in Pass mode. The caller closes it.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: listen: %w", target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target:  target,
		ln:      ln,
		ctx:     ctx,
		cancel:  cancel,
		changed: make(chan struct{}),
		conns:   make(map[*proxyConn]struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the host:port clients should connect to instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Pass restores normal forwarding; held bytes are delivered.
func (p *Proxy) Pass() { p.setMode(modePass, 0) }

// Delay forwards every chunk d after it was read, to simulate a slow network.
// A d <= 0 is the same as Pass.
func (p *Proxy) Delay(d time.Duration) {
	if d <= 0 {
		p.Pass()
		return
	}
	p.setMode(modeDelay, d)
}

// Blackhole forwards nothing in either direction while keeping connections
// open, so peers see silence as in a network partition (see Proxy).
func (p *Proxy) Blackhole() { p.setMode(modeBlackhole, 0) }

// DropResponses forwards client→server bytes but discards server→client
// bytes, so requests take effect on the server while their responses are
// lost: the way to provoke ambiguous outcomes (e.g. a commit whose result is
// unknown to the client).
func (p *Proxy) DropResponses() { p.setMode(modeDropResponses, 0) }

// Refuse makes the proxy reset new connections right after accepting them
// (on) or accept them normally again (off), to simulate a server that is down.
// Existing connections are not affected; combine with Cut for that.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Cut closes all current connections, as a crashed peer or a reset link
// would, and says how many. New connections are still accepted unless
// Refuse is on.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.mu.Unlock()
	for _, pc := range conns {
		p.closeConn(pc)
	}
	return len(conns)
}

// Conns is the number of client connections currently open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Bytes reports how many bytes were forwarded to the server and to the client
// so far (discarded bytes are not counted).
func (p *Proxy) Bytes() (toServer, toClient int64) {
	return p.toServer.Load(), p.toClient.Load()
}

// Close stops accepting, closes all connections and waits for every goroutine
// of the proxy to exit. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()

	p.cancel()
	_ = p.ln.Close()
	_ = p.Cut()
	p.wg.Wait()
}

func (p *Proxy) setMode(m proxyMode, d time.Duration) {
	p.mu.Lock()
	leavingDrop := p.mode == modeDropResponses && m != modeDropResponses
	p.mode, p.delay = m, d
	close(p.changed)
	p.changed = make(chan struct{})
	var tainted []*proxyConn
	if leavingDrop {
		for pc := range p.conns {
			if pc.tainted {
				tainted = append(tainted, pc)
			}
		}
	}
	p.mu.Unlock()
	for _, pc := range tainted {
		p.closeConn(pc)
	}
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient accept errors (e.g. EMFILE): back off briefly.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.mu.Lock()
		if p.closed || p.refuse {
			p.mu.Unlock()
			reset(c)
			continue
		}
		ctx, cancel := context.WithCancel(p.ctx)
		pc := &proxyConn{client: c, ctx: ctx, cancel: cancel}
		p.conns[pc] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(pc)
	}
}

// serve dials the target once forwarding is allowed and pumps both directions
// until the connection is closed.
func (p *Proxy) serve(pc *proxyConn) {
	defer p.wg.Done()
	defer p.closeConn(pc)

	// A blackholed new connection must not reach the target at all.
	if !p.awaitForwarding(pc) {
		return
	}
	d := net.Dialer{Timeout: DialTimeout}
	server, err := d.DialContext(pc.ctx, "tcp", p.target)
	if err != nil {
		reset(pc.client) // the client sees a reset, as with a refused connection
		return
	}
	if !pc.setServer(server) {
		return
	}

	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() {
		defer pumps.Done()
		p.pump(pc, pc.client, server, true)
	}()
	go func() {
		defer pumps.Done()
		p.pump(pc, server, pc.client, false)
	}()
	pumps.Wait()
}

// awaitForwarding blocks while the proxy is blackholed; false means the
// connection was closed meanwhile.
func (p *Proxy) awaitForwarding(pc *proxyConn) bool {
	for {
		p.mu.Lock()
		m, changed := p.mode, p.changed
		p.mu.Unlock()
		if m != modeBlackhole {
			return true
		}
		select {
		case <-changed:
		case <-pc.ctx.Done():
			return false
		}
	}
}

// pump copies src to dst chunk by chunk, applying the current mode to every
// chunk, and closes the connection when either side fails.
func (p *Proxy) pump(pc *proxyConn, src, dst net.Conn, toServer bool) {
	defer p.closeConn(pc)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.forward(pc, dst, buf[:n], time.Now(), toServer) {
			return
		}
		if err != nil {
			return
		}
	}
}

// forward applies the mode to one chunk read at readAt; false means the
// connection is finished.
func (p *Proxy) forward(pc *proxyConn, dst net.Conn, b []byte, readAt time.Time, toServer bool) bool {
	for {
		p.mu.Lock()
		m, d, changed := p.mode, p.delay, p.changed
		drop := m == modeDropResponses && !toServer
		if drop {
			pc.tainted = true
		}
		p.mu.Unlock()

		var timer *time.Timer
		var wait <-chan time.Time
		switch {
		case drop:
			return true
		case m == modeBlackhole:
			// wait stays nil: only a mode change or a close wakes us.
		case m == modeDelay && time.Until(readAt.Add(d)) > 0:
			timer = time.NewTimer(time.Until(readAt.Add(d)))
			wait = timer.C
		default:
			if _, err := dst.Write(b); err != nil {
				return false
			}
			if toServer {
				p.toServer.Add(int64(len(b)))
			} else {
				p.toClient.Add(int64(len(b)))
			}
			return true
		}
		select {
		case <-wait:
		case <-changed:
		case <-pc.ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if pc.ctx.Err() != nil {
			return false
		}
	}
}

// closeConn forgets pc and closes both of its sides.
func (p *Proxy) closeConn(pc *proxyConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
	pc.close()
}

func (pc *proxyConn) setServer(s net.Conn) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.closed {
		_ = s.Close()
		return false
	}
	pc.server = s
	return true
}

func (pc *proxyConn) close() {
	pc.mu.Lock()
	if pc.closed {
		pc.mu.Unlock()
		return
	}
	pc.closed = true
	server := pc.server
	pc.mu.Unlock()

	pc.cancel()
	_ = pc.client.Close()
	if server != nil {
		_ = server.Close()
	}
}

// reset closes c with an RST rather than a FIN, like a refused connection.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
