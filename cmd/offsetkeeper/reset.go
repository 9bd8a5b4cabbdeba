package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

// testHookBeforeApply, when set, runs after the plan is read and before it
// is applied: tests use it to change the offsets in between.
var testHookBeforeApply func()

// resetOptions is `offsetkeeper offsets reset`.
type resetOptions struct {
	admin adminFlags

	topics      []string
	allTopics   bool
	topicsRegex string

	earliest, latest, current bool
	offset, shift             int64
	datetime, duration        string
	file                      string
	fromGroup                 string

	execute bool
	export  bool

	// checkGroup, if set, sees the group's state before the plan (offsets
	// import refuses a running group).
	checkGroup func(snap *coordinator.Snapshot) error

	// Set by complete.
	targets    []string // the target flags given
	target     string   // the one target, when there is one
	outputSet  bool
	executeEnv bool
	scopes     []admin.TopicScope
	at         time.Time        // --to-datetime
	ago        time.Duration    // --by-duration: run plans at now minus it
	lines      []admin.PlanLine // --from-file
}

const offsetsResetLong = `Move the committed offsets of some partitions of a group: to re-deliver
records (back), to skip them (forward), or to make a running owner re-read
from where it is.

Unlike kafka-consumer-groups.sh, the group may be running. Each partition is
written by one etcd transaction conditioned on its offsets not having
changed since the plan was read, and that bumps the offsets' generation.
The partition's owner fails its next commit, rolls back the block it was
writing, seeks to the new offset and goes on: no restart. An owner that is
idle (caught up, nothing new to read) takes the new offset with the next
record it reads. When a replica commits between the plan and the write,
that partition is reported as conflicted (exit status 1) and the others are
still applied: run the command again to plan from the new state.

Scope (one of):
  --topic T          every partition of T; repeat for more topics
  --topic T:0,2      partitions 0 and 2 of T
  --all-topics       every partition of the topics found in the group's keys
  --topics-regex P   every partition of the group's topics (in its keys)
                     whose whole name matches P, as run's --topics-regex
  (--from-file carries its own partitions)

Target (exactly one):
  --to-earliest      the log start: re-deliver everything Kafka still has
  --to-latest        the log end (last stable offset): skip what is there
  --to-current       the committed offset itself: a running owner re-reads
                     from it; partitions without one are left out
  --to-offset N      offset N
  --shift-by N       the committed offset plus N (negative: back); left out
                     where there is none
  --to-datetime T    the first offset whose record time is at or after T,
                     an RFC 3339 time; after the last record: the log end
  --by-duration D    --to-datetime now minus D: ISO-8601 (PT1H, P1DT12H) or
                     a Go duration (90m, 1h30m)
  --from-file F      the offsets in F, CSV lines topic,partition,offset as
                     --export prints them (the header line is optional)
  --from-group G     the offsets Kafka consumer group G committed: move a
                     pipeline over from ClickHouse's Kafka engine, Kafka
                     Connect (connect-NAME) or any Kafka consumer without a
                     gap; partitions G committed nothing for are left out

A target outside [log start, log end] is clamped into it, with a warning on
stderr naming the partition, the offset asked and the offset used.

By default nothing is written: the plan is printed (TOPIC, PARTITION,
CURRENT, NEW; CURRENT is "-" where nothing is committed). --execute applies
it and prints each partition's STATUS: reset, conflict, or failed. --export
prints the plan as CSV instead, to edit, review or keep, and apply later
with --from-file F --execute. --execute must be on the command line: it is
not taken from OFFSETKEEPER_EXECUTE.

Bad input (unknown group, topic or partition, a negative or non-numeric
offset, a bad time or duration, conflicting options, a malformed file)
exits with status 2 and changes nothing. Kafka must be reachable: the plan
needs the log bounds.`

const offsetsResetExample = `  # See what re-delivering the last hour of "orders" would do, then do it:
  offsetkeeper offsets reset --group orders --topic orders --by-duration PT1H
  TOPIC   PARTITION  CURRENT  NEW
  orders  0          1250     1100
  orders  1          980      870
  offsetkeeper offsets reset --group orders --topic orders --by-duration PT1H --execute

  # Skip a poison record at orders/2 offset 4711:
  offsetkeeper offsets reset --group orders --topic orders:2 --to-offset 4712 --execute

  # Re-deliver partitions 0 and 2 from a point in time:
  offsetkeeper offsets reset --group orders --topic orders:0,2 --to-datetime 2026-12-01T10:00:00Z --execute

  # Save a plan, review it, apply it:
  offsetkeeper offsets reset --group orders --all-topics --to-latest --export > plan.csv
  offsetkeeper offsets reset --group orders --from-file plan.csv --execute`

