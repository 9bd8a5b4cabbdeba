package clickhouse

import (
	"context"
	"errors"
	"net/url"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// Descriptor is the ClickHouse sink's entry in a sinks.Table:
// clickhouse://.
var Descriptor = &sinks.Descriptor{
	Scheme: "clickhouse",
	Usage: "clickhouse://[USER@]HOST[:PORT]/DB[?table=T&mode=raw|columns&protocol=native|http] (exactly-once by deduplication tokens; " +
		"port 9000 by default; password in $" + PasswordEnv + " or password_file=)",
	Params: Params(),
	Doc:    "clickhouse.md",
	Check:  func(raw string) error { return ValidateURL(raw, false) },
	Open: func(ctx context.Context, raw string, o sinks.Options) (sinks.Sink, error) {
		opts := sqlsink.Options(o, WithGroup, WithLogger)
		if r, ok := sqlsink.RoutingOf(raw); ok {
			interval := DefaultInsertInterval
			if c, err := parseURL(raw); err == nil {
				interval = c.insertInterval
			}
			// One sink per table, opened at its topic's (or route's) first
			// block; a block's part in each table is inserted with the
			// block's token, deduplicated by that table.
			return sinks.NewRouter(sinks.RouterConfig{Template: r.Template, Field: r.Field, Default: r.Default, NeedsIntents: true,
				InsertsRounds: true, RoundInterval: interval,
				Open: func(ctx context.Context, rt sinks.Route) (sinks.Sink, error) {
					return openTable(ctx, r.ForRoute(raw, rt), opts)
				}}), nil
		}
		return openTable(ctx, raw, opts)
	},
	// A ClickHouse server answers the native protocol and HTTP on two
	// ports: the table is the same, so the port is left out.
	Identity: func(raw string) string { return sqlsink.Identity("clickhouse", raw, DefaultTable, "") },
	Keeps:    true,
	ByGroup:  true,
	Audit: func(ctx context.Context, raw, shown, _ string) (sinks.Reader, error) {
		return sqlsink.Reader(openClickHouseSink(ctx, raw, shown))
	},
	ReadBack: func(ctx context.Context, raw, topic string, partition int) ([]sinks.Record, bool, error) {
		recs, err := ReadAll(ctx, raw, topic, partition)
		if errors.Is(err, ErrURL) {
			return nil, false, nil // a columns table: no records to read back
		}
		return recs, err == nil, err
	},
	// The sink counts what it set aside (sinks.DeadLetterCounter); the
	// table is named for the reader to look.
	DeadLetters: func(_ context.Context, raw, _ string) (int64, string, error) {
		table := DefaultDeadLetterTable
		if u, err := url.Parse(raw); err == nil && u.Query().Get("dead_letter_table") != "" {
			table = u.Query().Get("dead_letter_table")
		}
		return -1, table, nil
	},
}

// openTable opens the sink of one table, on one shard or several.
func openTable(ctx context.Context, raw string, opts []Option) (sinks.Sink, error) {
	if IsSharded(raw) {
		return sqlsink.Open(ctx, "clickhouse", raw, DefaultRetryTimeout,
			func(ctx context.Context) (*Sharded, error) { return NewSharded(ctx, raw, opts...) }, ErrURL, ErrTableShape, ErrNoDeduplication)
	}
	return sqlsink.Open(ctx, "clickhouse", raw, DefaultRetryTimeout,
		func(ctx context.Context) (*Sink, error) { return New(ctx, raw, opts...) }, ErrURL, ErrTableShape, ErrNoDeduplication)
}
