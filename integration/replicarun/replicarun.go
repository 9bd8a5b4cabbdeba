// Package replicarun runs replicas in a test's own process, for tests that
// need a replica without a separate process. It is apart from harness, which
// replica's own tests import.
package replicarun

import (
	"context"
	"sync"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/replica"
)

// Running is a replica run in this process by Start. Stop is a
// graceful stop, as SIGTERM; Kill is a crash. Both wait for Run to return.
type Running struct {
	*replica.Replica
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start runs r until the test ends or Stop or Kill is called.
func Start(t testing.TB, r *replica.Replica) *Running {
	ctx, cancel := context.WithCancel(context.Background())
	rn := &Running{Replica: r, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rn.done)
		_ = r.Run(ctx)
	}()
	t.Cleanup(rn.Stop)
	return rn
}

// Done is closed when Run has returned.
func (rn *Running) Done() <-chan struct{} { return rn.done }

// Stop stops the replica gracefully: blocks finished, claims released,
// lease revoked.
func (rn *Running) Stop() {
	rn.once.Do(func() {
		rn.cancel()
		<-rn.done
	})
}

// Kill stops the replica as a crash would: nothing finished, released or
// revoked.
func (rn *Running) Kill() {
	rn.once.Do(func() {
		rn.Replica.Kill()
		<-rn.done
		rn.cancel()
	})
}
