package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/admin"
)

// groupsDeleteOptions is `offsetkeeper groups delete`.
type groupsDeleteOptions struct {
	admin   adminFlags
	execute bool
}

func newGroupsDeleteCommand() *cobra.Command {
	o := &groupsDeleteOptions{}
	cmd := &cobra.Command{
		Use:   "delete",
		Short: "Delete a group whose replicas all stopped: its offsets and every other key",
		Long: `Delete everything etcd keeps of a group: its committed offsets, claims,
blocks in flight and reset records, every key under
/offsetkeeper/v1/groups/<group>/. A group started once (a peek with
--sink stdout:, a test) otherwise stays, with its offsets, for ever.

Without --execute it only says what it would delete (a dry run). It is
refused, exit 2, while any replica of the group is live: stop them first
(their lease ends with them). The deletion is one etcd transaction
conditioned on no replica being registered, so a replica that starts
meanwhile makes it fail rather than lose its offsets.

What it does not touch: the sink's rows and its claim of the destination
(a file directory's .offsetkeeper-groups, a table's claim), and Kafka's
consumer group of the same name that --mirror-offsets writes
(kafka-consumer-groups.sh --delete --group NAME deletes that one).`,
		Example: `  # What would go:
  offsetkeeper groups delete --etcd-endpoints etcd1:2379 --group peek
  GROUP  REPLICAS  OFFSETS  KEYS  DELETED
  peek   0         12       12    no (dry run: add --execute)

  offsetkeeper groups delete --etcd-endpoints etcd1:2379 --group peek --execute`,
		Args: noArgs,
		RunE: runE(o),
	}
	o.admin.register(cmd, etcdOnly)
	cmd.Flags().BoolVar(&o.execute, "execute", false, "delete the keys; without it, only say what would be deleted")
	return cmd
}

func (o *groupsDeleteOptions) complete(*cobra.Command) error { return nil }

func (o *groupsDeleteOptions) validate() error { return o.admin.validate() }

// groupDeleteRow prints what delete found and did.
type groupDeleteRow struct{ admin.GroupDeletion }

func (r groupDeleteRow) columns() []string {
	return []string{"GROUP", "REPLICAS", "OFFSETS", "KEYS", "DELETED"}
}

func (r groupDeleteRow) rows() [][]string {
	deleted := "yes"
	if r.DryRun {
		deleted = "no (dry run: add --execute)"
	}
	return [][]string{{r.Group, strconv.Itoa(r.Replicas), strconv.Itoa(r.Offsets), strconv.FormatInt(r.Keys, 10), deleted}}
}

func (r groupDeleteRow) jsonValue() any { return r.GroupDeletion }

func (o *groupsDeleteOptions) run(ctx context.Context, cmd *cobra.Command) error {
	s, err := o.admin.openGroup(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	ectx, cancel := o.admin.etcdContext(ctx)
	defer cancel()
	d, err := admin.DeleteGroup(ectx, s.cli, s.coord, s.snap, !o.execute)
	if err != nil {
		return o.admin.libraryError(err)
	}
	if err := o.admin.output.print(cmd.OutOrStdout(), groupDeleteRow{d}); err != nil {
		return err
	}
	if d.DryRun && o.admin.output.format != outputJSON {
		fmt.Fprintf(cmd.ErrOrStderr(), "dry run: nothing deleted; add --execute to delete group %q\n", d.Group)
	}
	return nil
}
