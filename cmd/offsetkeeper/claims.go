package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

// claimsReleaseOptions is `offsetkeeper claims release`.
type claimsReleaseOptions struct {
	cluster   clusterFlags
	topic     string
	partition int
	waiting   waitFlags
	output    outputFlag
}

func newClaimsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "claims",
		Short: "Move partitions between replicas",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
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
the partition has been handed over, and prints who owns it now.`,
		Example: `  offsetkeeper claims release --group orders --topic orders --partition 3
  offsetkeeper claims release --group orders --topic orders --partition 3 -o json`,
		Args: noArgs,
		RunE: runE(o),
	}
	o.cluster.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&o.topic, "topic", "", "the partition's topic")
	fs.IntVar(&o.partition, "partition", -1, "the partition number")
	o.waiting.register(cmd, "wait until the partition has been handed over", time.Minute)
	o.output.register(cmd)
	return cmd
}

func (o *claimsReleaseOptions) complete(cmd *cobra.Command) error { return bindEnv(cmd) }

func (o *claimsReleaseOptions) validate() error {
	if err := o.cluster.validate(); err != nil {
		return err
	}
	if o.topic == "" {
		return usagef("--topic is required: the partition's topic")
	}
	if o.partition < 0 {
		return usagef("--partition %d: want a partition number, 0 or more", o.partition)
	}
	if err := o.output.validate(); err != nil {
		return err
	}
	return o.waiting.validate()
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
	stdout := cmd.OutOrStdout()
	cli, err := o.cluster.etcdClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	coord, err := coordinator.New(cli, o.cluster.group)
	if err != nil {
		return usage(err)
	}
	p := coordinator.Partition{Topic: o.topic, Partition: o.partition}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	snap, err := coord.Snapshot(rctx)
	if err != nil {
		return err
	}
	if len(snap.Members) == 0 && len(snap.Offsets) == 0 && len(snap.Claims) == 0 {
		return usagef("group %q: nothing in etcd under %s", o.cluster.group, coord.Keys().Prefix())
	}
	before, ok := snap.Claims[p]
	if !ok {
		return usagef("partition %s of group %q is not claimed by any replica: nothing to release", p, o.cluster.group)
	}
	epoch, err := coord.RequestRelease(rctx, p)
	if errors.Is(err, coordinator.ErrNotClaimed) {
		return usage(err)
	}
	if err != nil {
		return err
	}
	h := handover{Topic: p.Topic, Partition: p.Partition, From: before.Replica, FromEpoch: epoch}
	if o.waiting.wait {
		wctx, cancel := context.WithTimeout(ctx, o.waiting.timeout)
		defer cancel()
		err := poll(wctx, 50*time.Millisecond, func() (bool, error) {
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
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = coord.ClearRelease(cctx, p)
		ccancel()
		if err != nil {
			return fmt.Errorf("release %s: not handed over within --timeout %s (owner %s, epoch %d)", p, o.waiting.timeout, h.From, epoch)
		}
	}
	return o.output.print(stdout, h)
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

// waitFlags are --wait and --timeout of a command that can wait for the
// group to act on what it asked.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func (f *waitFlags) register(cmd *cobra.Command, what string, timeout time.Duration) {
	cmd.Flags().BoolVar(&f.wait, "wait", true, what)
	cmd.Flags().DurationVar(&f.timeout, "timeout", timeout, "how long --wait waits")
}

func (f *waitFlags) validate() error {
	if f.timeout <= 0 {
		return usagef("--timeout %s: want a positive duration", f.timeout)
	}
	return nil
}

// poll calls check every interval until it reports done, returns an error,
// or ctx ends.
func poll(ctx context.Context, interval time.Duration, check func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		done, err := check()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
