package replica

import (
	"sync/atomic"
	"time"

	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
)

// Stats is a snapshot of what a replica did since New: counters, and
// Claims, a gauge. Replica.Stats takes it; metrics export it.
type Stats struct {
	Records int64 // records delivered to the sink: stored, or set aside by it
	// Stored is the part of Records the sink stored as rows: not its dead
	// letters nor the records its policy skipped (sinks.Block.SetAside).
	Stored         int64
	Blocks         int64 // blocks committed
	Commits        int64 // successful offset commits
	Rollbacks      int64 // blocks rolled back (polled, not committed, read again)
	Fenced         int64 // partitions stopped because their claim was lost
	OffsetsChanged int64 // commits refused, or blocks dropped, by an operator's reset
	// OffsetResets counts offsets Kafka reported out of range: below the
	// log start (retention or DeleteRecords passed them), reading resumed
	// at the log start; past the log end (an unclean election truncated
	// the log), at the log end. OffsetsSkipped counts the offsets the
	// first kind never read: records gone from Kafka before they were
	// delivered.
	OffsetResets, OffsetsSkipped int64
	// LogTruncations counts, by cause (TruncationCauses), the times
	// Kafka's log of a partition was found truncated below what the
	// replica had read (an unclean leader election, or a leader that lost
	// acknowledged records): by the leader epoch stored with the offset,
	// validated at a claim, at a leader change or on an out-of-range
	// answer (each started a new generation at the divergence point), or
	// an offset past the log end without an epoch (reading resumed at the
	// log end). OffsetsTruncated counts the committed offsets Kafka no
	// longer held: records in the sink that Kafka lost.
	LogTruncations   map[string]int64
	OffsetsTruncated int64
	// TopicsRecreated counts partitions held because their topic was
	// deleted and created again: they wait for an operator's reset.
	TopicsRecreated int64
	// Topics is how many topics the replica found to read at its last
	// read of the metadata (Config.Topics and those matching
	// Config.TopicsRegex); TopicsFound and TopicsGone count the topics
	// that appeared and went between two reads (created or deleted,
	// mostly under a TopicsRegex).
	Topics, TopicsFound, TopicsGone int64
	// KafkaThrottled is the time brokers throttled the replica's fetches
	// by their quotas, KafkaRelogins the SASL logins again on open
	// connections before their sessions ended (KIP-368), and
	// KafkaLookups the metadata lookups of partition leaders.
	KafkaThrottled time.Duration
	KafkaRelogins  int64
	KafkaLookups   int64
	// IncrementalFetches counts the fetch requests sent in a fetch session
	// (KIP-227), which list only the partitions whose fetch changed, and
	// FetchRequestBytes the bytes of all fetch requests written.
	IncrementalFetches, FetchRequestBytes int64
	// CommitFailures counts offset commits that failed after their
	// retries: blocks in the sink whose offset is not committed, which the
	// next owner replays. Zero in a healthy group.
	CommitFailures int64
	SinkErrors     int64 // failed sink writes
	// WriteTimeouts counts sink writes that did not end within
	// Config.WriteTimeout (also in SinkErrors).
	WriteTimeouts int64
	SinkCalls     int64 // calls to the sink: Write, or WriteBlocks for several blocks
	// Abandoned counts the blocks a graceful stop gave up on when
	// ShutdownTimeout passed: rolled back, replayed by the next owner.
	Abandoned int64
	// OversizedBatches counts fetches of a record batch that would
	// decompress past the memory budget: its partition cannot go on.
	OversizedBatches int64
	Claims           int64 // partitions held now
	Rebalances       int64 // plans that claimed or released something
	Sessions         int64 // sessions joined (more than one: rejoined after a loss)
	// DeadLetters is the sink's count of records it set aside or skipped
	// by its own policy (sinks.DeadLetterCounter, found through
	// wrappers); 0 for a sink without one.
	DeadLetters int64
	// EtcdRounds counts the write transactions sent to etcd, and
	// EtcdRoundWrites the partition writes (claims, intents, commits,
	// releases) they carried.
	EtcdRounds      int64
	EtcdRoundWrites int64

	// DecodeErrors counts records whose key or value could not be
	// decoded (each time it was tried: a partition stopped at one counts
	// it at every retry), DecodeSkipped those of them left out by the
	// Skip policy, and RegistryWaits the blocks rolled back because the
	// Schema Registry did not answer.
	DecodeErrors, DecodeSkipped, RegistryWaits int64
	// DecodeBudgetStops counts blocks ended early because the JSON their
	// records decoded into filled the partition's share of the memory
	// budget (the next block starts at the record that did not fit).
	// Frequent ones mean the budget is small for the records' JSON.
	DecodeBudgetStops int64
	// RegistryRequests and RegistryErrors count the requests sent to the
	// Schema Registry and those that failed; SchemaCacheHits and
	// SchemaCacheMisses the lookups of a compiled schema by id.
	RegistryRequests, RegistryErrors   int64
	SchemaCacheHits, SchemaCacheMisses int64
	// IgnoredFields counts decoded fields the sink had no column for
	// (sinks.IgnoredFieldCounter); 0 for a sink without one.
	IgnoredFields int64
	// SinkDDL counts the statements the sink ran to change its tables'
	// shape (sinks.DDLCounter); 0 for a sink without one.
	SinkDDL int64
}

