package harness

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
)

// RequestCounter counts, on the client's side, what a Kafka client sends
// and receives, per broker address: its dials, its requests by API key and
// the bytes it reads. A real broker cannot be asked what it received, as
// kfake can (CountRequests): give the client Dial as its dial function
// (kafkaconf.Config.Dial). It reads the plaintext framing of the requests, so
// its request counts are zero for TLS connections; dials and bytes count
// all the same.
type RequestCounter struct {
	dial func(ctx context.Context, network, address string) (net.Conn, error)

	mu       sync.Mutex
	dials    map[string]int64
	closes   map[string]int64
	open     map[string]int64
	requests map[string]map[int16]int64
	read     map[string]int64
}

// NewRequestCounter returns a counter that dials with dial (nil: a
// net.Dialer).
func NewRequestCounter(dial func(ctx context.Context, network, address string) (net.Conn, error)) *RequestCounter {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return &RequestCounter{dial: dial, dials: map[string]int64{}, closes: map[string]int64{}, open: map[string]int64{}, requests: map[string]map[int16]int64{}, read: map[string]int64{}}
}

// Dial dials address and counts what goes through the connection.
func (c *RequestCounter) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	c.mu.Lock()
	c.dials[address]++
	c.mu.Unlock()
	conn, err := c.dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.open[address]++
	c.mu.Unlock()
	return &countedConn{Conn: conn, c: c, addr: address, left: -1}, nil
}

// Dials returns the connections dialled to address, those that failed
// included.
func (c *RequestCounter) Dials(address string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dials[address]
}

// Open returns the connections to address dialled and not closed.
func (c *RequestCounter) Open(address string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open[address]
}

// Closes returns the connections to address the client closed.
func (c *RequestCounter) Closes(address string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closes[address]
}

// Requests returns the requests of API key (a kmsg key) sent to address.
func (c *RequestCounter) Requests(address string, key int16) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests[address][key]
}

// TotalRequests returns the requests of API key sent to every address.
func (c *RequestCounter) TotalRequests(key int16) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, m := range c.requests {
		n += m[key]
	}
	return n
}

// BytesRead returns the bytes read from every address.
func (c *RequestCounter) BytesRead() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, b := range c.read {
		n += b
	}
	return n
}

// countedConn follows the framing of the requests written on it: a size,
// then the API key, version and the rest.
type countedConn struct {
	net.Conn
	c    *RequestCounter
	addr string

	closed sync.Once

	wmu  sync.Mutex
	head []byte // the start of a request, until its key is known
	left int64  // bytes left of the request being written, -1 between requests
}

func (cc *countedConn) Read(b []byte) (int, error) {
	n, err := cc.Conn.Read(b)
	if n > 0 {
		cc.c.mu.Lock()
		cc.c.read[cc.addr] += int64(n)
		cc.c.mu.Unlock()
	}
	return n, err
}

func (cc *countedConn) Close() error {
	cc.closed.Do(func() {
		cc.c.mu.Lock()
		cc.c.closes[cc.addr]++
		cc.c.open[cc.addr]--
		cc.c.mu.Unlock()
	})
	return cc.Conn.Close()
}

func (cc *countedConn) Write(b []byte) (int, error) {
	cc.wmu.Lock()
	cc.observe(b)
	cc.wmu.Unlock()
	return cc.Conn.Write(b)
}

// observe follows the framing through b. cc.wmu is held.
func (cc *countedConn) observe(b []byte) {
	for len(b) > 0 {
		if cc.left < 0 {
			take := min(6-len(cc.head), len(b))
			cc.head = append(cc.head, b[:take]...)
			b = b[take:]
			if len(cc.head) < 6 {
				return
			}
			size := int64(binary.BigEndian.Uint32(cc.head))
			key := int16(binary.BigEndian.Uint16(cc.head[4:]))
			cc.c.mu.Lock()
			m := cc.c.requests[cc.addr]
			if m == nil {
				m = map[int16]int64{}
				cc.c.requests[cc.addr] = m
			}
			m[key]++
			cc.c.mu.Unlock()
			cc.head = cc.head[:0]
			cc.left = size - 2
			if cc.left <= 0 {
				cc.left = -1
			}
			continue
		}
		n := min(int64(len(b)), cc.left)
		b = b[n:]
		if cc.left -= n; cc.left == 0 {
			cc.left = -1
		}
	}
}
