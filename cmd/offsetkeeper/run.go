package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/replica"
)

// clusterFlags are the flags every command that talks to a group takes.
type clusterFlags struct {
	etcdEndpoints []string
	brokers       []string
	group         string
	security      securityFlags // TLS and credentials of etcd and Kafka (security.go)
}

func (f *clusterFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringSliceVar(&f.etcdEndpoints, "etcd-endpoints", []string{"127.0.0.1:2379"}, "etcd client endpoints, comma-separated host:port or URL")
	fs.StringSliceVar(&f.brokers, "brokers", []string{"127.0.0.1:9092"}, "Kafka bootstrap brokers, comma-separated host:port")
	fs.StringVar(&f.group, "group", "", "the group (pipeline) name; its state is in etcd under /offsetkeeper/v1/groups/<group>/")
	f.security.register(cmd)
}

func (f *clusterFlags) validate() error {
	if err := coordinator.ValidGroup(f.group); err != nil {
		if f.group == "" {
			return usagef("--group is required: name the pipeline, e.g. --group orders")
		}
		return usage(fmt.Errorf("--group: %w", err))
	}
	if len(f.etcdEndpoints) == 0 {
		return usagef("--etcd-endpoints is empty: want host:port[,host:port...]")
	}
	for _, e := range f.etcdEndpoints {
		if strings.TrimSpace(e) == "" || strings.ContainsAny(e, " \t") {
			return usagef("--etcd-endpoints %q: want host:port or http(s)://host:port", e)
		}
	}
	return f.security.validate(f.etcdEndpoints)
}

func (f *clusterFlags) etcdClient() (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   f.etcdEndpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	if err := f.security.applyEtcd(&cfg); err != nil { // TLS and credentials; errDryRun in a dry run
		return nil, err
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		err = f.security.explainEtcd(err, f.etcdEndpoints) // a TLS refusal, not a timeout
		return nil, fmt.Errorf("connect to etcd %s: %w", strings.Join(redactURLs(f.etcdEndpoints), ","), err)
	}
	return cli, nil
}

// runOptions is `offsetkeeper run`.
type runOptions struct {
	cluster clusterFlags
	logs    logFlags
	ops     runOpsFlags

	topics         []string
	sink           string
	replicaID      string
	leaseTTL       time.Duration
	maxBlockRows   int
	maxBlockBytes  byteSize
	etcdMaxTxnOps  int
	commitLinger   time.Duration
	maxBufferBytes byteSize
	flushInterval  time.Duration
	maxEmptyPolls  int
	commitMode     string
	startFrom      string
	fetchMaxWait   time.Duration
	shutdown       time.Duration

	cfg    replica.Config
	target sinkTarget
}

func newRunCommand() *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run one replica of a group against etcd and Kafka",
		Long: `Run one replica of a group. Replicas of the same --group share the partitions
of --topics: each claims the partitions the plan gives it, reads them from
Kafka, writes blocks of records to --sink and commits each block's offset to
etcd after the write, fenced by its claim.

A block ends at --max-block-rows rows or --max-block-bytes bytes,
--flush-interval after its first row, when the partition reaches the log end
(counted as an empty poll), or after --max-empty-polls empty polls in a row.

--max-buffer-bytes bounds what the replica holds of fetched records across
all its partitions. Each partition may hold an equal share: its block ends
at half of it, the other half is fetched while the block is written, and
nothing more until it is committed, so a backlog costs the budget and no
more. Partitions are fetched with one request per broker per round trip,
whatever their number; their etcd writes go together, one transaction per
round, sized to --etcd-max-txn-ops, and a block that ended because its
partition went quiet lets them wait --commit-linger for company.

With --commit-mode after-write (default) a crash replays at most the block
in flight (at-least-once; no duplicate in a file:// sink, which replaces a
replayed block). every-batch commits before the write: at-most-once.

SIGTERM or SIGINT stops gracefully: blocks in flight are finished and
committed, claims released, the lease revoked; other replicas take over at
once. Exit status 0.`,
		Example: `  offsetkeeper run --etcd-endpoints etcd1:2379,etcd2:2379 --brokers kafka:9092 \
    --group orders --topics orders,refunds --sink file:///var/lib/offsetkeeper

  # The same from the environment, as in a container:
  OFFSETKEEPER_GROUP=orders OFFSETKEEPER_TOPICS=orders OFFSETKEEPER_SINK=stdout: offsetkeeper run`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.complete(cmd); err != nil {
				return err
			}
			if err := o.validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return o.run(ctx, cmd)
		},
	}
	o.cluster.register(cmd)
	fs := cmd.Flags()
	fs.StringSliceVar(&o.topics, "topics", nil, "topics to consume, comma-separated (all their partitions)")
	fs.StringVar(&o.sink, "sink", "", "where records go: "+sinkURLHelp)
	fs.StringVar(&o.replicaID, "replica-id", "", "this replica's ID, unique in the group (default host-pid)")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", coordinator.DefaultTTL, "etcd lease TTL: a dead replica's partitions move after this (at least 2s, whole seconds)")
	fs.IntVar(&o.maxBlockRows, "max-block-rows", replica.DefaultMaxBlockRows, "end a block at this many rows")
	o.maxBlockBytes, o.maxBufferBytes = replica.DefaultMaxBlockBytes, replica.DefaultMaxBufferBytes
	fs.Var(&o.maxBlockBytes, "max-block-bytes", "end a block at this many bytes of records (KiB, MiB, GiB)")
	fs.Var(&o.maxBufferBytes, "max-buffer-bytes", "bound the bytes fetched and not yet committed, all partitions together: the replica's memory for records (KiB, MiB, GiB)")
	fs.DurationVar(&o.flushInterval, "flush-interval", replica.DefaultFlushInterval, "end a block this long after its first row")
	fs.IntVar(&o.maxEmptyPolls, "max-empty-polls", replica.DefaultMaxEmptyPolls, "end a block after this many empty polls in a row")
	fs.IntVar(&o.etcdMaxTxnOps, "etcd-max-txn-ops", coordinator.DefaultMaxTxnOps, "the etcd cluster's --max-txn-ops: commits of many partitions go to etcd in transactions sized to it")
	fs.DurationVar(&o.commitLinger, "commit-linger", replica.DefaultCommitLinger, "how long the etcd writes of a block that ended because its partition went quiet may wait to share a transaction with other partitions' (0: never); full blocks never wait")
	fs.StringVar(&o.commitMode, "commit-mode", "after-write", "after-write (at-least-once) or every-batch (at-most-once)")
	fs.StringVar(&o.startFrom, "start-from", "earliest", "where a partition without a committed offset starts: earliest or latest")
	fs.DurationVar(&o.fetchMaxWait, "fetch-max-wait", replica.DefaultFetchMaxWait, "how long a fetch waits on the broker for new records")
	fs.DurationVar(&o.shutdown, "shutdown-timeout", replica.DefaultShutdownTimeout, "how long a graceful stop waits for blocks in flight")
	o.logs.register(fs, "json")
	o.ops.register(fs)
	return cmd
}