// counters are what Stats snapshots of the replica's own, updated by the
// partitions and the session loop; the rest comes from the coordinator and
// the sink.
type counters struct {
	records, blocks, commits, rollbacks, fenced  atomic.Int64
	stored                                       atomic.Int64
	offsetsChanged, offsetResets, offsetsSkipped atomic.Int64
	truncations                                  [len(truncationCauses)]atomic.Int64
	offsetsTruncated                             atomic.Int64
	topicsRecreated                              atomic.Int64
	topics, topicsFound, topicsGone              atomic.Int64
	sinkErrors, sinkCalls, oversizedBatches      atomic.Int64
	writeTimeouts, abandoned                     atomic.Int64
	claims, rebalances, sessions                 atomic.Int64
	decodeErrors, decodeSkipped, registryWaits   atomic.Int64
	decodeBudgetStops                            atomic.Int64
}

// TruncationCauses are the keys of Stats.LogTruncations.
var TruncationCauses = truncationCauses[:]

var truncationCauses = [...]string{"claimed", "leader_changed", "out_of_range", "past_log_end"}

// truncationCause is the index in truncationCauses of the cause a cursor
// gives a truncation (kafka.Truncation.Cause).
func truncationCause(cause string) int {
	switch cause {
	case kafka.CauseSeek:
		return 0
	case kafka.CauseLeaderChanged:
		return 1
	}
	return 2
}

// pastLogEnd is truncationCauses' index of an offset past the log end
// without an epoch.
const pastLogEnd = 3

func (c *counters) truncationCounts() map[string]int64 {
	m := make(map[string]int64, len(truncationCauses))
	for i, name := range truncationCauses {
		m[name] = c.truncations[i].Load()
	}
	return m
}

func (c *counters) snapshot() Stats {
	return Stats{
		Records:           c.records.Load(),
		Stored:            c.stored.Load(),
		Blocks:            c.blocks.Load(),
		Commits:           c.commits.Load(),
		Rollbacks:         c.rollbacks.Load(),
		Fenced:            c.fenced.Load(),
		OffsetsChanged:    c.offsetsChanged.Load(),
		OffsetResets:      c.offsetResets.Load(),
		OffsetsSkipped:    c.offsetsSkipped.Load(),
		LogTruncations:    c.truncationCounts(),
		OffsetsTruncated:  c.offsetsTruncated.Load(),
		TopicsRecreated:   c.topicsRecreated.Load(),
		Topics:            c.topics.Load(),
		TopicsFound:       c.topicsFound.Load(),
		TopicsGone:        c.topicsGone.Load(),
		SinkErrors:        c.sinkErrors.Load(),
		WriteTimeouts:     c.writeTimeouts.Load(),
		Abandoned:         c.abandoned.Load(),
		SinkCalls:         c.sinkCalls.Load(),
		OversizedBatches:  c.oversizedBatches.Load(),
		Claims:            c.claims.Load(),
		Rebalances:        c.rebalances.Load(),
		Sessions:          c.sessions.Load(),
		DecodeErrors:      c.decodeErrors.Load(),
		DecodeSkipped:     c.decodeSkipped.Load(),
		DecodeBudgetStops: c.decodeBudgetStops.Load(),
		RegistryWaits:     c.registryWaits.Load(),
	}
}
