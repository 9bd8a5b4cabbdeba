package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// New connects to the database of url, checks the tables that exist
// against the mode (refusing one it cannot use with an error wrapping
// ErrTableShape, before anything is created), creates the tables that are
// missing and, in columns and upsert modes, reads the table's columns. ctx
// bounds only this; the sink's lifetime is the caller's, until Close.
func New(ctx context.Context, url string, opts ...Option) (*Sink, error) {
	c, err := parseURL(url)
	if err == nil {
		err = c.finish(opts)
	}
	if err != nil {
		return nil, err
	}
	pool, owned := c.pool, false
	if pool == nil {
		if pool, err = newPool(ctx, &c); err != nil {
			return nil, err
		}
		owned = true
	}
	s := &Sink{cfg: c, pool: pool, ownsPool: owned, checked: map[int]time.Time{}, plans: map[int]*fieldPlan{}, logged: map[int]bool{}, recheck: recheckAfter}
	retry := sqlsink.Setup{Sink: "postgres", Timeout: c.retryTimeout, Min: retryFirst, Max: startRetryMax,
		Unreachable: unreachable, Log: c.log, Retried: func() { s.retries.Add(1) }}
	if err := retry.Run(ctx, s.setup); err != nil {
		if owned {
			pool.Close()
		}
		return nil, fmt.Errorf("postgres sink %s: %w", c.table.Sanitize(), err)
	}
	return s, nil
}

// newPool opens the connection pool of c's URL; each connection makes the
// mode's staging table when it opens.
func newPool(ctx context.Context, c *config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(c.connString)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrURL, err)
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		// pgx's default is none: one connection attempt to a server that
		// drops packets would take the whole wait at start.
		pc.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	stage := createStageRaw
	switch c.mode {
	case Columns:
		stage = createStageCols
	case Upsert:
		stage = createStageUpsert
	}
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, stage); err != nil {
			return fmt.Errorf("create the staging table: %w", err)
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres sink: %w", err)
	}
	return pool, nil
}

func (s *Sink) setup(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		if loginRefused(err) {
			return fmt.Errorf("connect: %w: give the role's password in the URL (postgres://USER:PASSWORD@HOST/DB, "+
				"percent-encoded), in $PGPASSWORD, in a password file (passfile=, or ~/.pgpass) or a service file "+
				"(service=); or check the server's pg_hba.conf", err)
		}
		return fmt.Errorf("connect: %w", err)
	}
	// A table made here, for evolve=add-columns, has no shape to refuse.
	if s.cfg.mode == Columns && s.cfg.evolve == AddColumns {
		made, err := createMissing(ctx, s.pool, s.cfg.table)
		if err != nil {
			return err
		}
		if made {
			s.ddl.Add(1)
			s.cfg.log.Info("table created", zap.String("table", s.cfg.table.Sanitize()), zap.Stringer("mode", s.cfg.mode))
		}
	}
	// What can refuse a table is read before any table is made, so that a
	// refused start changes nothing (ErrTableShape).
	if err := checkTables(ctx, s.pool, &s.cfg); err != nil {
		return err
	}
	if s.cfg.mode != Raw {
		oid, cols, names, err := readColumns(ctx, s.pool, s.cfg.table, s.cfg.mode)
		if err != nil {
			return err
		}
		if s.cfg.mode == Upsert {
			if s.key, err = readKey(ctx, s.pool, s.cfg.table, oid, s.cfg.conflict, cols); err != nil {
				return err
			}
		}
		s.tab.Store(s.newTable(cols, names))
	}
	if err := ensureTables(ctx, s.pool, &s.cfg); err != nil {
		return err
	}
	if !s.cfg.route {
		warnDurability(ctx, s.pool, s.cfg.log) // a router's tables: once for all, at its start
	}
	s.sql = buildStatements(&s.cfg)
	return s.prepareAll(ctx)
}

// warnDurability says when PostgreSQL acknowledges a commit before it is
// on disk (synchronous_commit = off for the sink's user or database): a
// crash of its host can then lose a block's rows and offsets row, while
// the etcd commit that follows is durable, and the replica resumes past
// them. fsync = off loses more.
func warnDurability(ctx context.Context, pool *pgxpool.Pool, log *zap.Logger) {
	var syncCommit, fsync string
	if err := pool.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('fsync')`).Scan(&syncCommit, &fsync); err != nil {
		log.Debug("could not read synchronous_commit and fsync", zap.Error(err))
		return
	}
	switch {
	case syncCommit == "off":
		log.Warn("PostgreSQL acknowledges the sink's commits before they are on disk (synchronous_commit = off): a crash "+
			"of its host (not of the process) can lose rows whose offsets etcd has committed; ALTER ROLE ... SET synchronous_commit = on",
			zap.String("synchronous_commit", syncCommit))
	case fsync == "off":
		// A server-wide choice (test clusters make it): said, not warned.
		log.Info("the PostgreSQL server runs with fsync = off: a crash of its host can lose committed rows",
			zap.String("fsync", fsync))
	}
}
