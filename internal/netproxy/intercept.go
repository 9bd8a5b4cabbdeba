package netproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// QuietBeforeCut is how long a connection whose answer LoseAnswer discards
// must have carried nothing either way before it is closed.
const QuietBeforeCut = 300 * time.Millisecond

// Interceptor is a loopback TCP forwarder that watches what clients send
// for one request (bytes such as an INSERT's text, matched without regard
// to case) and, when armed, acts on the connection that carries it. Proxy's
// modes apply to every connection at once; an Interceptor picks out one
// request and lets everything else pass, so a test can place a fault
// exactly:
//   - LoseAnswer: the request is forwarded whole and the server answers
//     it, but the answer is discarded from its first byte, and both sides
//     of the connection are closed once neither has sent anything for
//     QuietBeforeCut. The request took effect; its client never learns it.
//     (Waiting for quiet rather than cutting at the answer's first byte
//     matters when the server speaks before the client is done: ClickHouse
//     may send a progress packet between an INSERT's data and the empty
//     block that ends it, and a cut there loses the insert, not its
//     answer.) Every other connection is closed with it, and new ones are
//     refused from the answer's first byte until Allow, so that the test
//     can look at the server before the client's retry reaches it (a retry
//     on another pooled connection included).
//   - Hold: the request and all that its client sends after it on that
//     connection are read and kept, not forwarded, until Release, which
//     delivers them in order; the server's bytes pass. Every connection
//     that sends a matching request while Hold is armed is held.
//
// A connection closed on either side is closed on the other (a held one
// once its bytes are delivered). All its goroutines stop on Close, which
// is the caller's to call.
type Interceptor struct {
	target string
	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	conns    map[*icConn]struct{}
	closed   bool
	refuse   bool
	lose     []byte // armed LoseAnswer's request, upper case; nil when not armed
	loseTurn int
	hold     []byte // armed Hold's request, upper case; nil when not armed
	lost     int
	answers  []string
}

// icConn is one client connection through an Interceptor and its server
// side. Its fields other than the conns are guarded by Interceptor.mu.
type icConn struct {
	client, server net.Conn
	tail           []byte // the client's last bytes, for a request split between reads

	losing      bool      // the connection of the request whose answer is to be lost
	dropping    bool      // its answer has begun: the server's bytes are discarded
	last        time.Time // when either side last sent bytes, while dropping
	spoke       bool      // the client sent bytes since the server's last reply
	replies     int       // server replies since the request
	holding     bool
	held        []byte
	clientDone  bool // the client ended while its bytes were held
	released    bool // held bytes were delivered; the next reply is recorded
	closeOnce   sync.Once
	releaseDone chan struct{}
}

// NewInterceptor starts an Interceptor on a free 127.0.0.1 port forwarding
// to target (host:port), passing everything. The caller closes it.
func NewInterceptor(target string) (*Interceptor, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("interceptor to %s: listen: %w", target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ic := &Interceptor{target: target, ln: ln, ctx: ctx, cancel: cancel, conns: map[*icConn]struct{}{}}
	ic.wg.Add(1)
	go ic.acceptLoop()
	return ic, nil
}

// Addr is the host:port clients should connect to instead of the target.
func (ic *Interceptor) Addr() string { return ic.ln.Addr().String() }

// LoseAnswer arms the loss of the answer to the next request that contains
// request: on its connection, the server's turn-th reply after it is
// discarded and the connection closed, a reply being what the server sends
// between two sends of the client. An HTTP request has its answer in the
// first reply (turn 1); a ClickHouse native INSERT in the second (turn 2:
// the server first sends the table's structure, the client then its data).
// Every connection is closed then, and new ones are refused until Allow.
func (ic *Interceptor) LoseAnswer(request string, turn int) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.lose, ic.loseTurn = bytes.ToUpper([]byte(request)), max(1, turn)
}

// Lost is the number of answers discarded so far, counted from the
// first byte of each.
func (ic *Interceptor) Lost() int {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return ic.lost
}

// Allow accepts new connections again after LoseAnswer refused them.
func (ic *Interceptor) Allow() {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.refuse = false
}

// Hold arms the holding of every request that contains request, and of all
// that follows it on its connection, until Release.
func (ic *Interceptor) Hold(request string) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.hold = bytes.ToUpper([]byte(request))
}

// Holding is a copy of the bytes held on each held connection.
func (ic *Interceptor) Holding() [][]byte {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	var out [][]byte
	for c := range ic.conns {
		if c.holding {
			out = append(out, bytes.Clone(c.held))
		}
	}
	return out
}

// Release disarms Hold and delivers the held bytes to the server, in
// order. The first bytes of the server's next reply on each of those
// connections are kept (Answers).
func (ic *Interceptor) Release() {
	ic.mu.Lock()
	ic.hold = nil
	var held []*icConn
	for c := range ic.conns {
		if c.holding {
			held = append(held, c)
		}
	}
	ic.mu.Unlock()
	for _, c := range held {
		ic.mu.Lock()
		b, done := c.held, c.clientDone
		c.held, c.holding, c.released = nil, false, true
		ic.mu.Unlock()
		if _, err := c.server.Write(b); err != nil {
			ic.closeConn(c)
		} else if tc, ok := c.server.(*net.TCPConn); ok && done {
			_ = tc.CloseWrite()
		}
		close(c.releaseDone)
	}
}

