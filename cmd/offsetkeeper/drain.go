package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/admin"
)

// drainOptions is `offsetkeeper replicas drain`.
type drainOptions struct {
	admin   adminFlags
	id      string
	undo    bool
	force   bool
	waiting waitFlags
}

func newReplicasDrainCommand() *cobra.Command {
	o := &drainOptions{}
	cmd := &cobra.Command{
		Use:   "drain REPLICA-ID",
		Short: "Move every partition away from a replica before maintenance",
		Long: `Mark a replica as draining: the plan gives it no partitions, so it finishes
each block it is writing, commits it and releases the claim, and the other
replicas take the partitions over from the committed offsets: nothing is
lost or written twice. The replica keeps running and stays a member; stop it
when it owns nothing (with --wait, the default, this command returns then).
The mark lives in the replica's member key: a restarted replica is not
draining. --undo clears the mark and the replica gets its share back.

Draining the group's last replica that is not draining is refused (exit 2):
nobody would read its partitions. --force drains it all the same.`,
		Example: `  offsetkeeper replicas drain --group orders host-a-4242
  offsetkeeper replicas drain --group orders host-a-4242 --undo`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("replicas drain takes one replica ID (see 'offsetkeeper replicas list'), got %d arguments", len(args))
			}
			return nil
		},
		RunE: runE(o),
	}
	o.admin.register(cmd, etcdOnly)
	fs := cmd.Flags()
	fs.BoolVar(&o.undo, "undo", false, "clear the draining mark")
	fs.BoolVar(&o.force, "force", false, "drain the group's last replica that is not draining: its partitions are then read by nobody until another replica joins")
	o.waiting.register(cmd, "wait until the replica owns no partition", 2*time.Minute)
	return cmd
}

// complete reads the replica ID argument.
func (o *drainOptions) complete(cmd *cobra.Command) error {
	o.id = cmd.Flags().Arg(0)
	return nil
}

func (o *drainOptions) validate() error {
	if err := o.admin.validate(); err != nil {
		return err
	}
	return o.waiting.validate()
}

func (o *drainOptions) run(ctx context.Context, cmd *cobra.Command) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	s, err := o.admin.openGroup(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	rctx, cancel := o.admin.etcdContext(ctx)
	defer cancel()
	if err := admin.Drain(rctx, s.coord, o.id, o.undo, o.force); err != nil {
		return o.admin.libraryError(err)
	}
	owned := -1
	if o.waiting.wait && !o.undo {
		wctx, cancel := context.WithTimeout(ctx, o.waiting.timeout)
		defer cancel()
		owned, err = admin.AwaitDrained(wctx, s.coord, o.id, func(n int) { fmt.Fprintf(stderr, "%s: %d partitions left\n", o.id, n) })
		if err != nil {
			return fmt.Errorf("drain %s: still owns %d partitions after --timeout %s", o.id, owned, o.waiting.timeout)
		}
	}
	return o.admin.output.print(stdout, drainState{Replica: o.id, Draining: !o.undo, Partitions: max(owned, 0), Waited: o.waiting.wait && !o.undo})
}

// drainState is what `replicas drain` reports. partitions is what the
// replica owned when the command stopped waiting (0 without --wait).
type drainState struct {
	Replica    string `json:"replica"`
	Draining   bool   `json:"draining"`
	Partitions int    `json:"partitions"`
	Waited     bool   `json:"waited"`
}

func (d drainState) columns() []string { return []string{"REPLICA", "DRAINING", "PARTITIONS"} }

func (d drainState) rows() [][]string {
	parts := strconv.Itoa(d.Partitions)
	if !d.Waited {
		parts = dash
	}
	return [][]string{{d.Replica, strconv.FormatBool(d.Draining), parts}}
}

func (d drainState) jsonValue() any { return d }
