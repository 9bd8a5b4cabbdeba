package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

// The targets of a reset, one of which is given: each is a flag.
const (
	toEarliest = "to-earliest"
	toLatest   = "to-latest"
	toCurrent  = "to-current"
	toOffset   = "to-offset"
	shiftBy    = "shift-by"
	toDatetime = "to-datetime"
	byDuration = "by-duration"
	fromFile   = "from-file"
)

var resetTargets = []string{toEarliest, toLatest, toCurrent, toOffset, shiftBy, toDatetime, byDuration, fromFile}

// exportHeader is the first line --export prints and --from-file skips.
const exportHeader = "topic,partition,offset"

// testHookBeforeApply, when set, runs after the plan is read and before it
// is applied: tests use it to change the offsets in between.
var testHookBeforeApply func()

// resetOptions is `offsetkeeper offsets reset`.
type resetOptions struct {
	admin adminFlags

	topics    []string
	allTopics bool

	earliest, latest, current bool
	offset, shift             string
	datetime, duration        string
	file                      string

	execute bool
	export  bool

	// Set by complete and validate.
	targets    []string // the target flags given
	target     string
	outputSet  bool
	executeEnv bool
	scopes     []topicScope
	offsetN    int64
	shiftN     int64
	at         time.Time // --to-datetime; --by-duration sets it in run
	ago        time.Duration
	lines      []fileLine
}

// topicScope is one --topic: a topic and some of its partitions (nil: all).
type topicScope struct {
	topic      string
	partitions []int
	arg        string
}

// fileLine is one row of a --from-file plan.
type fileLine struct {
	p      coordinator.Partition
	offset int64
	line   int
}

func newOffsetsResetCommand() *cobra.Command {
	o := &resetOptions{}
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Move a group's committed offsets, safely and without stopping the group",
		Long: `Move the committed offsets of some partitions of a group: to re-deliver
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
needs the log bounds.`,
		Example: `  # See what re-delivering the last hour of "orders" would do, then do it:
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
  offsetkeeper offsets reset --group orders --from-file plan.csv --execute`,
		Args: noArgs,
		RunE: runE(o),
	}
	o.admin.register(cmd, withKafka)
	fs := cmd.Flags()
	fs.StringArrayVar(&o.topics, "topic", nil, "scope: a topic, or TOPIC:P,P,... for some of its partitions; repeatable")
	fs.BoolVar(&o.allTopics, "all-topics", false, "scope: every topic found in the group's keys in etcd")
	fs.BoolVar(&o.earliest, toEarliest, false, "target: the log start offset")
	fs.BoolVar(&o.latest, toLatest, false, "target: the log end (last stable offset)")
	fs.BoolVar(&o.current, toCurrent, false, "target: the committed offset itself (a running owner re-reads from it)")
	fs.StringVar(&o.offset, toOffset, "", "target: this offset (an integer, 0 or more)")
	fs.StringVar(&o.shift, shiftBy, "", "target: the committed offset plus this (an integer; negative goes back)")
	fs.StringVar(&o.datetime, toDatetime, "", "target: the first offset at or after this RFC 3339 time, e.g. 2026-12-01T10:00:00Z")
	fs.StringVar(&o.duration, byDuration, "", "target: --to-datetime now minus this: PT1H, P1DT12H, 90m, 1h30m")
	fs.StringVar(&o.file, fromFile, "", "target and scope: a CSV file of topic,partition,offset lines, as --export prints")
	fs.BoolVar(&o.execute, "execute", false, "apply the plan (default: only print it)")
	fs.BoolVar(&o.export, "export", false, "print the plan as CSV (topic,partition,offset) for --from-file")
	return cmd
}

