package replica

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/enum"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
)

// GCPercent is the GOGC a replica's process runs with under GOMEMLIMIT, as
// offsetkeeper run sets it unless GOGC is given (under its own memory
// limit, run turns the collector off and lets the limit start each cycle):
// the replica's live heap is mostly the records of its blocks, which the
// budget bounds, so the heap may grow well past it between cycles (fewer
// cycles, less CPU per record) while the memory limit keeps the total in
// bounds. Not a Config field: it is the process's.
const GCPercent = 400

// Defaults of Config. Each trades latency against etcd and sink load: a
// block costs one intent, one sink write and one commit.
const (
	// DefaultMaxBlockRows ends a block at this many rows.
	DefaultMaxBlockRows = 65536
	// DefaultMaxBlockBytes ends a block at this many bytes of records, so
	// that large records make blocks of a bounded size: 16 MiB makes the
	// per-block costs (an intent, a sink write, a commit) vanish beside
	// the bytes at any record size, keeps a sink's transaction modest, and
	// lets 16 partitions hold a full block each within the default budget
	// (DefaultMaxBufferBytes, 256 MiB).
	DefaultMaxBlockBytes = 16 << 20
	// DefaultFlushInterval ends a block this long after its first row: the
	// bound on how late a record reaches the sink under light load.
	DefaultFlushInterval = time.Second
	// DefaultMaxEmptyPolls ends a block after this many empty polls in a
	// row: a partition that has caught up flushes at once.
	DefaultMaxEmptyPolls = 1
	// DefaultCommitLinger is how long the etcd writes of a block that ended
	// because its partition went quiet may wait for other partitions' to
	// share a transaction. A replica of many trickling partitions would
	// otherwise make two transactions per record; with it, about ten a
	// second, for 0.2 s more latency at most. Full and larger blocks never
	// wait, nor do the block that ends a backlog and a small block whose
	// records were waiting in Kafka before it.
	DefaultCommitLinger = 100 * time.Millisecond
	// DefaultResyncInterval re-plans even without a watch event, to repair
	// anything a lost event would leave.
	DefaultResyncInterval = 10 * time.Second
	// DefaultMetadataInterval is how often topic metadata is read to find
	// partitions added to a topic.
	DefaultMetadataInterval = 10 * time.Second
	// DefaultRebalanceDelay debounces re-planning after membership or claim
	// changes, so a burst of events costs one plan.
	DefaultRebalanceDelay = 100 * time.Millisecond
	// DefaultShutdownTimeout bounds how long a graceful stop waits for the
	// blocks in flight before rolling them back.
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds one sink write: a write still in flight
	// after it (a lock held by a migration, a server that stopped
	// answering) fails, rolls back and is retried.
	DefaultWriteTimeout = time.Minute
	// DefaultLogEndInterval is how often the log ends of the owned
	// partitions are read from Kafka for the lag, whatever the partitions
	// do: a partition stuck in a write fetches nothing.
	DefaultLogEndInterval = 5 * time.Second
	// DefaultEtcdStatusInterval is how often a replica reads etcd's
	// database size and quota.
	DefaultEtcdStatusInterval = 30 * time.Second
	// DefaultProgressInterval is how often a replica that catches up says
	// how far behind it is.
	DefaultProgressInterval = 30 * time.Second
	// DefaultKafkaDownAfter is how long a replica's reads of Kafka may
	// fail before it gives its partitions to replicas that read.
	DefaultKafkaDownAfter = 30 * time.Second
)

// CommitMode says when a block's offset is committed.
type CommitMode int

func (c CommitMode) String() string               { return enum.Name[commitModes](int(c)) }
func (c CommitMode) Check() error                 { return enum.Valid[commitModes](int(c)) }
func (c CommitMode) MarshalText() ([]byte, error) { return enum.Text[commitModes](int(c)) }
func (c *CommitMode) UnmarshalText(b []byte) error {
	return enum.SetInt[commitModes]((*int)(c), string(b))
}
func (c *CommitMode) Set(s string) error { return enum.SetInt[commitModes]((*int)(c), s) }
func (CommitMode) Type() string          { return enum.Type[commitModes]() }

const (
	// AfterWrite commits after the sink write: at-least-once (exactly-once
	// with a sink that keys writes by range or stores its offsets).
	AfterWrite CommitMode = iota
	// EveryBatch commits each polled batch before writing it: at-most-once.
	// A crash between the commit and the write loses that batch.
	EveryBatch
)

