package clickhouse

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// maxReinserts bounds the inserts of one block under new tokens, in one
// Write, when its rows are still missing after each.
const maxReinserts = 3

// A target is a table a block's rows go to, and whether the sink can see
// that an insert there landed.
//
// A non-replicated MergeTree records an insert's block id in its
// deduplication log before the new part joins the table: a server killed
// between the two keeps the record without the part, and drops the
// insert's retry, or a new owner's replay, with the same token as a
// duplicate, answering success. The sink therefore checks that such an
// insert's rows are in the table whenever the token may already be known
// to the server: after an insert that succeeded only on a retry (an
// earlier attempt may have reached the server), and for a partition's
// first block after Resume (a new owner's replay of an intent, which the
// sink cannot tell from a new block) or after a failed Write. A block is
// one INSERT, sent with max_insert_block_size at least its rows (see
// insertOnce), so one part in an unpartitioned table: any row of its range
// and generation proves it landed.
type target struct {
	table ident
	// check: the table has the columns to find a block's rows
	// (kafka_topic, kafka_partition, kafka_offset), merges cannot remove
	// all of a block's rows, and its deduplication record is not kept
	// apart from its parts (not a Replicated or Shared engine, whose
	// block ids are committed in Keeper with the part, and whose parts
	// may not yet be on the replica read).
	check bool
	// generation: the table has kafka_generation, which narrows the
	// lookup to the block's generation.
	generation bool
	// partitioned: an insert may be several parts (one per table
	// partition), so some of a block's rows may be missing alone.
	partitioned bool
}

// planChecks decides which tables' inserts Write checks: the table's,
// from what setup found, and the dead-letter table's, from its engine.
func (s *Sink) planChecks(ctx context.Context) error {
	main := target{table: s.cfg.table, partitioned: s.dedup.partitioned}
	if s.cfg.mode == Raw {
		main.check, main.generation = true, true
	} else {
		// The lookup compares the topic as a string and the partition,
		// offset and generation as integers: a table whose columns hold
		// them otherwise (a String offset) is not checked, since the query
		// would fail every write that needs it.
		typ := map[string]string{}
		for _, c := range s.cols {
			typ[c.name] = innerType(c.typ)
		}
		integer := func(name string) bool {
			t := typ[name]
			return strings.HasPrefix(t, "Int") || strings.HasPrefix(t, "UInt")
		}
		main.check = typ["kafka_topic"] == "String" && integer("kafka_partition") && integer("kafka_offset")
		main.generation = integer("kafka_generation")
	}
	// Only a plain MergeTree: the other kinds may fold rows together.
	main.check = main.check && s.dedup.engine == "MergeTree"
	dd, err := checkDedup(ctx, s.conn, s.cfg.deadLetters)
	if err != nil {
		return err
	}
	// The dead-letter table's key is the record's (topic, partition,
	// offset): a ReplacingMergeTree keeps a row of each.
	s.deadTarget = target{table: s.cfg.deadLetters, generation: true, partitioned: dd.partitioned,
		check: dd.engine == "MergeTree" || dd.engine == "ReplacingMergeTree"}
	s.mainTarget = main
	return nil
}

// partitionKey names a topic's partition in Sink.suspect.
type partitionKey struct {
	topic     string
	partition int
}

// suspectNext marks the partition's next block for a check after its
// insert: its token may be known to the server already.
func (s *Sink) suspectNext(topic string, partition int) {
	s.suspectMu.Lock()
	defer s.suspectMu.Unlock()
	if s.suspect == nil {
		s.suspect = map[partitionKey]bool{}
	}
	s.suspect[partitionKey{topic, partition}] = true
}

// takeSuspect reports and clears the partition's mark.
func (s *Sink) takeSuspect(topic string, partition int) bool {
	s.suspectMu.Lock()
	defer s.suspectMu.Unlock()
	k := partitionKey{topic, partition}
	was := s.suspect[k]
	delete(s.suspect, k)
	return was
}

