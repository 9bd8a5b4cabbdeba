package backoff

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// ConnectionLost reports whether err is a connection that could not be
// made or was lost: refused, reset, closed or timed out (any net.Error),
// or ended in the middle of an answer (io.EOF, io.ErrUnexpectedEOF). A
// later attempt may not meet it. Each client adds what its own protocol
// says a wait mends, and takes out a TLS handshake that failed
// (secure.HandshakeFailed), which no wait mends.
func ConnectionLost(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}
