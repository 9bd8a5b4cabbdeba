package replica

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/enum"
)

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
	// (kafka.DefaultMaxBufferBytes, 256 MiB).
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
	// second, for 0.2 s more latency at most. Full blocks never wait.
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
)

// CommitMode says when a block's offset is committed.
type CommitMode int

const (
	// AfterWrite commits after the sink write: at-least-once (exactly-once
	// with a sink that keys writes by range or stores its offsets).
	AfterWrite CommitMode = iota
	// EveryBatch commits each polled batch before writing it: at-most-once.
	// A crash between the commit and the write loses that batch.
	EveryBatch
)

var commitModeNames = enum.New[CommitMode]("commit mode", "after-write", "every-batch")

// String returns "after-write" or "every-batch".
func (m CommitMode) String() string { return commitModeNames.String(m) }

// ParseCommitMode parses "after-write" or "every-batch" (space trimmed,
// case folded).
func ParseCommitMode(s string) (CommitMode, error) { return commitModeNames.Parse(s) }

// MarshalText implements encoding.TextMarshaler.
func (m CommitMode) MarshalText() ([]byte, error) { return commitModeNames.Marshal(m) }

// UnmarshalText implements encoding.TextUnmarshaler with ParseCommitMode.
func (m *CommitMode) UnmarshalText(b []byte) error { return commitModeNames.Unmarshal(m, b) }

// Config configures a Replica. Zero durations and counts take the defaults.
type Config struct {
	// Group names the pipeline; its state lives under
	// /offsetkeeper/v1/groups/<group>/ in etcd.
	Group string
	// ReplicaID identifies this replica in the group; unique among live
	// replicas. Default: host-pid.
	ReplicaID string
	// Topics are consumed whole: every partition of each.
	Topics []string
	// Kafka says how Kafka is read; Kafka.StartPolicy is the group's start
	// policy.
	Kafka Kafka
	// LeaseTTL is the replica's etcd lease TTL (default 10s, at least 2s).
	LeaseTTL time.Duration
	// EtcdMaxTxnOps is the etcd cluster's --max-txn-ops (default 128):
	// the write rounds that carry many partitions' claims, intents and
	// commits are sized to it.
	EtcdMaxTxnOps int

	MaxBlockRows int
	// MaxBlockBytes ends a block by size (default DefaultMaxBlockBytes).
	// A block also ends when its partition holds its share of the memory
	// budget, Fetch.MaxBufferBytes.
	MaxBlockBytes int
	FlushInterval time.Duration
	MaxEmptyPolls int
	CommitMode    CommitMode
	// CommitLinger is how long the intent and the commit of a block that
	// did not end by size may wait to share an etcd round with other
	// partitions' (default DefaultCommitLinger; negative: never wait). It
	// is capped at LeaseTTL/16.
	CommitLinger time.Duration

	ResyncInterval   time.Duration
	MetadataInterval time.Duration
	RebalanceDelay   time.Duration
	ShutdownTimeout  time.Duration

	// HTTPAddr and Version are advertised in the member key.
	HTTPAddr string
	Version  string
}

var topicName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

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
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("no topics: name at least one"))
	}
	for _, t := range c.Topics {
		if !topicName.MatchString(t) {
			errs = append(errs, fmt.Errorf("topic %q: want 1 to 249 characters of A-Z a-z 0-9 . _ -", t))
		}
	}
	if err := c.Kafka.validate(); err != nil {
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
	if c.MaxEmptyPolls < 1 {
		errs = append(errs, fmt.Errorf("max empty polls %d: want at least 1", c.MaxEmptyPolls))
	}
	if err := commitModeNames.Check(c.CommitMode); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
