package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/audit"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// auditOptions is `offsetkeeper audit`.
type auditOptions struct {
	admin       adminFlags
	sink        string
	topics      []string
	topicsRegex string

	target  sinkTarget
	scopes  []admin.TopicScope
	pattern *regexp.Regexp // topicsRegex compiled

	sinks sinks.Table // what --sink may name
}

// auditOpenTimeout bounds opening the sink to audit: a connection and a
// look at its tables.
const auditOpenTimeout = 30 * time.Second

// progressEvery is how often, at most, a long audit says on stderr how far
// it is.
const progressEvery = time.Second

const auditLong = `Compare, per partition of the group's topics, what the sink holds with the
records Kafka delivers (read_committed: aborted records and transaction
markers never are) from the log start up to the group's committed offset in
etcd: each offset, and where the sink keeps the record as Kafka had it, the
record itself, by a checksum of its key, value and timestamp. Findings, as
offset ranges:

  MISSING        delivered records below the committed offset that the sink
                 does not hold: lost
  DUPLICATED     offsets the sink holds more than once
  MISMATCHED     offsets whose record in the sink is not the one Kafka holds
                 there (another key, value or timestamp): a record of another
                 run, or of the topic before it was deleted and created
                 again, where this group's record should be; "n/a" where the
                 sink keeps no record to compare (the report says why)
  NOT-COMMITTED  offsets the sink holds at or beyond the committed offset:
                 "in flight" inside the partition's intent in etcd (a block
                 being written, or a crash before its commit) or, for a
                 postgres sink, below the next offset its own offsets table
                 holds (committed in the sink, not yet in etcd): not a
                 finding, the next owner replays that range or resumes after
                 it; else "beyond the commit", a finding
  ABORTED        offsets below the committed offset that the sink holds but
                 that are not delivered records (aborted transactions, or
                 records compacted away since)
  UNVERIFIABLE   offsets the sink holds below the log start, which retention
                 removed from Kafka: not findings; and offsets below the log
                 start are never reported missing

What each sink can be audited for:

  file:///DIR    everything. Files are read as file.ReadAll reads them: in
                 From order, each up to the From of the next (a later block
                 supersedes the offsets from its From onward), so held
                 twice means an offset on two lines that reading keeps (a
                 line repeated within a block's file). Records decoded
                 through a Schema Registry are not compared (their lines
                 hold the decoded JSON, not Kafka's bytes)
  postgres://…?mode=raw
                 everything but duplicates: the table's primary key is
                 (topic, partition, "offset"), so none can exist; records
                 compared by key, value_bytes and timestamp
  postgres://…?mode=columns
                 everything but mismatched records (the table holds fields of
                 the value, not the record), from the table's kafka_offset
                 column (required; kafka_topic and kafka_partition, when
                 there, tell topics and partitions apart, else audit one
                 partition with --topic T:P) with the dead-letter table's
                 offsets counted as held
  postgres://…?mode=upsert
                 duplicates, not committed and aborted only: the table keeps
                 the last record of each key, so an older record's absence is
                 not a loss and MISSING is not checked ("n/a"), nor are
                 records compared
  clickhouse://…?mode=raw|columns
                 everything but mismatched records (the ClickHouse reader
                 reads offsets only), from the table's kafka_offset column
                 (raw tables have it; a columns table needs it), counted,
                 with the dead-letter table's offsets as held; kafka_topic
                 and kafka_partition as for postgres columns. Copies a
                 deduplicating engine has not merged yet count as duplicated
  stdout:, discard:
                 cannot be audited (exit 2)

Memory is bounded by the findings, not by the records: both sides are read
in offset order and merged; each finding lists at most its first 100 ranges
per partition, with exact counts. A long audit prints its progress on stderr
at most once a second; stdout holds the report only. --kafka-timeout bounds
each exchange with Kafka (the partitions, the log bounds, each fetch), not the
whole audit. The report ends with how many records were compared, or why
none were.

A running group can be audited: each partition's offset and intent are read
again just before its sink, so its blocks being written show as in flight.

Exit status: 0 clean (offsets in flight and unverifiable ones are noted, not
findings), 1 findings (or etcd, Kafka or the sink failing), 2 bad
usage: an unknown group, a sink URL that cannot be audited or read (a
directory or table that is not there, a table without kafka_offset), a
--topic not in the group.`

const auditExample = `  offsetkeeper audit --group orders --sink file:///var/lib/offsetkeeper
  offsetkeeper audit --group orders --sink 'postgres://app@db/shop?table=orders_raw' --topic orders:0,1
  offsetkeeper audit --group orders --sink file:///data -o json | jq '.partitions[] | select(.missing.count > 0)'`

