package main

import (
	"context"
	"errors"
	"fmt"
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
	cmd.AddCommand(newOffsetsDescribeCommand(), newOffsetsResetCommand())
	return cmd
}

// describeOptions is `offsetkeeper offsets describe`.
type describeOptions struct {
	admin  adminFlags
	topics []string
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

An unknown --group exits with status 2 and names the groups there are.`,
		Example: `  offsetkeeper offsets describe --etcd-endpoints etcd1:2379 --brokers kafka:9092 --group orders
  TOPIC   PARTITION  COMMITTED  LOG-END  LAG  OWNER  EPOCH  LAST-COMMIT  IN-FLIGHT
  orders  0          1200       1250     50   r1     812    1s           [1200, 1250)
  orders  1          980        980      0    r2     815    4s           -

  # Total lag, for a script or an alert:
  offsetkeeper offsets describe --group orders -o json | jq '[.partitions[].lag // 0] | add'

  # Include the partitions of a topic the group has not read yet:
  offsetkeeper offsets list --group orders --topics orders,refunds`,
		Args: noArgs,
		RunE: runE(o),
	}
	o.admin.register(cmd, withKafka)
	cmd.Flags().StringSliceVar(&o.topics, "topics", nil,
		"topics of the group to show even where etcd has nothing yet, comma-separated, whole topics as run's --topics (default: the topics found in etcd)")
	return cmd
}

func (o *describeOptions) complete(*cobra.Command) error { return nil }

func (o *describeOptions) validate() error {
	if err := o.admin.validate(); err != nil {
		return err
	}
	return validTopics("--topics", o.topics)
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
