package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Timeouts of one request to one node: a paused node does not answer, and
// the next one is tried. A request that the node forwards to the
// controllers (one with a timeout of its own, kmsg.TimeoutRequest) may wait
// for the controllers' next leader when theirs is paused: see
// controller.socket.timeout.ms in brokerProperties.
const (
	kafkaAttemptTimeout        = 5 * time.Second
	kafkaForwardAttemptTimeout = 20 * time.Second
)

// anyBroker tells whether any broker of a KRaft cluster serves req (it
// answers from its metadata, or forwards to the controllers): the harness
// sends those to a running node of its choice. Others, routed by partition
// leader (DeleteRecords, ListOffsets), go where kgo routes them.
func anyBroker(req kmsg.Request) bool {
	switch r := req.(type) {
	case *kmsg.MetadataRequest, *kmsg.CreateTopicsRequest, *kmsg.DeleteTopicsRequest,
		*kmsg.CreatePartitionsRequest, *kmsg.ElectLeadersRequest,
		*kmsg.AlterPartitionAssignmentsRequest, *kmsg.ListPartitionReassignmentsRequest,
		*kmsg.IncrementalAlterConfigsRequest, *kmsg.AlterClientQuotasRequest,
		*kmsg.DescribeClientQuotasRequest, *kmsg.AlterUserSCRAMCredentialsRequest,
		*kmsg.DescribeUserSCRAMCredentialsRequest, *kmsg.DescribeClusterRequest:
		return true
	case *kmsg.DescribeConfigsRequest:
		for _, res := range r.Resources {
			if res.ResourceType != kmsg.ConfigResourceTypeTopic {
				return false
			}
		}
		return true
	}
	return false
}

// request sends req to a running, unpaused node, another each time, and to
// the next one when a node cannot be reached, until ctx ends. A node is
// addressed through cl's seed broker of the same index (see adminClient).
func (a *apacheKafka) request(ctx context.Context, cl *kgo.Client, req kmsg.Request) (kmsg.Response, error) {
	last := errors.New("no node is running")
	for {
		live := a.liveNodes()
		first := int(a.next.Add(1))
		for i := range live {
			n := live[(first+i)%len(live)]
			resp, err := a.nodeRequest(ctx, cl, n, req)
			if err == nil {
				return resp, nil
			}
			last = fmt.Errorf("node %d: %w", n.id, err)
			if ctx.Err() != nil {
				return nil, last
			}
		}
		select {
		case <-ctx.Done():
			return nil, last
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// nodeRequest sends req to node n, within kafkaAttemptTimeout (a request
// it forwards to the controllers, kafkaForwardAttemptTimeout).
func (a *apacheKafka) nodeRequest(ctx context.Context, cl *kgo.Client, n *KafkaNode, req kmsg.Request) (kmsg.Response, error) {
	seeds := cl.SeedBrokers()
	if int(n.id) >= len(seeds) {
		return nil, fmt.Errorf("the client has %d seed brokers", len(seeds))
	}
	timeout := kafkaAttemptTimeout
	if _, ok := req.(kmsg.TimeoutRequest); ok {
		timeout = kafkaForwardAttemptTimeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return seeds[n.id].Request(actx, req)
}

// awaitEachNode sends a request made by newReq to every running node until
// check accepts every node's response, or ctx ends: what each broker
// answers from its own copy of the metadata, which follows the
// controllers' by a little.
func awaitEachNode[Resp kmsg.Response](ctx context.Context, a *apacheKafka, newReq func() kmsg.Request, check func(Resp) error) error {
	for {
		err := checkEachNode(ctx, a, newReq, check)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func checkEachNode[Resp kmsg.Response](ctx context.Context, a *apacheKafka, newReq func() kmsg.Request, check func(Resp) error) error {
	live := a.liveNodes()
	if len(live) == 0 {
		return errors.New("no node is running")
	}
	for _, n := range live {
		kresp, err := a.nodeRequest(ctx, a.admin, n, newReq())
		if err != nil {
			return fmt.Errorf("node %d: %w", n.id, err)
		}
		resp, ok := kresp.(Resp)
		if !ok {
			return fmt.Errorf("node %d: unexpected response %T", n.id, kresp)
		}
		if err := check(resp); err != nil {
			return fmt.Errorf("node %d: %w", n.id, err)
		}
	}
	return nil
}

// awaitEach is awaitEachNode within kafkaOpTimeout for a helper: it fails
// t, naming what, when the time is up.
func awaitEach[Resp kmsg.Response](t testing.TB, k *Kafka, what string, newReq func() kmsg.Request, check func(Resp) error) {
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	if err := awaitEachNode(ctx, k.real, newReq, check); err != nil {
		t.Fatalf("kafka: %s: %v", what, err)
	}
}

// requireReal fails t when k is kfake's cluster.
func (k *Kafka) requireReal(t testing.TB, what string) {
	t.Helper()
	if k.real == nil {
		t.Fatalf("kafka: %s: a helper of Apache Kafka's clusters (StartApacheKafka), not kfake's", what)
	}
}

// metadataOf is a metadata request of the given topics.
func metadataOf(topics ...string) func() kmsg.Request {
	return func() kmsg.Request {
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{}
		for _, topic := range topics {
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = kmsg.StringPtr(topic)
			req.Topics = append(req.Topics, mt)
		}
		return req
	}
}

// partitionsOf are topic's partitions in resp, by partition.
func partitionsOf(resp *kmsg.MetadataResponse, topic string) (map[int32]kmsg.MetadataResponseTopicPartition, error) {
	for _, mt := range resp.Topics {
		if mt.Topic == nil || *mt.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
			return nil, fmt.Errorf("topic %s: %w", topic, err)
		}
		ps := make(map[int32]kmsg.MetadataResponseTopicPartition, len(mt.Partitions))
		for _, p := range mt.Partitions {
			ps[p.Partition] = p
		}
		return ps, nil
	}
	return nil, fmt.Errorf("topic %s missing from the metadata", topic)
}

// metadataOfAll is a metadata request of every topic.
func metadataOfAll() kmsg.Request { return kmsg.NewPtrMetadataRequest() }

// sameSet tells whether a and b hold the same ids.
func sameSet(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
