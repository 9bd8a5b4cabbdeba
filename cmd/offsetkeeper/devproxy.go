//go:build !nodev

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// errDevCut is what a cut-off dial returns.
var errDevCut = errors.New("cut off by dev --chaos")

// devProxy is a loopback TCP proxy in front of one etcd member for one dev
// replica, so that --chaos can cut that replica off (etcd-cut), pause it
// (zombie) or make the member look crashed (leader) without touching the
// others. The integration harness has a richer one; product code must not
// import it.
type devProxy struct {
	ln     net.Listener
	target string
	done   chan struct{} // closed by close: the accept loop ends
	wg     sync.WaitGroup

	mu      sync.Mutex
	refuse  bool          // new connections are closed at once
	resumed chan struct{} // non-nil while paused; closed on resume
	pairs   map[*devPipe]struct{}
}

// devPipe is one proxied connection: the replica's side and the member's.
type devPipe struct {
	client, server net.Conn
	done           chan struct{}
	once           sync.Once
}

func (p *devPipe) close() {
	p.once.Do(func() {
		close(p.done)
		_ = p.client.Close()
		_ = p.server.Close()
	})
}

func newDevProxy(target string) (*devProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", target, err)
	}
	p := &devProxy{ln: ln, target: target, done: make(chan struct{}), pairs: map[*devPipe]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// addr is where clients connect (host:port).
func (p *devProxy) addr() string { return p.ln.Addr().String() }

// cut closes every connection and says how many; with refuse, new ones are
// closed at once until restore.
func (p *devProxy) cut(refuse bool) int {
	p.mu.Lock()
	p.refuse = refuse
	pairs := p.pairs
	p.pairs = map[*devPipe]struct{}{}
	p.mu.Unlock()
	for pp := range pairs {
		pp.close()
	}
	return len(pairs)
}

// restore lets new connections through again.
func (p *devProxy) restore() {
	p.mu.Lock()
	p.refuse = false
	p.mu.Unlock()
}

// pause holds every byte in both directions, of connections old and new,
// as a stopped process would, until resume.
func (p *devProxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed == nil {
		p.resumed = make(chan struct{})
	}
}

func (p *devProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed != nil {
		close(p.resumed)
		p.resumed = nil
	}
}

// close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *devProxy) close() {
	close(p.done)
	_ = p.ln.Close()
	p.resume()
	p.cut(true)
	p.wg.Wait()
}

// accept ends when the listener is closed.
func (p *devProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		pp := &devPipe{client: c, server: s, done: make(chan struct{})}
		p.mu.Lock()
		select {
		case <-p.done:
			p.mu.Unlock()
			pp.close()
			return
		default:
		}
		p.pairs[pp] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pump(pp, c, s)
		go p.pump(pp, s, c)
	}
}

