package sinks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// RouterConfig is what a sink package gives NewRouter: its table
// template, how it opens the sink of one table, and what its sinks are.
type RouterConfig struct {
	// Template names each topic's table; Routed.
	Template Template
	// Open opens the sink that writes table. It is called once per table,
	// at the first block, Resume or claim of one of its topics.
	Open func(ctx context.Context, table string) (Sink, error)
	// Ping, if set, is the store's health check; nil: the routes' sinks
	// that are Pingers are asked.
	Ping func(ctx context.Context) error
	// Close, if set, runs after every route's sink closed (a pool the
	// routes shared).
	Close func() error
	// NeedsIntents is the routes' sinks' IntentKeeper answer.
	NeedsIntents bool
}

// Router is a sink that writes each topic's blocks to a sink of its own
// table, opened the first time the topic comes (Template). A partition's
// blocks all go to one table, so each is written, resumed and deduplicated
// by that table's sink exactly as without a router: exactly-once holds per
// table as it holds for one. Every side upgrade is the routes' sinks',
// which are Resumers and DeadLetterers.
type Router struct {
	cfg RouterConfig

	mu      sync.Mutex
	byTable map[string]*route
	byTopic map[string]*route
	claim   *destinationClaim // set by ClaimDestination
	closed  bool
}

// route is one table and its sink; ready is closed once it opened (or
// failed to: err).
type route struct {
	table   string
	topic   string // the first topic routed to it
	ready   chan struct{}
	sink    Sink
	err     error
	claimed map[string]bool // topics claimed in it for the group
}

type destinationClaim struct {
	group  string
	shared bool
}

var _ Sink = (*Router)(nil)
var _ BatchWriter = (*Router)(nil)
var _ Resumer = (*Router)(nil)
var _ IntentKeeper = (*Router)(nil)
var _ Pinger = (*Router)(nil)
var _ DeadLetterer = (*Router)(nil)
var _ DestinationClaimer = (*Router)(nil)

// ErrRouterClosed is returned by a Router's methods after Close.
var ErrRouterClosed = errors.New("sink is closed")

// NewRouter returns a router that opens nothing until a topic comes.
func NewRouter(cfg RouterConfig) *Router {
	return &Router{cfg: cfg, byTable: map[string]*route{}, byTopic: map[string]*route{}}
}

