package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

func newOffsetsCommand() *cobra.Command {
	cmd := groupCommand(&cobra.Command{
		Use:   "offsets",
		Short: "See where every partition of a group stands, and move its offsets",
		Long: `A group's committed offsets live in etcd, one key per partition:
/offsetkeeper/v1/groups/<group>/offsets/<topic>/<partition>. The committed
offset is the next offset to read (Kafka's convention).

  describe   one row per partition: committed offset, log end, lag, owner
  reset      move the committed offsets, while the group runs`,
	})
	cmd.AddCommand(newOffsetsDescribeCommand(), newOffsetsResetCommand(), newOffsetsImportCommand())
	return cmd
}

// describeOptions is `offsetkeeper offsets describe`.
type describeOptions struct {
	admin       adminFlags
	topics      []string
	topicsRegex string
	byTopic     bool
	pattern     *regexp.Regexp // topicsRegex compiled
}

func newOffsetsDescribeCommand() *cobra.Command {
	o := &describeOptions{}
	cmd := &cobra.Command{
		Use:     "describe",
		Aliases: []string{"list"},
		Short:   "One row per partition: committed offset, log end, lag, owner, block in flight",
		Long: `Show where every partition of a group stands, one row per partition, as
kafka-consumer-groups.sh --describe does for Kafka's own groups:

  TOPIC, PARTITION  the partition
  COMMITTED         the committed offset: the next offset the group reads
  LOG-END           where the partition's log ends for a read_committed
                    reader (the last stable offset), from Kafka
  LAG               LOG-END - COMMITTED: records not yet in the sink
  OWNER, EPOCH      the replica that holds the claim and the claim's epoch
                    (its fencing token); "(cannot read Kafka)" after an
                    owner that says so: it hands the partition over soon
  LAST-COMMIT       how long ago the offset was last committed (or reset)
  IN-FLIGHT         the block being written now, [from, next), if any

The partitions shown are those with an offset, a claim or an intent in etcd,
and every other partition of their topics and of --topics that Kafka knows,
so a partition nothing has read yet shows too ("-" where nothing is known).

Kafka is asked for the log ends only. When it does not answer within
--kafka-timeout the command still prints what etcd knows, with LOG-END and
LAG as "-" (null in JSON), and says on stderr that Kafka was unreachable.

--topics-regex P shows only the group's topics whose whole name matches P, as
run's --topics-regex. --by-topic prints one row per topic instead, for a group
of many topics: PARTITIONS, LAG (the sum of the known lags), MAX-LAG,
UNCOMMITTED (partitions without a committed offset), UNOWNED, OWNERS (replicas
that own some) and IN-FLIGHT (blocks being written).

An unknown --group exits with status 2 and names the groups there are.`,
		Example: `  offsetkeeper offsets describe --etcd-endpoints etcd1:2379 --brokers kafka:9092 --group orders
  TOPIC   PARTITION  COMMITTED  LOG-END  LAG  OWNER  EPOCH  LAST-COMMIT  IN-FLIGHT
  orders  0          1200       1250     50   r1     812    1s           [1200, 1250)
  orders  1          980        980      0    r2     815    4s           -

  # Total lag, for a script or an alert:
  offsetkeeper offsets describe --group orders -o json | jq '[.partitions[].lag // 0] | add'

  # Include the partitions of a topic the group has not read yet:
  offsetkeeper offsets list --group orders --topics orders,refunds

  # A group of many topics, a row each, those of the EU only:
  offsetkeeper offsets describe --group orders --by-topic --topics-regex 'orders\.eu-.*'`,
		Args: noArgs,
		RunE: runE(o),
	}
	o.admin.register(cmd, withKafka)
	cmd.Flags().StringSliceVar(&o.topics, "topics", nil,
		"topics of the group to show even where etcd has nothing yet, comma-separated, whole topics as run's --topics (default: the topics found in etcd)")
	cmd.Flags().StringVar(&o.topicsRegex, "topics-regex", "", "show only the group's topics whose whole name matches this regular expression (RE2), as run's --topics-regex (and those of --topics)")
	cmd.Flags().BoolVar(&o.byTopic, "by-topic", false, "one row per topic (partitions, lag, max lag, uncommitted, unowned, owners, blocks in flight) instead of one per partition")
	return cmd
}

func (o *describeOptions) complete(*cobra.Command) error { return nil }

func (o *describeOptions) validate() error {
	if err := o.admin.validate(); err != nil {
		return err
	}
	var err error
	if o.pattern, err = coordinator.TopicsPattern(o.topicsRegex); err != nil {
		return usagef("--topics-regex: %w", err)
	}
	return validTopics("--topics", o.topics)
}

