package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/internal/audit"
)

// testReport is a report with one finding of each kind.
func testReport(t *testing.T) *audit.Report {
	t.Helper()
	held := audit.Offsets(0, 1, 3, 4, 5, 7, 7, 8, 9, 10, 11, 20)
	delivered := audit.Offsets(0, 1, 2, 3, 4, 7, 8, 9)
	b := audit.Bounds{Committed: 10, InFlight: audit.Range{From: 10, Next: 12}, CheckMissing: true}
	p, err := audit.Merge(context.Background(), "orders", 0, b, held, delivered, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &audit.Report{Group: "g", Sink: "file:///data", Capabilities: audit.Capabilities{Missing: true, Duplicates: true},
		Partitions: []audit.Partition{*p}}
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
		"TOPIC   PARTITION  LOG-START  COMMITTED  HELD  MISSING  DUPLICATED  NOT-COMMITTED  ABORTED  UNVERIFIABLE",
		"orders  0          0          10         11    1        1           3              1        0",
		"missing                            1        2",
		"not committed (in flight)          2        [10, 12)",
		"not committed (beyond the commit)  1        20",
		"1 missing, 1 duplicated (1 extra copies), 3 not committed (2 in flight, 1 beyond the commit), 1 aborted",
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
