package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
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