func (o *resetOptions) complete(cmd *cobra.Command) error {
	fs := cmd.Flags()
	executeFlag := fs.Changed("execute")
	if err := bindEnv(cmd); err != nil {
		return err
	}
	o.executeEnv = !executeFlag && fs.Changed("execute") && o.execute
	o.outputSet = fs.Changed("output")
	o.targets = nil
	for _, name := range resetTargets {
		if !fs.Changed(name) {
			continue
		}
		if b, err := fs.GetBool(name); err == nil && !b {
			continue // --to-earliest=false
		}
		o.targets = append(o.targets, name)
	}
	return nil
}

func targetList() string {
	names := make([]string, len(resetTargets))
	for i, n := range resetTargets {
		names[i] = "--" + n
	}
	return strings.Join(names, ", ")
}

func (o *resetOptions) validate() error {
	if err := o.admin.validate(); err != nil {
		return err
	}
	switch len(o.targets) {
	case 0:
		return usagef("no target: give exactly one of %s", targetList())
	case 1:
		o.target = o.targets[0]
	default:
		return usagef("--%s conflict: give exactly one of %s", strings.Join(o.targets, " and --"), targetList())
	}
	switch {
	case o.executeEnv:
		return usagef("OFFSETKEEPER_EXECUTE=%s: --execute is taken from the command line only, so that a reset is never applied by accident", os.Getenv(envName("execute")))
	case o.execute && o.export:
		return usagef("--execute and --export conflict: --export only prints the plan as CSV; apply a saved plan with --from-file FILE --execute")
	case o.export && o.outputSet && o.admin.output.format != outputTable:
		return usagef("--export and -o %s conflict: --export prints CSV", o.admin.output.format)
	}

	// Scope.
	switch {
	case o.target == fromFile && (len(o.topics) > 0 || o.allTopics):
		return usagef("--from-file and %s conflict: the file names its own partitions", scopeFlag(o))
	case o.target == fromFile:
	case len(o.topics) > 0 && o.allTopics:
		return usagef("--topic and --all-topics conflict: give one")
	case len(o.topics) == 0 && !o.allTopics:
		return usagef("no scope: give --topic TOPIC (repeatable), --topic TOPIC:P,P... or --all-topics")
	}
	scopes, err := parseScopes(o.topics)
	if err != nil {
		return err
	}
	o.scopes = scopes

	// Target.
	switch o.target {
	case toOffset:
		n, err := strconv.ParseInt(strings.TrimSpace(o.offset), 10, 64)
		if err != nil {
			return usagef("--to-offset %q: want an offset, an integer 0 or more", o.offset)
		}
		if n < 0 {
			return usagef("--to-offset %d: offsets are never negative; want 0 or more (to go back from the committed offset use --shift-by %d)", n, n)
		}
		o.offsetN = n
	case shiftBy:
		n, err := strconv.ParseInt(strings.TrimSpace(o.shift), 10, 64)
		if err != nil {
			return usagef("--shift-by %q: want an integer, negative to go back (-100) or positive to skip ahead (100)", o.shift)
		}
		o.shiftN = n
	case toDatetime:
		t, err := parseDatetime(o.datetime)
		if err != nil {
			return usage(fmt.Errorf("--to-datetime %w", err))
		}
		o.at = t
	case byDuration:
		d, err := parseAgo(o.duration)
		if err != nil {
			return usage(fmt.Errorf("--by-duration %w", err))
		}
		o.ago = d
	case fromFile:
		lines, err := readPlanFile(o.file)
		if err != nil {
			return usage(err)
		}
		o.lines = lines
	}
	return nil
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

// parseDatetime parses an RFC 3339 time at or after 1970.
func parseDatetime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time such as 2026-12-01T10:00:00Z or 2026-12-01T11:00:00+01:00", s)
	}
	if t.UnixMilli() < 0 {
		return time.Time{}, fmt.Errorf("%q: before 1970, when Kafka's record times start; want a later RFC 3339 time", s)
	}
	return t, nil
}

