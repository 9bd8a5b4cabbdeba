package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/redact"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// runOptions is `offsetkeeper run`.
type runOptions struct {
	cluster clusterFlags
	logs    logFlags
	ops     runOpsFlags
	formats formatFlags

	topics           []string
	topicsRegex      string
	metadataInterval time.Duration
	sink             string
	replicaID        string
	leaseTTL         time.Duration
	maxBlockRows     int
	maxBlockBytes    byteSize
	etcdMaxTxnOps    int
	commitLinger     time.Duration
	maxBufferBytes   byteSize
	flushInterval    time.Duration
	maxEmptyPolls    int
	commitMode       replica.CommitMode
	startFrom        kafkaconf.StartPolicy
	fetchMaxWait     time.Duration
	fetchSessions    bool
	kafkaRack        string
	etcdCompact      time.Duration
	shutdown         time.Duration
	kafkaDownAfter   time.Duration
	allowTopicChange bool
	writeTimeout     time.Duration
	allowSinkChange  bool
	allowSharedSink  bool

	// Built by complete.
	cfg    replica.Config
	target sinkTarget

	sinks sinks.Table // what --sink may name
}

const runLong = `Run one replica of a group. Replicas of the same --group share the partitions
of --topics: each claims the partitions the plan gives it, reads them from
Kafka, writes blocks of records to --sink and commits each block's offset to
etcd after the write, fenced by its claim.

A block ends at --max-block-rows rows or --max-block-bytes bytes,
--flush-interval after its first row, when the partition reaches the log end
(counted as an empty poll), or after --max-empty-polls empty polls in a row.

--max-buffer-bytes bounds what the replica holds of fetched records across
all its partitions, decompressed and, with --value-format or --key-format
avro, protobuf or json-schema, decoded into JSON. Each partition may hold
an equal share: its block ends at half of it, the other half is fetched
while the block is written, and nothing more until it is committed, so a
backlog costs the budget and no more. The process's memory follows: the Go
runtime's limit is the budget plus 192 MiB and 32 KiB a partition, and the
collector runs only as the process nears it, so resident memory rises
towards it even when idle (GOMEMLIMIT or GOGC in the environment choose
otherwise). Partitions are fetched with one request per broker per round
trip, whatever their number; their etcd writes go together, one
transaction per round, sized to --etcd-max-txn-ops, and the small blocks of
a partition that trickles let them wait --commit-linger for company.

--value-format and --key-format say how records are encoded: json (default)
passes the bytes through; avro, protobuf and json-schema read Confluent's wire
format, fetching each schema once from --schema-registry, and hand the sink the
JSON each record stands for (as Kafka Connect's AvroConverter and friends do).
A registry that does not answer never loses a record: the block is read again.
A record that cannot be decoded goes to the sink's dead-letter table
(PostgreSQL, ClickHouse), or stops its partition there, logging why; with
--on-decode-error skip it is left out and counted.

With --commit-mode after-write (default) a crash replays at most the block
in flight (at-least-once; no duplicate in a file:// sink, which replaces a
replayed block). every-batch commits before the write: at-most-once.

A group records itself where it writes (file: DIR/.offsetkeeper-groups/TOPIC;
PostgreSQL, ClickHouse: the table offsetkeeper_sink_groups), and its replicas
advertise their --sink in etcd. A replica of another group on the same topic
of the same directory or table exits 2, naming both groups (each would deliver
every record once: duplicates to a plain reader); --allow-shared-sink lets it
write there anyway. A replica whose --sink differs from its group's live
replicas exits 2; --allow-sink-change moves a group to a new sink on purpose.

SIGTERM or SIGINT stops gracefully: blocks in flight are finished and
committed, claims released, the lease revoked; other replicas take over at
once. Exit status 0.`