// topicsView is describe --by-topic's output: a row per topic, or JSON,
// the group, the revision, whether Kafka answered, and the topics.
type topicsView struct {
	d      *admin.Description
	topics []admin.TopicState
}

func (v *topicsView) columns() []string {
	return []string{"TOPIC", "PARTITIONS", "LAG", "MAX-LAG", "UNCOMMITTED", "UNOWNED", "OWNERS", "IN-FLIGHT"}
}

func (v *topicsView) rows() [][]string {
	out := make([][]string, len(v.topics))
	for i, t := range v.topics {
		out[i] = []string{t.Topic, strconv.Itoa(t.Partitions), intCell(t.Lag), intCell(t.MaxLag), strconv.Itoa(t.Uncommitted),
			strconv.Itoa(t.Unowned), strconv.Itoa(t.Owners), strconv.Itoa(t.InFlight)}
	}
	return out
}

func (v *topicsView) jsonValue() any {
	return struct {
		Group          string             `json:"group"`
		Revision       int64              `json:"revision"`
		KafkaReachable bool               `json:"kafka_reachable"`
		Topics         []admin.TopicState `json:"topics"`
	}{v.d.Group, v.d.Revision, v.d.KafkaReachable, v.topics}
}

// describeView is describe's output: the table of the group's partitions,
// or JSON, an object with the group, the etcd revision read, whether Kafka
// answered, and the partitions.
type describeView struct {
	*admin.Description
	now time.Time
}

func (v *describeView) columns() []string {
	return []string{"TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "OWNER", "EPOCH", "LAST-COMMIT", "IN-FLIGHT"}
}

func (v *describeView) rows() [][]string {
	out := make([][]string, len(v.Partitions))
	for i, r := range v.Partitions {
		owner, last, flight := dash, dash, dash
		if r.Owner != nil {
			owner = *r.Owner
			if r.OwnerReads != nil && !*r.OwnerReads {
				owner += " (cannot read Kafka)"
			}
		}
		if r.LastCommit != nil {
			last = age(v.now, *r.LastCommit)
		}
		if r.InFlight != nil {
			flight = fmt.Sprintf("[%d, %d)", r.InFlight.From, r.InFlight.Next)
		}
		out[i] = []string{r.Topic, strconv.Itoa(r.Partition), intCell(r.Committed), intCell(r.LogEnd), intCell(r.Lag),
			owner, intCell(r.Epoch), last, flight}
	}
	return out
}

func (v *describeView) jsonValue() any { return v.Description }

func (o *describeOptions) run(ctx context.Context, cmd *cobra.Command) error {
	s, err := o.admin.openGroup(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	stderr := cmd.ErrOrStderr()
	for _, u := range s.snap.Unreadable {
		fmt.Fprintf(stderr, "warning: unreadable etcd key, left out: %s\n", u)
	}
	now := time.Now()
	topics := admin.DescribeTopics(s.snap, o.topics)
	if o.pattern != nil {
		topics = slices.DeleteFunc(topics, func(t string) bool { return !o.pattern.MatchString(t) && !slices.Contains(o.topics, t) })
	}
	var k *admin.Kafka
	kctx := ctx
	if len(topics) > 0 {
		var done func()
		k, kctx, done = o.admin.kafka(ctx, topics)
		defer done()
	}
	d, missing, kafkaErr := admin.Describe(kctx, o.admin.cluster.group, s.snap, k, topics)
	if kafkaErr != nil {
		if errors.Is(kafkaErr, context.DeadlineExceeded) {
			kafkaErr = fmt.Errorf("%w (waited --kafka-timeout %s)", kafkaErr, o.admin.kafkaTimeout)
		}
		fmt.Fprintf(stderr, "warning: %v; LOG-END and LAG are unknown (-)\n", kafkaErr)
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "warning: topics not found in Kafka at %s: %s; their LOG-END and LAG are unknown (-)\n",
			strings.Join(o.admin.cluster.brokers, ","), strings.Join(missing, ", "))
	}
	if o.pattern != nil {
		d.Partitions = slices.DeleteFunc(d.Partitions, func(p admin.PartitionState) bool { return !slices.Contains(topics, p.Topic) })
	}
	if o.byTopic {
		return o.admin.output.print(cmd.OutOrStdout(), &topicsView{d: d, topics: d.ByTopic()})
	}
	return o.admin.output.print(cmd.OutOrStdout(), &describeView{Description: d, now: now})
}

// validTopics checks the topics of flag.
func validTopics(flag string, topics []string) error {
	for _, t := range topics {
		if err := coordinator.ValidTopic(t); err != nil {
			return usage(fmt.Errorf("%s: %w", flag, err))
		}
	}
	return nil
}
