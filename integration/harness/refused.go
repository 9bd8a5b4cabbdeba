package harness

import (
	"fmt"
	"syscall"
	"testing"
)

// Refused returns a loopback address that refuses connections for as long
// as t runs. Its port is held by a socket that is bound but never listens
// (and does not share its port), so no other listener of the test process
// can take it meanwhile: a port found by listening and closing again can
// be handed to the next listener at once, and a test expecting "connection
// refused" would then reach some other test's server.
func Refused(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("bound socket's address is a %T", sa)
	}
	return fmt.Sprintf("127.0.0.1:%d", in.Port)
}
