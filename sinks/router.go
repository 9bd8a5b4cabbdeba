package sinks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// RouterConfig is what a sink package gives NewRouter: its table
// template, how it opens the sink of one table, and what its sinks are.
type RouterConfig struct {
	// Template names each topic's table, or with Field each route's.
	Template Template
	// Open opens the sink that writes a route's table. It is called once
	// per table, at the first block, Resume or claim of one of its topics.
	Open func(ctx context.Context, rt Route) (Sink, error)
	// Ping, if set, is the store's health check; nil: the routes' sinks
	// that are Pingers are asked.
	Ping func(ctx context.Context) error
	// Close, if set, runs after every route's sink closed (a pool the
	// routes shared).
	Close func() error
	// NeedsIntents is the routes' sinks' IntentKeeper answer.
	NeedsIntents bool
	// InsertsRounds is the routes' sinks' RoundInserter answer, and
	// RoundInterval their RoundPacer's.
	InsertsRounds bool
	RoundInterval time.Duration
	// Field, if set, routes each record by the top-level field of its
	// JSON value: to Template with {route} its value, or, for a record
	// without it, to Default. A block is then split, a part per table,
	// and each part written to its table's sink with the block's range:
	// each table deduplicates its part, so a block written again after a
	// crash doubles nothing. Without WriteParts each table's sink keeps
	// only its parts, so the router resumes from etcd and asks for
	// intents.
	Field   string
	Default Template
	// WriteParts, if set, writes the parts of blocks routed by Field in
	// one call: parts[i] are blocks[i]'s, each with its table's sink, and
	// errs[i] is blocks[i]'s outcome, all its parts or none (one
	// transaction). Its sinks then share one offsets row per partition,
	// so the router resumes from the default table's sink and asks for no
	// intents. Nil: each table's sink writes its parts with its own
	// offsets.
	WriteParts func(ctx context.Context, blocks []*Block, parts [][]Part) []error
}

// Part is a block's share of one table, and that table's sink.
type Part struct {
	Sink  Sink
	Block *Block
}

// Route is a table of a Router and what named it first: a topic and, by
// field, the field's value ("default" for the records without it).
type Route struct {
	Table, Topic, Value string
}

