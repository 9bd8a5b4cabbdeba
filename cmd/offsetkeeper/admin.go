package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/redact"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
)

// refusedProbeTimeout bounds the probe of the etcd endpoints that tells a
// refused connection at once, rather than after --etcd-timeout.
const refusedProbeTimeout = time.Second

// etcdSession is an operator command's connection to etcd, and for the
// commands of one group, the group's state read at one revision. Close it
// when done.
type etcdSession struct {
	cli   *clientv3.Client
	coord *coordinator.Coordinator // nil from open
	snap  *coordinator.Snapshot    // nil from open
}

func (s *etcdSession) Close() { _ = s.cli.Close() }

// open connects to etcd. When every endpoint refuses the connection it
// fails at once, saying so.
func (f *adminFlags) open(ctx context.Context) (*etcdSession, error) {
	cli, err := f.cluster.etcdClient()
	if err != nil {
		return nil, err
	}
	if err := refused(ctx, f.cluster.etcdEndpoints); err != nil {
		_ = cli.Close()
		return nil, err
	}
	return &etcdSession{cli: cli}, nil
}

// openGroup is open, then the group's state. A group without any key in
// etcd is bad usage: the error names it and the groups there are.
func (f *adminFlags) openGroup(ctx context.Context) (*etcdSession, error) {
	s, err := f.open(ctx)
	if err != nil {
		return nil, err
	}
	if s.coord, s.snap, err = f.loadGroup(ctx, s.cli); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// kafka opens the Kafka client of the topics, and a context bounded by
// --kafka-timeout. done closes both.
func (f *adminFlags) kafka(ctx context.Context, topics []string) (k *admin.Kafka, kctx context.Context, done func()) {
	kctx, cancel := context.WithTimeout(ctx, f.kafkaTimeout)
	cfg := kafkaconf.Config{Brokers: f.cluster.brokers, DialTimeout: f.kafkaTimeout, RequestTimeout: f.kafkaTimeout, ClientID: "offsetkeeper-cli"}
	f.cluster.security.kafkaAuth().apply(&cfg) // TLS and SASL (sasl.go)
	k = admin.NewKafka(cfg, topics...)
	return k, kctx, func() { k.Close(); cancel() }
}

// etcdContext bounds one etcd exchange.
func (f *adminFlags) etcdContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.etcdTimeout)
}

// etcdError names etcd and --etcd-timeout in an error of an etcd exchange.
func (f *adminFlags) etcdError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("etcd at %s did not answer within --etcd-timeout %s: %w",
			strings.Join(redact.URLs(f.cluster.etcdEndpoints), ","), f.etcdTimeout, err)
	}
	return fmt.Errorf("etcd at %s: %w", strings.Join(redact.URLs(f.cluster.etcdEndpoints), ","), err)
}

// libraryError is an error of an admin call: bad input as it is (exit 2),
// anything else etcd's.
func (f *adminFlags) libraryError(err error) error {
	var bad *admin.InputError
	if errors.As(err, &bad) {
		return err
	}
	return f.etcdError(err)
}

// loadGroup reads the group's state at one revision.
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
	if n.Count == 0 && !f.newGroup {
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

// refused is coordinator.Refused, naming the flag.
func refused(ctx context.Context, endpoints []string) error {
	if err := coordinator.Refused(ctx, endpoints, refusedProbeTimeout); err != nil {
		return fmt.Errorf("etcd at %s refused the connection (nothing listens there; check --etcd-endpoints): %w",
			strings.Join(redact.URLs(endpoints), ","), err)
	}
	return nil
}