func newAuditCommand(table sinks.Table) *cobra.Command {
	o := &auditOptions{sinks: table}
	cmd := &cobra.Command{
		Use:     "audit",
		Short:   "Check a sink against Kafka and etcd: records missing, held twice, not Kafka's, not committed, aborted",
		Long:    auditLong,
		Example: auditExample,
		Args:    noArgs,
		RunE:    runE(o),
	}
	o.admin.register(cmd, withKafka)
	fs := cmd.Flags()
	fs.StringVar(&o.sink, "sink", "", "the sink to audit, as run's --sink: file:///DIR, postgres://…?mode=raw|columns|upsert&table=T or clickhouse://…?table=T")
	fs.StringArrayVar(&o.topics, "topic", nil, "audit only this topic of the group, or TOPIC:P,P,... for some of its partitions; repeatable (default: every partition of the group's topics)")
	fs.StringVar(&o.topicsRegex, "topics-regex", "", "audit only the group's topics whose whole name matches this regular expression (RE2), as run's --topics-regex; with --topic, both")
	return cmd
}

func (o *auditOptions) complete(*cobra.Command) error { return nil }

func (o *auditOptions) validate() error {
	if err := o.admin.validate(); err != nil {
		return err
	}
	if o.sink == "" {
		return usagef("--sink is required: the sink to audit, %s", audit.Audited(o.sinks))
	}
	t, err := parseSink(o.sinks, o.sink)
	if err != nil {
		return err
	}
	if t.Sink.Audit == nil {
		var none []string
		for _, d := range o.sinks {
			if d.Audit == nil {
				none = append(none, d.Scheme+":")
			}
		}
		return usagef("--sink: sink URL %q %v: want %s (%s keep nothing the audit reads)",
			t.Shown(), audit.ErrSinkUnsupported, audit.Audited(o.sinks), strings.Join(none, " and "))
	}
	o.target = t
	if o.scopes, err = admin.ParseScopes(o.topics); err != nil {
		return err
	}
	if o.pattern, err = coordinator.TopicsPattern(o.topicsRegex); err != nil {
		return usagef("--topics-regex: %w", err)
	}
	return nil
}