// Router is a sink that writes each topic's blocks to a sink of its own
// table, opened the first time the topic comes (Template). A partition's
// blocks all go to one table, so each is written, resumed and deduplicated
// by that table's sink exactly as without a router: exactly-once holds per
// table as it holds for one. Every side upgrade is the routes' sinks',
// which are Resumers and DeadLetterers. With RouterConfig.Field it routes
// records instead, each by a field of its value.
type Router struct {
	cfg RouterConfig

	mu      sync.Mutex
	byTable map[string]*route
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
var (
	_ IntentKeeper  = (*Router)(nil)
	_ RoundInserter = (*Router)(nil)
	_ RoundPacer    = (*Router)(nil)
)
var _ Pinger = (*Router)(nil)
var _ DeadLetterer = (*Router)(nil)
var _ DestinationClaimer = (*Router)(nil)
var _ DDLCounter = (*Router)(nil)
var _ IgnoredFieldCounter = (*Router)(nil)
var _ DeadLetterCounter = (*Router)(nil)

// ErrRouterClosed is returned by a Router's methods after Close.
var ErrRouterClosed = errors.New("sink is closed")

// NewRouter returns a router that opens nothing until a topic comes.
func NewRouter(cfg RouterConfig) *Router {
	return &Router{cfg: cfg, byTable: map[string]*route{}}
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
// partitions' offsets and rows would mix. A router by field keys its
// sinks' offsets per table, so there topics may share one.
func (r *Router) route(ctx context.Context, topic, table, value string) (*route, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrRouterClosed
	}
	rt := r.byTable[table]
	if r.cfg.Field == "" {
		if other := r.byTable[table]; other != nil && other.topic != topic {
			r.mu.Unlock()
			return nil, fmt.Errorf("topics %q and %q both map to table %q (template %s): rename one, or route with a template that tells them apart",
				other.topic, topic, table, r.cfg.Template)
		}
	}
	if rt == nil {
		rt = &route{table: table, topic: topic, ready: make(chan struct{}), claimed: map[string]bool{}}
		r.byTable[table] = rt
		r.mu.Unlock()
		rt.sink, rt.err = r.cfg.Open(ctx, Route{Table: table, Topic: topic, Value: value})
		if rt.err != nil {
			rt.err = fmt.Errorf("table %s of topic %s: %w", table, topic, rt.err)
			r.mu.Lock()
			delete(r.byTable, table) // the next block tries again
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
		table, value := r.cfg.Template.Table(t), ""
		if r.cfg.Field != "" {
			table, value = r.cfg.Default.Table(t), defaultRoute
		}
		if _, err := r.route(ctx, t, table, value); err != nil {
			return err
		}
	}
	return nil
}

// Write writes b to its topic's table, or each part of it to its table.
func (r *Router) Write(ctx context.Context, b *Block) error {
	return r.WriteBlocks(ctx, []*Block{b})[0]
}

// routeWriters bounds the tables a WriteBlocks writes at once.
const routeWriters = 8

// part is a block's share of one table: the block itself when it goes
// whole.
type part struct {
	i int // the block's index in the call
	b *Block
}

// WriteBlocks writes each table's blocks (or parts) in one call of its
// sink, up to routeWriters tables at once; each block stands or falls
// with the calls of its parts, as BatchWriter says.
func (r *Router) WriteBlocks(ctx context.Context, blocks []*Block) []error {
	if r.cfg.Field != "" && r.cfg.WriteParts != nil {
		return r.writeParts(ctx, blocks)
	}
	errs := make([]error, len(blocks))
	byRoute := map[*route][]part{}
	var order []*route
	for i, b := range blocks {
		for _, t := range r.tablesOf(b) {
			rt, err := r.route(ctx, b.Topic, t.table, t.value)
			if err != nil {
				errs[i] = errors.Join(errs[i], err)
				continue
			}
			if _, ok := byRoute[rt]; !ok {
				order = append(order, rt)
			}
			byRoute[rt] = append(byRoute[rt], part{i, t.b})
		}
	}
	var mu sync.Mutex
	setAside := make([]int, len(blocks))
	sem := make(chan struct{}, routeWriters)
	var wg sync.WaitGroup
	for _, rt := range order {
		parts := byRoute[rt]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			bs := make([]*Block, len(parts))
			for k, p := range parts {
				bs[k] = p.b
			}
			out := WriteBlocks(ctx, rt.sink, bs)
			mu.Lock()
			defer mu.Unlock()
			for k, p := range parts {
				if err := out[k]; err != nil {
					if p.b != blocks[p.i] {
						err = fmt.Errorf("table %s: %w", rt.table, err)
					}
					errs[p.i] = errors.Join(errs[p.i], err)
				}
				setAside[p.i] += p.b.SetAside
			}
		}()
	}
	wg.Wait()
	if r.cfg.Field != "" {
		for i, b := range blocks {
			if errs[i] == nil {
				b.NoteSetAside(setAside[i])
			}
		}
	}
	return errs
}

// writeParts writes blocks routed by field through RouterConfig.WriteParts:
// every part of a block in one call, which stores them all or none.
func (r *Router) writeParts(ctx context.Context, blocks []*Block) []error {
	errs := make([]error, len(blocks))
	var ok []*Block
	var parts [][]Part
	var index []int
	for i, b := range blocks {
		var ps []Part
		for _, t := range r.tablesOf(b) {
			rt, err := r.route(ctx, b.Topic, t.table, t.value)
			if err != nil {
				errs[i] = errors.Join(errs[i], err)
				continue
			}
			ps = append(ps, Part{Sink: rt.sink, Block: t.b})
		}
		if errs[i] == nil {
			ok, parts, index = append(ok, b), append(parts, ps), append(index, i)
		}
	}
	if len(ok) == 0 {
		return errs
	}
	for k, err := range r.cfg.WriteParts(ctx, ok, parts) {
		i := index[k]
		if errs[i] = err; err == nil {
			n := 0
			for _, p := range parts[k] {
				n += p.Block.SetAside
			}
			blocks[i].NoteSetAside(n)
		}
	}
	return errs
}

// tableBlock is a block, or its part, its table and its route value.
type tableBlock struct {
	table, value string
	b            *Block
}

// defaultRoute is the route value of the records without the field.
const defaultRoute = "default"

// tablesOf is where b goes: whole to its topic's table, or by field, a
// part per table in the order of their names, each with b's range.
func (r *Router) tablesOf(b *Block) []tableBlock {
	if r.cfg.Field == "" {
		return []tableBlock{{r.cfg.Template.Table(b.Topic), "", b}}
	}
	byTable := map[string][]Record{}
	values := map[string]string{}
	for _, rec := range b.Records {
		t, value := r.cfg.Default.Table(b.Topic), defaultRoute
		if v, ok := FieldValue(rec.Value, r.cfg.Field); ok && len(TableName(v)) <= maxRouteName {
			t, value = r.cfg.Template.Expand(b.Topic, v), v
		}
		byTable[t] = append(byTable[t], rec)
		values[t] = value
	}
	out := make([]tableBlock, 0, len(byTable))
	for t, recs := range byTable {
		p := *b
		p.Records, p.SetAside = recs, 0
		out = append(out, tableBlock{t, values[t], &p})
	}
	slices.SortFunc(out, func(a, b tableBlock) int { return strings.Compare(a.table, b.table) })
	return out
}

// maxRouteName bounds a route value's part of a table name: a longer one
// goes to the default table, rather than to a name a store would cut
// short or refuse.
const maxRouteName = 48

// FieldValue is the top-level field of a JSON object value: a string, or
// a number as written; ok is false for another value, none, or a value
// that is not a JSON object.
func FieldValue(value []byte, field string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return "", false
		}
		if k != field {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return "", false
			}
			continue
		}
		var v any
		if dec.Decode(&v) != nil {
			return "", false
		}
		switch v := v.(type) {
		case string:
			return v, v != ""
		case json.Number:
			return v.String(), true
		}
		return "", false
	}
	return "", false
}

