package secure

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"time"
)

// HandshakeFailure connects to the https endpoints (or host:port ones)
// itself with cfg and returns the first whose TLS handshake fails: a server
// certificate that does not verify, or a client certificate the server
// refuses. gRPC reports such a failure as a timeout; this tells it. It
// returns a nil error when there is none, also when no endpoint answers;
// timeout bounds each dial and read.
func HandshakeFailure(ctx context.Context, endpoints []string, cfg *tls.Config, timeout time.Duration) (addr string, err error) {
	for _, ep := range endpoints {
		addr := ep
		if scheme, rest, ok := strings.Cut(ep, "://"); ok {
			if scheme != "https" {
				continue
			}
			addr = strings.TrimSuffix(rest, "/")
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			continue
		}
		d := tls.Dialer{NetDialer: &net.Dialer{}, Config: ForAddress(cfg, addr)}
		dctx, cancel := context.WithTimeout(ctx, timeout)
		conn, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			// Under TLS 1.3 the server checks the client's certificate
			// after the client's side of the handshake is done: its
			// verdict comes with the first read, as an alert, or not at
			// all (the server waits for a request).
			_ = conn.SetReadDeadline(time.Now().Add(timeout))
			_, err = conn.Read(make([]byte, 1))
			_ = conn.Close()
		}
		if err != nil && HandshakeFailed(err) {
			return addr, err
		}
	}
	return "", nil
}
