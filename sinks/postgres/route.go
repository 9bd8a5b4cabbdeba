package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// openRoutes opens the sink of a URL whose table= is a template
// ({topic}): a sinks.Router whose tables' sinks share one pool (a pool
// each would be a connection each, thousands of them at thousands of
// topics) and one offsets table. Each topic's table is opened, checked and
// created as a table= of its own would be, at the topic's first block.
//
// Routed by a field, a block's parts, one per table, and its partition's
// one offsets row are written in one transaction (writeParts): a block is
// in every table it routes to, or in none.
func openRoutes(ctx context.Context, raw string, r sqlsink.Routing, opts []Option) (sinks.Sink, error) {
	c, err := parseURL(r.Sample(raw))
	if err == nil {
		err = c.finish(opts)
	}
	if err != nil {
		return nil, &sinks.URLError{URL: sinks.Redact(raw), Err: err}
	}
	pool, err := newPool(ctx, &c)
	if err != nil {
		return nil, fmt.Errorf("open sink postgres: %w", err)
	}
	retry := sqlsink.Setup{Sink: "postgres", Timeout: c.retryTimeout, Min: retryFirst, Max: startRetryMax,
		Unreachable: unreachable, Log: c.log}
	if err := retry.Run(ctx, func(ctx context.Context) error { return ping(ctx, pool) }); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open sink postgres: %w", err)
	}
	warnDurability(ctx, pool, c.log) // once for every table, not once each
	opts = append(opts, withPool(pool))
	return sinks.NewRouter(sinks.RouterConfig{
		Template: r.Template, Field: r.Field, Default: r.Default,
		Open: func(ctx context.Context, rt sinks.Route) (sinks.Sink, error) {
			u := r.ForRoute(raw, rt)
			return sqlsink.Open(ctx, "postgres", u, DefaultRetryTimeout,
				func(ctx context.Context) (*Sink, error) { return New(ctx, u, opts...) }, ErrURL, ErrTableShape)
		},
		WriteParts: partsWriter(r.Field),
		Ping:       pool.Ping,
		Close:      func() error { pool.Close(); return nil },
	}), nil
}

// partsWriter is the router's WriteParts for a route field: nil without
// one. The offsets rows go through the first part's table's sink: the
// tables share the offsets table and its key.
func partsWriter(field string) func(context.Context, []*sinks.Block, [][]sinks.Part) []error {
	if field == "" {
		return nil
	}
	return func(ctx context.Context, blocks []*sinks.Block, parts [][]sinks.Part) []error {
		for _, ps := range parts {
			for _, p := range ps {
				if owner, ok := p.Sink.(*Sink); ok {
					return writeParts(ctx, owner, blocks, parts)
				}
			}
		}
		return make([]error, len(blocks)) // no records: nothing to store
	}
}

// ping is the server's answer, a refused login named as such.
func ping(ctx context.Context, pool *pgxpool.Pool) error {
	if err := pool.Ping(ctx); err != nil {
		if loginRefused(err) {
			return fmt.Errorf("connect: %w: give the role's password in the URL, in $PGPASSWORD, a password file or a service file", err)
		}
		return fmt.Errorf("connect: %w", err)
	}
	return nil
}
