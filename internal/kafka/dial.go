package kafka

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/offsetkeeper/offsetkeeper/internal/secure"
)

// Connections are made here, not by kafka-go's Transport: TCP through
// Config.Dial, then TLS, then the SASL login, so that a refused login is
// the broker's error (kafka-go's Transport sees only the connection closing)
// and so that a connection can log in again before its session ends
// (KIP-368): a broker with connections.max.reauth.ms closes a connection
// whose session expired at its next request, which kafka-go never renews.

// reauthTimeout bounds a login again on an open connection.
const reauthTimeout = 10 * time.Second

// dialer opens the transport's connections to brokers.
type dialer struct {
	dial     func(ctx context.Context, network, address string) (net.Conn, error)
	tls      *tls.Config
	mech     sasl.Mechanism // nil: no SASL
	clientID string
	versions *apiVersions
	// boot picks the bootstrap broker of the connection named bootName.
	boot     *bootstrap
	bootName string
	// logins and relogins count the SASL logins, the first of each
	// connection and those again before a session ends.
	logins, relogins atomic.Int64
}

// DialContext opens a connection to a broker: TCP, TLS when configured, and
// the SASL login when configured. ctx bounds all of it. The bootstrap
// brokers' name is resolved to the first of them that answers.
func (d *dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if d.boot != nil && address == d.bootName {
		return d.dialBootstrap(ctx, network)
	}
	return d.dialBroker(ctx, network, address)
}

// dialBroker opens a connection to the broker at address.
func (d *dialer) dialBroker(ctx context.Context, network, address string) (net.Conn, error) {
	dial := d.dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	if d.tls != nil {
		tc := tls.Client(conn, secure.ForAddress(d.tls, address))
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("tls with kafka broker at %s: %w", address, err)
		}
		conn = tc
	}
	if d.mech == nil {
		return conn, nil
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	rc := &reauthConn{Conn: conn, d: d, addr: address}
	lifetime, err := d.login(ctx, conn, address)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	d.logins.Add(1)
	rc.schedule(lifetime)
	return rc, nil
}

// login runs the SASL exchange on conn: SaslHandshake, then SaslAuthenticate
// until the mechanism is done. It returns the session's lifetime, 0 when the
// broker does not end sessions.
func (d *dialer) login(ctx context.Context, conn net.Conn, address string) (time.Duration, error) {
	ctx = sasl.WithMetadata(ctx, saslMetadata(address))
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = d.mech.Name()
	hs.SetVersion(1) // v1: the tokens go in SaslAuthenticate requests
	m, err := exchangeKmsg(conn, d.clientID, hs)
	if err != nil {
		return 0, fmt.Errorf("sasl handshake with kafka broker at %s: %w", address, err)
	}
	if code := m.(*kmsg.SASLHandshakeResponse).ErrorCode; code != 0 {
		return 0, fmt.Errorf("sasl handshake with kafka broker at %s: %w (it accepts %v)", address, kafkago.Error(code),
			m.(*kmsg.SASLHandshakeResponse).SupportedMechanisms)
	}
	sm, state, err := d.mech.Start(ctx)
	if err != nil {
		return 0, fmt.Errorf("sasl %s with kafka broker at %s: %w", d.mech.Name(), address, err)
	}
	var lifetime time.Duration
	for done := false; !done; {
		auth := kmsg.NewPtrSASLAuthenticateRequest()
		auth.SASLAuthBytes = state
		// v1 tells the session's lifetime; v2 is v1 in the flexible
		// encoding, and v0 is what brokers before Kafka 2.2 serve.
		auth.SetVersion(1)
		m, err := exchangeKmsg(conn, d.clientID, auth)
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			// Some brokers close the connection on a refused login
			// rather than answer with the error.
			return 0, fmt.Errorf("sasl %s with kafka broker at %s: %w (the broker closed the connection during the login)",
				d.mech.Name(), address, kafkago.SASLAuthenticationFailed)
		}
		if err != nil {
			return 0, fmt.Errorf("sasl %s with kafka broker at %s: %w", d.mech.Name(), address, err)
		}
		res := m.(*kmsg.SASLAuthenticateResponse)
		if res.ErrorCode != 0 {
			msg := ""
			if res.ErrorMessage != nil {
				msg = ": " + *res.ErrorMessage
			}
			return 0, fmt.Errorf("sasl %s with kafka broker at %s: %w%s", d.mech.Name(), address, kafkago.Error(res.ErrorCode), msg)
		}
		lifetime = time.Duration(res.SessionLifetimeMillis) * time.Millisecond
		if done, state, err = sm.Next(ctx, res.SASLAuthBytes); err != nil {
			return 0, fmt.Errorf("sasl %s with kafka broker at %s: %w", d.mech.Name(), address, err)
		}
	}
	return lifetime, nil
}

