package harness

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// awaitLeaders waits until every running node knows a leader of each of
// topic's first n partitions.
func (k *Kafka) awaitLeaders(t testing.TB, what, topic string, n int) {
	t.Helper()
	awaitEach(t, k, what, metadataOf(topic), func(resp *kmsg.MetadataResponse) error {
		ps, err := partitionsOf(resp, topic)
		if err != nil {
			return err
		}
		for p := range int32(n) {
			if mp, ok := ps[p]; !ok || mp.Leader < 0 {
				return fmt.Errorf("%s/%d has no leader yet", topic, p)
			}
		}
		return nil
	})
}

// partition is topic/partition as a running node's metadata has it.
func (k *Kafka) partition(t testing.TB, topic string, partition int) kmsg.MetadataResponseTopicPartition {
	t.Helper()
	what := fmt.Sprintf("metadata of %s/%d", topic, partition)
	resp := admin(t, k, what, metadataOf(topic)(), func(resp *kmsg.MetadataResponse) []int16 {
		return errorCodes(resp.Topics, func(mt kmsg.MetadataResponseTopic) int16 { return mt.ErrorCode })
	})
	ps, err := partitionsOf(resp, topic)
	if err != nil {
		t.Fatalf("kafka: %s: %v", what, err)
	}
	p, ok := ps[int32(partition)]
	if !ok {
		t.Fatalf("kafka: %s: no such partition (%d partitions)", what, len(ps))
	}
	return p
}

// Leader is the leader of topic/partition as a running node knows it, -1
// when it has none.
func (k *Kafka) Leader(t testing.TB, topic string, partition int) int32 {
	t.Helper()
	return k.partition(t, topic, partition).Leader
}

// Replicas are the replicas of topic/partition, the preferred leader
// first.
func (k *Kafka) Replicas(t testing.TB, topic string, partition int) []int32 {
	t.Helper()
	return k.partition(t, topic, partition).Replicas
}

// ISR is the in-sync replicas of topic/partition.
func (k *Kafka) ISR(t testing.TB, topic string, partition int) []int32 {
	t.Helper()
	return k.partition(t, topic, partition).ISR
}

// ElectPreferredLeaders makes the preferred replica (the first) the leader
// of the given partitions of topic (all when none is given), and waits
// until every running node knows it. A preferred replica out of the ISR is
// waited for, within kafkaOpTimeout.
func (k *Kafka) ElectPreferredLeaders(t testing.TB, topic string, partitions ...int) {
	t.Helper()
	k.requireReal(t, "elect leaders")
	if len(partitions) == 0 {
		for p := range k.NumPartitions(t, topic) {
			partitions = append(partitions, p)
		}
	}
	req := kmsg.NewPtrElectLeadersRequest()
	req.ElectionType = 0 // preferred
	req.TimeoutMillis = int32(kafkaOpTimeout / time.Millisecond)
	rt := kmsg.NewElectLeadersRequestTopic()
	rt.Topic = topic
	for _, p := range partitions {
		rt.Partitions = append(rt.Partitions, int32(p))
	}
	req.Topics = append(req.Topics, rt)
	what := fmt.Sprintf("elect preferred leaders of %s %v", topic, partitions)
	admin(t, k, what, req, func(resp *kmsg.ElectLeadersResponse) []int16 {
		codes := []int16{resp.ErrorCode}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != kerr.ElectionNotNeeded.Code {
					codes = append(codes, rp.ErrorCode)
				}
			}
		}
		return codes
	})
	awaitEach(t, k, what, metadataOf(topic), func(resp *kmsg.MetadataResponse) error {
		ps, err := partitionsOf(resp, topic)
		if err != nil {
			return err
		}
		for _, p := range partitions {
			mp := ps[int32(p)]
			if len(mp.Replicas) == 0 || mp.Leader != mp.Replicas[0] {
				return fmt.Errorf("%s/%d: leader %d, replicas %v", topic, p, mp.Leader, mp.Replicas)
			}
		}
		return nil
	})
}

