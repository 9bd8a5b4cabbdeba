package integration_test

import (
	"net"
	"syscall"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

type (
	netDialer = net.Dialer
	netConn   = net.Conn
)

const sigterm = syscall.SIGTERM

func coordinatorPartition(topic string, p int) coordinator.Partition {
	return coordinator.Partition{Topic: topic, Partition: p}
}