// Tables lists the tables opened so far, sorted.
func (r *Router) Tables() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.byTable))
	for t := range r.byTable {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// route is topic's route, opened if it is the first of its table. Two
// topics of one table (orders.eu and orders_eu) are refused: their
// partitions' offsets and rows would mix.
func (r *Router) route(ctx context.Context, topic string) (*route, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrRouterClosed
	}
	rt, ok := r.byTopic[topic]
	if !ok {
		table := r.cfg.Template.Table(topic)
		if other := r.byTable[table]; other != nil {
			r.mu.Unlock()
			return nil, fmt.Errorf("topics %q and %q both map to table %q (template %s): rename one, or route with a template that tells them apart",
				other.topic, topic, table, r.cfg.Template)
		}
		rt = &route{table: table, topic: topic, ready: make(chan struct{}), claimed: map[string]bool{}}
		r.byTable[table], r.byTopic[topic] = rt, rt
		r.mu.Unlock()
		rt.sink, rt.err = r.cfg.Open(ctx, table)
		if rt.err != nil {
			rt.err = fmt.Errorf("table %s of topic %s: %w", table, topic, rt.err)
			r.mu.Lock()
			delete(r.byTable, table) // the next block tries again
			delete(r.byTopic, topic)
			r.mu.Unlock()
		}
		close(rt.ready)
	} else {
		r.mu.Unlock()
	}
	select {
	case <-rt.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if rt.err != nil {
		return nil, rt.err
	}
	if err := r.claimIn(ctx, rt, topic); err != nil {
		return nil, err
	}
	return rt, nil
}

// claimIn records the group as the writer of topic in rt's table, once,
// when the caller asked for claims (ClaimDestination).
func (r *Router) claimIn(ctx context.Context, rt *route, topic string) error {
	r.mu.Lock()
	c, done := r.claim, rt.claimed[topic]
	r.mu.Unlock()
	dc, ok := rt.sink.(DestinationClaimer)
	if c == nil || done || !ok {
		return nil
	}
	if err := dc.ClaimDestination(ctx, c.group, []string{topic}, c.shared); err != nil {
		return err
	}
	r.mu.Lock()
	rt.claimed[topic] = true
	r.mu.Unlock()
	return nil
}

// ClaimDestination claims topics' tables for group now, and every table a
// topic found later is routed to at its first block: a table another
// group writes refuses that topic's blocks (see DestinationClaimer).
func (r *Router) ClaimDestination(ctx context.Context, group string, topics []string, shared bool) error {
	r.mu.Lock()
	r.claim = &destinationClaim{group: group, shared: shared}
	r.mu.Unlock()
	for _, t := range topics {
		if _, err := r.route(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

// Write writes b to its topic's table.
func (r *Router) Write(ctx context.Context, b *Block) error {
	rt, err := r.route(ctx, b.Topic)
	if err != nil {
		return err
	}
	return rt.sink.Write(ctx, b)
}

// routeWriters bounds the tables a WriteBlocks writes at once.
const routeWriters = 8

// WriteBlocks writes each table's blocks in one call of its sink, up to
// routeWriters tables at once; each block stands or falls with its table's
// call, as BatchWriter says.
func (r *Router) WriteBlocks(ctx context.Context, blocks []*Block) []error {
	errs := make([]error, len(blocks))
	byRoute := map[*route][]int{}
	var order []*route
	for i, b := range blocks {
		rt, err := r.route(ctx, b.Topic)
		if err != nil {
			errs[i] = err
			continue
		}
		if _, ok := byRoute[rt]; !ok {
			order = append(order, rt)
		}
		byRoute[rt] = append(byRoute[rt], i)
	}
	sem := make(chan struct{}, routeWriters)
	var wg sync.WaitGroup
	for _, rt := range order {
		idx := byRoute[rt]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			bs := make([]*Block, len(idx))
			for k, i := range idx {
				bs[k] = blocks[i]
			}
			for k, err := range WriteBlocks(ctx, rt.sink, bs) {
				errs[idx[k]] = err
			}
		}()
	}
	wg.Wait()
	return errs
}

// Resume is the next offset topic's table holds of the partition.
func (r *Router) Resume(ctx context.Context, topic string, partition int) (int64, int64, bool, error) {
	rt, err := r.route(ctx, topic)
	if err != nil {
		return 0, 0, false, err
	}
	res, ok := As[Resumer](rt.sink)
	if !ok {
		return 0, 0, false, nil
	}
	return res.Resume(ctx, topic, partition)
}

// NeedsIntents is RouterConfig.NeedsIntents.
func (r *Router) NeedsIntents() bool { return r.cfg.NeedsIntents }

// TakesUndecodable reports true: the routes' sinks keep dead letters.
func (r *Router) TakesUndecodable() bool { return true }

// Ping is RouterConfig.Ping, else every open route's sink's.
func (r *Router) Ping(ctx context.Context) error {
	if r.cfg.Ping != nil {
		return r.cfg.Ping(ctx)
	}
	for _, s := range r.sinks() {
		if p, ok := As[Pinger](s); ok {
			if err := p.Ping(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// DeadLetters sums the routes' sinks' (DeadLetterCounter).
func (r *Router) DeadLetters() int64 {
	var n int64
	for _, s := range r.sinks() {
		if c, ok := As[DeadLetterCounter](s); ok {
			n += c.DeadLetters()
		}
	}
	return n
}

// IgnoredFields sums the routes' sinks' (IgnoredFieldCounter).
func (r *Router) IgnoredFields() int64 {
	var n int64
	for _, s := range r.sinks() {
		if c, ok := As[IgnoredFieldCounter](s); ok {
			n += c.IgnoredFields()
		}
	}
	return n
}

// sinks are the routes' sinks that opened.
func (r *Router) sinks() []Sink {
	r.mu.Lock()
	rts := make([]*route, 0, len(r.byTable))
	for _, rt := range r.byTable {
		rts = append(rts, rt)
	}
	r.mu.Unlock()
	var out []Sink
	for _, rt := range rts {
		select {
		case <-rt.ready:
			if rt.err == nil {
				out = append(out, rt.sink)
			}
		default:
		}
	}
	return out
}

// Close closes every route's sink, then RouterConfig.Close. A second
// Close returns nil.
func (r *Router) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	rts := make([]*route, 0, len(r.byTable))
	for _, rt := range r.byTable {
		rts = append(rts, rt)
	}
	r.mu.Unlock()
	var errs []error
	for _, rt := range rts {
		<-rt.ready // an open in flight ends with its ctx or its sink's timeout
		if rt.err == nil {
			errs = append(errs, rt.sink.Close())
		}
	}
	if r.cfg.Close != nil {
		errs = append(errs, r.cfg.Close())
	}
	return errors.Join(errs...)
}