const runExample = `  offsetkeeper run --etcd-endpoints etcd1:2379,etcd2:2379 --brokers kafka:9092 \
    --group orders --topics orders,refunds --sink file:///var/lib/offsetkeeper

  # Avro values through a Schema Registry, into PostgreSQL columns that grow with the schema:
  offsetkeeper run --etcd-endpoints etcd:2379 --brokers kafka:9092 --group orders --topics orders \
    --value-format avro --schema-registry http://registry:8081 \
    --sink 'postgres://app@db/shop?mode=columns&table=orders&evolve=add-columns'

  # The same from the environment, as in a container:
  OFFSETKEEPER_GROUP=orders OFFSETKEEPER_TOPICS=orders OFFSETKEEPER_SINK=stdout: offsetkeeper run`

func newRunCommand(table sinks.Table) *cobra.Command {
	o := &runOptions{sinks: table}
	cmd := &cobra.Command{
		Use:     "run",
		Short:   "Run one replica of a group against etcd and Kafka",
		Long:    runLong,
		Example: runExample,
		Args:    noArgs,
		RunE:    runE(o),
	}
	o.cluster.register(cmd)
	fs := cmd.Flags()
	fs.StringSliceVar(&o.topics, "topics", nil, "topics to consume, comma-separated, each with all its partitions (the operator commands' --topic T:P,P picks partitions)")
	fs.StringVar(&o.topicsRegex, "topics-regex", "", `also consume every topic whose whole name matches this regular expression (RE2, e.g. 'orders\..*'), but Kafka's internal topics: topics created later are read within --metadata-interval, deleted ones released; see docs/topics.md`)
	fs.DurationVar(&o.metadataInterval, "metadata-interval", replica.DefaultMetadataInterval, "how often the topics' metadata is read (metadata.max.age.ms): partitions added to a topic, and with --topics-regex topics created or deleted, are found within it; must be positive")
	fs.StringVar(&o.sink, "sink", "", "where records go: "+table.Usage())
	fs.StringVar(&o.replicaID, "replica-id", "", "this replica's ID, unique in the group (default host-pid)")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", coordinator.DefaultTTL, "etcd lease TTL: a dead replica's partitions move after this (at least 2s, whole seconds)")
	fs.IntVar(&o.maxBlockRows, "max-block-rows", replica.DefaultMaxBlockRows, "end a block at this many rows (at least 1)")
	o.maxBlockBytes, o.maxBufferBytes = replica.DefaultMaxBlockBytes, kafkaconf.DefaultMaxBufferBytes
	fs.Var(&o.maxBlockBytes, "max-block-bytes", "end a block at this many bytes of records (KiB, MiB, GiB)")
	fs.Var(&o.maxBufferBytes, "max-buffer-bytes", "bound the bytes fetched (decompressed, and decoded into JSON) and not yet committed, all partitions together: the replica's memory for records (KiB, MiB, GiB)")
	fs.DurationVar(&o.flushInterval, "flush-interval", replica.DefaultFlushInterval, "end a block this long after its first row; must be positive")
	fs.IntVar(&o.maxEmptyPolls, "max-empty-polls", replica.DefaultMaxEmptyPolls, "end a block after this many empty polls in a row (at least 1)")
	fs.DurationVar(&o.etcdCompact, "etcd-compact-interval", coordinator.DefaultCompactInterval, "compact etcd's history to the revision of one interval before, every interval (one replica of all on the etcd cluster takes each round, as kube-apiserver's do); 0: never, where the cluster is shared and its owner compacts it (--auto-compaction-retention): without either, etcd's database grows with every commit until its quota, then refuses every write")
	fs.IntVar(&o.etcdMaxTxnOps, "etcd-max-txn-ops", coordinator.DefaultMaxTxnOps, "the etcd cluster's --max-txn-ops: commits of many partitions go to etcd in transactions sized to it")
	fs.DurationVar(&o.commitLinger, "commit-linger", replica.DefaultCommitLinger, "how long the etcd writes of a trickling partition's small block (at most a 64th of the block limits; it and the block before it ended because the partition went quiet, and its records came after the partition was read to its log end) may wait to share a transaction with other partitions' (0: never); full and larger blocks, the block that ends a backlog and small blocks of records that waited in Kafka never wait")
	fs.Var(enumVar(&o.commitMode),
		"commit-mode", "after-write (at-least-once) or every-batch (at-most-once)")
	fs.Var(enumVar(&o.startFrom),
		"start-from", "where a partition without a committed offset starts: earliest or latest")
	fs.StringVar(&o.cluster.kafkaClientID, "kafka-client-id", kafkaconf.DefaultClientID, "the client.id the replica sends Kafka (quotas, ACLs and broker logs see it)")
	fs.StringVar(&o.kafkaRack, "kafka-rack", "", "the rack or zone this replica runs in (client.rack): with a cluster whose replica.selector.class is RackAwareReplicaSelector, partitions are read from a replica in the same rack rather than the leader (KIP-392); empty: the leader's, unless it names another replica")
	fs.BoolVar(&o.fetchSessions, "fetch-sessions", true, "send a broker only the partitions whose fetch changed, in an incremental fetch session (KIP-227), where it keeps them; false: every fetch lists all its partitions")
	fs.DurationVar(&o.fetchMaxWait, "fetch-max-wait", kafkaconf.DefaultFetchMaxWait, "how long a fetch waits on the broker for new records; must be positive (the broker answers as soon as it has records)")
	fs.DurationVar(&o.shutdown, "shutdown-timeout", replica.DefaultShutdownTimeout, "how long a graceful stop waits for blocks in flight before it cuts them short; must be positive")
	fs.DurationVar(&o.kafkaDownAfter, "kafka-down-after", replica.DefaultKafkaDownAfter, "how long the replica's reads of Kafka (metadata, a broker's fetches) may fail before it says it cannot read, is not ready, and gives its partitions to replicas that read (after half as long again; nothing moves while none reads); must be positive")
	fs.DurationVar(&o.writeTimeout, "write-timeout", replica.DefaultWriteTimeout, "bound one sink write: past it the write fails, rolls back and is retried (a lock, a server that stopped answering); must be positive")
	fs.BoolVar(&o.allowSinkChange, "allow-sink-change", false, "join a group whose live replicas write to another sink: to move a group to a new sink, roll every replica with the new --sink and this flag, then without it")
	fs.BoolVar(&o.allowTopicChange, "allow-topic-change", false, "join a group whose live replicas read other --topics: to change a group's topics, roll every replica with the new list and this flag, then without it")
	fs.BoolVar(&o.allowSharedSink, "allow-shared-sink", false, "write topics to a sink destination (file directory, PostgreSQL or ClickHouse table) that another group writes them to: each group then delivers every record once, so only a reader that deduplicates sees them once")
	o.formats.register(fs)
	o.logs.register(fs, logInfo, logJSON)
	o.ops.register(fs)
	return cmd
}

