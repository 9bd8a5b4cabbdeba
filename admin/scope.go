package admin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Reset is a reset of a group's committed offsets: where to (Target) and
// which partitions (Topics, AllTopics, or the partitions of a plan file).
type Reset struct {
	// Target is where to. Its AtTime and File are filled by Plan.
	Target Target
	// At is the time of ToDatetime and ByDuration.
	At time.Time
	// Topics are the topics in scope, each whole or some partitions;
	// AllTopics scopes every topic of the group instead.
	Topics    []TopicScope
	AllTopics bool
	// File and Lines are FromFile's plan file and what it says.
	File  string
	Lines []PlanLine
}

// ScopeTopics are the topics of the reset's scope; a group without topics
// asked for AllTopics is an *InputError.
func (r *Reset) ScopeTopics(group string, snap *coordinator.Snapshot) ([]string, error) {
	var topics []string
	switch {
	case r.Target.Kind == FromFile:
		for _, l := range r.Lines {
			if !slices.Contains(topics, l.Partition.Topic) {
				topics = append(topics, l.Partition.Topic)
			}
		}
	case r.AllTopics:
		topics = GroupTopics(snap)
		if len(topics) == 0 {
			return nil, inputf("--all-topics: group %q has no offsets, claims or intents, so no topics; name them with --topic", group)
		}
	default:
		for _, s := range r.Topics {
			topics = append(topics, s.Topic)
		}
	}
	return topics, nil
}

// Plan plans the reset from the group's state in etcd (snap) and Kafka's
// log bounds: each partition's committed offset and the new one. Nothing
// is changed; Plan.Apply applies it. warn is told what was left out or
// clamped (nil: not told). A scope Kafka does not have is an *InputError;
// an error of Kafka is returned as it is (ErrKafkaUnreachable when it
// could not be asked).
func (r *Reset) Plan(ctx context.Context, group string, snap *coordinator.Snapshot, k *Kafka, warn func(string)) (*Plan, error) {
	if warn == nil {
		warn = func(string) {}
	}
	topics, err := r.ScopeTopics(group, snap)
	if err != nil {
		return nil, err
	}
	known, missing, err := k.Partitions(ctx, topics)
	if err != nil {
		return nil, err
	}
	parts, err := r.inScope(snap, k.brokers, known, missing, warn)
	if err != nil {
		return nil, err
	}
	bounds, err := k.Bounds(ctx, parts)
	if err != nil {
		return nil, err
	}
	t := r.Target
	if t.Kind == ToDatetime || t.Kind == ByDuration {
		if t.AtTime, err = k.OffsetsAt(ctx, parts, r.At); err != nil {
			return nil, err
		}
	}
	if t.Kind == FromGroup {
		if t.GroupOffsets, err = k.GroupOffsets(ctx, t.Group, parts); err != nil {
			return nil, err
		}
	}
	if t.Kind == FromFile {
		t.File = make(map[sinks.Partition]int64, len(r.Lines))
		for _, l := range r.Lines {
			t.File[l.Partition] = l.Offset
		}
	}
	rows, warnings := PlanReset(t, parts, snap.Offsets, bounds)
	for _, w := range warnings {
		warn(w)
	}
	return &Plan{Group: group, Partitions: rows}, nil
}

// The scope of a reset: --topic T, --topic T:P,P, --all-topics, or the
// partitions of --from-file, checked against what Kafka has.

// TopicScope is one --topic: a topic and some of its partitions (nil: all).
type TopicScope struct {
	Topic      string
	Partitions []int
	Arg        string // as given: messages quote it
}

