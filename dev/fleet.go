package dev

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/netproxy"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// fleet runs in-process replicas, each with its own etcd client, as
// separate processes would. Each replica reaches every etcd member through a
// proxy of its own and Kafka through a dialer of its own, and writes through
// a gate of its own, so that chaos can fault one replica at a time.
type fleet struct {
	cfg     replica.Config
	members []string // etcd members' client addresses, host:port
	sink    sinks.Sink
	log     *zap.Logger
	late    lateWrites // a zombie's held writes
	// expect, with chaos, tells which replicas' warnings are the
	// expected work of a fault dev injected; nil without.
	expect *expect

	mu      sync.Mutex
	next    int
	down    map[int]bool // etcd members stopped by the leader fault
	running []*node
}

// node is one replica of the fleet, with its own ways to etcd (a proxy
// per member), to Kafka (a dialer) and to the sink (a gate).
type node struct {
	r       *replica.Replica
	cli     *clientv3.Client
	proxies []*netproxy.Proxy // to etcd member i
	kafka   *netproxy.Dialer
	gate    *gate
	cancel  context.CancelFunc
	done    chan struct{}
}

// client is an etcd client of dev itself (the progress lines and the
// operator's faults), straight to the members.
func (f *fleet) client() (*clientv3.Client, error) {
	return etcdClient(f.members)
}

func etcdClient(endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client of %s: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

func (f *fleet) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.running)
}

func (f *fleet) start(ctx context.Context) error {
	d := &node{kafka: netproxy.NewDialer(), gate: &gate{}, done: make(chan struct{})}
	f.mu.Lock()
	f.next++
	cfg := f.cfg
	cfg.ReplicaID = fmt.Sprintf("dev-%d", f.next)
	var endpoints []string
	for i, m := range f.members {
		p, err := netproxy.New(m)
		if err != nil {
			f.mu.Unlock()
			d.closeProxies()
			return err
		}
		if f.down[i] {
			p.Refuse(true)
		}
		d.proxies = append(d.proxies, p)
		endpoints = append(endpoints, p.Addr())
	}
	f.mu.Unlock()
	cli, err := etcdClient(endpoints)
	if err != nil {
		d.closeProxies()
		return err
	}
	d.cli = cli
	cfg.Kafka.Dial = d.kafka.DialContext
	log := f.log
	if f.expect != nil {
		log = f.expect.logger(log, cfg.ReplicaID)
	}
	r, err := replica.New(cfg, cli, &gatedSink{inner: f.sink, gate: d.gate, late: &f.late}, log)
	if err != nil {
		d.close()
		return err
	}
	d.r = r
	rctx, cancel := context.WithCancel(ctx)
	d.cancel = cancel
	go func() {
		defer close(d.done)
		_ = r.Run(rctx)
	}()
	f.mu.Lock()
	f.running = append(f.running, d)
	f.mu.Unlock()
	return nil
}

func (f *fleet) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, d := range f.running {
		out = append(out, d.r.ID())
	}
	return out
}

// find is the running replica id, or nil.
func (f *fleet) find(id string) *node {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.running {
		if d.r.ID() == id {
			return d
		}
	}
	return nil
}

func (f *fleet) take(i int) *node {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.running[i]
	f.running = append(f.running[:i], f.running[i+1:]...)
	return d
}

// crash kills replica i: no block finished, no claim released, the lease
// left to expire.
func (f *fleet) crash(i int) {
	d := f.take(i)
	d.r.Kill()
	d.gate.resume() // a write held by a pause must not hold Run
	<-d.done
	d.cancel()
	d.close()
}

// stop stops replica i as SIGTERM would.
func (f *fleet) stop(i int) {
	d := f.take(i)
	d.gate.resume()
	for _, p := range d.proxies {
		p.Pass()
	}
	d.cancel()
	<-d.done
	d.close()
}

func (f *fleet) stopAll() {
	for f.size() > 0 {
		f.stop(0)
	}
}

// memberDown makes etcd member i look crashed to every replica, now and to
// those started later: connections cut, new ones refused.
func (f *fleet) memberDown(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[i] = true
	for _, d := range f.running {
		d.proxies[i].Refuse(true)
		_ = d.proxies[i].Cut()
	}
}

// memberUp undoes memberDown.
func (f *fleet) memberUp(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.down, i)
	for _, d := range f.running {
		d.proxies[i].Refuse(false)
	}
}

// cutEtcd cuts replica d off from every etcd member, or restores it (but
// not to a member the leader fault keeps down); it says how many
// connections it cut.
func (f *fleet) cutEtcd(d *node, cut bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for i, p := range d.proxies {
		switch {
		case cut:
			p.Refuse(true)
			n += p.Cut()
		case !f.down[i]:
			p.Refuse(false)
		}
	}
	return n
}

