package harness

import (
	"testing"

	"github.com/offsetkeeper/offsetkeeper/internal/netproxy"
)

// Interceptor is a loopback TCP forwarder that watches what clients send
// for one request and, when armed, acts on the connection that carries it:
// LoseAnswer (the request takes effect, its answer is lost) or Hold (the
// request is kept until Release). It is netproxy.Interceptor; its doc gives
// the semantics.
type Interceptor = netproxy.Interceptor

// NewInterceptor starts an Interceptor on a free 127.0.0.1 port forwarding
// to target (host:port), passing everything. It is closed in t.Cleanup.
func NewInterceptor(t testing.TB, target string) *Interceptor {
	t.Helper()
	ic, err := netproxy.NewInterceptor(target)
	if err != nil {
		t.Fatalf("interceptor: %v", err)
	}
	t.Cleanup(ic.Close)
	return ic
}
