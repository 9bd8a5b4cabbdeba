package main

import (
	"context"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

func newGroupsCommand() *cobra.Command {
	cmd := groupCommand(&cobra.Command{
		Use:   "groups",
		Short: "Inspect the groups (pipelines) kept in etcd",
		Long: `A group is one pipeline: a set of topics, a sink and the replicas that run
it. Its state lives in etcd under /offsetkeeper/v1/groups/<group>/.`,
	})
	cmd.AddCommand(newGroupsListCommand(), newGroupsDeleteCommand())
	return cmd
}

// groupsListOptions is `offsetkeeper groups list`.
type groupsListOptions struct {
	admin adminFlags
}

func newGroupsListCommand() *cobra.Command {
	o := &groupsListOptions{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the groups found in etcd, with replica and partition counts",
		Long: `List every group that has a key in etcd below /offsetkeeper/v1/groups/.

REPLICAS counts the live members (replicas whose lease is alive); PARTITIONS
counts the partitions with a committed offset or a claim. A group whose
replicas all stopped still shows, with 0 replicas, as long as its offsets
are kept. With --group only that group is listed.`,
		Example: `  offsetkeeper groups list --etcd-endpoints etcd1:2379
  GROUP   REPLICAS  PARTITIONS
  orders  3         12

  # For scripts:
  offsetkeeper groups list -o json | jq -r '.[] | select(.replicas == 0) | .group'`,
		Args: noArgs,
		RunE: runE(o),
	}
	o.admin.register(cmd, etcdOnly)
	o.admin.needGroup = false
	return cmd
}

func (o *groupsListOptions) complete(*cobra.Command) error { return nil }

func (o *groupsListOptions) validate() error { return o.admin.validate() }

type groupsView []admin.GroupSummary

func (v groupsView) columns() []string { return []string{"GROUP", "REPLICAS", "PARTITIONS"} }

func (v groupsView) rows() [][]string {
	out := make([][]string, len(v))
	for i, g := range v {
		out[i] = []string{g.Group, strconv.Itoa(g.Replicas), strconv.Itoa(g.Partitions)}
	}
	return out
}

func (v groupsView) jsonValue() any { return []admin.GroupSummary(v) }

func (o *groupsListOptions) run(ctx context.Context, cmd *cobra.Command) error {
	s, err := o.admin.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	cli := s.cli
	ectx, cancel := o.admin.etcdContext(ctx)
	defer cancel()
	groups, err := coordinator.Groups(ectx, cli)
	if err != nil {
		return o.admin.etcdError(err)
	}
	if g := o.admin.cluster.group; g != "" {
		found := false
		for _, name := range groups {
			found = found || name == g
		}
		if !found {
			return unknownGroup(g, groups)
		}
		groups = []string{g}
	}
	v, err := admin.Groups(ectx, cli, groups)
	if err != nil {
		return o.admin.etcdError(err)
	}
	return o.admin.output.print(cmd.OutOrStdout(), groupsView(v))
}
