package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const (
	// DefaultTTL is the lease TTL of a replica: how long etcd keeps its
	// claims after it stops renewing them.
	DefaultTTL = 10 * time.Second
	// MinTTL is the shortest TTL accepted: below it a GC pause or a slow
	// disk would expire healthy replicas.
	MinTTL = 2 * time.Second
)

// SessionOption configures a Session.
type SessionOption func(*sessionConfig)

type sessionConfig struct {
	ttl    time.Duration
	linger time.Duration
}

// WithTTL sets the lease TTL (default DefaultTTL, at least MinTTL, whole
// seconds). A shorter TTL moves a dead replica's partitions sooner; a longer
// one survives longer etcd or network hiccups without a rebalance.
func WithTTL(ttl time.Duration) SessionOption { return func(c *sessionConfig) { c.ttl = ttl } }

// WithLinger makes an idle session wait d after the first write before it
// sends a round (default 0: at once), so that writes made close together
// share one etcd Txn even when no round is in flight to gather them behind.
// It trades latency for fewer transactions: every write of an idle session
// waits up to d longer, while a busy session batches without it (the next
// round gathers while one is in flight). At most TTL/16, since the wait
// counts against a commit attempt's TTL/8.
func WithLinger(d time.Duration) SessionOption { return func(c *sessionConfig) { c.linger = d } }

// WriteOption configures one write of a claim (PutIntent, Commit).
type WriteOption func(*op)

// Linger lets the write wait up to d for other writes to share its round
// (at most TTL/16), instead of the session's WithLinger delay. A replica
// gives it to the blocks of partitions that caught up with the log end, whose
// latency matters less than the transactions a trickle would cost, and not
// to full blocks, which carry their own weight.
func Linger(d time.Duration) WriteOption { return func(o *op) { o.linger = max(d, 0) } }

// newWrite is newOp with the session's linger and the write's options.
func (s *Session) newWrite(key string, cmps []clientv3.Cmp, then, els []clientv3.Op, opts []WriteOption) *op {
	o := newOp(key, cmps, then, els)
	o.linger = s.linger
	for _, opt := range opts {
		opt(o)
	}
	return o
}

func (c sessionConfig) validate() error {
	if err := ValidTTL(c.ttl); err != nil {
		return err
	}
	if c.linger < 0 || c.linger > c.ttl/16 {
		return fmt.Errorf("linger %s: want 0 to ttl/16 (%s)", c.linger, c.ttl/16)
	}
	return nil
}

// ValidTTL checks a lease TTL.
func ValidTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl%time.Second != 0 {
		return fmt.Errorf("lease ttl %s: want whole seconds, at least %s", ttl, MinTTL)
	}
	return nil
}

// Session is one replica's membership: one lease, the member key bound to it,
// and the claims taken under it.
//
// The writes of all its claims go to etcd in write rounds: one Txn holding
// one nested, separately fenced Txn per write (see round.go). The session
// owns the goroutine that sends them; it ends with the session.
//
// A session is alive while a keepalive sent less than TTL/2 ago succeeded.
// Once it is not, it is lost for good: Lost is closed, every claim reports
// lost, and commits fail with ErrFenced. A replica that wants to go on joins
// again with a new session. The margin of TTL/2 lets a write in flight end
// before etcd could expire the lease and hand the partition to another.
type Session struct {
	c      *Coordinator
	member Member
	lease  clientv3.LeaseID
	ttl    time.Duration
	log    *zap.Logger

	// aliveUntil is UnixNano of (send time of the last acknowledged
	// keepalive) + TTL/2.
	aliveUntil atomic.Int64

	lostOnce sync.Once
	lost     chan struct{}
	stopped  atomic.Bool // Close or Abandon was called
	doneOnce sync.Once
	done     chan struct{} // closed once stopped or lost: the loops' exit
	wg       sync.WaitGroup

	// The round loop (round.go): ops queued for the next write round.
	linger      time.Duration
	wake        chan struct{} // one token: something was queued
	rmu         sync.Mutex
	queue       []*op
	queueBytes  int // the sizes of the queue's ops, cancelled ones included
	roundsEnded bool
	// The rounds in flight and the keys of their ops: a key in flight
	// waits for its round's outcome before another op of it is sent.
	flying    map[string]bool
	inFlight  int
	roundsRun sync.WaitGroup
	// fillKeys is the set of keys of the round being filled (roundFill),
	// kept between fills: the loop filled one on every wake to see whether
	// the queue held a full round, and a new set each time was 7% of a
	// 10,000-partition replica's CPU (mayHoldFull now spares most fills).
	fillKeys map[string]bool
}

