package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/audit"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// testReport is a report with one finding of each kind.
func testReport(t *testing.T) *audit.Report {
	t.Helper()
	held := sinks.Offsets(0, 1, 3, 4, 5, 7, 7, 8, 9, 10, 11, 20)
	delivered := sinks.Offsets(0, 1, 2, 3, 4, 7, 8, 9)
	b := audit.Bounds{Committed: 10, InFlight: audit.Range{From: 10, Next: 12}, CheckMissing: true}
	p, err := audit.Merge(context.Background(), "orders", 0, b, held, delivered, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &audit.Report{Group: "g", Sink: "file:///data", Capabilities: sinks.Capabilities{Missing: true, Duplicates: true, RecordsNote: "offsets only here"},
		Partitions: []audit.Partition{*p}}
}

// TestAuditViewMismatched: records held at the right offsets but not
// Kafka's are a finding of their own, listed and counted, and the summary
// says how many records were compared.
func TestAuditViewMismatched(t *testing.T) {
	rec := func(off int64, v string) sinks.Record {
		return sinks.Record{Offset: off, Value: []byte(v), Time: time.UnixMilli(off)}
	}
	delivered := []sinks.Record{rec(0, "a"), rec(1, "b"), rec(2, "c"), rec(3, "d")}
	held := []sinks.Record{rec(0, "a"), rec(1, "another run's"), rec(2, "another run's"), rec(3, "d")}
	p, err := audit.Merge(context.Background(), "orders", 0, audit.Bounds{Committed: 4, CheckMissing: true},
		sinks.Records(held...), sinks.Records(delivered...), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep := &audit.Report{Group: "g", Sink: "postgres://db?table=t", Capabilities: sinks.Capabilities{Missing: true, Duplicates: true, Records: true},
		Partitions: []audit.Partition{*p}}
	v := &auditView{rep: rep}
	var buf bytes.Buffer
	if err := (outputFlag{format: outputTable}).print(&buf, v); err != nil {
		t.Fatal(err)
	}
	if err := v.printFindings(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, w := range []string{
		"orders  0          0          4          4     0        0           2           0              0        0",
		"orders  0          mismatched  2        [1, 3)",
		"2 mismatched (held, but not the record Kafka holds there); 4 records compared with Kafka's (key, value, timestamp)",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("table lacks %q:\n%s", w, out)
		}
	}
	if rep.Clean() {
		t.Error("a report with mismatched records is clean")
	}

	p, err = audit.Merge(context.Background(), "orders", 0, audit.Bounds{Committed: 4, CheckMissing: true},
		sinks.Records(delivered...), sinks.Records(delivered...), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	clean := &auditView{rep: &audit.Report{Capabilities: rep.Capabilities, Partitions: []audit.Partition{*p}}}
	if got, want := clean.rep.Summary(), "clean: 1 partitions; 4 records compared with Kafka's (key, value, timestamp)"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

func TestAuditViewTable(t *testing.T) {
	v := &auditView{rep: testReport(t)}
	var buf bytes.Buffer
	if err := (outputFlag{format: outputTable}).print(&buf, v); err != nil {
		t.Fatal(err)
	}
	if err := v.printFindings(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, w := range []string{
		"TOPIC   PARTITION  LOG-START  COMMITTED  HELD  MISSING  DUPLICATED  MISMATCHED  NOT-COMMITTED  ABORTED  UNVERIFIABLE",
		"orders  0          0          10         11    1        1           n/a         3              1        0",
		"missing                            1        2",
		"not committed (in flight)          2        [10, 12)",
		"not committed (beyond the commit)  1        20",
		"1 missing, 1 duplicated (1 extra copies), 3 not committed (2 in flight, 1 beyond the commit), 1 aborted; records not compared, only their offsets: offsets only here",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("table lacks %q:\n%s", w, out)
		}
	}
}

func TestAuditViewJSON(t *testing.T) {
	v := &auditView{rep: testReport(t)}
	var buf bytes.Buffer
	if err := (outputFlag{format: outputJSON}).print(&buf, v); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Clean      bool `json:"clean"`
		Partitions []struct {
			Missing struct {
				Count  int64 `json:"count"`
				Ranges []struct {
					From int64 `json:"from"`
					Next int64 `json:"next"`
				} `json:"ranges"`
			} `json:"missing"`
			ExtraCopies int64 `json:"extra_copies"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, buf.String())
	}
	if got.Clean || len(got.Partitions) != 1 || got.Partitions[0].Missing.Count != 1 ||
		got.Partitions[0].Missing.Ranges[0].From != 2 || got.Partitions[0].ExtraCopies != 1 {
		t.Errorf("JSON %s", buf.String())
	}
}

// TestAuditKafkaTimeoutNamesBrokersAndFlags: a broker address that takes
// connections and never answers (a wrong port, a paused broker) ends the
// audit after --kafka-timeout with an error that names the brokers asked
// and the flags that set them and the wait, not a bare deadline.
func TestAuditKafkaTimeoutNamesBrokersAndFlags(t *testing.T) {
	etcd := harness.StartEtcd(t, 1)
	cli := etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	coord, err := coordinator.New(cli, "g")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := json.Marshal(coordinator.Offsets{Next: 1, Epoch: 1, Replica: "seed", At: time.Now().UTC()})
	if _, err := cli.Put(ctx, coord.Keys().Offsets(sinks.Partition{Topic: "orders", Partition: 0}), string(v)); err != nil {
		t.Fatal(err)
	}
	silent := harness.Blackhole(t)
	start := time.Now()
	r := runCLI(t, 30*time.Second, "audit", "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--brokers", silent,
		"--group", "g", "--sink", "file://"+t.TempDir(), "--kafka-timeout", "1s")
	if r.code != exitError {
		t.Fatalf("exit %d, want 1\nstderr:\n%s", r.code, r.stderr)
	}
	for _, w := range []string{"brokers " + silent, "within 1s", "--brokers", "OFFSETKEEPER_BROKERS", "--kafka-timeout"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("error lacks %q: %s", w, r.stderr)
		}
	}
	t.Logf("after %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(r.stderr))
}
