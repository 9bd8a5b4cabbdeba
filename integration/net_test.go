package integration_test

import (
	"net"
	"syscall"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

type (
	netDialer = net.Dialer
	netConn   = net.Conn
)

const sigterm = syscall.SIGTERM

func coordinatorPartition(topic string, p int) sinks.Partition {
	return sinks.Partition{Topic: topic, Partition: p}
}