func (o *runOptions) complete(cmd *cobra.Command) error {
	return bindEnv(cmd)
}

func (o *runOptions) validate() error {
	if err := o.cluster.validate(); err != nil {
		return err
	}
	if o.sink == "" {
		return usagef("--sink is required: want %s", sinkURLHelp)
	}
	t, err := parseSink(o.sink)
	if err != nil {
		return err
	}
	o.target = t
	o.target.group = o.cluster.group
	mode, err := replica.ParseCommitMode(o.commitMode)
	if err != nil {
		return usage(fmt.Errorf("--commit-mode: %w", err))
	}
	start, err := replica.ParseStartPolicy(o.startFrom)
	if err != nil {
		return usage(fmt.Errorf("--start-from: %w", err))
	}
	o.cfg = replica.Config{
		Group:     o.cluster.group,
		ReplicaID: o.replicaID,
		Topics:    o.topics,
		Kafka: replica.Kafka{
			Brokers:        o.cluster.brokers,
			FetchMaxWait:   o.fetchMaxWait,
			StartPolicy:    start,
			MaxBufferBytes: int(o.maxBufferBytes),
		},
		MaxBlockBytes:   int(o.maxBlockBytes),
		LeaseTTL:        o.leaseTTL,
		MaxBlockRows:    o.maxBlockRows,
		FlushInterval:   o.flushInterval,
		MaxEmptyPolls:   o.maxEmptyPolls,
		CommitLinger:    o.commitLinger,
		EtcdMaxTxnOps:   o.etcdMaxTxnOps,
		CommitMode:      mode,
		ShutdownTimeout: o.shutdown,
		Version:         version,
	}
	o.cluster.security.kafkaAuth().applyFetch(&o.cfg.Kafka) // TLS and SASL (sasl.go)
	if o.cfg.ReplicaID == "" {
		o.cfg.ReplicaID = replica.DefaultID()
	}
	if o.commitLinger < 0 {
		return usagef("--commit-linger %s: want 0 (never wait) or more", o.commitLinger)
	}
	if o.commitLinger == 0 {
		o.cfg.CommitLinger = -1 // the library's zero is its default
	}
	if o.leaseTTL <= 0 || o.maxBlockRows <= 0 || o.flushInterval <= 0 || o.maxEmptyPolls <= 0 {
		// Zero would mean "default" to the library; on the command line it
		// is a mistake.
		return usagef("--lease-ttl, --max-block-rows, --flush-interval and --max-empty-polls must be positive (got %s, %d, %s, %d)",
			o.leaseTTL, o.maxBlockRows, o.flushInterval, o.maxEmptyPolls)
	}
	if len(o.topics) == 0 {
		return usagef("--topics is required: name at least one topic, e.g. --topics orders,refunds")
	}
	if err := coordinator.ValidTTL(o.leaseTTL); err != nil {
		return usage(fmt.Errorf("--lease-ttl: %w", err))
	}
	for _, b := range o.cluster.brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return usagef("--brokers %q: want host:port", b)
		}
	}
	if err := o.cfg.Validate(); err != nil {
		return usage(err)
	}
	if err := o.ops.validate(); err != nil {
		return err
	}
	if _, err := o.logs.newLogger(os.Stderr); err != nil {
		return err
	}
	return nil
}

func (o *runOptions) run(ctx context.Context, cmd *cobra.Command) error {
	log, _ := o.logs.newLogger(cmd.ErrOrStderr())
	defer func() { _ = log.Sync() }()
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
	defer ops.stop() // after Run, before cli.Close: the last offsets are mirrored
	o.cfg.HTTPAddr = ops.advertised()
	sink, err := o.target.open(cmd.OutOrStdout())
	if err != nil {
		return err
	}
	r, err := replica.New(o.cfg, cli, sink, log)
	if err != nil {
		_ = sink.Close()
		return usage(err)
	}
	log.Info("replica starting", zap.Strings("topics", o.cfg.Topics), zap.String("sink", o.target.scheme),
		zap.Stringer("commit_mode", o.cfg.CommitMode))
	ops.start(ctx, r)
	runErr := r.Run(ctx)
	if err := sink.Close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("close sink: %w", err)
	}
	log.Info("replica stopped", zap.Int64("records", r.Stats().Records), zap.Int64("blocks", r.Stats().Blocks))
	return runErr
}
