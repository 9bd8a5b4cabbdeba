package admin

import (
	"context"
	"slices"
	"time"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// InFlight is an intent: the block [from, next) being written by the owner
// of epoch.
type InFlight struct {
	From  int64 `json:"from"`
	Next  int64 `json:"next"`
	Epoch int64 `json:"epoch"`
}

// PartitionState is one partition of a Description; its JSON fields are stable. Null
// means not known (log_end, lag when Kafka was unreachable) or not there
// (committed, owner, epoch, last_commit, in_flight).
type PartitionState struct {
	Topic     string  `json:"topic"`
	Partition int     `json:"partition"`
	Committed *int64  `json:"committed"`
	LogEnd    *int64  `json:"log_end"`
	Lag       *int64  `json:"lag"`
	Owner     *string `json:"owner"`
	// OwnerReads is whether the owner reads Kafka (its member key); null
	// when nobody owns the partition.
	OwnerReads *bool      `json:"owner_reads_kafka"`
	Epoch      *int64     `json:"epoch"`
	LastCommit *time.Time `json:"last_commit"`
	// CommittedBy is the replica that wrote the offset, or "operator"
	// after a reset; Generation counts the resets.
	CommittedBy *string   `json:"committed_by"`
	Generation  int64     `json:"generation"`
	InFlight    *InFlight `json:"in_flight"`
}

// Description is a group's partitions as etcd and Kafka see them, read at
// one etcd revision; KafkaReachable tells whether Kafka answered.
type Description struct {
	Group          string           `json:"group"`
	Revision       int64            `json:"revision"`
	KafkaReachable bool             `json:"kafka_reachable"`
	Partitions     []PartitionState `json:"partitions"`
}

// DescribeTopics are the topics a description of the group covers: the
// group's in etcd, and those asked, sorted.
func DescribeTopics(snap *coordinator.Snapshot, asked []string) []string {
	topics := GroupTopics(snap)
	for _, t := range asked {
		if !slices.Contains(topics, t) {
			topics = append(topics, t)
		}
	}
	slices.Sort(topics)
	return topics
}

// Describe describes the group's partitions from its state in etcd (snap)
// and, for topics (DescribeTopics), Kafka's log ends and the partitions
// with nothing in etcd yet. k may be nil when topics is empty. An error of
// Kafka is returned beside a description of etcd's view alone; missing are
// the topics Kafka does not have.
func Describe(ctx context.Context, group string, snap *coordinator.Snapshot, k *Kafka, topics []string) (d *Description, missing []string, kafkaErr error) {
	parts := GroupPartitions(snap)
	var ends map[sinks.Partition]int64
	if len(topics) > 0 {
		ends, missing, kafkaErr = logEnds(ctx, k, topics, &parts)
	}
	d = &Description{Group: group, Revision: snap.Revision, KafkaReachable: kafkaErr == nil, Partitions: []PartitionState{}}
	for _, p := range parts {
		r := PartitionState{Topic: p.Topic, Partition: p.Partition}
		if off, ok := snap.Offsets[p]; ok {
			r.Committed = ptr(off.Next)
			r.LastCommit = ptr(off.At)
			r.CommittedBy = ptr(off.Replica)
			r.Generation = off.Generation
		}
		if end, ok := ends[p]; ok {
			r.LogEnd = ptr(end)
			if r.Committed != nil {
				r.Lag = ptr(max(end-*r.Committed, 0))
			}
		}
		if c, ok := snap.Claims[p]; ok {
			r.Owner = ptr(c.Replica)
			r.Epoch = ptr(c.Epoch)
			r.OwnerReads = ptr(true)
			for _, m := range snap.Members {
				if m.ID == c.Replica && !m.Reads() {
					r.OwnerReads = ptr(false)
				}
			}
		}
		if in, ok := snap.Intents[p]; ok {
			r.InFlight = &InFlight{From: in.From, Next: in.Next, Epoch: in.Epoch}
		}
		d.Partitions = append(d.Partitions, r)
	}
	return d, missing, kafkaErr
}

// logEnds adds to parts the partitions of topics that Kafka knows and
// returns the log end of each, and the topics Kafka does not know. An error
// means Kafka could not be asked.
func logEnds(ctx context.Context, k *Kafka, topics []string, parts *[]sinks.Partition) (map[sinks.Partition]int64, []string, error) {
	known, missing, err := k.Partitions(ctx, topics)
	if err != nil {
		return nil, nil, err
	}
	have := map[sinks.Partition]bool{}
	for _, p := range *parts {
		have[p] = true
	}
	var ask []sinks.Partition
	for _, t := range topics {
		for _, id := range known[t] {
			p := sinks.Partition{Topic: t, Partition: id}
			ask = append(ask, p)
			if !have[p] {
				*parts = append(*parts, p)
			}
		}
	}
	sortPartitions(*parts)
	b, err := k.Bounds(ctx, ask)
	if err != nil {
		return nil, missing, err
	}
	ends := make(map[sinks.Partition]int64, len(b))
	for p, lb := range b {
		ends[p] = lb.End
	}
	return ends, missing, nil
}

// TopicState sums a topic's partitions of a Description: how many, the
// lag of those whose lag is known, the largest, how many have no
// committed offset, how many replicas own them and how many blocks are in
// flight.
type TopicState struct {
	Topic       string `json:"topic"`
	Partitions  int    `json:"partitions"`
	Lag         *int64 `json:"lag"` // null when no partition's lag is known
	MaxLag      *int64 `json:"max_lag"`
	Uncommitted int    `json:"uncommitted"`
	Unowned     int    `json:"unowned"`
	Owners      int    `json:"owners"`
	InFlight    int    `json:"in_flight"`
}

// ByTopic sums d's partitions per topic, in the order of d's.
func (d *Description) ByTopic() []TopicState {
	var out []TopicState
	owners := map[string]map[string]bool{}
	for _, p := range d.Partitions {
		if len(out) == 0 || out[len(out)-1].Topic != p.Topic {
			out = append(out, TopicState{Topic: p.Topic})
			owners[p.Topic] = map[string]bool{}
		}
		t := &out[len(out)-1]
		t.Partitions++
		if p.Lag != nil {
			t.Lag = ptr(deref(t.Lag) + *p.Lag)
			t.MaxLag = ptr(max(deref(t.MaxLag), *p.Lag))
		}
		if p.Committed == nil {
			t.Uncommitted++
		}
		if p.Owner == nil {
			t.Unowned++
		} else {
			owners[p.Topic][*p.Owner] = true
		}
		if p.InFlight != nil {
			t.InFlight++
		}
		t.Owners = len(owners[p.Topic])
	}
	return out
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