// pump copies src to dst until either side closes; it ends by closing both.
func (p *devProxy) pump(pp *devPipe, src, dst net.Conn) {
	defer p.wg.Done()
	defer func() {
		pp.close()
		p.mu.Lock()
		delete(p.pairs, pp)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.await(pp) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// await waits while the proxy is paused; false if the pipe closed meanwhile.
func (p *devProxy) await(pp *devPipe) bool {
	for {
		p.mu.Lock()
		resumed := p.resumed
		p.mu.Unlock()
		if resumed == nil {
			return true
		}
		select {
		case <-resumed:
		case <-pp.done:
			return false
		}
	}
}

// devDialer opens a replica's Kafka connections (replica.Kafka.Dial) and can
// cut them all (kafka-cut). It cuts at the dialer rather than through a
// proxy: the replica learns the brokers' addresses from metadata, and kfake
// advertises its own listeners, so a proxy seeded as the bootstrap broker
// would be bypassed after the first metadata response.
type devDialer struct {
	mu    sync.Mutex
	cutOn bool
	conns map[*devConn]struct{}
}

func newDevDialer() *devDialer { return &devDialer{conns: map[*devConn]struct{}{}} }

// dial is replica.Kafka.Dial.
func (d *devDialer) dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	cut := d.cutOn
	d.mu.Unlock()
	if cut {
		return nil, fmt.Errorf("dial %s: %w", address, errDevCut)
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	dc := &devConn{Conn: c, d: d}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cutOn {
		_ = c.Close()
		return nil, fmt.Errorf("dial %s: %w", address, errDevCut)
	}
	d.conns[dc] = struct{}{}
	return dc, nil
}

// cut closes every connection, says how many, and refuses new ones until
// restore.
func (d *devDialer) cut() int {
	d.mu.Lock()
	d.cutOn = true
	conns := d.conns
	d.conns = map[*devConn]struct{}{}
	d.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
	return len(conns)
}

func (d *devDialer) restore() {
	d.mu.Lock()
	d.cutOn = false
	d.mu.Unlock()
}

// devConn forgets itself in its dialer when closed.
type devConn struct {
	net.Conn
	d *devDialer
}

func (c *devConn) Close() error {
	c.d.mu.Lock()
	delete(c.d.conns, c)
	c.d.mu.Unlock()
	return c.Conn.Close()
}

// devGate holds a dev replica's sink writes while it is paused (zombie):
// they go on, late, once it resumes, as a stopped process's would.
type devGate struct {
	mu      sync.Mutex
	resumed chan struct{} // non-nil while paused
	arrived chan struct{} // closed when a write is first held by this pause
}

// pause holds the writes to come; the channel is closed once one is held.
func (g *devGate) pause() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resumed == nil {
		g.resumed, g.arrived = make(chan struct{}), make(chan struct{})
	}
	return g.arrived
}

func (g *devGate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resumed != nil {
		close(g.resumed)
		g.resumed = nil
	}
}

// devLateWrite bounds a write that a pause held, once it goes on.
const devLateWrite = 10 * time.Second

// wait returns once the gate is open, with the context to write with and
// whether the write was held. A held write goes on whatever became of ctx
// meanwhile, as one a stopped process had started would when it resumes:
// the late write that fencing must refuse, or make harmless.
func (g *devGate) wait(ctx context.Context) (context.Context, context.CancelFunc, bool) {
	g.mu.Lock()
	resumed := g.resumed
	if resumed != nil {
		select {
		case <-g.arrived:
		default:
			close(g.arrived)
		}
	}
	g.mu.Unlock()
	if resumed == nil {
		return ctx, func() {}, false
	}
	<-resumed
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), devLateWrite)
	return ctx, cancel, true
}

// devLate counts the writes a pause held, and how the sink took them, over
// all the replicas of a run.
type devLate struct {
	writes, fenced, failed atomic.Int64
}

// note counts one held write (one call, of one block or several) by its
// worst outcome: fenced, failed otherwise, or stored.
func (l *devLate) note(errs ...error) {
	l.writes.Add(1)
	failed := false
	for _, err := range errs {
		if errors.Is(err, sinks.ErrFenced) {
			l.fenced.Add(1)
			return
		}
		failed = failed || err != nil
	}
	if failed {
		l.failed.Add(1)
	}
}

// String is the zombies' line of the report.
func (l *devLate) String() string {
	w, f, e := l.writes.Load(), l.fenced.Load(), l.failed.Load()
	return fmt.Sprintf("%d late writes: %d fenced by the sink, %d failed otherwise, %d stored", w, f, e, w-f-e)
}

// gatedSink is one dev replica's view of the shared sink, through its gate.
// It is a sinks.Wrapper, so the inner sink's upgrades stay visible.
type gatedSink struct {
	inner sinks.Sink
	gate  *devGate
	late  *devLate
}

// Unwrap returns the inner sink (sinks.Wrapper).
func (s *gatedSink) Unwrap() sinks.Sink { return s.inner }

// Write waits for the gate, then writes.
func (s *gatedSink) Write(ctx context.Context, b *sinks.Block) error {
	ctx, cancel, held := s.gate.wait(ctx)
	defer cancel()
	err := s.inner.Write(ctx, b)
	if held {
		s.late.note(err)
	}
	return err
}

// WriteBlocks (sinks.BatchWriter) waits for the gate, then writes through
// the inner sink's batching.
func (s *gatedSink) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	ctx, cancel, held := s.gate.wait(ctx)
	defer cancel()
	errs := sinks.WriteBlocks(ctx, s.inner, blocks)
	if held {
		s.late.note(errs...)
	}
	return errs
}

// Close does nothing: the shared sink is closed by dev.
func (s *gatedSink) Close() error { return nil }