// Join grants a lease, registers m under it and starts renewing it. The
// member key must not exist: two live replicas with one ID are refused with
// ErrMemberExists.
func (c *Coordinator) Join(ctx context.Context, m Member, opts ...SessionOption) (*Session, error) {
	cfg := sessionConfig{ttl: DefaultTTL}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if m.ID == "" {
		return nil, errors.New("join: empty replica id")
	}
	if m.StartedAt.IsZero() {
		m.StartedAt = time.Now().UTC()
	}
	sent := time.Now()
	grant, err := c.cli.Grant(ctx, int64(cfg.ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("join group %s as %s: grant lease: %w", c.group, m.ID, err)
	}
	value, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("join group %s as %s: %w", c.group, m.ID, err)
	}
	key := c.keys.Member(m.ID)
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value), clientv3.WithLease(grant.ID))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("%w: %s in group %s", ErrMemberExists, m.ID, c.group)
	}
	if err != nil {
		revokeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = c.cli.Revoke(revokeCtx, grant.ID)
		cancel()
		return nil, fmt.Errorf("join group %s as %s: %w", c.group, m.ID, err)
	}
	m.Revision, m.Lease = resp.Header.Revision, int64(grant.ID)
	s := &Session{
		c:      c,
		member: m,
		lease:  grant.ID,
		ttl:    cfg.ttl,
		log:    c.log.With(zap.String("replica", m.ID)),
		lost:   make(chan struct{}),
		done:   make(chan struct{}),
		linger: cfg.linger,
		wake:   make(chan struct{}, 1),
	}
	s.aliveUntil.Store(sent.Add(cfg.ttl / 2).UnixNano())
	s.wg.Add(2)
	go s.keepAlive()
	go s.runRounds()
	s.log.Info("joined group", zap.Int64("lease", int64(grant.ID)), zap.Duration("ttl", cfg.ttl))
	return s, nil
}

// ID is the replica ID.
func (s *Session) ID() string { return s.member.ID }

// Member is the registered member value, with its join revision and lease.
func (s *Session) Member() Member { return s.member }

// Lease is the session's lease ID.
func (s *Session) Lease() clientv3.LeaseID { return s.lease }

// TTL is the lease TTL.
func (s *Session) TTL() time.Duration { return s.ttl }

// Coordinator is the coordinator the session belongs to.
func (s *Session) Coordinator() *Coordinator { return s.c }

// Alive reports whether a keepalive sent less than TTL/2 ago succeeded. It is
// computed from the clock at each call, so it turns false on time even if the
// goroutine that closes Lost is late.
func (s *Session) Alive() bool {
	select {
	case <-s.lost:
		return false
	default:
	}
	return time.Now().UnixNano() < s.aliveUntil.Load()
}

// Lost is closed once the session is not alive any more, or was closed.
func (s *Session) Lost() <-chan struct{} { return s.lost }

func (s *Session) markLost(reason string) {
	s.lostOnce.Do(func() {
		close(s.lost)
		s.end()
		if reason != reasonClosed {
			s.log.Warn("session lost", zap.String("reason", reason), zap.Int64("lease", int64(s.lease)))
		}
	})
}

const reasonClosed = "closed"

// end closes done, on which the keep-alive and round loops exit.
func (s *Session) end() { s.doneOnce.Do(func() { close(s.done) }) }

// keepAlive renews the lease every TTL/6 with one request at a time and
// marks the session lost when TTL/2 passes without an acknowledged renewal.
// It exits on done: when the session is closed or lost.
func (s *Session) keepAlive() {
	defer s.wg.Done()
	interval := s.ttl / 6
	watchdog := time.NewTimer(time.Until(time.Unix(0, s.aliveUntil.Load())))
	defer watchdog.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	// cancel ends a renewal in flight when the loop returns.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acks := make(chan time.Time, 1)
	inFlight := false
	for {
		select {
		case <-s.done:
			return
		case <-watchdog.C:
			if time.Now().UnixNano() >= s.aliveUntil.Load() {
				s.markLost(fmt.Sprintf("no keepalive acknowledged for %s (ttl/2)", s.ttl/2))
				return
			}
			watchdog.Reset(time.Until(time.Unix(0, s.aliveUntil.Load())))
		case sent := <-acks:
			inFlight = false
			if sent.IsZero() {
				continue
			}
			until := sent.Add(s.ttl / 2)
			if until.UnixNano() > s.aliveUntil.Load() {
				s.aliveUntil.Store(until.UnixNano())
			}
		case <-tick.C:
			if inFlight {
				continue
			}
			inFlight = true
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				sent := time.Now()
				rctx, rcancel := context.WithTimeout(ctx, s.ttl/2)
				_, err := s.c.cli.KeepAliveOnce(rctx, s.lease)
				rcancel()
				switch {
				case err == nil:
					acks <- sent
				case errors.Is(err, rpctypes.ErrLeaseNotFound):
					s.markLost("lease expired in etcd")
					acks <- time.Time{}
				default:
					acks <- time.Time{}
				}
			}()
		}
	}
}

// Abandon stops renewing without revoking, as a crash would: etcd keeps the
// member key and the claims until the lease expires. It is for chaos tests
// and the dev command's fault injection. Like Close, it waits for the write
// round in flight (at most TTL/8); writes still queued fail unsent.
func (s *Session) Abandon() {
	s.stopped.Store(true)
	s.end()
	s.wg.Wait()
	s.markLost("abandoned")
}

// Close stops renewing and revokes the lease, which deletes the member key
// and every claim still bound to it. Release claims first for a handoff
// without replay. Close waits for the write round in flight (at most
// TTL/8) and fails the writes still queued unsent, as on a lost session.
// Close is idempotent.
func (s *Session) Close(ctx context.Context) error {
	first := !s.stopped.Swap(true)
	s.end()
	s.wg.Wait()
	s.markLost(reasonClosed)
	if !first {
		return nil
	}
	if _, err := s.c.cli.Revoke(ctx, s.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("close session %s: revoke lease %x: %w", s.member.ID, int64(s.lease), err)
	}
	s.log.Info("left group", zap.Int64("lease", int64(s.lease)))
	return nil
}
