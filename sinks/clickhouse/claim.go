package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

var _ sinks.DestinationClaimer = (*Sink)(nil)

// GroupsTable is the table ClaimDestination records the groups in, made if
// missing in the database of the rows' table:
//
//	table_name String, topic String, group_name String, since DateTime64(6, 'UTC')
//	ENGINE = MergeTree ORDER BY (table_name, topic)
//	SETTINGS non_replicated_deduplication_window = 10000
//
// table_name is the rows' table as db.name.
const GroupsTable = "offsetkeeper_sink_groups"

// owner is the group recorded for a topic of the table.
type owner struct {
	group string
	since time.Time
}

// ClaimDestination records group as the writer of each of topics in the
// sink's table (sinks.DestinationClaimer), where no group is recorded yet.
// A topic recorded for another group is refused with an error wrapping
// sinks.ErrDestinationClaimed, before anything is recorded, unless shared.
//
// ClickHouse has no transactions; the first group wins by ClickHouse's
// insert deduplication instead: each topic's row is inserted with a token
// of the table and the topic alone, so of groups claiming it at once on
// one server the first insert is stored and the others are dropped, and
// each reads back which group it is. Where that cannot hold, two groups
// starting at the same moment may both pass: a cluster whose servers each
// keep their own GroupsTable, or a topic whose row an operator deleted
// (its token still remembered, the next claim inserts without one).
func (s *Sink) ClaimDestination(ctx context.Context, group string, topics []string, shared bool) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return fmt.Errorf("claim %s: %w", s.cfg.table, ErrClosed)
	}
	gt := ident{s.cfg.table.db, GroupsTable}
	table := s.cfg.table.db + "." + s.cfg.table.name
	fail := func(err error) error { return fmt.Errorf("claim %s for group %q: %w", s.cfg.table, group, err) }
	if err := s.conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+gt.String()+` (
	table_name String,
	topic      String,
	group_name String,
	since      DateTime64(6, 'UTC') DEFAULT now64(6)
) ENGINE = MergeTree ORDER BY (table_name, topic)
SETTINGS non_replicated_deduplication_window = `+strconv.Itoa(DefaultWindow)); err != nil {
		return fail(fmt.Errorf("create %s: %w", gt, err))
	}
	owners, err := s.owners(ctx, gt, table, topics)
	if err != nil {
		return fail(err)
	}
	if err := s.refuse(group, table, gt, owners, shared); err != nil {
		return err
	}
	var free []string
	for _, t := range topics {
		if _, ok := owners[t]; !ok {
			free = append(free, t)
		}
	}
	if len(free) == 0 {
		return nil
	}
	insert := func(topic string, settings ch.Settings) error {
		// async_insert off: the next read must see the row.
		settings["async_insert"] = 0
		ictx := ch.Context(ctx, ch.WithSettings(settings))
		if err := s.conn.Exec(ictx, `INSERT INTO `+gt.String()+` (table_name, topic, group_name) VALUES (?, ?, ?)`, table, topic, group); err != nil {
			return fail(fmt.Errorf("record in %s: %w", gt, err))
		}
		return nil
	}
	for _, t := range free {
		if err := insert(t, ch.Settings{"insert_deduplicate": 1, "insert_deduplication_token": "offsetkeeper-claim/" + table + "/" + t}); err != nil {
			return err
		}
	}
	if owners, err = s.owners(ctx, gt, table, topics); err != nil {
		return fail(err)
	}
	for _, t := range free {
		if _, ok := owners[t]; ok {
			continue
		}
		// Dropped as a repeat of a row since deleted: insert it plainly.
		if err := insert(t, ch.Settings{"insert_deduplicate": 0}); err != nil {
			return err
		}
		if owners, err = s.owners(ctx, gt, table, topics); err != nil {
			return fail(err)
		}
	}
	return s.refuse(group, table, gt, owners, shared)
}

// owners reads the group recorded first for each of topics.
func (s *Sink) owners(ctx context.Context, gt ident, table string, topics []string) (map[string]owner, error) {
	rows, err := s.conn.Query(ctx, `SELECT topic, argMin(group_name, (since, group_name)), min(since) FROM `+gt.String()+
		` WHERE table_name = ? AND has(?, topic) GROUP BY topic`, table, topics)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", gt, err)
	}
	defer rows.Close()
	owners := map[string]owner{}
	for rows.Next() {
		var t string
		var o owner
		if err := rows.Scan(&t, &o.group, &o.since); err != nil {
			return nil, fmt.Errorf("read %s: %w", gt, err)
		}
		owners[t] = o
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", gt, err)
	}
	return owners, nil
}

// refuse is the error of a claim of topics recorded for other groups, nil
// when there are none or shared.
func (s *Sink) refuse(group, table string, gt ident, owners map[string]owner, shared bool) error {
	var others []string
	for t, o := range owners {
		if o.group != group {
			others = append(others, t)
		}
	}
	if len(others) == 0 || shared {
		return nil
	}
	slices.Sort(others)
	var parts, topics, groups []string
	for _, t := range others {
		parts = append(parts, fmt.Sprintf("topic %s is written by group %q (since %s)", t, owners[t].group, owners[t].since.UTC().Format(time.RFC3339)))
		topics = append(topics, quoteString(t))
		if g := quoteString(owners[t].group); !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	return fmt.Errorf("clickhouse table %s: %s, not by group %q: each group delivers every record once (the tokens hold the group), so a reader of the table would see them twice; "+
		"if that group no longer writes here, delete its rows: ALTER TABLE %s DELETE WHERE table_name = %s AND topic IN (%s) AND group_name IN (%s): %w",
		table, strings.Join(parts, "; "), group, gt, quoteString(table), strings.Join(topics, ", "), strings.Join(groups, ", "), sinks.ErrDestinationClaimed)
}

// quoteString is s as a ClickHouse string literal, for a statement to copy.
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}