func newOffsetsResetCommand() *cobra.Command {
	o := &resetOptions{}
	cmd := &cobra.Command{
		Use:     "reset",
		Short:   "Move a group's committed offsets, safely and without stopping the group",
		Long:    offsetsResetLong,
		Example: offsetsResetExample,
		Args:    noArgs,
		RunE:    runE(o),
	}
	o.admin.register(cmd, withKafka)
	fs := cmd.Flags()
	fs.StringArrayVar(&o.topics, "topic", nil, "scope: a topic, or TOPIC:P,P,... for some of its partitions; repeatable (run and offsets describe take whole topics: --topics T,T)")
	fs.BoolVar(&o.allTopics, "all-topics", false, "scope: every topic found in the group's keys in etcd")
	fs.StringVar(&o.topicsRegex, "topics-regex", "", "scope: every topic found in the group's keys in etcd whose whole name matches this regular expression (RE2), as run's --topics-regex")
	fs.BoolVar(&o.earliest, admin.ToEarliest, false, "target: the log start offset")
	fs.BoolVar(&o.latest, admin.ToLatest, false, "target: the log end (last stable offset)")
	fs.BoolVar(&o.current, admin.ToCurrent, false, "target: the committed offset itself (a running owner re-reads from it)")
	fs.Var(&int64Flag{&o.offset, "offset", "want an offset, an integer 0 or more"}, admin.ToOffset, "target: this offset (an integer, 0 or more)")
	fs.Var(&int64Flag{&o.shift, "delta", "want an integer, negative to go back (-100) or positive to skip ahead (100)"}, admin.ShiftBy,
		"target: the committed offset plus this (an integer; negative goes back)")
	fs.StringVar(&o.datetime, admin.ToDatetime, "", "target: the first offset at or after this RFC 3339 time, e.g. 2026-12-01T10:00:00Z")
	fs.StringVar(&o.duration, admin.ByDuration, "", "target: --to-datetime now minus this: PT1H, P1DT12H, 90m, 1h30m")
	fs.StringVar(&o.file, admin.FromFile, "", "target and scope: a CSV file of topic,partition,offset lines, as --export prints")
	fs.StringVar(&o.fromGroup, admin.FromGroup, "", "target: the offsets this Kafka consumer group committed (ClickHouse's Kafka engine's kafka_group_name, Kafka Connect's connect-NAME)")
	fs.BoolVar(&o.execute, "execute", false, "apply the plan (default: only print it)")
	fs.BoolVar(&o.export, "export", false, "print the plan as CSV (topic,partition,offset) for --from-file")
	return cmd
}

// complete finds the target given and parses the
// scope and the target's value.
func (o *resetOptions) complete(cmd *cobra.Command) error {
	fs := cmd.Flags()
	o.executeEnv = fromEnv(fs.Lookup("execute")) && o.execute
	o.outputSet = fs.Changed("output")
	o.targets = nil
	for _, name := range admin.Targets {
		if !fs.Changed(name) {
			continue
		}
		if b, err := fs.GetBool(name); err == nil && !b {
			continue // --to-earliest=false
		}
		o.targets = append(o.targets, name)
	}
	scopes, err := admin.ParseScopes(o.topics)
	if err != nil {
		return err
	}
	o.scopes = scopes
	if len(o.targets) != 1 {
		return nil // validate says what is wrong
	}
	o.target = o.targets[0]
	switch o.target {
	case admin.ToDatetime:
		if o.at, err = admin.ParseDatetime(o.datetime); err != nil {
			return usage(fmt.Errorf("--to-datetime %w", err))
		}
	case admin.ByDuration:
		if o.ago, err = admin.ParseAgo(o.duration); err != nil {
			return usage(fmt.Errorf("--by-duration %w", err))
		}
	case admin.FromFile:
		if o.lines, err = admin.ReadPlanFile(o.file); err != nil {
			return usage(err)
		}
	case admin.FromGroup:
		if strings.TrimSpace(o.fromGroup) == "" {
			return usagef("--from-group is empty: want the Kafka consumer group whose offsets to take, such as ClickHouse's kafka_group_name")
		}
	}
	return nil
}