// insertChecked inserts rows with the token and, when the insert's success
// may have been the server dropping it as a duplicate (it succeeded only on
// a retry, or suspect), checks that the block's rows are in the table; see
// target.
func (s *Sink) insertChecked(ctx context.Context, b *sinks.Block, t target, cols []string, rows insertRows, token string, suspect bool) error {
	retried, err := s.insert(ctx, b, t.table, cols, rows, token)
	if err != nil || (!retried && !suspect) || !t.check {
		return err
	}
	return s.ensureLanded(ctx, b, t, cols, rows, token)
}

// ensureLanded inserts the block again, with new tokens, while none of its
// rows is in the table: the server dropped its insert as a duplicate of a
// block it no longer holds. The new tokens are the block's with
// "/again/N", N from 1: the same in every Write of the block, so that a
// retry of a re-insert, or the block's next Write after this one failed,
// is dropped by the server when the re-insert is there (and found here).
func (s *Sink) ensureLanded(ctx context.Context, b *sinks.Block, t target, cols []string, rows insertRows, token string) error {
	for round := 1; ; round++ {
		n, err := s.countBlock(ctx, b, t)
		if err != nil {
			return fmt.Errorf("check that %s holds the block: %w", t.table, err)
		}
		if n > 0 {
			if t.partitioned && n < int64(rows.count()) {
				// Some of its table partitions' parts are missing; an
				// insert of the block would duplicate the others.
				s.incomplete.Add(1)
				s.cfg.log.Error("part of the block is missing from the table and is not inserted again: its other rows would be duplicated",
					s.blockFields(b, t, zap.Int64("rows", n), zap.Int("want", rows.count()))...)
			}
			return nil
		}
		if round > maxReinserts {
			return fmt.Errorf("the block's rows are still missing from %s after %d inserts with new tokens", t.table, maxReinserts)
		}
		again := token + "/again/" + strconv.Itoa(round)
		s.cfg.log.Warn("the server dropped the block's insert as a duplicate, yet none of its rows is in the table "+
			"(its deduplication record outlived the part, as after a crash of the server); inserting it again with a new token",
			s.blockFields(b, t, zap.Int("rows", rows.count()), zap.String("token", again))...)
		if _, err := s.insert(ctx, b, t.table, cols, rows, again); err != nil {
			return fmt.Errorf("insert again as %s: %w", again, err)
		}
		s.reinserts.Add(1)
	}
}

// countBlock counts the rows of b's range (and generation) in the table.
func (s *Sink) countBlock(ctx context.Context, b *sinks.Block, t target) (int64, error) {
	q := `SELECT count() FROM ` + t.table.String() + ` WHERE kafka_topic = ? AND kafka_partition = ? AND kafka_offset >= ? AND kafka_offset < ?`
	args := []any{b.Topic, b.Partition, b.From, b.Next}
	if t.generation {
		q += ` AND kafka_generation = ?`
		args = append(args, b.Generation)
	}
	var n uint64
	if err := s.conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		return 0, err
	}
	return int64(n), nil
}

func (s *Sink) blockFields(b *sinks.Block, t target, more ...zap.Field) []zap.Field {
	return append([]zap.Field{zap.String("topic", b.Topic), zap.Int("partition", b.Partition), zap.Int64("generation", b.Generation),
		zap.Int64("from", b.From), zap.Int64("next", b.Next), zap.String("table", t.table.String())}, more...)
}

// Reinserts counts the inserts made again with a new token because the
// server had dropped the block's insert as a duplicate while none of its
// rows was in the table (see target).
func (s *Sink) Reinserts() int64 { return s.reinserts.Load() }

// Incomplete counts the blocks of a partitioned table found with some of
// their rows missing after a retry: logged as errors, not inserted again
// (the rows there would be doubled). Zero unless ClickHouse lost a part.
func (s *Sink) Incomplete() int64 { return s.incomplete.Load() }
