package main

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
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

// replicaRow is one replica; its JSON fields are stable. lease_ttl_left is
// in whole seconds, null when the lease is already gone.
type replicaRow struct {
	ID          string    `json:"id"`
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	Version     string    `json:"version"`
	StartedAt   time.Time `json:"started_at"`
	HTTPAddress string    `json:"http_address,omitempty"`
	Draining    bool      `json:"draining"`
	// Reads is whether the replica reads its topics from Kafka; when it
	// does not, Unreadable says why, and it holds no partitions while
	// another reads.
	Reads        bool     `json:"reads_kafka"`
	Unreadable   string   `json:"kafka_unreadable,omitempty"`
	ClaimCount   int      `json:"claim_count"`
	Claims       []string `json:"claims"`
	Lease        string   `json:"lease"`
	LeaseTTLLeft *int64   `json:"lease_ttl_left"`
}

type replicasView struct {
	replicas []replicaRow
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
	snap := s.snap
	now := time.Now()
	claims := map[string][]coordinator.Partition{}
	for p, c := range snap.Claims {
		claims[c.Replica] = append(claims[c.Replica], p)
	}
	v := &replicasView{replicas: []replicaRow{}, now: now}
	ectx, cancel := o.admin.etcdContext(ctx)
	defer cancel()
	for _, m := range snap.Members {
		ps := claims[m.ID]
		slices.SortFunc(ps, coordinator.Partition.Compare)
		names := make([]string, len(ps))
		for i, p := range ps {
			names[i] = p.String()
		}
		r := replicaRow{
			ID: m.ID, Host: m.Host, PID: m.PID, Version: m.Version, StartedAt: m.StartedAt, HTTPAddress: m.HTTPAddr, Draining: m.Draining,
			Reads: m.Reads(), Unreadable: m.Unreadable,
			ClaimCount: len(ps), Claims: names, Lease: strconv.FormatInt(m.Lease, 16),
		}
		ttl, err := s.cli.TimeToLive(ectx, clientv3.LeaseID(m.Lease))
		if err != nil {
			return o.admin.etcdError(err)
		}
		if ttl.TTL >= 0 {
			r.LeaseTTLLeft = ptr(ttl.TTL)
		}
		v.replicas = append(v.replicas, r)
	}
	return o.admin.output.print(cmd.OutOrStdout(), v)
}
