package integration_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// cli runs the offsetkeeper command against the env and returns its exit
// code and standard output (the process's combined output).
func (e *env) cli(args ...string) (int, string) {
	e.t.Helper()
	all := append(args,
		"--etcd-endpoints", strings.Join(e.etcd.Endpoints(), ","),
		"--brokers", strings.Join(e.kafka.Brokers(), ","),
		"--group", e.group)
	p := harness.StartProcess(e.t, "cli "+strings.Join(args, " "), bin, all...)
	code := p.Wait(60 * time.Second)
	return code, p.Output()
}

func TestClaimsReleaseUnderLoadLosesAndDuplicatesNothing(t *testing.T) {
	e := newEnv(t, "orders", 4)
	e.leaseTTL = loadLeaseTTL
	sink, l := e.startEven(3000, "a", "b")
	await(t, 10*time.Second, "records flowing", func() bool { return len(e.committed()) == 4 })

	var part int
	for p, owner := range e.claimMap() {
		if owner == "a" {
			part = p
			break
		}
	}
	var h struct {
		From      string `json:"from"`
		FromEpoch int64  `json:"from_epoch"`
		To        string `json:"to"`
		ToEpoch   int64  `json:"to_epoch"`
		Done      bool   `json:"done"`
	}
	e.cliJSON(&h, "claims", "release", "--topic", "orders", "--partition", itoa(part))
	if !h.Done || h.From != "a" || h.ToEpoch <= h.FromEpoch {
		t.Fatalf("handover %+v, want a's claim replaced by a newer one", h)
	}
	// The plan is sticky and balanced: a gets its partition back.
	if h.To != "a" {
		t.Errorf("partition %d went to %s, want the planned owner a", part, h.To)
	}
	produced := l.stop(t)
	await(t, 30*time.Second, "everything committed", func() bool { return e.allCommitted(produced) })
	sink.exactlyOnce(t, produced)
}

func TestReleaseOfUnclaimedPartitionIsUsageError(t *testing.T) {
	e := newEnv(t, "orders", 1)
	e.produce(1)
	sink := newCountingSink()
	rn := e.start(e.config("a"), sink)
	await(t, 20*time.Second, "committed", func() bool { return e.allCommitted(perPartition(1, 1)) })
	code, out := e.cli("claims", "release", "--topic", "orders", "--partition", "7")
	if code != 2 || !strings.Contains(out, "orders/7") {
		t.Fatalf("release of an unclaimed partition: exit %d, %q; want 2 naming orders/7", code, out)
	}
	rn.stop()
}

// cliJSON runs the CLI with args and -o json, fails the test unless it
// exits 0, and decodes the JSON object it printed into v.
func (e *env) cliJSON(v any, args ...string) {
	e.t.Helper()
	code, out := e.cli(append(args, "-o", "json")...)
	if code != 0 {
		e.t.Fatalf("%s exited %d: %s", strings.Join(args[:2], " "), code, out)
	}
	if err := json.Unmarshal([]byte(jsonOf(out)), v); err != nil {
		e.t.Fatalf("output %q: %v", out, err)
	}
}

// jsonOf is the JSON object a command printed (from its first "{").
func jsonOf(s string) string {
	if i := strings.Index(s, "{"); i >= 0 {
		return s[i:]
	}
	return s
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestResetOfIdlePartitionRedeliversWithoutNewRecords(t *testing.T) {
	e := newEnv(t, "orders", 1)
	e.produce(100)
	sink := newCountingSink()
	rn := e.start(e.config("a"), sink)
	await(t, 20*time.Second, "first delivery", func() bool { return e.allCommitted(perPartition(1, 100)) })

	ctx := t.Context()
	p := coordinatorPartition("orders", 0)
	snap, err := e.coord.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.coord.ResetOffsets(ctx, p, 0, snap.Offsets[p]); err != nil {
		t.Fatal(err)
	}
	// Nothing new is produced: the idle owner must notice the reset by
	// itself and deliver everything again.
	await(t, 20*time.Second, "every offset delivered twice", func() bool { return sink.total.Load() == 200 })
	await(t, 20*time.Second, "the offset back at the log end", func() bool { return e.allCommitted(perPartition(1, 100)) })
	if n := rn.r.Stats().Sessions; n != 1 {
		t.Fatalf("%d sessions: the replica restarted, want the reset applied live", n)
	}
}

func TestReplicasDrainUnderLoadLosesAndDuplicatesNothing(t *testing.T) {
	e := newEnv(t, "orders", 6)
	e.leaseTTL = loadLeaseTTL
	sink, l := e.startEven(3000, "a", "b", "c")
	await(t, 10*time.Second, "records flowing", func() bool { return len(e.committed()) == 6 })

	var d struct {
		Replica    string `json:"replica"`
		Draining   bool   `json:"draining"`
		Partitions int    `json:"partitions"`
	}
	e.cliJSON(&d, "replicas", "drain", "a")
	if d.Replica != "a" || !d.Draining || d.Partitions != 0 {
		t.Fatalf("drain reported %+v, want a draining with no partition", d)
	}
	await(t, 20*time.Second, "b and c to own everything", func() bool { return balanced(e.owners(), map[string]int{"b": 3, "c": 3}) })

	if code, out := e.cli("replicas", "drain", "a", "--undo"); code != 0 {
		t.Fatalf("drain --undo exited %d: %s", code, out)
	}
	await(t, 20*time.Second, "a to get its share back", func() bool { return balanced(e.owners(), map[string]int{"a": 2, "b": 2, "c": 2}) })
	produced := l.stop(t)
	await(t, 30*time.Second, "everything committed", func() bool { return e.allCommitted(produced) })
	sink.exactlyOnce(t, produced)

	if code, out := e.cli("replicas", "drain", "nobody"); code != 2 || !strings.Contains(out, `"nobody"`) {
		t.Fatalf("drain of an unknown replica: exit %d, %q; want 2 naming it", code, out)
	}

	// The last replica that is not draining: refused, unless forced.
	for _, id := range []string{"a", "b"} {
		if code, out := e.cli("replicas", "drain", id, "--wait=false"); code != 0 {
			t.Fatalf("drain %s exited %d: %s", id, code, out)
		}
	}
	if code, out := e.cli("replicas", "drain", "c", "--wait=false"); code != 2 || !strings.Contains(out, "last member") || !strings.Contains(out, "--force") {
		t.Fatalf("drain of the last reading replica: exit %d, %q; want 2, naming --force", code, out)
	}
	ms, err := e.coord.Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == "c" && m.Draining {
			t.Fatal("c marked draining by a refused drain")
		}
	}
	if code, out := e.cli("replicas", "drain", "c", "--wait=false", "--force"); code != 0 {
		t.Fatalf("drain --force of the last reading replica exited %d: %s", code, out)
	}
}
