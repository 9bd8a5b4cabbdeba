package coordinator

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Refused dials every TCP endpoint at once and returns the first error
// when all refuse the connection: nothing listens there, and the etcd
// client would wait out its timeout to say no more than that. It returns
// nil as soon as one connects, and when one does not answer within timeout
// (the client's own wait then tells) or is not TCP.
func Refused(ctx context.Context, endpoints []string, timeout time.Duration) error {
	addrs := make([]string, 0, len(endpoints))
	for _, e := range endpoints {
		addr := e
		if scheme, _, ok := strings.Cut(e, "://"); ok {
			u, err := url.Parse(e)
			if err != nil || (scheme != "http" && scheme != "https") {
				return nil
			}
			addr = u.Host
		}
		addrs = append(addrs, addr)
	}
	if len(addrs) == 0 {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	results := make(chan error, len(addrs))
	for _, a := range addrs {
		go func() {
			var d net.Dialer
			conn, err := d.DialContext(pctx, "tcp", a)
			if err == nil {
				_ = conn.Close()
			}
			results <- err
		}()
	}
	var first error
	for range addrs {
		err := <-results
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil // it connected, timed out or failed otherwise: let the client tell
		}
		if first == nil {
			first = err
		}
	}
	return first
}
