package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/admin"
)

func newReplicasCommand() *cobra.Command {
	cmd := groupCommand(&cobra.Command{
		Use:   "replicas",
		Short: "Inspect the replicas of a group",
		Long: `A replica is one running instance of a group. It is a member while its etcd
lease is alive: /offsetkeeper/v1/groups/<group>/members/<id>, bound to the
lease, and each partition it consumes is a claim bound to the same lease.`,
	})
	cmd.AddCommand(newReplicasListCommand(), newReplicasDrainCommand())
	return cmd
}

// replicasListOptions is `offsetkeeper replicas list`.
type replicasListOptions struct {
	admin adminFlags
}

func newReplicasListCommand() *cobra.Command {
	o := &replicasListOptions{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a group's live replicas, their claims and how long their leases have left",
		Long: `List the live replicas of a group, in the order they joined:

  ID              the replica ID (--replica-id of run; host-pid by default)
  HOST, PID       where it runs
  VERSION         the offsetkeeper version it runs
  STARTED         how long ago it joined
  CLAIMS          how many partitions it holds, and which (topic/partition)
  LEASE-TTL-LEFT  seconds until etcd expires its lease unless renewed; a
                  healthy replica renews every third of the TTL, so this
                  stays near the TTL. A replica that is cut off or stopped
                  counts down to 0, then its claims go to the others.

Claims whose replica is not listed belong to a lease being revoked: they
show in 'offsets describe' until it is gone.`,
		Example: `  offsetkeeper replicas list --etcd-endpoints etcd1:2379 --group orders
  ID  HOST   PID   VERSION  STARTED  CLAIMS               LEASE-TTL-LEFT
  r1  node1  4242  1.4.0    3h       2 orders/0,orders/2  9s
  r2  node2  4310  1.4.0    12m      2 orders/1,orders/3  10s

  offsetkeeper replicas list --group orders -o json | jq -r '.[] | "\(.id) \(.claims | length)"'`,
		Args: noArgs,
		RunE: runE(o),
	}
	o.admin.register(cmd, etcdOnly)
	return cmd
}

func (o *replicasListOptions) complete(*cobra.Command) error { return nil }

func (o *replicasListOptions) validate() error { return o.admin.validate() }

type replicasView struct {
	replicas []admin.ReplicaState
	now      time.Time
}

func (v *replicasView) columns() []string {
	return []string{"ID", "HOST", "PID", "VERSION", "STARTED", "CLAIMS", "LEASE-TTL-LEFT", "KAFKA"}
}

func (v *replicasView) rows() [][]string {
	out := make([][]string, len(v.replicas))
	for i, r := range v.replicas {
		claims := strconv.Itoa(r.ClaimCount)
		if len(r.Claims) > 0 {
			claims += " " + strings.Join(r.Claims, ",")
		}
		ttl := dash
		if r.LeaseTTLLeft != nil {
			ttl = strconv.FormatInt(*r.LeaseTTLLeft, 10) + "s"
		}
		kafka := "reads"
		if !r.Reads {
			kafka = "cannot read: " + r.Unreadable
		}
		if r.Draining {
			claims += " (draining)"
		}
		out[i] = []string{r.ID, strCell(r.Host), strconv.Itoa(r.PID), strCell(r.Version), age(v.now, r.StartedAt), claims, ttl, kafka}
	}
	return out
}

func (v *replicasView) jsonValue() any { return v.replicas }

func (o *replicasListOptions) run(ctx context.Context, cmd *cobra.Command) error {
	s, err := o.admin.openGroup(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	now := time.Now()
	ectx, cancel := o.admin.etcdContext(ctx)
	defer cancel()
	rs, err := admin.Replicas(ectx, s.cli, s.snap)
	if err != nil {
		return o.admin.etcdError(err)
	}
	return o.admin.output.print(cmd.OutOrStdout(), &replicasView{replicas: rs, now: now})
}
