package clickhouse

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// A target is a table a block's rows go to, and whether the sink can see
// that an insert there landed.
//
// A non-replicated MergeTree records an insert's block id in its
// deduplication log before the new part joins the table: a server killed
// between the two keeps the record without the part, and drops the
// insert's retry, or a new owner's replay, with the same token as a
// duplicate, answering success. An insert into a partitioned table is a
// part per table partition, each recorded and renamed in turn: a kill
// between two leaves some of the block's rows in and the others' records
// without them. The sink therefore checks which of an insert's offsets are
// in the table whenever the token may already be known to the server:
// after an insert that succeeded only on a retry (an earlier attempt may
// have reached the server), and for a partition's first block after
// Resume (a new owner's replay of an intent, which the sink cannot tell
// from a new block) or after a failed Write. It inserts the missing ones
// again, alone, under a token of their own derived from them (every writer
// of the block finds the same set, and a second such insert is dropped),
// and checks once more: rows still missing then are an error, not a reason
// for another copy (a row policy that hides the sink's rows, a server that
// drops every insert).
type target struct {
	table ident
	// check: the table has the columns to find a block's rows
	// (kafka_topic, kafka_partition, kafka_offset), merges cannot fold the
	// rows of two offsets together (a plain MergeTree, or a sorting key
	// holding those three), and its deduplication record is not kept
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
	// Not where merges may fold the rows of two offsets together.
	main.check = main.check && !s.dedup.replicated && !s.dedup.folds()
	dd, err := checkDedup(ctx, s.conn, s.cfg.deadLetters)
	if err != nil {
		return err
	}
	// The dead-letter table made by the sink is a ReplacingMergeTree keyed
	// by the record's (topic, partition, offset): a row of each is kept.
	s.deadTarget = target{table: s.cfg.deadLetters, generation: true, partitioned: dd.partitioned,
		check: !dd.replicated && !dd.folds()}
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
// target. wanted are the offsets of rows, in order; subset makes the rows of
// some of them.
func (s *Sink) insertChecked(ctx context.Context, b *sinks.Block, t target, cols []string, rows insertRows, token string, suspect bool,
	wanted []int64, subset func(offsets []int64) insertRows) error {
	retried, dropped, err := s.insert(ctx, s.blockFields(b, t), t.table, cols, rows, token, false)
	if err != nil || (!retried && !suspect) {
		return err
	}
	if !t.check {
		if dropped {
			// Said, since it cannot be checked: after a crash of the
			// server in the window, the block's rows are not there.
			s.unchecked.Add(1)
			s.cfg.log.Warn("the server dropped a block's insert as a duplicate and the table cannot be checked for its rows "+
				"(see the WARN at start): if ClickHouse was killed between recording the insert and committing its part, they are lost",
				s.blockFields(b, t, zap.Int("rows", len(wanted)))...)
		}
		return nil
	}
	return s.ensureLanded(ctx, b, t, cols, token, wanted, subset)
}

// ensureLanded inserts again, alone, the offsets of wanted that the table
// does not hold: the server dropped an insert of theirs as a duplicate of
// a part it no longer has (see target). Their token is the block's with
// "/missing/" and a hash of them: the same for every writer of the block
// that finds the same rows missing, so that a second such insert is
// dropped. Rows still missing after it are an error.
func (s *Sink) ensureLanded(ctx context.Context, b *sinks.Block, t target, cols []string, token string, wanted []int64,
	subset func(offsets []int64) insertRows) error {
	missing, err := s.missingOffsets(ctx, b, t, wanted)
	if err != nil {
		return fmt.Errorf("check that %s holds the block: %w", t.table, err)
	}
	if len(missing) == 0 {
		return nil
	}
	again := missingToken(b, token, missing, s.inRound(b))
	fields := s.blockFields(b, t, zap.Int("missing", len(missing)), zap.Int("rows", len(wanted)), zap.Int64("first_missing", missing[0]),
		zap.String("token", again))
	if s.inRound(b) {
		// The round's token was spent by an insert that held other
		// blocks of the round (a new owner's replay of one of them).
		s.cfg.log.Info("a block written again with its round's token is not in the table: the round's first insert held "+
			"other blocks; inserting its rows under a token of their own", fields...)
	} else {
		s.cfg.log.Warn("the server dropped the block's insert as a duplicate, yet some of its rows are not in the table "+
			"(its deduplication record outlived the part, as after a crash of the server); inserting those again under a token of their own",
			fields...)
	}
	if _, _, err := s.insert(ctx, s.blockFields(b, t), t.table, cols, subset(missing), again, false); err != nil {
		return fmt.Errorf("insert the %d missing rows again as %s: %w", len(missing), again, err)
	}
	s.reinserts.Add(1)
	still, err := s.missingOffsets(ctx, b, t, missing)
	if err != nil {
		return fmt.Errorf("check that %s holds the rows inserted again: %w", t.table, err)
	}
	if len(still) > 0 {
		s.incomplete.Add(1)
		return fmt.Errorf("%d of the block's rows (from offset %d) are still not in %s after they were inserted again as %s: "+
			"the sink's user may not see them (a row policy), or the server drops their inserts; nothing more is inserted, "+
			"so that no row is doubled", len(still), still[0], t.table, again)
	}
	return nil
}

// missingOffsets returns the offsets of wanted (rising) that the table
// does not hold for b's partition (and generation). It reads without the
// query cache, whatever the user's profile says: a cached answer from
// before an insert would hide its rows.
func (s *Sink) missingOffsets(ctx context.Context, b *sinks.Block, t target, wanted []int64) ([]int64, error) {
	if len(wanted) == 0 {
		return nil, nil
	}
	q := `SELECT DISTINCT toInt64(kafka_offset) FROM ` + t.table.String() +
		` WHERE kafka_topic = ? AND kafka_partition = ? AND kafka_offset >= ? AND kafka_offset <= ?`
	args := []any{b.Topic, b.Partition, wanted[0], wanted[len(wanted)-1]}
	if t.generation {
		q += ` AND kafka_generation = ?`
		args = append(args, b.Generation)
	}
	q += ` SETTINGS use_query_cache = 0`
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	held := make(map[int64]bool, len(wanted))
	for rows.Next() {
		var off int64
		if err := rows.Scan(&off); err != nil {
			return nil, err
		}
		held[off] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var missing []int64
	for _, off := range wanted {
		if !held[off] {
			missing = append(missing, off)
		}
	}
	return missing, nil
}

// missingToken is the token of the rows of b (offsets missing) inserted
// again after an insert with token was dropped: token, with b's partition
// when token is a round's (round: the blocks of a round share it),
// "/missing/" and a hash of the offsets.
func missingToken(b *sinks.Block, token string, missing []int64, round bool) string {
	if round {
		token += "/" + b.Topic + "/" + strconv.Itoa(b.Partition)
	}
	return token + "/missing/" + offsetsHash(missing)
}

// offsetsHash names a set of offsets: their count and an FNV-1a hash.
func offsetsHash(offsets []int64) string {
	h := fnv.New64a()
	var buf [8]byte
	for _, o := range offsets {
		binary.BigEndian.PutUint64(buf[:], uint64(o))
		h.Write(buf[:])
	}
	return strconv.Itoa(len(offsets)) + "-" + strconv.FormatUint(h.Sum64(), 16)
}

func (s *Sink) blockFields(b *sinks.Block, t target, more ...zap.Field) []zap.Field {
	return append([]zap.Field{zap.String("topic", b.Topic), zap.Int("partition", b.Partition), zap.Int64("generation", b.Generation),
		zap.Int64("from", b.From), zap.Int64("next", b.Next), zap.String("table", t.table.String())}, more...)
}

// Reinserts counts the inserts made again with a new token because the
// server had dropped the block's insert as a duplicate while none of its
// rows was in the table (see target).
func (s *Sink) Reinserts() int64 { return s.reinserts.Load() }

// UncheckedDuplicates counts the inserts of a table the sink cannot check
// (target.check) that the server said it dropped as duplicates when their
// token may already have been known to it (after a retry, a new owner's
// replay): each is a block whose rows are in the table unless the server
// crashed in the window target describes, which only a check could tell.
// Over the native protocol; HTTP does not say.
func (s *Sink) UncheckedDuplicates() int64 { return s.unchecked.Load() }

// Incomplete counts the inserts whose rows were still missing after they
// were inserted again (see target): each failed its Write. Zero unless the
// server hides or drops the sink's rows.
func (s *Sink) Incomplete() int64 { return s.incomplete.Load() }
