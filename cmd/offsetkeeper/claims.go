package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// claimsReleaseOptions is `offsetkeeper claims release`.
type claimsReleaseOptions struct {
	admin     adminFlags
	topic     string
	partition int
	waiting   waitFlags

	// Set by complete.
	partitionSet bool
	p            sinks.Partition
}

func newClaimsCommand() *cobra.Command {
	cmd := groupCommand(&cobra.Command{
		Use:   "claims",
		Short: "Move partitions between replicas",
	})
	cmd.AddCommand(newClaimsReleaseCommand())
	return cmd
}

func newClaimsReleaseCommand() *cobra.Command {
	o := &claimsReleaseOptions{}
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Ask a partition's owner to hand it over at its next block boundary",
		Long: `Ask the replica that owns a partition to finish the block it is writing,
commit it, and release its claim; the replica the plan names (possibly the
same one, under a new epoch) claims it next and resumes from the committed
offset, so nothing is lost or written twice. The request is a key under
/offsetkeeper/v1/groups/<group>/release/ that names the claim's epoch, so it
can never affect a later claim. With --wait (default) the command returns once
the partition has been handed over, and prints who owns it now.

The partition is --topic T --partition P, or --topic T:P as 'offsets reset'
takes it. A partition the group has no claim of is bad usage (exit 2); the
error says whether the group knows the partition at all.`,
		Example: `  offsetkeeper claims release --group orders --topic orders --partition 3
  offsetkeeper claims release --group orders --topic orders:3 -o json`,
		Args: noArgs,
		RunE: runE(o),
	}
	o.admin.register(cmd, etcdOnly)
	fs := cmd.Flags()
	fs.StringVar(&o.topic, "topic", "", "the partition's topic, or TOPIC:P for the partition too")
	fs.IntVar(&o.partition, "partition", 0, "the partition number, 0 or more (required unless --topic is TOPIC:P)")
	o.waiting.register(cmd, "wait until the partition has been handed over", time.Minute)
	return cmd
}

// complete reads the partition of --topic T:P.
func (o *claimsReleaseOptions) complete(cmd *cobra.Command) error {
	o.partitionSet = cmd.Flags().Changed("partition")
	o.p = sinks.Partition{Topic: o.topic, Partition: o.partition}
	if topic, part, ok := strings.Cut(o.topic, ":"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return usagef("--topic %q: partition %q is not a partition number; want TOPIC or TOPIC:P with P 0 or more, such as %s:0", o.topic, part, topic)
		}
		if o.partitionSet && n != o.partition {
			return usagef("--topic %q and --partition %d conflict: give the partition once", o.topic, o.partition)
		}
		o.p, o.partitionSet = sinks.Partition{Topic: topic, Partition: n}, true
	}
	return nil
}

func (o *claimsReleaseOptions) validate() error {
	if err := o.admin.validate(); err != nil {
		return err
	}
	switch {
	case o.topic == "":
		return usagef("--topic is required: the partition's topic, e.g. --topic orders --partition 3 or --topic orders:3")
	case !o.partitionSet:
		return usagef("--partition is required: the partition number, 0 or more, e.g. --topic %s --partition 0 (or --topic %s:0)", o.p.Topic, o.p.Topic)
	case o.p.Partition < 0:
		return usagef("--partition %d: want a partition number, 0 or more", o.p.Partition)
	}
	if err := coordinator.ValidTopic(o.p.Topic); err != nil {
		return usagef("--topic %q: %v", o.topic, err)
	}
	return o.waiting.validate()
}

// handover is what `claims release` reports.
type handover struct{ admin.Handover }

func (o *claimsReleaseOptions) run(ctx context.Context, cmd *cobra.Command) error {
	s, err := o.admin.openGroup(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	rctx, cancel := o.admin.etcdContext(ctx)
	defer cancel()
	h, err := admin.Release(rctx, s.coord, s.snap, o.p)
	if err != nil {
		return o.admin.libraryError(err)
	}
	if o.waiting.wait {
		wctx, cancel := context.WithTimeout(ctx, o.waiting.timeout)
		defer cancel()
		if err := h.Await(wctx, s.coord, o.admin.etcdTimeout); err != nil {
			return fmt.Errorf("release %s: not handed over within --timeout %s (owner %s, epoch %d)", o.p, o.waiting.timeout, h.From, h.FromEpoch)
		}
	}
	return o.admin.output.print(cmd.OutOrStdout(), handover{h})
}

func (h handover) columns() []string {
	return []string{"TOPIC", "PARTITION", "FROM", "FROM-EPOCH", "TO", "TO-EPOCH"}
}

func (h handover) rows() [][]string {
	to, toEpoch := dash, dash
	if h.Done {
		to, toEpoch = h.To, strconv.FormatInt(h.ToEpoch, 10)
	}
	return [][]string{{h.Topic, strconv.Itoa(h.Partition), h.From, strconv.FormatInt(h.FromEpoch, 10), to, toEpoch}}
}

func (h handover) jsonValue() any { return h.Handover }
