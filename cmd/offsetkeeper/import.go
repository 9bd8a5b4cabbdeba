package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

// importOptions is `offsetkeeper offsets import`: a reset to another
// consumer's offsets, for a group that does not run yet.
type importOptions struct {
	reset resetOptions
	live  bool
}

const offsetsImportLong = `Start a group from the offsets another consumer committed, to move a
pipeline over to offsetkeeper without a gap and without reading anything
twice: ClickHouse's Kafka engine (its kafka_group_name), Kafka Connect
(connect-NAME), any Kafka consumer group, or a plan file.

Source (exactly one):
  --from-group G   the offsets Kafka consumer group G committed; without
                   --topic, every topic G committed offsets for
  --from-file F    CSV lines topic,partition,offset, as offsets reset
                   --export prints them

The group must not be running: with replicas holding member keys the
import is refused (exit status 2), naming them, unless --live, which moves
a running group's partitions as offsets reset does. A source group that
still has members is refused too: its offsets still move, and what it
reads after the import would be read by both. Stop it first (for
ClickHouse's Kafka engine, DETACH TABLE its materialized view, then its
Kafka table), or give --live to take its offsets as they are now.

By default nothing is written: the plan is printed (TOPIC, PARTITION,
CURRENT, NEW). --execute writes it, each partition by one etcd transaction,
as offsets reset does. Offsets outside Kafka's log bounds are clamped, with
a warning on stderr. docs/clickhouse.md gives the cut-over from the Kafka
engine step by step.`

const offsetsImportExample = `  # Move over from ClickHouse's Kafka engine: detach its view, then
  clickhouse-client -q 'DETACH TABLE shop.orders_mv'
  clickhouse-client -q 'DETACH TABLE shop.orders_queue'
  offsetkeeper offsets import --group orders --from-group clickhouse-orders
  offsetkeeper offsets import --group orders --from-group clickhouse-orders --execute
  offsetkeeper run --group orders --topics orders --sink 'clickhouse://ch:9000/shop?table=orders&mode=columns'

  # From Kafka Connect's sink connector "pg-orders", one topic:
  offsetkeeper offsets import --group orders --from-group connect-pg-orders --topic orders --execute`

func newOffsetsImportCommand() *cobra.Command {
	o := &importOptions{}
	r := &o.reset
	cmd := &cobra.Command{
		Use:     "import",
		Short:   "Start a group from the offsets another consumer committed (the Kafka engine's, Kafka Connect's, a file)",
		Long:    offsetsImportLong,
		Example: offsetsImportExample,
		Args:    noArgs,
		RunE:    runE(o),
	}
	r.admin.register(cmd, withKafka)
	fs := cmd.Flags()
	fs.StringVar(&r.fromGroup, admin.FromGroup, "", "source: the Kafka consumer group whose committed offsets to take (ClickHouse's kafka_group_name, connect-NAME)")
	fs.StringVar(&r.file, admin.FromFile, "", "source: a CSV file of topic,partition,offset lines, as offsets reset --export prints")
	fs.StringArrayVar(&r.topics, "topic", nil, "with --from-group: only this topic, or TOPIC:P,P,... (repeatable; default: every topic the source committed)")
	fs.BoolVar(&r.execute, "execute", false, "write the offsets (default: only print the plan)")
	fs.BoolVar(&r.export, "export", false, "print the plan as CSV (topic,partition,offset)")
	fs.BoolVar(&o.live, "live", false, "import although the group's replicas, or the source group's consumers, are running")
	return cmd
}

func (o *importOptions) complete(cmd *cobra.Command) error {
	r := &o.reset
	if err := r.complete(cmd); err != nil {
		return err
	}
	if len(r.targets) == 1 && r.target == admin.FromGroup && len(r.topics) == 0 {
		// validate wants a scope; run fills it from the source group.
		r.allTopics = true
	}
	return nil
}

func (o *importOptions) validate() error {
	r := &o.reset
	if len(r.targets) == 0 {
		return usagef("no source: give --from-group GROUP (a Kafka consumer group) or --from-file FILE")
	}
	if len(r.targets) > 1 {
		return usagef("--from-group and --from-file conflict: give one source")
	}
	return r.validate()
}

func (o *importOptions) run(ctx context.Context, cmd *cobra.Command) error {
	r := &o.reset
	group := r.admin.cluster.group
	r.checkGroup = func(snap *coordinator.Snapshot) error {
		if len(snap.Members) == 0 || o.live {
			return nil
		}
		ids := make([]string, len(snap.Members))
		for i, m := range snap.Members {
			ids[i] = m.ID
		}
		return usagef("group %s is running: %d replicas hold member keys (%s); an import starts a group: stop them first, "+
			"or give --live to move the running group's partitions as offsets reset does", group, len(ids), strings.Join(ids, ", "))
	}
	if r.target == admin.FromGroup {
		k, kctx, done := r.admin.kafka(ctx, nil)
		src, err := k.DescribeSource(kctx, r.fromGroup)
		done()
		if err != nil {
			return r.kafkaError(err)
		}
		if len(src.Members) > 0 && !o.live {
			return usagef("Kafka consumer group %s has %d members still consuming (%s, state %s): its offsets still move, and what it reads "+
				"after the import would be read twice; stop it first (ClickHouse's Kafka engine: DETACH TABLE its materialized view, "+
				"then its Kafka table), "+
				"or give --live", r.fromGroup, len(src.Members), strings.Join(src.Members, ", "), src.State)
		}
		if r.allTopics {
			if len(src.Topics) == 0 {
				return usagef("Kafka consumer group %s committed no offsets: nothing to import (is the name right? "+
					"ClickHouse's Kafka engine uses kafka_group_name, Kafka Connect connect-NAME)", r.fromGroup)
			}
			r.allTopics = false
			for _, t := range src.Topics {
				r.scopes = append(r.scopes, admin.TopicScope{Topic: t, Arg: t})
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Kafka consumer group %s (%s) committed offsets of %s\n", r.fromGroup,
				strings.ToLower(src.State), strings.Join(src.Topics, ", "))
		}
	}
	return r.run(ctx, cmd)
}