// complete parses --sink and builds the replica's configuration.
func (o *runOptions) complete(cmd *cobra.Command) error {
	if cmd.Flags().Changed("replica-id") && strings.TrimSpace(o.replicaID) == "" {
		// Empty would silently mean host-pid: a typo'd variable in a manifest.
		return usagef("--replica-id is empty: want a name unique in the group, such as the pod's name, or leave the flag out for host-pid (%s)", replica.DefaultID())
	}
	var err error
	if o.target, err = parseSinkFlag(o.sinks, o.sink); err != nil {
		return err
	}
	if err := o.target.setGroup(o.cluster.group); err != nil {
		return err
	}
	o.target.claim, o.target.shared = o.topics, o.allowSharedSink
	o.cfg = replica.Config{
		Group:            o.cluster.group,
		ReplicaID:        o.replicaID,
		Topics:           o.topics,
		TopicsRegex:      o.topicsRegex,
		MetadataInterval: o.metadataInterval,
		CompactInterval:  o.etcdCompact,
		NoCompaction:     o.etcdCompact == 0,
		Kafka: kafkaconf.Config{
			Brokers:         o.cluster.brokers,
			ClientID:        o.cluster.kafkaClientID,
			Rack:            o.kafkaRack,
			FetchMaxWait:    o.fetchMaxWait,
			NoFetchSessions: !o.fetchSessions,
			StartPolicy:     o.startFrom,
			MaxBufferBytes:  int(o.maxBufferBytes),
		},
		MaxBlockBytes:    int(o.maxBlockBytes),
		LeaseTTL:         o.leaseTTL,
		MaxBlockRows:     o.maxBlockRows,
		FlushInterval:    o.flushInterval,
		MaxEmptyPolls:    o.maxEmptyPolls,
		CommitLinger:     o.commitLinger,
		EtcdMaxTxnOps:    o.etcdMaxTxnOps,
		CommitMode:       o.commitMode,
		ShutdownTimeout:  o.shutdown,
		KafkaDownAfter:   o.kafkaDownAfter,
		WriteTimeout:     o.writeTimeout,
		Sink:             o.target.Identity(),
		AllowSinkChange:  o.allowSinkChange,
		AllowTopicChange: o.allowTopicChange,
		Version:          version,
	}
	if o.cfg.ReplicaID == "" {
		o.cfg.ReplicaID = replica.DefaultID()
	}
	if o.commitLinger == 0 {
		o.cfg.CommitLinger = -1 // the library's zero is its default
	}
	return nil
}

