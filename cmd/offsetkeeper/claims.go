package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
)

// claimsReleaseOptions is `offsetkeeper claims release`.
type claimsReleaseOptions struct {
	admin     adminFlags
	topic     string
	partition int
	waiting   waitFlags

	// Set by complete.
	partitionSet bool
	p            coordinator.Partition
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
	o.p = coordinator.Partition{Topic: o.topic, Partition: o.partition}
	if topic, part, ok := strings.Cut(o.topic, ":"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return usagef("--topic %q: partition %q is not a partition number; want TOPIC or TOPIC:P with P 0 or more, such as %s:0", o.topic, part, topic)
		}
		if o.partitionSet && n != o.partition {
			return usagef("--topic %q and --partition %d conflict: give the partition once", o.topic, o.partition)
		}
		o.p, o.partitionSet = coordinator.Partition{Topic: topic, Partition: n}, true
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
	if err := admin.ValidTopic(o.p.Topic); err != nil {
		return usagef("--topic %q: %v", o.topic, err)
	}
	return o.waiting.validate()
}

// notClaimed is the usage error of releasing p, which has no claim: it says
// whether the group knows the partition, and which of the topic's it knows.
func notClaimed(snap *coordinator.Snapshot, p coordinator.Partition, group string) error {
	var ids []int
	for _, q := range admin.GroupPartitions(snap) {
		if q.Topic == p.Topic {
			ids = append(ids, q.Partition)
		}
	}
	switch {
	case len(ids) == 0:
		return usagef("partition %s: group %q has no partition of topic %q in etcd (its topics: %s); nothing to release",
			p, group, p.Topic, strings.Join(admin.GroupTopics(snap), ", "))
	case !slices.Contains(ids, p.Partition) && p.Partition > ids[len(ids)-1]:
		return usagef("partition %s does not exist in group %q: etcd knows %d partitions of %s (%d to %d); nothing to release",
			p, group, len(ids), p.Topic, ids[0], ids[len(ids)-1])
	}
	return usagef("partition %s of group %q is not claimed by any replica: nothing to release", p, group)
}

// handover is what `claims release` reports.
type handover struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	From      string `json:"from"`
	FromEpoch int64  `json:"from_epoch"`
	To        string `json:"to,omitempty"`
	ToEpoch   int64  `json:"to_epoch,omitempty"`
	Done      bool   `json:"done"`
}

func (o *claimsReleaseOptions) run(ctx context.Context, cmd *cobra.Command) error {
	s, err := o.admin.openGroup(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	p, coord := o.p, s.coord
	before, ok := s.snap.Claims[p]
	if !ok {
		return notClaimed(s.snap, p, o.admin.cluster.group)
	}
	rctx, cancel := o.admin.etcdContext(ctx)
	defer cancel()
	epoch, err := coord.RequestRelease(rctx, p)
	if errors.Is(err, coordinator.ErrNotClaimed) {
		return usage(err)
	}
	if err != nil {
		return o.admin.etcdError(err)
	}
	h := handover{Topic: p.Topic, Partition: p.Partition, From: before.Replica, FromEpoch: epoch}
	if o.waiting.wait {
		wctx, cancel := context.WithTimeout(ctx, o.waiting.timeout)
		defer cancel()
		err := backoff.Poll(wctx, 50*time.Millisecond, func() (bool, error) {
			s, err := coord.Snapshot(wctx)
			if err != nil {
				return false, nil // etcd may be briefly away; keep waiting
			}
			if c, ok := s.Claims[p]; ok && c.Epoch != epoch {
				h.To, h.ToEpoch, h.Done = c.Replica, c.Epoch, true
				return true, nil
			}
			return false, nil
		})
		cctx, ccancel := o.admin.etcdContext(context.Background())
		_ = coord.ClearRelease(cctx, p)
		ccancel()
		if err != nil {
			return fmt.Errorf("release %s: not handed over within --timeout %s (owner %s, epoch %d)", p, o.waiting.timeout, h.From, epoch)
		}
	}
	return o.admin.output.print(cmd.OutOrStdout(), h)
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

func (h handover) jsonValue() any { return h }