// pause stops replica d as SIGSTOP would, as far as etcd and the sink can
// tell: its etcd bytes and its sink writes are held until resume. The sink
// is held first and etcd once a write is held (or after wait): the zombie
// that fencing exists for is the one stopped in the middle of a block, its
// intent written, its write to come.
func (d *node) pause(wait time.Duration) {
	arrived := d.gate.pause()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-arrived:
	case <-t.C:
	}
	for _, p := range d.proxies {
		p.Blackhole()
	}
}

func (d *node) resume() {
	for _, p := range d.proxies {
		p.Pass()
	}
	d.gate.resume()
}

func (d *node) close() {
	if d.cli != nil {
		_ = d.cli.Close()
	}
	d.closeProxies()
}

func (d *node) closeProxies() {
	for _, p := range d.proxies {
		p.Close()
	}
}

// gate holds a dev replica's sink writes while it is paused (zombie):
// they go on, late, once it resumes, as a stopped process's would.
type gate struct {
	mu      sync.Mutex
	resumed chan struct{} // non-nil while paused
	arrived chan struct{} // closed when a write is first held by this pause
}

// pause holds the writes to come; the channel is closed once one is held.
func (g *gate) pause() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resumed == nil {
		g.resumed, g.arrived = make(chan struct{}), make(chan struct{})
	}
	return g.arrived
}

func (g *gate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resumed != nil {
		close(g.resumed)
		g.resumed = nil
	}
}

// lateWriteBound bounds a write that a pause held, once it goes on.
const lateWriteBound = 10 * time.Second

// wait returns once the gate is open, with the context to write with and
// whether the write was held. A held write goes on whatever became of ctx
// meanwhile, as one a stopped process had started would when it resumes:
// the late write that fencing must refuse, or make harmless.
func (g *gate) wait(ctx context.Context) (context.Context, context.CancelFunc, bool) {
	g.mu.Lock()
	resumed := g.resumed
	if resumed != nil {
		select {
		case <-g.arrived:
		default:
			close(g.arrived)
		}
	}
	g.mu.Unlock()
	if resumed == nil {
		return ctx, func() {}, false
	}
	<-resumed
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lateWriteBound)
	return ctx, cancel, true
}

// lateWrites counts the writes a pause held, and how the sink took them, over
// all the replicas of a run.
type lateWrites struct {
	writes, fenced, failed atomic.Int64
}

// note counts one held write (one call, of one block or several) by its
// worst outcome: fenced, failed otherwise, or stored.
func (l *lateWrites) note(errs ...error) {
	l.writes.Add(1)
	failed := false
	for _, err := range errs {
		if errors.Is(err, sinks.ErrFenced) {
			l.fenced.Add(1)
			return
		}
		failed = failed || err != nil
	}
	if failed {
		l.failed.Add(1)
	}
}

// counts are the late writes counted so far.
func (l *lateWrites) counts() LateWrites {
	w, f, e := l.writes.Load(), l.fenced.Load(), l.failed.Load()
	return LateWrites{Writes: w, Fenced: f, Failed: e, Stored: w - f - e}
}

// LateWrites are the writes a paused replica (FaultZombie) resumed after
// losing its claim, and how the sink took them.
type LateWrites struct {
	// Writes is how many; each is one call, of one block or several.
	Writes int64
	// Fenced were refused by the sink's epoch fence (sinks.ErrFenced).
	Fenced int64
	// Failed failed otherwise.
	Failed int64
	// Stored were stored: harmless when the audit finds nothing.
	Stored int64
}

// String is the zombies: line of the report.
func (l LateWrites) String() string {
	return fmt.Sprintf("%d late writes: %d fenced by the sink, %d failed otherwise, %d stored", l.Writes, l.Fenced, l.Failed, l.Stored)
}

// gatedSink is one dev replica's view of the shared sink, through its gate.
// It is a sinks.Wrapper, so the inner sink's upgrades stay visible.
type gatedSink struct {
	inner sinks.Sink
	gate  *gate
	late  *lateWrites
}

// Unwrap returns the inner sink (sinks.Wrapper).
func (s *gatedSink) Unwrap() sinks.Sink { return s.inner }

// Write waits for the gate, then writes.
func (s *gatedSink) Write(ctx context.Context, b *sinks.Block) error {
	ctx, cancel, held := s.gate.wait(ctx)
	defer cancel()
	err := s.inner.Write(ctx, b)
	if held {
		s.late.note(err)
	}
	return err
}

// WriteBlocks (sinks.BatchWriter) waits for the gate, then writes through
// the inner sink's batching.
func (s *gatedSink) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	ctx, cancel, held := s.gate.wait(ctx)
	defer cancel()
	errs := sinks.WriteBlocks(ctx, s.inner, blocks)
	if held {
		s.late.note(errs...)
	}
	return errs
}

// Close does nothing: the shared sink is closed by dev.
func (s *gatedSink) Close() error { return nil }