// Answers are the first bytes (up to 64) of the server's first reply on
// each connection after its held bytes were released: "HTTP/1.1 200 OK"
// for an accepted HTTP request.
func (ic *Interceptor) Answers() []string {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return append([]string(nil), ic.answers...)
}

// Close stops accepting, closes every connection and waits for the
// Interceptor's goroutines. It is idempotent.
func (ic *Interceptor) Close() {
	ic.mu.Lock()
	if ic.closed {
		ic.mu.Unlock()
		return
	}
	ic.closed = true
	conns := make([]*icConn, 0, len(ic.conns))
	for c := range ic.conns {
		conns = append(conns, c)
	}
	ic.mu.Unlock()
	ic.cancel()
	_ = ic.ln.Close()
	for _, c := range conns {
		ic.closeConn(c)
	}
	ic.wg.Wait()
}

func (ic *Interceptor) acceptLoop() {
	defer ic.wg.Done()
	for {
		client, err := ic.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		ic.mu.Lock()
		if ic.closed || ic.refuse {
			ic.mu.Unlock()
			reset(client)
			continue
		}
		ic.wg.Add(1)
		ic.mu.Unlock()
		go ic.serve(client)
	}
}

func (ic *Interceptor) serve(client net.Conn) {
	defer ic.wg.Done()
	d := net.Dialer{Timeout: DialTimeout}
	server, err := d.DialContext(ic.ctx, "tcp", ic.target)
	if err != nil {
		reset(client)
		return
	}
	c := &icConn{client: client, server: server, releaseDone: make(chan struct{})}
	ic.mu.Lock()
	if ic.closed || ic.refuse {
		// Accepted before a loss but not yet known to it when it closed
		// the connections: it goes the same way.
		ic.mu.Unlock()
		reset(client)
		_ = server.Close()
		return
	}
	ic.conns[c] = struct{}{}
	ic.mu.Unlock()
	defer ic.closeConn(c)
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); ic.toServer(c) }()
	go func() { defer pumps.Done(); ic.toClient(c) }()
	pumps.Wait()
}

// toServer forwards the client's bytes, looking for the armed requests.
func (ic *Interceptor) toServer(c *icConn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			ic.mu.Lock()
			window := append(c.tail, buf[:n]...)
			upper := bytes.ToUpper(window)
			keep := max(len(ic.lose), len(ic.hold), 64)
			c.tail = bytes.Clone(window[max(0, len(window)-keep):])
			if !c.holding && ic.hold != nil && bytes.Contains(upper, ic.hold) {
				c.holding = true
			}
			if !c.losing && ic.lose != nil && bytes.Contains(upper, ic.lose) {
				c.losing, ic.lose = true, nil
			}
			c.spoke = true
			c.last = time.Now()
			hold := c.holding
			if hold {
				c.held = append(c.held, buf[:n]...)
			}
			ic.mu.Unlock()
			if !hold {
				if _, werr := c.server.Write(buf[:n]); werr != nil {
					ic.closeConn(c)
					return
				}
			}
		}
		if err != nil {
			ic.mu.Lock()
			holding := c.holding
			if holding {
				c.clientDone = true
			}
			ic.mu.Unlock()
			if !holding {
				ic.closeConn(c)
				return
			}
			// Keep the server side open until the held bytes are out.
			select {
			case <-c.releaseDone:
			case <-ic.ctx.Done():
				ic.closeConn(c)
			}
			return
		}
	}
}

// toClient forwards the server's bytes, losing the armed answer.
func (ic *Interceptor) toClient(c *icConn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			ic.mu.Lock()
			drop := c.dropping
			if drop {
				c.last = time.Now()
			} else if c.losing && c.spoke {
				c.replies++
				c.spoke = false
				if c.replies == ic.loseTurn {
					drop = true
					c.losing, c.dropping, c.last = false, true, time.Now()
					ic.lost++
					ic.refuse = true
					ic.wg.Add(1)
					go ic.cutWhenQuiet(c)
				}
			} else {
				c.spoke = false
			}
			if c.released {
				c.released = false
				ic.answers = append(ic.answers, string(buf[:min(n, 64)]))
			}
			ic.mu.Unlock()
			if !drop {
				if _, werr := c.client.Write(buf[:n]); werr != nil {
					ic.closeConn(c)
					return
				}
			}
		}
		if err != nil {
			ic.closeConn(c)
			return
		}
	}
}

// cutWhenQuiet closes every connection once c, whose answer is being
// discarded, has carried nothing for QuietBeforeCut.
func (ic *Interceptor) cutWhenQuiet(c *icConn) {
	defer ic.wg.Done()
	tick := time.NewTicker(QuietBeforeCut / 6)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-ic.ctx.Done():
			return
		}
		ic.mu.Lock()
		if time.Since(c.last) < QuietBeforeCut {
			ic.mu.Unlock()
			continue
		}
		all := make([]*icConn, 0, len(ic.conns)+1)
		all = append(all, c)
		for o := range ic.conns {
			all = append(all, o)
		}
		ic.mu.Unlock()
		for _, o := range all {
			ic.closeConn(o)
		}
		return
	}
}

// closeConn forgets c and closes both of its sides.
func (ic *Interceptor) closeConn(c *icConn) {
	ic.mu.Lock()
	delete(ic.conns, c)
	ic.mu.Unlock()
	c.closeOnce.Do(func() {
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// String names the Interceptor and its target, for logs.
func (ic *Interceptor) String() string {
	return fmt.Sprintf("interceptor %s → %s", ic.Addr(), ic.target)
}