func saslMetadata(address string) *sasl.Metadata {
	host, port, _ := net.SplitHostPort(address)
	var p int
	_, _ = fmt.Sscan(port, &p)
	return &sasl.Metadata{Host: host, Port: p}
}

// reauthConn is a SASL connection that logs in again before its session
// ends. kafka-go sends one request at a time on a connection and reads its
// whole response before it writes the next, so a request's first byte
// marks a moment when nothing is in flight: the login goes then, on the
// connection below, unseen by kafka-go.
type reauthConn struct {
	net.Conn
	d    *dialer
	addr string

	mu  sync.Mutex
	due time.Time // zero: the session does not end
	// head gathers a request's size; left counts what is left of the
	// request being written, -1 between requests.
	head []byte
	left int64

	dmu         sync.Mutex // guards the deadlines, set while a Write waits on mu
	read, write time.Time
}

// schedule sets when to log in again: at 85% to 95% of the session's
// lifetime, as KIP-368 advises, so that connections do not all go at once.
func (c *reauthConn) schedule(lifetime time.Duration) {
	c.left = -1
	if lifetime <= 0 {
		c.due = time.Time{}
		return
	}
	c.due = time.Now().Add(time.Duration(float64(lifetime) * (0.85 + 0.1*rand.Float64())))
}

// Write implements net.Conn: it logs in again first when a request starts
// and the session is due.
func (c *reauthConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	written := 0
	for len(b) > 0 {
		if c.left < 0 && len(c.head) == 0 && !c.due.IsZero() && !time.Now().Before(c.due) {
			if err := c.relogin(); err != nil {
				return written, err
			}
		}
		n := min(int64(len(b)), c.left)
		if c.left < 0 {
			// The size of the request starting here, maybe split
			// across writes.
			prev := len(c.head)
			take := min(4-prev, len(b))
			c.head = append(c.head, b[:take]...)
			n = int64(take)
			if len(c.head) == 4 {
				c.left = int64(binary.BigEndian.Uint32(c.head)) + 4 - int64(prev)
				c.head = c.head[:0]
				n = min(int64(len(b)), c.left)
			}
		}
		m, err := c.Conn.Write(b[:n])
		written += m
		if c.left >= 0 {
			if c.left -= int64(m); c.left == 0 {
				c.left = -1
			}
		}
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

// SetDeadline, SetReadDeadline and SetWriteDeadline implement net.Conn and
// remember the deadlines kafka-go sets for its request, to restore them
// after a login again, which has a deadline of its own.
func (c *reauthConn) SetDeadline(t time.Time) error {
	c.dmu.Lock()
	c.read, c.write = t, t
	c.dmu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *reauthConn) SetReadDeadline(t time.Time) error {
	c.dmu.Lock()
	c.read = t
	c.dmu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *reauthConn) SetWriteDeadline(t time.Time) error {
	c.dmu.Lock()
	c.write = t
	c.dmu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// relogin runs the SASL exchange again on the connection, within
// reauthTimeout, then puts kafka-go's deadlines back. c.mu is held.
func (c *reauthConn) relogin() error {
	ctx, cancel := context.WithTimeout(context.Background(), reauthTimeout)
	defer cancel()
	dl, _ := ctx.Deadline()
	_ = c.Conn.SetDeadline(dl)
	lifetime, err := c.d.login(ctx, c.Conn, c.addr)
	c.dmu.Lock()
	_ = c.Conn.SetReadDeadline(c.read)
	_ = c.Conn.SetWriteDeadline(c.write)
	c.dmu.Unlock()
	if err != nil {
		return fmt.Errorf("login again (KIP-368): %w", err)
	}
	c.d.relogins.Add(1)
	c.schedule(lifetime)
	return nil
}
