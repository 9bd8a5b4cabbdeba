package main

import (
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// TestGroupsList lists a running group and one that only keeps offsets.
func TestGroupsList(t *testing.T) {
	e := newOpsEnv(t, "orders", 2)
	e.startReplica("r1", newRecordingSink())
	awaitCond(t, 30*time.Second, "r1 owns both partitions", func() bool { return len(e.snapshot().Claims) == 2 })
	idle, err := coordinator.New(e.cli, "archive")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := e.ctx()
	defer cancel()
	for p := range 3 {
		if _, err := idle.ResetOffsets(ctx, sinks.Partition{Topic: "old", Partition: p}, 7, coordinator.Offsets{}); err != nil {
			t.Fatal(err)
		}
	}
	etcd := []string{"--etcd-endpoints", strings.Join(e.etcd.Endpoints(), ",")}

	r := opsRun(t, 30*time.Second, append([]string{"groups", "list"}, etcd...)...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("%s", r)
	}
	rows := parseTable(t, r.stdout, "GROUP", "REPLICAS", "PARTITIONS")
	want := []map[string]string{
		{"GROUP": "archive", "REPLICAS": "0", "PARTITIONS": "3"},
		{"GROUP": "g", "REPLICAS": "1", "PARTITIONS": "2"},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %v, want %v", rows, want)
	}
	for i := range want {
		for k, v := range want[i] {
			if rows[i][k] != v {
				t.Errorf("row %d %s = %q, want %q", i, k, rows[i][k], v)
			}
		}
	}

	r = opsRun(t, 30*time.Second, append([]string{"groups", "list", "-o", "json"}, etcd...)...)
	var got []struct {
		Group      string `json:"group"`
		Replicas   int    `json:"replicas"`
		Partitions int    `json:"partitions"`
	}
	decodeStrict(t, r.stdout, &got)
	if r.code != 0 || len(got) != 2 || got[0].Group != "archive" || got[0].Replicas != 0 || got[0].Partitions != 3 ||
		got[1].Group != "g" || got[1].Replicas != 1 || got[1].Partitions != 2 {
		t.Errorf("JSON %+v, want archive 0 3 and g 1 2", got)
	}

	// --group narrows the list; the variable works as the flag does.
	t.Setenv("OFFSETKEEPER_GROUP", "archive")
	r = opsRun(t, 30*time.Second, append([]string{"groups", "list", "-o", "json"}, etcd...)...)
	if r.code != 0 || strings.Join(strings.Fields(r.stdout), " ") != `[ { "group": "archive", "replicas": 0, "partitions": 3 } ]` {
		t.Errorf("OFFSETKEEPER_GROUP=archive: %s", r)
	}
}

// TestOperatorHelp checks that every operator command teaches: a Long
// text, examples, the cluster flags and -o.
func TestOperatorHelp(t *testing.T) {
	common := []string{"--etcd-endpoints", "--brokers", "--group", "-o, --output", "table", "json", "Examples:", "--etcd-timeout"}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"groups", "list", "--help"}, []string{"REPLICAS", "PARTITIONS", "offsetkeeper groups list"}},
		{[]string{"offsets", "describe", "--help"}, []string{"list", "LOG-END", "last stable offset", "IN-FLIGHT", "--topics", "--kafka-timeout", "unreachable", "offsetkeeper offsets describe"}},
		{[]string{"offsets", "list", "--help"}, []string{"LAG"}},
		{[]string{"offsets", "reset", "--help"}, []string{
			"--topic", "--all-topics", "--to-earliest", "--to-latest", "--to-current", "--to-offset", "--shift-by", "--to-datetime",
			"--by-duration", "--from-file", "--execute", "--export", "rolls back the block", "clamped", "conflict", "PT1H", "RFC 3339",
			"offsetkeeper offsets reset --group orders --from-file plan.csv --execute",
		}},
		{[]string{"replicas", "list", "--help"}, []string{"LEASE-TTL-LEFT", "CLAIMS", "offsetkeeper replicas list"}},
		{[]string{"audit", "--help"}, []string{"--sink", "--topic", "--kafka-timeout", "MISSING", "DUPLICATED", "NOT-COMMITTED", "in flight",
			"ABORTED", "UNVERIFIABLE", "mode=raw", "mode=upsert", "stdout:, discard:", "cannot be audited", "Exit status: 0 clean", "1 findings", "running group",
			"offsetkeeper audit --group orders"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := opsRun(t, 10*time.Second, tc.args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("%s", r)
			}
			for _, w := range append(common, tc.want...) {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("help does not mention %q:\n%s", w, r.stdout)
				}
			}
		})
	}
	for _, args := range [][]string{{"offsets"}, {"groups"}, {"replicas"}, {"--help"}} {
		r := opsRun(t, 10*time.Second, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Available Commands:") {
			t.Errorf("%v: %s, want the help with its commands", args, r)
		}
	}
}

