package dev

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

// A run on the embedded etcd and kfake, or on an existing etcd and Kafka
// (Config.Etcd, Config.Brokers): the same replicas, faults, verdict and
// audit, the step from dev to a real cluster.

// etcd starts the embedded etcd, or takes Config.Etcd's. close stops the
// one it started, or deletes the run's group from the one it was given.
func (r *run) etcd(dir string) (e *etcdCluster, endpoints []string, close func(), err error) {
	cfg := &r.cfg
	if len(cfg.Etcd) > 0 {
		for _, ep := range cfg.Etcd {
			if u, err := url.Parse(ep); err == nil && u.Scheme != "" && u.Host != "" {
				if u.Scheme != "http" {
					return nil, nil, nil, fmt.Errorf("dev: etcd endpoint %s: dev speaks to etcd without TLS; want host:port or http://host:port", ep)
				}
				ep = u.Host
			}
			endpoints = append(endpoints, ep)
		}
		return nil, endpoints, func() { r.forgetGroup() }, nil
	}
	members := 1
	if cfg.Chaos != nil && slices.Contains(cfg.Chaos.Faults, FaultLeader) {
		members = 3 // a quorum that survives its leader
	}
	e, endpoints, err = startEtcd(dir, members)
	if err != nil {
		return nil, nil, nil, err
	}
	return e, endpoints, e.close, nil
}

// forgetGroup deletes the run's group from an etcd it was given, once its
// replicas stopped: a run leaves no keys behind.
func (r *run) forgetGroup() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: r.cfg.Etcd, DialTimeout: 5 * time.Second})
	if err != nil {
		return
	}
	defer cli.Close()
	coord, err := coordinator.New(cli, r.cfg.Group)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := coord.DeleteGroup(ctx); err != nil {
		fmt.Fprintf(r.cfg.Err, "group %s left in etcd: %v (offsetkeeper groups delete --group %s --execute)\n", r.cfg.Group, err, r.cfg.Group)
	}
}

// kafka starts kfake with the run's topic, or creates the topic in
// Config.Brokers' Kafka.
func (r *run) kafka(ctx context.Context) (brokers []string, close func(), err error) {
	cfg := &r.cfg
	if len(cfg.Brokers) == 0 {
		broker, brokers, err := startKafka(cfg.Topic, cfg.Partitions)
		if err != nil {
			return nil, nil, err
		}
		return brokers, broker.Close, nil
	}
	if err := createTopic(ctx, cfg.Brokers, cfg.Topic, cfg.Partitions); err != nil {
		return nil, nil, err
	}
	return cfg.Brokers, func() {}, nil
}

// createTopic creates topic with partitions, the cluster's default
// replication factor and configuration (KIP-464), and waits until every
// partition has a leader. A topic of that name must not exist: a run
// checks the records it produced from offset 0.
func createTopic(ctx context.Context, brokers []string, topic string, partitions int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("dev: kafka at %v: %w", brokers, err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, int32(partitions), -1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30_000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("dev: create topic %s at %v: %w", topic, brokers, err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.TopicAlreadyExists) {
				return fmt.Errorf("dev: topic %s exists in the Kafka at %v: a run checks the records it produces from offset 0; "+
					"name another with --topic, or leave --topic out for one of this run's own", topic, brokers)
			}
			return fmt.Errorf("dev: create topic %s at %v: %w", topic, brokers, err)
		}
	}
	for {
		mreq := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topic)
		mreq.Topics = append(mreq.Topics, mt)
		mresp, err := mreq.RequestWith(ctx, cl)
		if err == nil && len(mresp.Topics) == 1 && mresp.Topics[0].ErrorCode == 0 && len(mresp.Topics[0].Partitions) == partitions {
			led := true
			for _, p := range mresp.Topics[0].Partitions {
				led = led && p.Leader >= 0 && p.ErrorCode == 0
			}
			if led {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dev: topic %s at %v has no leader for every partition: %w", topic, brokers, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
