package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
)

// Defaults of the operator commands' timeouts.
const (
	defaultEtcdTimeout  = 10 * time.Second
	defaultKafkaTimeout = 5 * time.Second
)

// adminFlags are the flags every operator command takes: where the cluster
// is (the same flags as run), how long to wait for it, and -o.
type adminFlags struct {
	cluster      clusterFlags
	output       outputFlag
	etcdTimeout  time.Duration
	kafkaTimeout time.Duration
	withKafka    bool
}

// register adds the flags to cmd; withKafka adds --kafka-timeout for the
// commands that ask Kafka.
func (f *adminFlags) register(cmd *cobra.Command, withKafka bool) {
	f.cluster.register(cmd)
	f.output.register(cmd)
	fs := cmd.Flags()
	fs.DurationVar(&f.etcdTimeout, "etcd-timeout", defaultEtcdTimeout, "give up on etcd after this long (exit 1)")
	f.withKafka = withKafka
	if withKafka {
		fs.DurationVar(&f.kafkaTimeout, "kafka-timeout", defaultKafkaTimeout, "give up on Kafka after this long")
	}
}

// validate checks the flags; the group is checked only when needGroup, and
// otherwise only if given.
func (f *adminFlags) validate(needGroup bool) error {
	if err := f.output.validate(); err != nil {
		return err
	}
	if needGroup || f.cluster.group != "" {
		if err := f.cluster.validate(); err != nil {
			return err
		}
	} else if err := (&clusterFlags{etcdEndpoints: f.cluster.etcdEndpoints, group: "any"}).validate(); err != nil {
		return err
	} else if err := f.cluster.security.validate(f.cluster.etcdEndpoints); err != nil {
		return err
	}
	if f.etcdTimeout <= 0 {
		return usagef("--etcd-timeout %s: want a positive duration such as 10s", f.etcdTimeout)
	}
	if f.withKafka && f.kafkaTimeout <= 0 {
		return usagef("--kafka-timeout %s: want a positive duration such as 5s", f.kafkaTimeout)
	}
	for _, b := range f.cluster.brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return usagef("--brokers %q: want host:port[,host:port...]", b)
		}
	}
	return nil
}

// etcd opens a client; close it when done.
func (f *adminFlags) etcd() (*clientv3.Client, error) { return f.cluster.etcdClient() }

// etcdContext bounds one etcd exchange.
func (f *adminFlags) etcdContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.etcdTimeout)
}

func (f *adminFlags) etcdError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("etcd at %s did not answer within --etcd-timeout %s: %w",
			strings.Join(f.cluster.etcdEndpoints, ","), f.etcdTimeout, err)
	}
	return err
}

// loadGroup reads the group's state at one revision. A group without any
// key in etcd is bad usage: the error names it and the groups there are.
func (f *adminFlags) loadGroup(ctx context.Context, cli *clientv3.Client) (*coordinator.Coordinator, *coordinator.Snapshot, error) {
	group := f.cluster.group
	coord, err := coordinator.New(cli, group)
	if err != nil {
		return nil, nil, usage(fmt.Errorf("--group: %w", err))
	}
	ectx, cancel := f.etcdContext(ctx)
	defer cancel()
	n, err := cli.Get(ectx, coord.Keys().Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, nil, f.etcdError(fmt.Errorf("read group %s: %w", group, err))
	}
	if n.Count == 0 {
		known, err := coordinator.Groups(ectx, cli)
		if err != nil {
			return nil, nil, f.etcdError(err)
		}
		return nil, nil, unknownGroup(group, known)
	}
	snap, err := coord.Snapshot(ectx)
	if err != nil {
		return nil, nil, f.etcdError(err)
	}
	return coord, snap, nil
}

func unknownGroup(group string, known []string) error {
	if len(known) == 0 {
		return usagef("--group %q: no such group in etcd (no group has any key under /offsetkeeper/v1/groups/)", group)
	}
	return usagef("--group %q: no such group in etcd; want one of: %s", group, strings.Join(known, ", "))
}

// groupTopics lists the topics named in the group's claims, offsets and
// intents, sorted.
func groupTopics(s *coordinator.Snapshot) []string {
	var out []string
	for _, p := range groupPartitions(s) {
		if len(out) == 0 || out[len(out)-1] != p.Topic {
			out = append(out, p.Topic)
		}
	}
	return out
}

