package harness

import (
	"testing"

	"github.com/offsetkeeper/offsetkeeper/internal/netproxy"
)

// Proxy is a loopback TCP forwarder placed between a client and a server
// (etcd, Kafka, ...) so tests can inject network faults: latency
// (Delay), partitions (Blackhole), lost responses (DropResponses), dropped
// connections (Cut) and a server that is down (Refuse). It is
// netproxy.Proxy, the one `offsetkeeper dev` uses too; its doc gives the
// semantics of each mode.
type Proxy = netproxy.Proxy

// NewProxy starts a proxy on a free 127.0.0.1 port forwarding to target
// (host:port), in Pass mode. It is closed in t.Cleanup, which waits for
// all its goroutines.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := newProxy(target)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// newProxy is a Proxy whose caller closes it.
func newProxy(target string) (*Proxy, error) { return netproxy.New(target) }