type commitModes struct{}

func (commitModes) Enum() (string, []string) {
	return "commit mode", []string{"after-write", "every-batch"}
}

// Config configures a Replica. Group, Topics and Kafka.Brokers are
// required; every other zero field takes the default its doc names. New
// applies the defaults to its own copy, and Validate checks a copy the same
// way: the caller's Config is never changed.
//
// The block rules (MaxBlockRows, MaxBlockBytes, FlushInterval,
// MaxEmptyPolls) decide where a block ends. A block is the unit of work:
// one intent in etcd (for a sink without its own offsets), one sink write,
// one offset commit. Larger blocks cost etcd and the sink less per record,
// and a crash replays more; smaller ones the reverse.
type Config struct {
	// Group names the pipeline (Kafka's group.id): its state lives under
	// /offsetkeeper/v1/groups/<group>/ in etcd, and a Mirror copies its
	// offsets to the Kafka consumer group of this name. Required.
	Group string
	// ReplicaID identifies this replica in the group (group.instance.id);
	// unique among live replicas, without '/' or spaces. Default
	// DefaultID(), host-pid. A fixed ID lets a restarted replica be known
	// again in logs; two live replicas with one ID refuse each other.
	ReplicaID string
	// Topics are consumed whole, every partition of each, partitions added
	// later included (see MetadataInterval). Topics or TopicsRegex is
	// required.
	Topics []string
	// TopicsRegex adds every topic whose whole name matches it (Go's
	// RE2 syntax, anchored at both ends, as Kafka's pattern
	// subscriptions are), but Kafka's internal topics: topics created
	// while the group runs are found within MetadataInterval, and a
	// deleted topic's partitions are released.
	TopicsRegex string
	// Kafka says how Kafka is reached and read: brokers, TLS, SASL, fetch
	// sizes, isolation level and the group's start policy
	// (Kafka.StartPolicy, auto.offset.reset). Kafka.Brokers is required.
	Kafka kafkaconf.Config
	// Formats says how keys and values are encoded: JSON or any bytes
	// (the default), or Avro, Protobuf and JSON Schema through a Schema
	// Registry, which the replica decodes into JSON for the sink.
	Formats Formats

	// LeaseTTL is the TTL of the replica's etcd lease, the counterpart of
	// session.timeout.ms: a replica that dies is replaced after it, and a
	// replica cut off from etcd stops writing after LeaseTTL/2, before its
	// claims can go to another. Default coordinator.DefaultTTL, 10s; at
	// least 2s, whole seconds. Shorter moves partitions sooner after a
	// crash, at the cost of a keepalive every LeaseTTL/6 and of losing the
	// claims over a shorter etcd hiccup.
	LeaseTTL time.Duration
	// EtcdMaxTxnOps is the etcd cluster's --max-txn-ops. Default
	// coordinator.DefaultMaxTxnOps, 128, etcd's own; at least 4. The write
	// rounds that carry many partitions' claims, intents and commits are
	// sized to it: set it to the cluster's value, higher than it and
	// rounds are refused.
	EtcdMaxTxnOps int

	// MaxBlockRows ends a block at this many records (think
	// max.poll.records, per partition). Default DefaultMaxBlockRows,
	// 65,536.
	MaxBlockRows int
	// MaxBlockBytes ends a block at this many bytes of records. Default
	// DefaultMaxBlockBytes, 16 MiB. A block also ends when its partition
	// holds half its share of the memory budget, Kafka.MaxBufferBytes.
	MaxBlockBytes int
	// FlushInterval ends a block this long after its first record: the
	// bound on how late a record reaches the sink under a light load.
	// Default DefaultFlushInterval, 1s; at least 1ms. Shorter is fresher
	// data for more, smaller blocks.
	FlushInterval time.Duration
	// MaxEmptyPolls ends a block after this many empty polls in a row;
	// reaching the log end counts as one. Default DefaultMaxEmptyPolls, 1:
	// a partition that caught up writes what it has at once. More waits
	// up to that many Kafka.FetchMaxWait for company.
	MaxEmptyPolls int
	// CommitMode is when a block's offset is committed. Default
	// AfterWrite: after the sink write, at-least-once (exactly-once with a
	// sink that stores its offsets, a sinks.Resumer). EveryBatch commits
	// before the write: at-most-once.
	CommitMode CommitMode
	// CommitLinger is how long the intent and the commit of a trickling
	// partition's small block (at most a 64th of MaxBlockRows and
	// MaxBlockBytes; it and the block before it did not end by size; its
	// records came after the partition was read to its log end) may
	// wait to share an etcd transaction with other partitions'. Default DefaultCommitLinger, 100ms; negative: never
	// wait. It is capped at LeaseTTL/16. Longer makes fewer etcd
	// transactions for many trickling partitions, for that much latency.
	CommitLinger time.Duration

	// ResyncInterval re-plans even without a watch event, to repair what a
	// lost event would leave. Default DefaultResyncInterval, 10s.
	ResyncInterval time.Duration
	// MetadataInterval is how often topic metadata is read to find
	// partitions added to a topic (metadata.max.age.ms). Default
	// DefaultMetadataInterval, 10s. Each read is one Metadata request.
	MetadataInterval time.Duration
	// RebalanceDelay debounces re-planning after membership or claim
	// changes, with as much jitter again, so that a burst of events costs
	// one plan and replicas do not all claim at the same instant. Default
	// DefaultRebalanceDelay, 100ms.
	RebalanceDelay time.Duration
	// ShutdownTimeout bounds how long a graceful stop (Run's ctx done)
	// waits for the blocks in flight to be written and committed before
	// it rolls them back. Default DefaultShutdownTimeout, 30s: keep it
	// below the orchestrator's grace period (Kubernetes' is 30s).
	ShutdownTimeout time.Duration
	// WriteTimeout bounds one sink write; past it the write fails, the
	// block rolls back and is retried, and it counts as a sink error. A
	// write in flight for a quarter of it is logged, once. Default
	// DefaultWriteTimeout, 1m: above the slowest write of a healthy sink
	// (a block is at most MaxBlockRows rows).
	WriteTimeout time.Duration
	// LogEndInterval is how often the log ends of the owned partitions
	// are read for the lag. Default DefaultLogEndInterval, 5s.
	LogEndInterval time.Duration
	// KafkaDownAfter is how long the replica's reads of Kafka (metadata,
	// the fetches of a broker) may fail before it says in its member key
	// that it cannot read, is not Ready, and gives its partitions to the
	// replicas that read: it says so within KafkaDownAfter +
	// MetadataInterval, keeps its claims KafkaDownAfter/2 more (were Kafka
	// down for all, the others find out meanwhile, and nothing moves),
	// then finishes its block in flight and releases them. It takes its
	// share again within MetadataInterval of reading again. While no
	// replica of the group reads, nothing moves. A replica that never
	// reached Kafka since it started says so at once, and holds nothing.
	// Default DefaultKafkaDownAfter, 30s.
	KafkaDownAfter time.Duration
	// ProgressInterval is how often a replica whose partitions lag by
	// 10,000 records or more logs "catching up" (the lag, records per
	// second, when the lag will be gone), and then once "caught up".
	// Default DefaultProgressInterval, 30s; negative: never.
	ProgressInterval time.Duration
	// EtcdStatusInterval is how often the replica reads etcd's database
	// size and quota (Etcd), and warns past 80 % of the quota. Default
	// DefaultEtcdStatusInterval, 30s.
	EtcdStatusInterval time.Duration

	// CompactInterval is how often the replicas compact etcd's history, to
	// the revision of one interval before, one replica of all that run on
	// the etcd cluster taking each round (coordinator.Compactor). Default
	// coordinator.DefaultCompactInterval, 5m. NoCompaction leaves it to
	// etcd's own --auto-compaction-retention, where the cluster is shared
	// and its owner compacts it: without either, etcd's database grows
	// with every commit until its quota, and then refuses every write.
	CompactInterval time.Duration
	NoCompaction    bool

	// Sink identifies the sink to the group: its scheme and location
	// (file:///var/lib/orders, postgres://db:5432/app?table=orders),
	// never a secret. Every member advertises it, and a replica whose
	// Sink is not that of the group's live members refuses to start
	// (SinkMismatchError): two deployments of one group writing to two
	// places split every partition between them. Empty (the default):
	// nothing is advertised or checked. The CLI sets it from --sink.
	Sink string
	// AllowSinkChange lets a replica join a group whose live members
	// write to another sink: the way to move a group to a new sink is to
	// roll every replica with the new one and this set, then without it.
	AllowSinkChange bool
	// AllowTopicChange joins a group whose live members read other topics
	// than Topics; without it Run refuses with a *TopicsMismatchError.
	// Set it while rolling a group's replicas onto a new list of topics.
	AllowTopicChange bool
	// BeforeJoin, if set, runs in Run once the topics and the sink are
	// checked, before the replica joins its group: what must not happen
	// for a replica that refuses to start (the CLI claims the sink's
	// destination for the group there). Its error ends Run.
	BeforeJoin func(ctx context.Context) error

	// HTTPAddr and Version are advertised in the member key, for the
	// operator's tools (offsetkeeper replicas). Default empty.
	HTTPAddr string
	Version  string
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	orDefault(&c.ReplicaID, DefaultID())
	orDefault(&c.LeaseTTL, coordinator.DefaultTTL)
	orDefault(&c.MaxBlockRows, DefaultMaxBlockRows)
	orDefault(&c.EtcdMaxTxnOps, coordinator.DefaultMaxTxnOps)
	orDefault(&c.MaxBlockBytes, DefaultMaxBlockBytes)
	orDefault(&c.FlushInterval, DefaultFlushInterval)
	orDefault(&c.MaxEmptyPolls, DefaultMaxEmptyPolls)
	orDefault(&c.CommitLinger, DefaultCommitLinger)
	orDefault(&c.ResyncInterval, DefaultResyncInterval)
	orDefault(&c.MetadataInterval, DefaultMetadataInterval)
	orDefault(&c.RebalanceDelay, DefaultRebalanceDelay)
	orDefault(&c.ShutdownTimeout, DefaultShutdownTimeout)
	orDefault(&c.WriteTimeout, DefaultWriteTimeout)
	orDefault(&c.LogEndInterval, DefaultLogEndInterval)
	orDefault(&c.KafkaDownAfter, DefaultKafkaDownAfter)
	orDefault(&c.ProgressInterval, DefaultProgressInterval)
	orDefault(&c.EtcdStatusInterval, DefaultEtcdStatusInterval)
	orDefault(&c.CompactInterval, coordinator.DefaultCompactInterval)
	c.Formats = c.Formats.withDefaults()
	return c
}

