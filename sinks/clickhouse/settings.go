package clickhouse

import (
	"context"
	"fmt"
	"strings"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"go.uber.org/zap"
)

// What the sink's user's profile and the table's settings do to its
// promise: deduplication that a profile may turn off, and inserts that
// ClickHouse acknowledges before they are on disk.

// checkDeduplicate finds whether the server knows deduplicate_insert
// (ClickHouse 26.2 and later, where it overrides insert_deduplicate), and
// checks that the settings the sink sends with its inserts take effect for
// its user: a profile's constraint that refuses them refuses the start. A
// profile that turns deduplication off is overridden by them, and said.
func (s *Sink) checkDeduplicate(ctx context.Context) error {
	var n uint64
	if err := s.conn.QueryRow(ctx, `SELECT count() FROM system.settings WHERE name = 'deduplicate_insert'`).Scan(&n); err != nil {
		return fmt.Errorf("read the server's settings: %w", err)
	}
	s.dedupSetting = n > 0
	if s.cfg.atLeastOnce {
		return nil
	}
	q := `SELECT toString(getSetting('insert_deduplicate')), ` + `'enable'`
	settings := ch.Settings{"insert_deduplicate": 1}
	if s.dedupSetting {
		q = `SELECT toString(getSetting('insert_deduplicate')), toString(getSetting('deduplicate_insert'))`
		settings["deduplicate_insert"] = "enable"
	}
	var profDedup, profDeduplicate string
	if err := s.conn.QueryRow(ctx, q).Scan(&profDedup, &profDeduplicate); err != nil {
		return fmt.Errorf("read the user's insert_deduplicate: %w", err)
	}
	var dedup, deduplicate string
	err := s.conn.QueryRow(ch.Context(ctx, ch.WithSettings(settings)), q).Scan(&dedup, &deduplicate)
	if err != nil {
		return fmt.Errorf("%w: the sink's inserts set insert_deduplicate = 1 (and deduplicate_insert = 'enable' where the server has it), "+
			"and the server refuses them for this user (a constraint of its profile?): %w", ErrNoDeduplication, err)
	}
	if !truthy(dedup) || deduplicate != "enable" {
		return fmt.Errorf("%w: with the sink's settings the user's inserts still do not deduplicate (insert_deduplicate = %s, "+
			"deduplicate_insert = %s): its profile must let a query enable them", ErrNoDeduplication, dedup, deduplicate)
	}
	if !truthy(profDedup) || profDeduplicate != "enable" {
		s.cfg.log.Warn("the user's profile turns insert deduplication off; the sink turns it on for each of its inserts",
			zap.String("insert_deduplicate", profDedup), zap.String("deduplicate_insert", profDeduplicate))
	}
	return nil
}

func truthy(v string) bool { return v == "1" || v == "true" }

// warnDurability says what a crash of the host (not of the process) can
// do: ClickHouse acknowledges an insert before its part is on disk unless
// the table fsyncs it, while the etcd commit that follows is durable; the
// deduplication log is not synced either, so a part can outlive its block
// id, and a replay then doubles it. A Replicated table whose inserts wait
// for a quorum of two replicas survives the loss of one host.
func (s *Sink) warnDurability(ctx context.Context, log *zap.Logger) {
	if s.dedup.replicated {
		var quorum string
		if err := s.conn.QueryRow(ctx, `SELECT toString(getSetting('insert_quorum'))`).Scan(&quorum); err != nil {
			log.Warn("could not read insert_quorum", zap.Error(err))
			return
		}
		if quorum == "0" || quorum == "1" {
			log.Warn("an insert is acknowledged once one replica has it (insert_quorum = "+quorum+"): a crash of that host before "+
				"another replica fetched the part loses rows whose offsets are committed; set insert_quorum = 2 (or auto) for the sink's user",
				zap.String("insert_quorum", quorum))
		}
		return
	}
	if !s.dedup.fsyncInsert || !s.dedup.fsyncDirectory {
		log.Warn("ClickHouse acknowledges inserts before they are on disk: a crash of the host (a power loss, not of the "+
			"process) can lose rows whose offsets are committed; ALTER TABLE "+s.cfg.table.String()+" MODIFY SETTING "+
			"fsync_after_insert = 1, fsync_part_directory = 1 closes that (the deduplication log is not synced, so a block "+
			"replayed after such a crash may still be doubled), or a Replicated table with insert_quorum = 2",
			zap.Bool("fsync_after_insert", s.dedup.fsyncInsert), zap.Bool("fsync_part_directory", s.dedup.fsyncDirectory))
	}
}

// checkRowPolicies refuses a table that the sink's user reads through a
// row policy: the sink reads its own rows back, to check an insert the
// server may have dropped and to resume, and would take rows the policy
// hides for missing ones, inserting them again. A user that may not read
// system.row_policies is not refused: nothing can be told.
func (s *Sink) checkRowPolicies(ctx context.Context) error {
	rows, err := s.conn.Query(ctx, `SELECT short_name, currentUser() FROM system.row_policies WHERE database = ? AND table = ?
		AND ((apply_to_all AND NOT has(apply_to_except, currentUser())) OR has(apply_to_list, currentUser()))`,
		s.cfg.table.db, s.cfg.table.name)
	if err != nil {
		s.cfg.log.Debug("could not read the row policies of the table", zap.Error(err))
		return nil
	}
	defer rows.Close()
	var names []string
	var user string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name, &user); err != nil {
			return fmt.Errorf("read the row policies of %s: %w", s.cfg.table, err)
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the row policies of %s: %w", s.cfg.table, err)
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("%w: user %s reads %s through row policy %s: the sink reads its own rows back (to check an insert the "+
		"server may have dropped as a duplicate, and to resume) and would take the rows the policy hides for missing ones, "+
		"inserting them again; exempt the sink's user from the policy", ErrTableShape, user, s.cfg.table, strings.Join(names, ", "))
}