// ParseScopes parses the --topic values: TOPIC or TOPIC:P,P,... A topic
// named twice is scoped to the union.
func ParseScopes(args []string) ([]TopicScope, error) {
	var out []TopicScope
	index := map[string]int{}
	for _, arg := range args {
		topic, list, hasList := strings.Cut(arg, ":")
		if err := coordinator.ValidTopic(topic); err != nil {
			return nil, inputf("--topic %q: %v; want TOPIC or TOPIC:P,P,...", arg, err)
		}
		var parts []int
		if hasList {
			if list == "" {
				return nil, inputf("--topic %q: no partitions after ':'; want TOPIC or TOPIC:P,P,... such as %s:0,2", arg, topic)
			}
			for _, s := range strings.Split(list, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n < 0 {
					return nil, inputf("--topic %q: partition %q is not a partition number; want TOPIC:P,P,... with numbers 0 or more, such as %s:0,2", arg, s, topic)
				}
				if !slices.Contains(parts, n) {
					parts = append(parts, n)
				}
			}
			slices.Sort(parts)
		}
		i, seen := index[topic]
		switch {
		case !seen:
			index[topic] = len(out)
			out = append(out, TopicScope{Topic: topic, Partitions: parts, Arg: arg})
		case out[i].Partitions == nil || parts == nil:
			out[i].Partitions = nil // all of it
		default:
			for _, n := range parts {
				if !slices.Contains(out[i].Partitions, n) {
					out[i].Partitions = append(out[i].Partitions, n)
				}
			}
			slices.Sort(out[i].Partitions)
			out[i].Arg += " --topic " + arg
		}
	}
	return out, nil
}

// inScope lists the partitions to reset, checked against what Kafka has
// (known, missing): a topic or partition it does not know is an
// *InputError. warn is told of a topic of the group Kafka does not have.
func (r *Reset) inScope(snap *coordinator.Snapshot, brokerList []string, known map[string][]int, missing []string, warn func(string)) ([]sinks.Partition, error) {
	brokers := strings.Join(brokerList, ",")
	groupHas := "the group's topics in etcd: " + strings.Join(GroupTopics(snap), ", ")
	if len(GroupTopics(snap)) == 0 {
		groupHas = "the group has no topics in etcd yet"
	}
	var parts []sinks.Partition
	exists := func(t string, n int) bool { return slices.Contains(known[t], n) }
	describeTopic := func(t string) string {
		ids := known[t]
		return fmt.Sprintf("%s has %d partitions (%d to %d)", t, len(ids), ids[0], ids[len(ids)-1])
	}
	switch {
	case r.Target.Kind == FromFile:
		for _, l := range r.Lines {
			if slices.Contains(missing, l.Partition.Topic) {
				return nil, inputf("--from-file %s line %d: topic %q not found in Kafka at %s; %s", r.File, l.Line, l.Partition.Topic, brokers, groupHas)
			}
			if !exists(l.Partition.Topic, l.Partition.Partition) {
				return nil, inputf("--from-file %s line %d: partition %d of %s not found in Kafka; %s", r.File, l.Line, l.Partition.Partition, l.Partition.Topic, describeTopic(l.Partition.Topic))
			}
			parts = append(parts, l.Partition)
		}
	case r.AllTopics:
		for _, t := range missing {
			warn(fmt.Sprintf("topic %s of the group not found in Kafka at %s: left out", t, brokers))
		}
		for _, t := range GroupTopics(snap) {
			for _, n := range known[t] {
				parts = append(parts, sinks.Partition{Topic: t, Partition: n})
			}
		}
	default:
		for _, s := range r.Topics {
			if slices.Contains(missing, s.Topic) {
				return nil, inputf("--topic %q: topic %q not found in Kafka at %s; %s", s.Arg, s.Topic, brokers, groupHas)
			}
			ids := s.Partitions
			if ids == nil {
				ids = known[s.Topic]
			}
			for _, n := range ids {
				if !exists(s.Topic, n) {
					return nil, inputf("--topic %q: partition %d not found in Kafka; %s", s.Arg, n, describeTopic(s.Topic))
				}
				parts = append(parts, sinks.Partition{Topic: s.Topic, Partition: n})
			}
		}
	}
	sortPartitions(parts)
	return parts, nil
}