func (o *auditOptions) run(ctx context.Context, cmd *cobra.Command) error {
	s, err := o.admin.openGroup(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	scope, err := o.scope(s.snap)
	if err != nil {
		return err
	}

	shown := o.target.Shown()
	octx, cancel := context.WithTimeout(ctx, auditOpenTimeout)
	sink, err := audit.OpenSink(octx, o.sinks, o.sink, o.admin.cluster.group)
	cancel()
	if err != nil {
		if errors.Is(err, audit.ErrSinkUnsupported) || errors.Is(err, sinks.ErrUnreadable) {
			return usage(fmt.Errorf("--sink %q: %w", shown, err))
		}
		return fmt.Errorf("--sink %q: %w", shown, err)
	}
	defer sink.Close()

	kcfg := kafkaconf.Config{Brokers: o.admin.cluster.brokers, DialTimeout: o.admin.kafkaTimeout, ClientID: "offsetkeeper-audit"}
	o.admin.cluster.security.kafkaAuth().apply(&kcfg)
	rep, err := audit.Run(ctx, o.config(s.cli, kcfg, sink, scope, cmd.ErrOrStderr()))
	if err != nil {
		switch {
		case errors.Is(err, audit.ErrNotInGroup):
			return usage(fmt.Errorf("--topic: %w", err))
		case errors.Is(err, sinks.ErrUnreadable):
			return usage(fmt.Errorf("--sink %q: %w", shown, err))
		}
		if errors.Is(err, audit.ErrKafkaTimeout) {
			// Name the knobs: a timeout alone does not say that the
			// address may be the mistake.
			return fmt.Errorf("audit group %s: %w (the brokers are --brokers or OFFSETKEEPER_BROKERS; each exchange waits --kafka-timeout, %s)",
				o.admin.cluster.group, err, o.admin.kafkaTimeout)
		}
		return fmt.Errorf("audit group %s: %w", o.admin.cluster.group, err)
	}
	v := &auditView{rep: rep}
	if err := o.admin.output.print(cmd.OutOrStdout(), v); err != nil {
		return err
	}
	if o.admin.output.format == outputTable {
		if err := v.printFindings(cmd.OutOrStdout()); err != nil {
			return err
		}
	}
	if !rep.Clean() {
		return fmt.Errorf("audit of group %s in %s: %s", rep.Group, rep.Sink, v.rep.Summary())
	}
	return nil
}

// config is the audit's configuration; progress lines go to stderr.
func (o *auditOptions) config(cli *clientv3.Client, kcfg kafkaconf.Config, sink sinks.Reader, scope []audit.Scope, stderr io.Writer) audit.Config {
	started := time.Now()
	last := started
	return audit.Config{
		Etcd:  cli,
		Group: o.admin.cluster.group,
		Kafka: kcfg,
		Sink:  sink,
		Scope: scope,
		// Each exchange, not the whole audit, which takes as long as
		// the records take to read.
		KafkaTimeout: o.admin.kafkaTimeout,
		Progress: func(p audit.Progress) {
			// A line a second at most, and none for a short audit.
			if now := time.Now(); now.Sub(last) >= progressEvery {
				last = now
				fmt.Fprintf(stderr, "audit: %d offsets read, %d/%d partitions done (%s)\n",
					p.Records, p.PartitionsDone, p.Partitions, now.Sub(started).Round(time.Second))
			}
		},
	}
}

// auditView prints a report: a row per partition, then the findings' ranges.
// JSON: the report with "clean".
type auditView struct{ rep *audit.Report }

func (v *auditView) columns() []string {
	return []string{"TOPIC", "PARTITION", "LOG-START", "COMMITTED", "HELD", "MISSING", "DUPLICATED", "MISMATCHED", "NOT-COMMITTED", "ABORTED", "UNVERIFIABLE"}
}

func (v *auditView) rows() [][]string {
	out := make([][]string, 0, len(v.rep.Partitions))
	for _, p := range v.rep.Partitions {
		missing := strconv.FormatInt(p.Missing.Count, 10)
		if !p.MissingChecked {
			missing = "n/a"
		}
		mismatched := i64(p.Mismatched.Count)
		if p.Compared == 0 && p.NotCompared > 0 {
			mismatched = "n/a"
		}
		out = append(out, []string{p.Topic, strconv.Itoa(p.Partition), i64(p.LogStart), i64(p.Committed), i64(p.Held),
			missing, i64(p.Duplicated.Count), mismatched, i64(p.InFlight.Count + p.BeyondCommit.Count), i64(p.Aborted.Count), i64(p.Unverifiable.Count)})
	}
	return out
}

func (v *auditView) jsonValue() any {
	return struct {
		*audit.Report
		Clean bool `json:"clean"`
	}{v.rep, v.rep.Clean()}
}

func i64(n int64) string { return strconv.FormatInt(n, 10) }

// printFindings lists each finding's ranges, then a line that sums up.
func (v *auditView) printFindings(w io.Writer) error {
	var rows [][]string
	for _, p := range v.rep.Partitions {
		for _, f := range []struct {
			kind string
			rs   audit.Ranges
		}{
			{"missing", p.Missing}, {"duplicated", p.Duplicated}, {"mismatched", p.Mismatched}, {"not committed (in flight)", p.InFlight},
			{"not committed (beyond the commit)", p.BeyondCommit}, {"aborted", p.Aborted}, {"unverifiable", p.Unverifiable},
			{"truncated by Kafka", p.TruncatedByKafka},
		} {
			if f.rs.Count == 0 {
				continue
			}
			list := make([]string, len(f.rs.Ranges))
			for i, r := range f.rs.Ranges {
				list[i] = r.String()
			}
			s := strings.Join(list, " ")
			if f.rs.Truncated {
				s += " …"
			}
			rows = append(rows, []string{p.Topic, strconv.Itoa(p.Partition), f.kind, i64(f.rs.Count), s})
		}
	}
	if len(rows) > 0 {
		fmt.Fprintln(w)
		if err := printTable(w, []string{"TOPIC", "PARTITION", "FINDING", "OFFSETS", "RANGES"}, rows); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "\n%s\n", v.rep.Summary())
	return err
}

// scope is the audit's partitions: those of --topic and of the group's
// topics --topics-regex matches; none is all. A topic not in the group is
// bad usage.
func (o *auditOptions) scope(snap *coordinator.Snapshot) ([]audit.Scope, error) {
	topics := admin.GroupTopics(snap)
	var scope []audit.Scope
	for _, sc := range o.scopes {
		if !slices.Contains(topics, sc.Topic) {
			return nil, usagef("--topic %q: topic %s is not in group %s; want one of its topics in etcd: %s",
				sc.Arg, sc.Topic, o.admin.cluster.group, strings.Join(topics, ", "))
		}
		scope = append(scope, audit.Scope{Topic: sc.Topic, Partitions: sc.Partitions})
	}
	if o.pattern != nil {
		matched := admin.MatchingTopics(snap, o.pattern)
		if len(matched) == 0 {
			return nil, usagef("--topics-regex %q matches no topic of group %s in etcd; its topics: %s", o.topicsRegex,
				o.admin.cluster.group, strings.Join(topics, ", "))
		}
		for _, t := range matched {
			scope = append(scope, audit.Scope{Topic: t})
		}
	}
	return scope, nil
}