func (o *resetOptions) validate() error {
	if err := o.admin.validate(); err != nil {
		return err
	}
	switch len(o.targets) {
	case 0:
		return usagef("no target: give exactly one of %s", admin.TargetList())
	case 1:
	default:
		return usagef("--%s conflict: give exactly one of %s", strings.Join(o.targets, " and --"), admin.TargetList())
	}
	switch {
	case o.executeEnv:
		return usagef("OFFSETKEEPER_EXECUTE=%s: --execute is taken from the command line only, so that a reset is never applied by accident", os.Getenv(envName("execute")))
	case o.execute && o.export:
		return usagef("--execute and --export conflict: --export only prints the plan as CSV; apply a saved plan with --from-file FILE --execute")
	case o.export && o.outputSet && o.admin.output.format != outputTable:
		return usagef("--export and -o %s conflict: --export prints CSV", o.admin.output.format)
	}
	switch {
	case o.target == admin.FromFile && (len(o.topics) > 0 || o.allTopics || o.topicsRegex != ""):
		return usagef("--from-file and %s conflict: the file names its own partitions", scopeFlag(o))
	case o.target == admin.FromFile:
	case countTrue(len(o.topics) > 0, o.allTopics, o.topicsRegex != "") > 1:
		return usagef("--topic, --all-topics and --topics-regex conflict: give one")
	case len(o.topics) == 0 && !o.allTopics && o.topicsRegex == "":
		return usagef("no scope: give --topic TOPIC (repeatable), --topic TOPIC:P,P..., --all-topics or --topics-regex PATTERN")
	}
	if _, err := coordinator.TopicsPattern(o.topicsRegex); err != nil {
		return usagef("--topics-regex: %w", err)
	}
	switch {
	case o.target == admin.ToOffset && o.offset < 0:
		return usagef("--to-offset %d: offsets are never negative; want 0 or more (to go back from the committed offset use --shift-by %d)", o.offset, o.offset)
	case o.target == admin.ByDuration && time.Now().Add(-o.ago).UnixMilli() < 0:
		return usagef("--by-duration %q: reaches back to %s, before 1970, when Kafka's record times start; want a shorter duration",
			o.duration, time.Now().Add(-o.ago).UTC().Format(time.RFC3339))
	}
	return nil
}

func (o *resetOptions) run(ctx context.Context, cmd *cobra.Command) error {
	stderr := cmd.ErrOrStderr()
	// Taking another consumer's offsets is how a group starts.
	o.admin.newGroup = o.target == admin.FromGroup
	s, err := o.admin.openGroup(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	coord, snap := s.coord, s.snap
	if o.checkGroup != nil {
		if err := o.checkGroup(snap); err != nil {
			return err
		}
	}
	if o.target == admin.ByDuration {
		o.at = time.Now().Add(-o.ago)
	}

	if err := o.matchScopes(snap); err != nil {
		return err
	}
	r := admin.Reset{Target: admin.Target{Kind: o.target, Offset: o.offset, Shift: o.shift, Group: o.fromGroup}, At: o.at,
		Topics: o.scopes, AllTopics: o.allTopics, File: o.file, Lines: o.lines}
	topics, err := r.ScopeTopics(o.admin.cluster.group, snap)
	if err != nil {
		return err
	}
	k, kctx, done := o.admin.kafka(ctx, topics)
	defer done()
	p, err := r.Plan(kctx, o.admin.cluster.group, snap, k, func(w string) { fmt.Fprintf(stderr, "warning: %s\n", w) })
	if err != nil {
		return o.kafkaError(err)
	}
	k.Close()
	plan := &planView{p}

	out := cmd.OutOrStdout()
	if o.export {
		return admin.WriteExport(out, plan.Partitions)
	}
	if !o.execute {
		if err := o.admin.output.print(out, plan); err != nil {
			return err
		}
		if len(plan.Partitions) == 0 {
			fmt.Fprintln(stderr, "nothing to reset")
		} else {
			fmt.Fprintln(stderr, "dry run: nothing changed; add --execute to apply this plan")
		}
		return nil
	}

	if testHookBeforeApply != nil {
		testHookBeforeApply()
	}
	applyErr := plan.Apply(ctx, coord, o.admin.etcdTimeout, o.admin.etcdError)
	if err := o.admin.output.print(out, plan); err != nil {
		return err
	}
	return applyErr
}

func (o *resetOptions) kafkaError(err error) error {
	var ie *admin.InputError
	if errors.As(err, &ie) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (waited --kafka-timeout %s)", err, o.admin.kafkaTimeout)
	}
	if errors.Is(err, admin.ErrKafkaUnreachable) {
		return fmt.Errorf("%w: a reset needs the log bounds to plan; nothing changed", err)
	}
	return fmt.Errorf("%w; nothing changed", err)
}

// scopeFlag is the scope flag given, for messages.
func scopeFlag(o *resetOptions) string {
	switch {
	case o.allTopics:
		return "--all-topics"
	case o.topicsRegex != "":
		return "--topics-regex"
	}
	return "--topic"
}

// countTrue counts the true ones of bs.
func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// matchScopes adds the group's topics --topics-regex matches to the scope,
// whole; matching none is bad usage.
func (o *resetOptions) matchScopes(snap *coordinator.Snapshot) error {
	if o.topicsRegex == "" {
		return nil
	}
	re, _ := coordinator.TopicsPattern(o.topicsRegex) // validate compiled it
	matched := admin.MatchingTopics(snap, re)
	if len(matched) == 0 {
		return usagef("--topics-regex %q matches no topic of group %s in etcd; its topics: %s", o.topicsRegex,
			o.admin.cluster.group, cmp.Or(strings.Join(admin.GroupTopics(snap), ", "), "none"))
	}
	for _, t := range matched {
		o.scopes = append(o.scopes, admin.TopicScope{Topic: t, Arg: t})
	}
	return nil
}
