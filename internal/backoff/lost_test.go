package backoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

func TestConnectionLost(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{net.ErrClosed, true},
		{os.ErrDeadlineExceeded, true},
		{errors.New("table does not exist"), false},
		{context.Canceled, false},
	} {
		if got := ConnectionLost(tc.err); got != tc.want {
			t.Errorf("ConnectionLost(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
