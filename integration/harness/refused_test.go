package harness

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// The address refuses connections, and no listener can take its port
// while the test runs.
func TestRefused(t *testing.T) {
	addr := Refused(t)
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("a listener took %s while it was held", addr)
	}
}