// TestGroupsDelete: a dry run by default; refused (exit 2) while a replica
// of the group is live, naming it; with --execute every key of the group
// goes, and no other group's.
func TestGroupsDelete(t *testing.T) {
	e := newOpsEnv(t, "orders", 2)
	e.produce("orders", 0, 5, nil)
	r1 := e.startReplica("r1", newRecordingSink())
	e.awaitCommitted(map[sinks.Partition]int64{e.part(0): 5})
	idle, err := coordinator.New(e.cli, "peek")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := e.ctx()
	defer cancel()
	for p := range 3 {
		if _, err := idle.ResetOffsets(ctx, sinks.Partition{Topic: "orders", Partition: p}, 7, coordinator.Offsets{}); err != nil {
			t.Fatal(err)
		}
	}
	etcd := []string{"--etcd-endpoints", strings.Join(e.etcd.Endpoints(), ",")}
	count := func(group string) int64 {
		resp, err := e.cli.Get(ctx, coordinator.KeysFor(group).Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	keysG, keysPeek := count("g"), count("peek")

	r := opsRun(t, 30*time.Second, append([]string{"groups", "delete", "--group", "g", "--execute"}, etcd...)...)
	if r.code != exitUsage || !strings.Contains(r.stderr, `group "g" has 1 live replicas (r1)`) || !strings.Contains(r.stderr, "stop them first") {
		t.Fatalf("delete of a live group: %s", r)
	}
	if n := count("g"); n != keysG {
		t.Errorf("the live group has %d keys after a refused delete, had %d", n, keysG)
	}

	r = opsRun(t, 30*time.Second, append([]string{"groups", "delete", "--group", "peek"}, etcd...)...)
	if r.code != 0 || !strings.Contains(r.stderr, "dry run: nothing deleted; add --execute") {
		t.Fatalf("dry run: %s", r)
	}
	rows := parseTable(t, r.stdout, "GROUP", "REPLICAS", "OFFSETS", "KEYS", "DELETED")
	if len(rows) != 1 || rows[0]["OFFSETS"] != "3" || rows[0]["KEYS"] != itoa(keysPeek) || !strings.HasPrefix(rows[0]["DELETED"], "no") {
		t.Errorf("dry run rows %v, want 3 offsets, %d keys, not deleted", rows, keysPeek)
	}
	if n := count("peek"); n != keysPeek {
		t.Fatalf("the dry run deleted: %d keys left of %d", n, keysPeek)
	}

	r = opsRun(t, 30*time.Second, append([]string{"groups", "delete", "--group", "peek", "--execute", "-o", "json"}, etcd...)...)
	var got struct {
		Group    string `json:"group"`
		Replicas int    `json:"replicas"`
		Offsets  int    `json:"offsets"`
		Keys     int64  `json:"keys"`
		Deleted  bool   `json:"deleted"`
		DryRun   bool   `json:"dry_run"`
	}
	decodeStrict(t, r.stdout, &got)
	if r.code != 0 || !got.Deleted || got.DryRun || got.Keys != keysPeek || got.Offsets != 3 {
		t.Fatalf("delete --execute: %s %+v", r, got)
	}
	if n := count("peek"); n != 0 {
		t.Errorf("%d keys of peek left", n)
	}
	if n := count("g"); n != keysG {
		t.Errorf("deleting peek changed g: %d keys, had %d", n, keysG)
	}

	// Once its replica stopped, the group can go.
	r1.stop()
	awaitCond(t, 30*time.Second, "r1 to leave", func() bool { return len(e.snapshot().Members) == 0 })
	r = opsRun(t, 30*time.Second, append([]string{"groups", "delete", "--group", "g", "--execute"}, etcd...)...)
	if r.code != 0 || count("g") != 0 {
		t.Fatalf("delete of a stopped group: %s; %d keys left", r, count("g"))
	}
}
