package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

// The scope of a reset: --topic T, --topic T:P,P, --all-topics, or the
// partitions of --from-file, checked against what Kafka has.

// topicScope is one --topic: a topic and some of its partitions (nil: all).
type topicScope struct {
	topic      string
	partitions []int
	arg        string
}

func scopeFlag(o *resetOptions) string {
	if o.allTopics {
		return "--all-topics"
	}
	return "--topic"
}

// parseScopes parses the --topic values: TOPIC or TOPIC:P,P,... A topic
// named twice is scoped to the union.
func parseScopes(args []string) ([]topicScope, error) {
	var out []topicScope
	index := map[string]int{}
	for _, arg := range args {
		topic, list, hasList := strings.Cut(arg, ":")
		if err := validTopic(topic); err != nil {
			return nil, usagef("--topic %q: %v; want TOPIC or TOPIC:P,P,...", arg, err)
		}
		var parts []int
		if hasList {
			if list == "" {
				return nil, usagef("--topic %q: no partitions after ':'; want TOPIC or TOPIC:P,P,... such as %s:0,2", arg, topic)
			}
			for _, s := range strings.Split(list, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n < 0 {
					return nil, usagef("--topic %q: partition %q is not a partition number; want TOPIC:P,P,... with numbers 0 or more, such as %s:0,2", arg, s, topic)
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
			out = append(out, topicScope{topic: topic, partitions: parts, arg: arg})
		case out[i].partitions == nil || parts == nil:
			out[i].partitions = nil // all of it
		default:
			for _, n := range parts {
				if !slices.Contains(out[i].partitions, n) {
					out[i].partitions = append(out[i].partitions, n)
				}
			}
			slices.Sort(out[i].partitions)
			out[i].arg += " --topic " + arg
		}
	}
	return out, nil
}

// partitionsInScope lists the partitions to reset, checked against what
// Kafka has: a topic or partition it does not know is bad usage.
func (o *resetOptions) partitionsInScope(snap *coordinator.Snapshot, known map[string][]int, missing []string, stderr io.Writer) ([]coordinator.Partition, error) {
	brokers := strings.Join(o.admin.cluster.brokers, ",")
	groupHas := "the group's topics in etcd: " + strings.Join(groupTopics(snap), ", ")
	if len(groupTopics(snap)) == 0 {
		groupHas = "the group has no topics in etcd yet"
	}
	var parts []coordinator.Partition
	exists := func(t string, n int) bool { return slices.Contains(known[t], n) }
	describeTopic := func(t string) string {
		ids := known[t]
		return fmt.Sprintf("%s has %d partitions (%d to %d)", t, len(ids), ids[0], ids[len(ids)-1])
	}
	switch {
	case o.target == fromFile:
		for _, l := range o.lines {
			if slices.Contains(missing, l.p.Topic) {
				return nil, usagef("--from-file %s line %d: topic %q not found in Kafka at %s; %s", o.file, l.line, l.p.Topic, brokers, groupHas)
			}
			if !exists(l.p.Topic, l.p.Partition) {
				return nil, usagef("--from-file %s line %d: partition %d of %s not found in Kafka; %s", o.file, l.line, l.p.Partition, l.p.Topic, describeTopic(l.p.Topic))
			}
			parts = append(parts, l.p)
		}
	case o.allTopics:
		for _, t := range missing {
			fmt.Fprintf(stderr, "warning: topic %s of the group not found in Kafka at %s: left out\n", t, brokers)
		}
		for _, t := range groupTopics(snap) {
			for _, n := range known[t] {
				parts = append(parts, coordinator.Partition{Topic: t, Partition: n})
			}
		}
	default:
		for _, s := range o.scopes {
			if slices.Contains(missing, s.topic) {
				return nil, usagef("--topic %q: topic %q not found in Kafka at %s; %s", s.arg, s.topic, brokers, groupHas)
			}
			ids := s.partitions
			if ids == nil {
				ids = known[s.topic]
			}
			for _, n := range ids {
				if !exists(s.topic, n) {
					return nil, usagef("--topic %q: partition %d not found in Kafka; %s", s.arg, n, describeTopic(s.topic))
				}
				parts = append(parts, coordinator.Partition{Topic: s.topic, Partition: n})
			}
		}
	}
	sortPartitions(parts)
	return parts, nil
}
