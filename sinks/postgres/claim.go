package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

var _ sinks.DestinationClaimer = (*Sink)(nil)

// GroupsTable is the table ClaimDestination records the groups in, made
// if missing in the schema of the offsets table:
//
//	table_name text, topic text, group_name text, since timestamptz;
//	PRIMARY KEY (table_name, topic)
//
// table_name is the rows' table as schema.name, whatever the URL's
// spelling of it.
const GroupsTable = "offsetkeeper_sink_groups"

// ClaimDestination records group as the writer of each of topics in the
// sink's table (sinks.DestinationClaimer), where no group is recorded. In
// one transaction, under the advisory lock the sink creates its tables
// under, so that two groups claiming at once take turns and the first one
// wins: a topic of the table recorded for another group is refused with an
// error wrapping sinks.ErrDestinationClaimed, and nothing is recorded,
// unless shared.
func (s *Sink) ClaimDestination(ctx context.Context, group string, topics []string, shared bool) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return fmt.Errorf("claim %s: %w", s.cfg.table.Sanitize(), ErrClosed)
	}
	groups := s.groupsTable()
	type owner struct {
		group string
		since time.Time
	}
	owners := map[string]owner{}
	var table string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schemaLock)); err != nil {
			return fmt.Errorf("lock the schema: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+groups.Sanitize()+` (
	table_name text NOT NULL,
	topic text NOT NULL,
	group_name text NOT NULL,
	since timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (table_name, topic)
)`); err != nil {
			return fmt.Errorf("create %s: %w", groups.Sanitize(), err)
		}
		// The table by its catalog name, so that "t" and "public.t" are one.
		if err := tx.QueryRow(ctx, `SELECT format('%I.%I', n.nspname, c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1::regclass`,
			s.cfg.table.Sanitize()).Scan(&table); err != nil {
			return fmt.Errorf("find %s: %w", s.cfg.table.Sanitize(), err)
		}
		rows, err := tx.Query(ctx, `SELECT topic, group_name, since FROM `+groups.Sanitize()+
			` WHERE table_name = $1 AND topic = ANY($2) AND group_name <> $3`, table, topics, group)
		if err != nil {
			return fmt.Errorf("read %s: %w", groups.Sanitize(), err)
		}
		defer rows.Close() // on a Scan error too: the rollback needs the connection
		for rows.Next() {
			var t string
			var o owner
			if err := rows.Scan(&t, &o.group, &o.since); err != nil {
				return fmt.Errorf("read %s: %w", groups.Sanitize(), err)
			}
			owners[t] = o
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read %s: %w", groups.Sanitize(), err)
		}
		if len(owners) > 0 && !shared {
			return nil // and record nothing: the caller refuses
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+groups.Sanitize()+` (table_name, topic, group_name)
SELECT $1, t, $3 FROM unnest($2::text[]) AS t ON CONFLICT DO NOTHING`, table, topics, group); err != nil {
			return fmt.Errorf("record in %s: %w", groups.Sanitize(), err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("claim %s for group %q: %w", s.cfg.table.Sanitize(), group, err)
	}
	if len(owners) == 0 || shared {
		return nil
	}
	var parts, quoted []string
	names := make([]string, 0, len(owners))
	for t := range owners {
		names = append(names, t)
	}
	slices.Sort(names)
	for _, t := range names {
		parts = append(parts, fmt.Sprintf("topic %s is written by group %q (since %s)", t, owners[t].group, owners[t].since.UTC().Format(time.RFC3339)))
		quoted = append(quoted, literal(t))
	}
	return fmt.Errorf("postgres table %s: %s, not by group %q: each group delivers every record once, so a reader of the table would see them twice; "+
		"if that group no longer writes here, delete its row: DELETE FROM %s WHERE table_name = %s AND topic IN (%s): %w",
		table, strings.Join(parts, "; "), group, groups.Sanitize(), literal(table), strings.Join(quoted, ", "), sinks.ErrDestinationClaimed)
}

// literal is s as an SQL string literal, for a statement to copy.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// groupsTable is GroupsTable in the offsets table's schema.
func (s *Sink) groupsTable() pgx.Identifier {
	id := slices.Clone(s.cfg.offsets[:len(s.cfg.offsets)-1])
	return append(id, GroupsTable)
}
