package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// Descriptor is the PostgreSQL sink's entry in a sinks.Table:
// postgres:// (or postgresql://).
var Descriptor = &sinks.Descriptor{
	Scheme:  "postgres",
	Aliases: []string{"postgresql"},
	Usage:   "postgres://USER@HOST[:PORT]/DB[?table=T&mode=raw|columns|upsert] (exactly-once)",
	Params:  descriptorParams(),
	Doc:     "postgresql.md",
	Check:   func(raw string) error { return ValidateURL(raw, false) },
	Open: func(ctx context.Context, raw string, o sinks.Options) (sinks.Sink, error) {
		opts := sqlsink.Options(o, WithGroup, WithLogger)
		if r, ok := sqlsink.RoutingOf(raw); ok {
			return openRoutes(ctx, raw, r, opts)
		}
		return sqlsink.Open(ctx, "postgres", raw, DefaultRetryTimeout,
			func(ctx context.Context) (*Sink, error) { return New(ctx, raw, opts...) }, ErrURL, ErrTableShape)
	},
	// The port is part of where a PostgreSQL sink writes: two servers on
	// one host are two databases.
	Identity: func(raw string) string { return sqlsink.Identity("postgres", raw, DefaultTable, "5432") },
	Keeps:    true,
	ByGroup:  true,
	Audit: func(ctx context.Context, raw, shown, group string) (sinks.Reader, error) {
		return sqlsink.Reader(openPostgresSink(ctx, raw, shown, group))
	},
	ReadBack: func(ctx context.Context, raw, topic string, partition int) ([]sinks.Record, bool, error) {
		recs, err := ReadAll(ctx, raw, topic, partition)
		if errors.Is(err, ErrURL) {
			return nil, false, nil // a columns table: no records to read back
		}
		return recs, err == nil, err
	},
	DeadLetters: deadLetters,
	ExactlyOnce: true,
}

// descriptorParams are the sink's own parameters and, after them, those
// it passes on.
func descriptorParams() []sinks.Param {
	ps := Params()
	for _, c := range ConnParams() {
		ps = append(ps, sinks.Param{Name: c.Name, PassedTo: c.From})
	}
	return ps
}

// deadLetters counts the dead-letter table's records of topic, with the
// first reason.
func deadLetters(ctx context.Context, raw, topic string) (int64, string, error) {
	t, err := ParseTables(raw)
	if err != nil {
		return 0, "", fmt.Errorf("count the dead letters: %w", err)
	}
	conn, err := pgx.Connect(ctx, t.ConnString)
	if err != nil {
		return 0, "", fmt.Errorf("count the dead letters in %s: %w", t.DeadLetters, err)
	}
	defer conn.Close(context.Background())
	var n int64
	var reason *string
	err = conn.QueryRow(ctx, `SELECT count(*), min(error) FROM `+t.DeadLetters+` WHERE topic = $1`, topic).Scan(&n, &reason)
	if err != nil {
		return 0, "", fmt.Errorf("count the dead letters in %s: %w", t.DeadLetters, err)
	}
	where := t.DeadLetters
	if n > 0 && reason != nil {
		where = fmt.Sprintf("%s (the first reason: %s)", t.DeadLetters, *reason)
	}
	return n, where, nil
}