// validate checks the flags, each by name: zero would mean "the default"
// to the library, and on the command line it is a mistake.
func (o *runOptions) validate() error {
	if err := o.cluster.validate(); err != nil {
		return err
	}
	if o.sink == "" {
		return usagef("--sink is required: want %s", o.sinks.Usage())
	}
	if len(o.topics) == 0 && o.topicsRegex == "" {
		return usagef("--topics or --topics-regex is required: name at least one topic, e.g. --topics orders,refunds, or give a pattern, e.g. --topics-regex 'orders\\..*'")
	}
	if _, err := coordinator.TopicsPattern(o.topicsRegex); err != nil {
		return usagef("--topics-regex: %w", err)
	}
	if err := validTopics("--topics", o.topics); err != nil {
		return err
	}
	for _, c := range []struct {
		flag string
		ok   bool
		got  any
		want string
	}{
		{"--lease-ttl", o.leaseTTL > 0, o.leaseTTL, "whole seconds, at least 2s"},
		{"--max-block-rows", o.maxBlockRows > 0, o.maxBlockRows, "1 or more"},
		{"--flush-interval", o.flushInterval > 0, o.flushInterval, "a duration such as 1s"},
		{"--max-empty-polls", o.maxEmptyPolls > 0, o.maxEmptyPolls, "1 or more"},
		{"--metadata-interval", o.metadataInterval > 0, o.metadataInterval, "a duration such as 10s"},
		{"--fetch-max-wait", o.fetchMaxWait > 0, o.fetchMaxWait, "a duration such as 500ms"},
		{"--shutdown-timeout", o.shutdown > 0, o.shutdown, "a duration such as 30s (a stop that does not wait is SIGKILL)"},
		{"--kafka-down-after", o.kafkaDownAfter > 0, o.kafkaDownAfter, "a duration such as 30s"},
		{"--write-timeout", o.writeTimeout > 0, o.writeTimeout, "a duration such as 1m, above the slowest write of a healthy sink"},
	} {
		if !c.ok {
			return usagef("%s must be positive; the value given, %v, is not: want %s", c.flag, c.got, c.want)
		}
	}
	if strings.TrimSpace(o.cluster.kafkaClientID) == "" {
		return usagef("--kafka-client-id is empty: want a name brokers know this replica by, such as %s", kafkaconf.DefaultClientID)
	}
	if o.etcdMaxTxnOps < 4 {
		return usagef("--etcd-max-txn-ops %d: want the etcd cluster's --max-txn-ops, at least 4 (etcd's default is %d)", o.etcdMaxTxnOps, coordinator.DefaultMaxTxnOps)
	}
	if o.etcdCompact < 0 || (o.etcdCompact > 0 && o.etcdCompact < time.Second) {
		return usagef("--etcd-compact-interval %v: want 0 (never) or at least 1s (default %v)", o.etcdCompact, coordinator.DefaultCompactInterval)
	}
	if o.commitLinger < 0 {
		return usagef("--commit-linger %s: want 0 (never wait) or more", o.commitLinger)
	}
	if err := coordinator.ValidTTL(o.leaseTTL); err != nil {
		return usage(fmt.Errorf("--lease-ttl: %w", err))
	}
	var err error
	if o.cfg.Formats, err = o.formats.build(); err != nil {
		return err
	}
	if err := o.cfg.Validate(); err != nil {
		return usage(err)
	}
	return o.ops.validate()
}

