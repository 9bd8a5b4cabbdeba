package integration_test

import (
	"net"
	"syscall"
)

type (
	netDialer = net.Dialer
	netConn   = net.Conn
)

const sigterm = syscall.SIGTERM