// Resume is the next offset topic's table holds of the partition; a
// router by field without WriteParts knows none (ok false: etcd's offset
// and the intents decide).
func (r *Router) Resume(ctx context.Context, topic string, partition int) (int64, int64, bool, error) {
	table, value := r.cfg.Template.Table(topic), ""
	switch {
	case r.cfg.Field != "" && r.cfg.WriteParts == nil:
		return 0, 0, false, nil
	case r.cfg.Field != "":
		// The tables share the partition's offsets row: any of them
		// knows it; the default table is the topic's for sure.
		table, value = r.cfg.Default.Table(topic), defaultRoute
	}
	rt, err := r.route(ctx, topic, table, value)
	if err != nil {
		return 0, 0, false, err
	}
	res, ok := As[Resumer](rt.sink)
	if !ok {
		return 0, 0, false, nil
	}
	return res.Resume(ctx, topic, partition)
}

// NeedsIntents is RouterConfig.NeedsIntents; true for a router by field
// without WriteParts, whose parts are deduplicated only when written again
// with their range.
func (r *Router) NeedsIntents() bool {
	return r.cfg.NeedsIntents || (r.cfg.Field != "" && r.cfg.WriteParts == nil)
}

// InsertsRounds is RouterConfig.InsertsRounds: each table's sink stores
// the blocks (or parts) of a round that go to it as one insert.
func (r *Router) InsertsRounds() bool { return r.cfg.InsertsRounds }

// RoundInterval is RouterConfig.RoundInterval: each table gets an insert
// per interval at most.
func (r *Router) RoundInterval() time.Duration { return r.cfg.RoundInterval }

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

// DDL sums the routes' sinks' (DDLCounter).
func (r *Router) DDL() int64 {
	var n int64
	for _, s := range r.sinks() {
		if c, ok := As[DDLCounter](s); ok {
			n += c.DDL()
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