func (o *runOptions) run(ctx context.Context, cmd *cobra.Command) error {
	log := o.logs.newLogger(cmd.ErrOrStderr())
	defer func() { _ = log.Sync() }()
	follow := replica.TuneMemory(log, int64(o.maxBufferBytes))
	cli, err := o.cluster.etcdClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	if err := o.cluster.checkAccess(ctx, cli, o.cfg.Topics); err != nil {
		return err // credentials refused: fail now rather than retry forever
	}
	ops, err := o.ops.listen(log)
	if err != nil {
		return err
	}
	defer ops.Stop() // after Run, before cli.Close: the last offsets are mirrored
	o.cfg.HTTPAddr = ops.Advertised()
	// TLS and SASL, which validate read from the files (sasl.go).
	o.cluster.security.kafkaAuth().apply(&o.cfg.Kafka)
	o.target.log = log
	// The destination is claimed for the group once the replica has found
	// its topics and its group's sink (BeforeJoin): a replica that refuses
	// to start leaves no claim behind.
	sink, err := o.target.openSink(ctx, cmd.OutOrStdout())
	if err != nil && ctx.Err() != nil {
		// Stopped while waiting for the sink's server: a stop, as asked.
		log.Info("replica stopped before its sink opened", zap.Error(err))
		return nil
	}
	if err != nil {
		return err
	}
	o.cfg.BeforeJoin = func(ctx context.Context) error { return o.target.claimDestination(ctx, sink) }
	r, err := replica.New(o.cfg, cli, sink, log)
	if err != nil {
		_ = sink.Close()
		return usage(err)
	}
	log.Info("replica starting", zap.String("replica", o.cfg.ReplicaID), zap.String("group", o.cfg.Group),
		zap.Strings("topics", o.cfg.Topics), zap.String("topics_regex", o.cfg.TopicsRegex), zap.String("sink", o.target.scheme()),
		zap.Strings("brokers", o.cfg.Kafka.Brokers), zap.Strings("etcd", redact.URLs(o.cluster.etcdEndpoints)),
		zap.Duration("lease_ttl", o.cfg.LeaseTTL), zap.Stringer("commit_mode", o.cfg.CommitMode), zap.String("version", version))
	ops.Start(ctx, r)
	fctx, stopFollow := context.WithCancel(ctx)
	go replica.FollowPartitions(fctx, r, follow)
	runErr := r.Run(ctx)
	stopFollow()
	_ = r.Close() // the registry's connections
	if errors.As(runErr, new(*replica.MissingTopicError)) || errors.As(runErr, new(*replica.SinkMismatchError)) ||
		errors.As(runErr, new(*replica.TopicsMismatchError)) || errors.As(runErr, new(*replica.DuplicateIDError)) {
		runErr = usage(runErr) // a name or a URL on the command line: exit 2
	}
	if err := sink.Close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("close sink: %w", err)
	}
	log.Info("replica stopped", zap.Int64("records", r.Stats().Records), zap.Int64("blocks", r.Stats().Blocks))
	return runErr
}
