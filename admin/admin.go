// Package admin is what an operator does to a group, as library calls:
// plan and apply a reset of its committed offsets (Reset, Plan.Apply),
// read and write plan files (ReadPlanFile, WriteExport), and ask Kafka the
// questions these need (Kafka). The CLI's commands parse flags, call these
// and print; dev's chaos deck and tests call the same. Bad input is an
// *InputError, which names the value and what is accepted: nothing was
// changed, and the CLI exits 2.
package admin

import (
	"fmt"
	"regexp"
	"slices"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// InputError is input refused before anything changed: a value, a file,
// a scope Kafka does not have.
type InputError struct{ err error }

func (e *InputError) Error() string { return e.err.Error() }

func (e *InputError) Unwrap() error { return e.err }

func inputf(format string, a ...any) error { return &InputError{fmt.Errorf(format, a...)} }

// GroupTopics are the topics the group has keys of in etcd (offsets,
// claims, intents), sorted.
func GroupTopics(s *coordinator.Snapshot) []string {
	var out []string
	for _, p := range GroupPartitions(s) {
		if len(out) == 0 || out[len(out)-1] != p.Topic {
			out = append(out, p.Topic)
		}
	}
	return out
}

// MatchingTopics are the group's topics (GroupTopics) whose whole name re
// matches (coordinator.TopicsPattern).
func MatchingTopics(s *coordinator.Snapshot, re *regexp.Regexp) []string {
	var out []string
	for _, t := range GroupTopics(s) {
		if re.MatchString(t) {
			out = append(out, t)
		}
	}
	return out
}

// GroupPartitions lists the partitions that have a claim, offsets or an
// intent, sorted.
func GroupPartitions(s *coordinator.Snapshot) []sinks.Partition {
	seen := map[sinks.Partition]bool{}
	for p := range s.Claims {
		seen[p] = true
	}
	for p := range s.Offsets {
		seen[p] = true
	}
	for p := range s.Intents {
		seen[p] = true
	}
	out := make([]sinks.Partition, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sortPartitions(out)
	return out
}

func sortPartitions(ps []sinks.Partition) {
	slices.SortFunc(ps, sinks.Partition.Compare)
}

func ptr[T any](v T) *T { return &v }