// ReassignPartition gives topic/partition the replicas given, in that
// order (the first is the preferred leader), and waits until the
// reassignment completes: no longer listed as ongoing, and every running
// node has the new replicas, all in the ISR.
func (k *Kafka) ReassignPartition(t testing.TB, topic string, partition int, replicas []int32) {
	t.Helper()
	k.requireReal(t, "reassign partition")
	what := fmt.Sprintf("reassign %s/%d to %v", topic, partition, replicas)
	req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	req.TimeoutMillis = int32(kafkaOpTimeout / time.Millisecond)
	rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
	rp.Partition = int32(partition)
	rp.Replicas = replicas
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	admin(t, k, what, req, func(resp *kmsg.AlterPartitionAssignmentsResponse) []int16 {
		codes := []int16{resp.ErrorCode}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				codes = append(codes, rp.ErrorCode)
			}
		}
		return codes
	})
	list := func() kmsg.Request {
		req := kmsg.NewPtrListPartitionReassignmentsRequest()
		req.TimeoutMillis = int32(kafkaAttemptTimeout / time.Millisecond)
		lt := kmsg.NewListPartitionReassignmentsRequestTopic()
		lt.Topic = topic
		lt.Partitions = []int32{int32(partition)}
		req.Topics = append(req.Topics, lt)
		return req
	}
	awaitEach(t, k, what, list, func(resp *kmsg.ListPartitionReassignmentsResponse) error {
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				return fmt.Errorf("still reassigning: replicas %v, adding %v, removing %v", rp.Replicas, rp.AddingReplicas, rp.RemovingReplicas)
			}
		}
		return nil
	})
	awaitEach(t, k, what, metadataOf(topic), func(resp *kmsg.MetadataResponse) error {
		ps, err := partitionsOf(resp, topic)
		if err != nil {
			return err
		}
		mp := ps[int32(partition)]
		if !slices.Equal(mp.Replicas, replicas) || !sameSet(mp.ISR, replicas) {
			return fmt.Errorf("replicas %v, ISR %v", mp.Replicas, mp.ISR)
		}
		return nil
	})
}

// MoveLeader makes broker to the leader of topic/partition: it reassigns
// the partition with to first (in place of its last replica when it is not
// one), elects the preferred leader, and waits until every running node
// knows to as the leader.
func (k *Kafka) MoveLeader(t testing.TB, topic string, partition int, to int32) {
	t.Helper()
	k.requireReal(t, "move leader")
	cur := k.Replicas(t, topic, partition)
	next := []int32{to}
	for _, r := range cur {
		if r != to && len(next) < len(cur) {
			next = append(next, r)
		}
	}
	if !slices.Equal(cur, next) {
		k.ReassignPartition(t, topic, partition, next)
	}
	k.ElectPreferredLeaders(t, topic, partition)
}

// AlterTopicConfig sets configs of topic, key, value pairs (an empty
// value deletes the key, back to the broker's default), and waits until
// every running node describes them so.
func (k *Kafka) AlterTopicConfig(t testing.TB, topic string, kv ...string) {
	t.Helper()
	k.requireReal(t, "alter topic config")
	what := fmt.Sprintf("alter config of %s %v", topic, kv)
	if len(kv)%2 != 0 {
		t.Fatalf("kafka: %s: configs must be key, value pairs", what)
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeTopic
	res.ResourceName = topic
	for i := 0; i < len(kv); i += 2 {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name = kv[i]
		if kv[i+1] == "" {
			c.Op = kmsg.IncrementalAlterConfigOpDelete
		} else {
			c.Op, c.Value = kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(kv[i+1])
		}
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	admin(t, k, what, req, func(resp *kmsg.IncrementalAlterConfigsResponse) []int16 {
		return errorCodes(resp.Resources, func(r kmsg.IncrementalAlterConfigsResponseResource) int16 { return r.ErrorCode })
	})
	describe := func() kmsg.Request {
		req := kmsg.NewPtrDescribeConfigsRequest()
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType = kmsg.ConfigResourceTypeTopic
		r.ResourceName = topic
		for i := 0; i < len(kv); i += 2 {
			r.ConfigNames = append(r.ConfigNames, kv[i])
		}
		req.Resources = append(req.Resources, r)
		return req
	}
	awaitEach(t, k, what, describe, func(resp *kmsg.DescribeConfigsResponse) error {
		for _, r := range resp.Resources {
			if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
				return err
			}
			for i := 0; i < len(kv); i += 2 {
				for _, c := range r.Configs {
					if c.Name != kv[i] {
						continue
					}
					topicLevel := c.Source == kmsg.ConfigSourceDynamicTopicConfig
					if kv[i+1] == "" && topicLevel || kv[i+1] != "" && (c.Value == nil || *c.Value != kv[i+1]) {
						return fmt.Errorf("%s is %v (source %v)", c.Name, deref(c.Value), c.Source)
					}
				}
			}
		}
		return nil
	})
}

// DeleteTopic deletes topic and waits until no running node knows it.
func (k *Kafka) DeleteTopic(t testing.TB, topic string) {
	t.Helper()
	k.requireReal(t, "delete topic")
	what := "delete topic " + topic
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = int32(kafkaOpTimeout / time.Millisecond)
	req.TopicNames = []string{topic}
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, dt)
	admin(t, k, what, req, func(resp *kmsg.DeleteTopicsResponse) []int16 {
		return errorCodes(resp.Topics, func(rt kmsg.DeleteTopicsResponseTopic) int16 { return rt.ErrorCode })
	})
	awaitEach(t, k, what, metadataOf(topic), func(resp *kmsg.MetadataResponse) error {
		for _, mt := range resp.Topics {
			if mt.ErrorCode != kerr.UnknownTopicOrPartition.Code {
				return fmt.Errorf("topic %s still known (error code %d)", topic, mt.ErrorCode)
			}
		}
		return nil
	})
}