// orDefault sets *v to def when it is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// DefaultID is the replica ID of a Config without one: the host name and
// the process ID, host-pid, unique among the live replicas of a host.
func DefaultID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// Validate checks the configuration as New would use it, zero fields taking
// their defaults; c itself is not changed. Each message names the value and
// what is accepted; all the problems are reported together.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if err := coordinator.ValidGroup(c.Group); err != nil {
		errs = append(errs, err)
	}
	if c.ReplicaID == "" || strings.ContainsAny(c.ReplicaID, "/ \t\n") {
		errs = append(errs, fmt.Errorf("replica id %q: want a non-empty name without '/' or spaces", c.ReplicaID))
	}
	if len(c.Topics) == 0 && c.TopicsRegex == "" {
		errs = append(errs, errors.New("no topics: name at least one, or give a pattern"))
	}
	if _, err := coordinator.TopicsPattern(c.TopicsRegex); err != nil {
		errs = append(errs, err)
	}
	for _, t := range c.Topics {
		if err := coordinator.ValidTopic(t); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Kafka.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := coordinator.ValidTTL(c.LeaseTTL); err != nil {
		errs = append(errs, err)
	}
	if c.MaxBlockRows < 1 {
		errs = append(errs, fmt.Errorf("max block rows %d: want at least 1", c.MaxBlockRows))
	}
	if c.EtcdMaxTxnOps < 4 {
		errs = append(errs, fmt.Errorf("etcd max txn ops %d: want at least 4 (etcd's --max-txn-ops, 128 by default)", c.EtcdMaxTxnOps))
	}
	if c.MaxBlockBytes < 1 {
		errs = append(errs, fmt.Errorf("max block bytes %d: want at least 1", c.MaxBlockBytes))
	}
	if c.FlushInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("flush interval %s: want at least 1ms", c.FlushInterval))
	}
	if c.WriteTimeout < 0 {
		errs = append(errs, fmt.Errorf("write timeout %s: want a positive duration", c.WriteTimeout))
	}
	if c.LogEndInterval < 0 {
		errs = append(errs, fmt.Errorf("log end interval %s: want a positive duration", c.LogEndInterval))
	}
	if c.KafkaDownAfter < 0 {
		errs = append(errs, fmt.Errorf("kafka down after %s: want a positive duration", c.KafkaDownAfter))
	}
	if c.MaxEmptyPolls < 1 {
		errs = append(errs, fmt.Errorf("max empty polls %d: want at least 1", c.MaxEmptyPolls))
	}
	if err := c.CommitMode.Check(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Formats.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
