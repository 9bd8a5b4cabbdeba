package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

// TestReplicasList runs two replicas and checks every column of the table
// and every field of the JSON against etcd, with the cluster flags taken
// from OFFSETKEEPER_* variables.
func TestReplicasList(t *testing.T) {
	e := newOpsEnv(t, "orders", 4)
	e.startReplica("r1", newRecordingSink())
	e.startReplica("r2", newRecordingSink())
	awaitCond(t, 30*time.Second, "both replicas own two partitions", func() bool {
		n := map[string]int{}
		for _, c := range e.snapshot().Claims {
			n[c.Replica]++
		}
		return n["r1"] == 2 && n["r2"] == 2
	})
	snap := e.snapshot()
	claims := map[string][]string{}
	for _, p := range admin.GroupPartitions(snap) {
		if c, ok := snap.Claims[p]; ok {
			claims[c.Replica] = append(claims[c.Replica], p.String())
		}
	}
	host, _ := os.Hostname()
	t.Setenv("OFFSETKEEPER_ETCD_ENDPOINTS", strings.Join(e.etcd.Endpoints(), ","))
	t.Setenv("OFFSETKEEPER_GROUP", e.group)

	t.Run("table", func(t *testing.T) {
		r := opsRun(t, 30*time.Second, "replicas", "list")
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("%s", r)
		}
		rows := parseTable(t, r.stdout, "ID", "HOST", "PID", "VERSION", "STARTED", "CLAIMS", "LEASE-TTL-LEFT", "KAFKA")
		if len(rows) != 2 || rows[0]["ID"] != snap.Members[0].ID || rows[1]["ID"] != snap.Members[1].ID {
			t.Fatalf("rows %v, want r1 and r2 in join order %s, %s", rows, snap.Members[0].ID, snap.Members[1].ID)
		}
		ttl := regexp.MustCompile(`^[0-2]s$`) // the lease TTL is 2s
		for _, row := range rows {
			id := row["ID"]
			if row["HOST"] != host || row["PID"] != itoa(int64(os.Getpid())) || row["VERSION"] != "test-1.2" {
				t.Errorf("%s: HOST %s PID %s VERSION %s, want %s %d test-1.2", id, row["HOST"], row["PID"], row["VERSION"], host, os.Getpid())
			}
			if !ageRE.MatchString(row["STARTED"]) {
				t.Errorf("%s: STARTED %q, want an age", id, row["STARTED"])
			}
			if want := "2 " + strings.Join(claims[id], ","); row["CLAIMS"] != want {
				t.Errorf("%s: CLAIMS %q, want %q", id, row["CLAIMS"], want)
			}
			if !ttl.MatchString(row["LEASE-TTL-LEFT"]) {
				t.Errorf("%s: LEASE-TTL-LEFT %q, want 0s to 2s", id, row["LEASE-TTL-LEFT"])
			}
			if row["KAFKA"] != "reads" {
				t.Errorf("%s: KAFKA %q, want reads", id, row["KAFKA"])
			}
		}
	})

	t.Run("json", func(t *testing.T) {
		r := opsRun(t, 30*time.Second, "replicas", "list", "-o", "json")
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("%s", r)
		}
		var got []struct {
			ID           string    `json:"id"`
			Host         string    `json:"host"`
			PID          int       `json:"pid"`
			Version      string    `json:"version"`
			StartedAt    time.Time `json:"started_at"`
			HTTPAddress  string    `json:"http_address"`
			Draining     bool      `json:"draining"`
			Reads        bool      `json:"reads_kafka"`
			Unreadable   string    `json:"kafka_unreadable"`
			ClaimCount   int       `json:"claim_count"`
			Claims       []string  `json:"claims"`
			Lease        string    `json:"lease"`
			LeaseTTLLeft *int64    `json:"lease_ttl_left"`
		}
		decodeStrict(t, r.stdout, &got)
		if len(got) != 2 {
			t.Fatalf("%d replicas, want 2", len(got))
		}
		for i, g := range got {
			m := snap.Members[i]
			if g.ID != m.ID || g.Host != host || g.PID != os.Getpid() || g.Version != "test-1.2" || !g.StartedAt.Equal(m.StartedAt) || g.Draining ||
				!g.Reads || g.Unreadable != "" {
				t.Errorf("replica %d: %+v, want member %+v", i, g, m)
			}
			if g.ClaimCount != 2 || strings.Join(g.Claims, ",") != strings.Join(claims[g.ID], ",") {
				t.Errorf("%s: claims %d %v, want 2 %v", g.ID, g.ClaimCount, g.Claims, claims[g.ID])
			}
			if g.Lease != strconv.FormatInt(m.Lease, 16) || g.LeaseTTLLeft == nil || *g.LeaseTTLLeft < 0 || *g.LeaseTTLLeft > 2 {
				t.Errorf("%s: lease %s ttl %v, want %x and 0 to 2", g.ID, g.Lease, g.LeaseTTLLeft, m.Lease)
			}
		}
	})

	t.Run("a group without replicas", func(t *testing.T) {
		other, err := coordinator.New(e.cli, "idle")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := e.ctx()
		defer cancel()
		if _, err := other.ResetOffsets(ctx, e.part(0), 3, coordinator.Offsets{}); err != nil {
			t.Fatal(err)
		}
		r := opsRun(t, 30*time.Second, "replicas", "list", "--group", "idle")
		if r.code != 0 || strings.TrimSpace(r.stdout) != "ID  HOST  PID  VERSION  STARTED  CLAIMS  LEASE-TTL-LEFT  KAFKA" {
			t.Errorf("%s, want only the header", r)
		}
		r = opsRun(t, 30*time.Second, "replicas", "list", "--group", "idle", "-o", "json")
		if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("%s, want []", r)
		}
	})
}