var isoDuration = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:[.,]\d+)?)S)?)?$`)

// parseAgo parses a positive duration: ISO-8601's PnDTnHnMnS (days of 24
// hours; no years, months or weeks, whose length varies) or Go's (90m,
// 1h30m).
func parseAgo(s string) (time.Duration, error) {
	const want = "want a positive ISO-8601 duration such as PT1H, PT30M or P1DT12H, or a Go duration such as 90m or 1h30m"
	v := strings.TrimSpace(s)
	var d time.Duration
	if strings.HasPrefix(strings.ToUpper(v), "P") {
		m := isoDuration.FindStringSubmatch(strings.ToUpper(v))
		if m == nil || strings.HasSuffix(strings.ToUpper(v), "T") || len(v) < 3 {
			return 0, fmt.Errorf("%q: %s", s, want)
		}
		total := 0.0
		for i, unit := range []float64{24 * 3600, 3600, 60, 1} {
			if m[i+1] == "" {
				continue
			}
			n, err := strconv.ParseFloat(strings.ReplaceAll(m[i+1], ",", "."), 64)
			if err != nil {
				return 0, fmt.Errorf("%q: %s", s, want)
			}
			total += n * unit
		}
		if total*float64(time.Second) > math.MaxInt64/2 {
			return 0, fmt.Errorf("%q: too long; %s", s, want)
		}
		d = time.Duration(total * float64(time.Second))
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, fmt.Errorf("%q: %s", s, want)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: not positive; %s", s, want)
	}
	return d, nil
}

// readPlanFile reads a plan as --export prints it: CSV lines of
// topic,partition,offset, the header line optional, blank lines and lines
// starting with # ignored.
func readPlanFile(path string) ([]fileLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--from-file %q: %w; want a CSV file of topic,partition,offset lines as --export prints", path, err)
	}
	defer f.Close()
	lines, err := parsePlan(f)
	if err != nil {
		return nil, fmt.Errorf("--from-file %s %w", path, err)
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("--from-file %s: no partitions in it; want CSV lines of topic,partition,offset as --export prints", path)
	}
	return lines, nil
}

func parsePlan(r io.Reader) ([]fileLine, error) {
	const want = "want topic,partition,offset (e.g. orders,0,1200) as --export prints"
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	var out []fileLine
	seen := map[coordinator.Partition]int{}
	for first := true; ; first = false {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("line %d: %v; %s", pe.StartLine, pe.Err, want)
			}
			return nil, fmt.Errorf(": %w", err)
		}
		line, _ := cr.FieldPos(0)
		for i := range rec {
			rec[i] = strings.TrimSpace(rec[i])
		}
		text := strings.Join(rec, ",")
		if first && strings.EqualFold(text, exportHeader) {
			continue
		}
		if len(rec) != 3 {
			return nil, fmt.Errorf("line %d: %q has %d fields; %s", line, text, len(rec), want)
		}
		if err := validTopic(rec[0]); err != nil {
			return nil, fmt.Errorf("line %d: %q: %v; %s", line, text, err, want)
		}
		part, err := strconv.Atoi(rec[1])
		if err != nil || part < 0 {
			return nil, fmt.Errorf("line %d: %q: partition %q is not a number 0 or more; %s", line, text, rec[1], want)
		}
		off, err := strconv.ParseInt(rec[2], 10, 64)
		if err != nil || off < 0 {
			return nil, fmt.Errorf("line %d: %q: offset %q is not an integer 0 or more; %s", line, text, rec[2], want)
		}
		p := coordinator.Partition{Topic: rec[0], Partition: part}
		if prev, dup := seen[p]; dup {
			return nil, fmt.Errorf("line %d: %q: %s is already on line %d; want each partition once", line, text, p, prev)
		}
		seen[p] = line
		out = append(out, fileLine{p: p, offset: off, line: line})
	}
}

// Statuses of an executed plan's rows.
const (
	statusReset        = "reset"
	statusConflict     = "conflict"
	statusFailed       = "failed"
	statusNotAttempted = "not-attempted"
)

// planRow is one partition of a reset; its JSON fields are stable. current
// is null where nothing is committed; status and generation are set by
// --execute.
type planRow struct {
	Topic      string `json:"topic"`
	Partition  int    `json:"partition"`
	Current    *int64 `json:"current"`
	New        int64  `json:"new"`
	LogStart   int64  `json:"log_start"`
	LogEnd     int64  `json:"log_end"`
	Status     string `json:"status,omitempty"`
	Generation *int64 `json:"generation,omitempty"`
	Error      string `json:"error,omitempty"`

	p    coordinator.Partition
	seen coordinator.Offsets
}

// planView is the plan, or its outcome after --execute. JSON: an object
// with the group, whether it was executed, and the partitions.
type planView struct {
	Group      string    `json:"group"`
	Executed   bool      `json:"executed"`
	Partitions []planRow `json:"partitions"`
}

func (v *planView) columns() []string {
	if v.Executed {
		return []string{"TOPIC", "PARTITION", "CURRENT", "NEW", "STATUS"}
	}
	return []string{"TOPIC", "PARTITION", "CURRENT", "NEW"}
}

func (v *planView) rows() [][]string {
	out := make([][]string, len(v.Partitions))
	for i, r := range v.Partitions {
		out[i] = []string{r.Topic, strconv.Itoa(r.Partition), intCell(r.Current), strconv.FormatInt(r.New, 10)}
		if v.Executed {
			out[i] = append(out[i], r.Status)
		}
	}
	return out
}

func (v *planView) jsonValue() any { return v }

func (o *resetOptions) run(ctx context.Context, cmd *cobra.Command) error {
	stderr := cmd.ErrOrStderr()
	s, err := o.admin.openGroup(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	coord, snap := s.coord, s.snap
	if o.target == byDuration {
		o.at = time.Now().Add(-o.ago)
	}

	// The topics in scope.
	var topics []string
	switch {
	case o.target == fromFile:
		for _, l := range o.lines {
			if !slices.Contains(topics, l.p.Topic) {
				topics = append(topics, l.p.Topic)
			}
		}
	case o.allTopics:
		topics = groupTopics(snap)
		if len(topics) == 0 {
			return usagef("--all-topics: group %q has no offsets, claims or intents, so no topics; name them with --topic", o.admin.cluster.group)
		}
	default:
		for _, s := range o.scopes {
			topics = append(topics, s.topic)
		}
	}

	kctx, cancel := context.WithTimeout(ctx, o.admin.kafkaTimeout)
	defer cancel()
	k := newKafkaAdmin(o.admin.cluster.brokers, o.admin.kafkaTimeout, topics, o.admin.cluster.security.kafkaAuth())
	defer k.Close()
	known, missing, err := k.partitions(kctx, topics)
	if err != nil {
		return o.kafkaError(err)
	}
	parts, err := o.partitionsInScope(snap, known, missing, stderr)
	if err != nil {
		return err
	}
	bounds, err := k.bounds(kctx, parts)
	if err != nil {
		return o.kafkaError(err)
	}
	var atTime map[coordinator.Partition]int64
	if o.target == toDatetime || o.target == byDuration {
		if atTime, err = k.offsetsAt(kctx, parts, o.at); err != nil {
			return o.kafkaError(err)
		}
	}
	k.Close()

	plan := &planView{Group: o.admin.cluster.group, Partitions: []planRow{}}
	asked := map[coordinator.Partition]int64{}
	for _, l := range o.lines {
		asked[l.p] = l.offset
	}
	for _, p := range parts {
		b := bounds[p]
		seen, committed := snap.Offsets[p]
		row := planRow{Topic: p.Topic, Partition: p.Partition, LogStart: b.earliest, LogEnd: b.end, p: p, seen: seen}
		if committed {
			row.Current = ptr(seen.Next)
		}
		var want int64
		switch o.target {
		case toEarliest:
			want = b.earliest
		case toLatest:
			want = b.end
		case toCurrent, shiftBy:
			if !committed {
				fmt.Fprintf(stderr, "warning: %s has no committed offset: left out of --%s\n", p, o.target)
				continue
			}
			want = seen.Next
			if o.target == shiftBy {
				want = saturatingAdd(seen.Next, o.shiftN)
			}
		case toOffset:
			want = o.offsetN
		case toDatetime, byDuration:
			want = atTime[p]
			if want < 0 {
				want = b.end // no record at or after the time
			}
		case fromFile:
			want = asked[p]
		}
		row.New = want
		switch {
		case want < b.earliest:
			row.New = b.earliest
			fmt.Fprintf(stderr, "warning: %s: offset %d is before the log start %d; using %d\n", p, want, b.earliest, b.earliest)
		case want > b.end:
			row.New = b.end
			fmt.Fprintf(stderr, "warning: %s: offset %d is past the log end %d; using %d\n", p, want, b.end, b.end)
		}
		plan.Partitions = append(plan.Partitions, row)
	}

	out := cmd.OutOrStdout()
	if o.export {
		w := csv.NewWriter(out)
		_ = w.Write(strings.Split(exportHeader, ","))
		for _, r := range plan.Partitions {
			_ = w.Write([]string{r.Topic, strconv.Itoa(r.Partition), strconv.FormatInt(r.New, 10)})
		}
		w.Flush()
		return w.Error()
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
	applyErr := o.apply(ctx, coord, plan)
	if err := o.admin.output.print(out, plan); err != nil {
		return err
	}
	return applyErr
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

// apply writes each row by its own fenced transaction, conditioned on the
// offsets as the plan read them. A conflict does not stop the others; an
// etcd failure does, as etcd is then unlikely to answer the rest.
func (o *resetOptions) apply(ctx context.Context, coord *coordinator.Coordinator, plan *planView) error {
	plan.Executed = true
	var applied, conflicted, failed, skipped []string
	var failure error
	for i := range plan.Partitions {
		r := &plan.Partitions[i]
		if failure != nil {
			r.Status = statusNotAttempted
			skipped = append(skipped, r.p.String())
			continue
		}
		ectx, cancel := o.admin.etcdContext(ctx)
		got, err := coord.ResetOffsets(ectx, r.p, r.New, r.seen)
		cancel()
		switch {
		case err == nil:
			r.Status, r.Generation = statusReset, ptr(got.Generation)
			applied = append(applied, r.p.String())
		case errors.Is(err, coordinator.ErrConflict):
			r.Status, r.Error = statusConflict, err.Error()
			conflicted = append(conflicted, r.p.String())
		default:
			r.Status, r.Error = statusFailed, err.Error()
			failed = append(failed, r.p.String())
			failure = o.admin.etcdError(err)
		}
	}
	if len(conflicted) == 0 && failure == nil {
		return nil
	}
	var msg []string
	if len(conflicted) > 0 {
		msg = append(msg, fmt.Sprintf("not reset, offsets changed since the plan was read (a replica committed or another reset ran; run again to plan from the new state): %s",
			strings.Join(conflicted, ", ")))
	}
	if failure != nil {
		msg = append(msg, fmt.Sprintf("failed, the outcome unknown (check with offsets describe): %s: %v", strings.Join(failed, ", "), failure))
		if len(skipped) > 0 {
			msg = append(msg, "not attempted: "+strings.Join(skipped, ", "))
		}
	}
	if len(applied) > 0 {
		msg = append(msg, "reset: "+strings.Join(applied, ", "))
	} else {
		msg = append(msg, "nothing was reset")
	}
	return errors.New(strings.Join(msg, "; "))
}

func (o *resetOptions) kafkaError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (waited --kafka-timeout %s)", err, o.admin.kafkaTimeout)
	}
	if errors.Is(err, errKafkaUnreachable) {
		return fmt.Errorf("%w: a reset needs the log bounds to plan; nothing changed", err)
	}
	return fmt.Errorf("%w; nothing changed", err)
}

// saturatingAdd is a+b, held within int64.
func saturatingAdd(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}
