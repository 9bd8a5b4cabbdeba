package netproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
)

// ErrCut is what a Dialer's dial returns while it is cut.
var ErrCut = errors.New("cut off by netproxy.Dialer")

// Dialer opens connections (its DialContext fits kafka-go's and net's
// dialer hooks) and can cut them all at once and refuse new ones, as a lost
// link would. It cuts at the dialer rather than through a Proxy, for a
// client that learns its servers' addresses from them: a Kafka client gets
// the brokers' own listeners from metadata, so a Proxy seeded as the
// bootstrap broker would be bypassed after the first metadata response.
// The zero value is not usable: use NewDialer.
type Dialer struct {
	mu    sync.Mutex
	cut   bool
	conns map[*dialedConn]struct{}
}

// NewDialer returns a Dialer that dials through.
func NewDialer() *Dialer { return &Dialer{conns: map[*dialedConn]struct{}{}} }

// DialContext dials address, or fails with ErrCut while the Dialer is cut.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	cut := d.cut
	d.mu.Unlock()
	if cut {
		return nil, fmt.Errorf("dial %s: %w", address, ErrCut)
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	dc := &dialedConn{Conn: c, d: d}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		_ = c.Close()
		return nil, fmt.Errorf("dial %s: %w", address, ErrCut)
	}
	d.conns[dc] = struct{}{}
	return dc, nil
}

// Cut closes every connection, says how many, and refuses new ones until
// Restore.
func (d *Dialer) Cut() int {
	d.mu.Lock()
	d.cut = true
	conns := d.conns
	d.conns = map[*dialedConn]struct{}{}
	d.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
	return len(conns)
}

// Restore lets new connections through again.
func (d *Dialer) Restore() {
	d.mu.Lock()
	d.cut = false
	d.mu.Unlock()
}

// dialedConn forgets itself in its Dialer when closed.
type dialedConn struct {
	net.Conn
	d *Dialer
}

func (c *dialedConn) Close() error {
	c.d.mu.Lock()
	delete(c.d.conns, c)
	c.d.mu.Unlock()
	return c.Conn.Close()
}