// groupPartitions lists the partitions that have a claim, offsets or an
// intent, sorted.
func groupPartitions(s *coordinator.Snapshot) []coordinator.Partition {
	seen := map[coordinator.Partition]bool{}
	for p := range s.Claims {
		seen[p] = true
	}
	for p := range s.Offsets {
		seen[p] = true
	}
	for p := range s.Intents {
		seen[p] = true
	}
	out := make([]coordinator.Partition, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sortPartitions(out)
	return out
}

func sortPartitions(ps []coordinator.Partition) {
	slices.SortFunc(ps, coordinator.Partition.Compare)
}

// kafkaAdmin asks Kafka the few questions the operator commands have: which
// partitions a topic has, where each partition's log starts and ends, and
// which offset a time corresponds to. Log ends are read_committed: the last
// stable offset, where a replica's reading ends.
type kafkaAdmin struct {
	brokers   []string
	addr      net.Addr
	transport *kafkago.Transport
	client    *kafkago.Client
	stop      context.CancelFunc
}

func newKafkaAdmin(brokers []string, timeout time.Duration, topics []string, auth kafkaAuth) *kafkaAdmin {
	bg, stop := context.WithCancel(context.Background())
	t := &kafkago.Transport{
		DialTimeout:    timeout,
		ClientID:       "offsetkeeper-cli",
		MetadataTopics: topics,
		Context:        bg,
	}
	auth.apply(t) // TLS and SASL (security.go)
	return &kafkaAdmin{
		brokers:   brokers,
		addr:      kafkago.TCP(brokers...),
		transport: t,
		client:    &kafkago.Client{Transport: t, Timeout: timeout},
		stop:      stop,
	}
}

// Close ends the connections and the transport's goroutines.
func (k *kafkaAdmin) Close() {
	k.stop()
	k.transport.CloseIdleConnections()
}

// errKafkaUnreachable marks a failure to talk to Kafka at all, as opposed to
// an answer that refuses something.
var errKafkaUnreachable = errors.New("kafka unreachable")

func (k *kafkaAdmin) unreachable(err error) error {
	return fmt.Errorf("%w at %s: %w", errKafkaUnreachable, strings.Join(k.brokers, ","), err)
}

// partitions returns the partition ids of each topic Kafka knows, sorted,
// and the topics it does not know.
func (k *kafkaAdmin) partitions(ctx context.Context, topics []string) (map[string][]int, []string, error) {
	found := map[string][]int{}
	if len(topics) == 0 {
		return found, nil, nil
	}
	res, err := k.client.Metadata(ctx, &kafkago.MetadataRequest{Addr: k.addr, Topics: topics})
	if err != nil {
		return nil, nil, k.unreachable(err)
	}
	for _, t := range res.Topics {
		if !slices.Contains(topics, t.Name) {
			continue
		}
		if t.Error != nil {
			if errors.Is(t.Error, kafkago.UnknownTopicOrPartition) {
				continue
			}
			return nil, nil, fmt.Errorf("partitions of topic %q: %w", t.Name, t.Error)
		}
		ids := make([]int, len(t.Partitions))
		for i, p := range t.Partitions {
			ids[i] = p.ID
		}
		slices.Sort(ids)
		found[t.Name] = ids
	}
	var missing []string
	for _, t := range topics {
		if _, ok := found[t]; !ok {
			missing = append(missing, t)
		}
	}
	return found, missing, nil
}

// logBounds is where a partition's log starts and where it ends for a
// read_committed reader.
type logBounds struct{ earliest, end int64 }

// bounds returns the log bounds of every partition in ps.
func (k *kafkaAdmin) bounds(ctx context.Context, ps []coordinator.Partition) (map[coordinator.Partition]logBounds, error) {
	out := make(map[coordinator.Partition]logBounds, len(ps))
	if len(ps) == 0 {
		return out, nil
	}
	earliest, err := k.listOffsets(ctx, ps, kafka.ListEarliest, "log start")
	if err != nil {
		return nil, err
	}
	end, err := k.listOffsets(ctx, ps, kafka.ListLatest, "log end")
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		out[p] = logBounds{earliest: earliest[p], end: end[p]}
	}
	return out, nil
}

// offsetsAt returns, for every partition in ps, the first offset whose
// record timestamp is at or after t, or -1 where there is none (t is after
// the last record).
func (k *kafkaAdmin) offsetsAt(ctx context.Context, ps []coordinator.Partition, t time.Time) (map[coordinator.Partition]int64, error) {
	if len(ps) == 0 {
		return map[coordinator.Partition]int64{}, nil
	}
	return k.listOffsets(ctx, ps, t.UnixMilli(), "offset at "+t.Format(time.RFC3339))
}

// listOffsets asks, with one request per broker, for the offset of every
// partition in ps at ts (kafka.ListEarliest, kafka.ListLatest or a time in
// milliseconds), read_committed. what names the offset in errors.
func (k *kafkaAdmin) listOffsets(ctx context.Context, ps []coordinator.Partition, ts int64, what string) (map[coordinator.Partition]int64, error) {
	tps := make([]kafka.TopicPartition, len(ps))
	for i, p := range ps {
		tps[i] = kafka.TopicPartition{Topic: p.Topic, Partition: p.Partition}
	}
	got, errs, err := kafka.ListOffsets(ctx, k.transport, k.brokers, "offsetkeeper-cli", kafka.ReadCommitted, ts, tps)
	if err != nil {
		return nil, k.unreachable(err)
	}
	out := make(map[coordinator.Partition]int64, len(ps))
	for i, p := range ps {
		if err := errs[tps[i]]; err != nil {
			return nil, fmt.Errorf("%s of %s: %w", what, p, err)
		}
		off, ok := got[tps[i]]
		if !ok {
			return nil, fmt.Errorf("%s of %s: no answer from Kafka", what, p)
		}
		out[p] = off
	}
	return out, nil
}

// noArgs refuses positional arguments as bad usage.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q (flags start with --; see %s --help)", cmd.CommandPath(), args, cmd.CommandPath())
	}
	return nil
}

// groupCommand is a command that only holds subcommands: without one it
// prints its help; with an unknown one it is bad usage.
func groupCommand(cmd *cobra.Command) *cobra.Command {
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			var names []string
			for _, s := range c.Commands() {
				if s.IsAvailableCommand() {
					names = append(names, s.Name())
				}
			}
			return usagef("unknown command %q for %q: want one of %s", args[0], c.CommandPath(), strings.Join(names, ", "))
		}
		return nil
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	return cmd
}