// SetFetchQuota sets the quota consumer_byte_rate of the clients of id
// clientID, in bytes per second, over all their fetches from one broker
// (a broker throttles by delaying its answers, KIP-219); 0 or less removes
// it. It waits until every running node has it.
func (k *Kafka) SetFetchQuota(t testing.TB, clientID string, bytesPerSecond float64) {
	t.Helper()
	k.requireReal(t, "set fetch quota")
	const key = "consumer_byte_rate"
	what := fmt.Sprintf("set %s of client %q to %v", key, clientID, bytesPerSecond)
	remove := bytesPerSecond <= 0
	req := kmsg.NewPtrAlterClientQuotasRequest()
	e := kmsg.NewAlterClientQuotasRequestEntry()
	ec := kmsg.NewAlterClientQuotasRequestEntryEntity()
	ec.Type, ec.Name = "client-id", kmsg.StringPtr(clientID)
	e.Entity = append(e.Entity, ec)
	op := kmsg.NewAlterClientQuotasRequestEntryOp()
	op.Key, op.Value, op.Remove = key, bytesPerSecond, remove
	e.Ops = append(e.Ops, op)
	req.Entries = append(req.Entries, e)
	admin(t, k, what, req, func(resp *kmsg.AlterClientQuotasResponse) []int16 {
		return errorCodes(resp.Entries, func(e kmsg.AlterClientQuotasResponseEntry) int16 { return e.ErrorCode })
	})
	describe := func() kmsg.Request {
		req := kmsg.NewPtrDescribeClientQuotasRequest()
		c := kmsg.NewDescribeClientQuotasRequestComponent()
		c.EntityType, c.MatchType, c.Match = "client-id", 0, kmsg.StringPtr(clientID)
		req.Components = append(req.Components, c)
		req.Strict = true
		return req
	}
	awaitEach(t, k, what, describe, func(resp *kmsg.DescribeClientQuotasResponse) error {
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		for _, e := range resp.Entries {
			for _, v := range e.Values {
				if v.Key == key && !remove && v.Value == bytesPerSecond {
					return nil
				}
				if v.Key == key && remove {
					return fmt.Errorf("%s still %v", key, v.Value)
				}
			}
		}
		if remove {
			return nil
		}
		return fmt.Errorf("%s not set yet", key)
	})
}

// EndOffsets are the high watermarks of topic's partitions, by partition.
func (k *Kafka) EndOffsets(t testing.TB, topic string) map[int32]int64 {
	t.Helper()
	return k.listOffsets(t, topic, -1, nil)
}

// LogStartOffset is the log start offset of topic/partition.
func (k *Kafka) LogStartOffset(t testing.TB, topic string, partition int) int64 {
	t.Helper()
	return k.listOffsets(t, topic, -2, []int32{int32(partition)})[int32(partition)]
}

// listOffsets lists the offsets at timestamp (-1 end, -2 start) of the
// given partitions of topic (all when nil).
func (k *Kafka) listOffsets(t testing.TB, topic string, timestamp int64, partitions []int32) map[int32]int64 {
	t.Helper()
	if partitions == nil {
		for p := range k.NumPartitions(t, topic) {
			partitions = append(partitions, int32(p))
		}
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p, timestamp, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	what := fmt.Sprintf("list offsets (%d) of %s", timestamp, topic)
	resp := admin(t, k, what, req, func(resp *kmsg.ListOffsetsResponse) []int16 {
		var codes []int16
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				codes = append(codes, rp.ErrorCode)
			}
		}
		return codes
	})
	out := make(map[int32]int64, len(partitions))
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			out[rp.Partition] = rp.Offset
		}
	}
	return out
}

