package kafka

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The transport learns the cluster through one control connection to the
// bootstrap brokers. kafka-go dials their addresses in turn but moves on
// only when a dial fails, and a paused broker (SIGSTOP, a long GC pause, a
// cut without a reset) accepts the TCP connection and then answers nothing:
// its first request waits out the whole dial timeout and the transport
// stays without metadata. So the transport is given one name for all of
// them, bootstrapAddr, and the dialer picks the broker: it asks each in
// turn for its API versions, starts the next one when the last has not
// answered within a stagger, keeps the first that answers and closes the
// rest.

// bootstrapAddr is the address of the transport's control connection: the
// bootstrap brokers under one name (no comma, so kafka-go dials it once).
type bootstrapAddr struct{ name string }

func (a bootstrapAddr) Network() string { return "tcp" }
func (a bootstrapAddr) String() string  { return a.name }

func newBootstrapAddr(brokers []string) bootstrapAddr {
	return bootstrapAddr{name: "bootstrap(" + strings.Join(brokers, " ") + ")"}
}

// bootstrapStagger bounds the wait on one bootstrap broker before the next
// is asked as well (the first is not given up: a slow broker may still win).
const bootstrapStagger = time.Second

// bootstrap keeps which bootstrap broker answered last and which failed, so
// that a new control connection asks a good one first.
type bootstrap struct {
	addrs []string

	mu     sync.Mutex
	good   string
	failed map[string]time.Time
}

func newBootstrap(addrs []string) *bootstrap {
	return &bootstrap{addrs: slices.Clone(addrs), failed: map[string]time.Time{}}
}

// order returns the addresses to ask: the last that answered, then those
// that have not failed (shuffled, to spread replicas' control connections),
// then those that failed, the longest ago first.
func (b *bootstrap) order() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := slices.Clone(b.addrs)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	rank := func(a string) int {
		switch {
		case a == b.good:
			return 0
		case b.failed[a].IsZero():
			return 1
		}
		return 2
	}
	slices.SortStableFunc(out, func(x, y string) int {
		if r := rank(x) - rank(y); r != 0 {
			return r
		}
		return b.failed[x].Compare(b.failed[y])
	})
	return out
}

func (b *bootstrap) answered(addr string) {
	b.mu.Lock()
	b.good = addr
	delete(b.failed, addr)
	b.mu.Unlock()
}

func (b *bootstrap) failedAt(addr string, t time.Time) {
	b.mu.Lock()
	if b.good == addr {
		b.good = ""
	}
	b.failed[addr] = t
	b.mu.Unlock()
}

// dialBootstrap opens a connection to the first bootstrap broker that
// answers, within ctx.
func (d *dialer) dialBootstrap(ctx context.Context, network string) (net.Conn, error) {
	order := d.boot.order()
	type result struct {
		addr string
		conn net.Conn
		err  error
	}
	results := make(chan result, len(order))
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	started, pending := 0, 0
	start := func() {
		addr := order[started]
		started++
		pending++
		go func() {
			conn, err := d.dialAnswering(actx, network, addr)
			results <- result{addr, conn, err}
		}()
	}
	// Those still pending when one wins are closed as they come.
	abandon := func(n int) {
		go func() {
			for ; n > 0; n-- {
				if r := <-results; r.conn != nil {
					_ = r.conn.Close()
				}
			}
		}()
	}
	stagger := time.NewTimer(bootstrapStagger)
	defer stagger.Stop()
	var errs []error
	start()
	for {
		select {
		case r := <-results:
			pending--
			if r.err == nil {
				d.boot.answered(r.addr)
				abandon(pending)
				return r.conn, nil
			}
			d.boot.failedAt(r.addr, time.Now())
			errs = append(errs, r.err)
			if started < len(order) {
				start()
				stagger.Reset(bootstrapStagger)
			} else if pending == 0 {
				return nil, fmt.Errorf("no bootstrap broker answered: %w", errors.Join(errs...))
			}
		case <-stagger.C:
			if started < len(order) {
				start()
				stagger.Reset(bootstrapStagger)
			}
		case <-ctx.Done():
			cancel()
			for _, a := range order[:started] {
				d.boot.failedAt(a, time.Now())
			}
			abandon(pending)
			errs = append(errs, ctx.Err())
			return nil, fmt.Errorf("no bootstrap broker of %s answered in time: %w", strings.Join(order[:started], ", "), errors.Join(errs...))
		}
	}
}

// dialAnswering connects to addr and, unless the SASL login already
// exchanged requests, asks for its API versions: a broker that accepts
// connections but does not answer is not taken.
func (d *dialer) dialAnswering(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := d.dialBroker(ctx, network, addr)
	if err != nil || d.mech != nil {
		return conn, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(0) // every broker serves v0
	_, err = exchangeKmsg(conn, d.clientID, req)
	if !stop() || err != nil {
		_ = conn.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("kafka broker at %s: %w", addr, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}