// AwaitHealthy restores the cluster for the next test and waits until it
// is whole: it resumes paused nodes, starts stopped ones, and waits until
// every node's metadata lists every broker and every partition of every
// topic (internal ones too) has a leader and all its replicas in the ISR.
// It is a no-op on kfake's cluster.
func (k *Kafka) AwaitHealthy(t testing.TB) {
	t.Helper()
	if k.real == nil {
		return
	}
	for _, n := range k.real.nodes {
		n.Resume()
		if err := n.Start(); err != nil {
			t.Fatalf("kafka: %v", err)
		}
	}
	nodes := len(k.real.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*kafkaOpTimeout)
	defer cancel()
	err := awaitEachNode(ctx, k.real, metadataOfAll, func(resp *kmsg.MetadataResponse) error {
		if len(resp.Brokers) != nodes {
			return fmt.Errorf("%d of %d brokers registered", len(resp.Brokers), nodes)
		}
		for _, mt := range resp.Topics {
			if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
				return fmt.Errorf("topic %s: %w", deref(mt.Topic), err)
			}
			for _, p := range mt.Partitions {
				if p.Leader < 0 || !sameSet(p.ISR, p.Replicas) || len(p.OfflineReplicas) > 0 {
					return fmt.Errorf("%s/%d: leader %d, replicas %v, ISR %v, offline %v",
						deref(mt.Topic), p.Partition, p.Leader, p.Replicas, p.ISR, p.OfflineReplicas)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("kafka: await a healthy cluster: %v\n%s", err, k.real.logs())
	}
}

// CreateTopicOn creates topic with one partition whose replicas are the
// nodes given, in that order (the first is the preferred leader), and waits
// until every running node knows its leader. Configs are as CreateTopic's.
func (k *Kafka) CreateTopicOn(t testing.TB, name string, replicas []int32, configs ...string) {
	t.Helper()
	k.requireReal(t, "create topic on given replicas")
	if len(configs)%2 != 0 {
		t.Fatalf("kafka: create topic %s: configs must be key, value pairs", name)
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = name
	rt.NumPartitions, rt.ReplicationFactor = -1, -1
	ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
	ra.Partition, ra.Replicas = 0, replicas
	rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	for i := 0; i < len(configs); i += 2 {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = configs[i], kmsg.StringPtr(configs[i+1])
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = int32(kafkaOpTimeout / time.Millisecond)
	admin(t, k, fmt.Sprintf("create topic %s on %v", name, replicas), req, func(resp *kmsg.CreateTopicsResponse) []int16 {
		return errorCodes(resp.Topics, func(rt kmsg.CreateTopicsResponseTopic) int16 { return rt.ErrorCode })
	})
	k.awaitLeaders(t, "create topic "+name, name, 1)
}

// ElectUncleanLeader has the controllers elect a leader of
// topic/partition among its live replicas whether or not they are in the
// ISR (ElectLeaders, type unclean): one out of sync takes over with the log
// it has, and the records it lacks are gone from Kafka. A partition the
// controllers already elected a leader of (the topic allows unclean
// elections) is left as it is. It waits until every running node knows
// the leader, and returns it.
func (k *Kafka) ElectUncleanLeader(t testing.TB, topic string, partition int) int32 {
	t.Helper()
	k.requireReal(t, "elect an unclean leader")
	req := kmsg.NewPtrElectLeadersRequest()
	req.ElectionType = 1 // unclean
	req.TimeoutMillis = int32(kafkaOpTimeout / time.Millisecond)
	rt := kmsg.NewElectLeadersRequestTopic()
	rt.Topic = topic
	rt.Partitions = []int32{int32(partition)}
	req.Topics = append(req.Topics, rt)
	what := fmt.Sprintf("elect an unclean leader of %s/%d", topic, partition)
	// A replica just resumed is fenced until it has caught up with the
	// cluster's metadata: no leader is eligible until then.
	ctx, cancel := opCtx()
	defer cancel()
	for {
		resp, err := k.request(ctx, t, req)
		if err != nil {
			t.Fatalf("kafka: %s: %v", what, err)
		}
		er := resp.(*kmsg.ElectLeadersResponse)
		failed := kerr.ErrorForCode(er.ErrorCode)
		for _, rt := range er.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 && rp.ErrorCode != kerr.ElectionNotNeeded.Code {
					failed = kerr.ErrorForCode(rp.ErrorCode)
				}
			}
		}
		if failed == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("kafka: %s: %v", what, failed)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var leader int32 = -1
	awaitEach(t, k, what, metadataOf(topic), func(resp *kmsg.MetadataResponse) error {
		ps, err := partitionsOf(resp, topic)
		if err != nil {
			return err
		}
		mp := ps[int32(partition)]
		if mp.Leader < 0 {
			return fmt.Errorf("%s/%d has no leader yet (ISR %v)", topic, partition, mp.ISR)
		}
		leader = mp.Leader
		return nil
	})
	return leader
}
