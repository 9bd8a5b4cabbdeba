package dev

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/audit"
)

func TestParseFaults(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"all", allFaults},
		{"kill", []string{FaultKill}},
		// The menu's order, once each, whatever was written.
		{"drain, kill,drain", []string{FaultKill, FaultDrain}},
		{"reset,all", allFaults},
	} {
		got, err := ParseFaults(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseFaults(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestVerdictFailure(t *testing.T) {
	var v Verdict
	v.note("t", 0, 0, 1)
	v.note("t", 0, 1, 2)
	v.note("t", 1, 0, 3)
	if got := v.failure(false); got != "" {
		t.Errorf("duplicates in a file sink: failure %q, want none", got)
	}
	if got, want := v.failure(true), "3 duplicates in a sink that must have none, the first t/0 at offset 1 (2 copies)"; got != want {
		t.Errorf("duplicates in postgres: failure %q, want %q", got, want)
	}
	v.note("t", 1, 7, 0)
	v.note("t", 2, 3, 0)
	if got, want := v.failure(false), "2 records lost, the first t/1 at offset 7"; got != want {
		t.Errorf("lost: failure %q, want %q", got, want)
	}

	// Without losses: records not Kafka's come first, then dead letters.
	w := Verdict{Delivered: 10, Compared: 10, Mismatched: 2, firstMismatch: "t/0 at offset 4", DeadLetters: 3, deadWhere: " dl"}
	if got, want := w.failure(false), "2 records in the sink are not the ones Kafka holds at their offsets (another run's, or of another topic of the same name), the first t/0 at offset 4"; got != want {
		t.Errorf("mismatched: failure %q, want %q", got, want)
	}
	w.Mismatched = 0
	if got, want := w.failure(false), "3 records went to the dead-letter table dl: the sink refused them, though each is a JSON object"; got != want {
		t.Errorf("dead letters: failure %q, want %q", got, want)
	}
	if got, want := w.line(10), "produced=10 delivered=10 lost=0 duplicates=0 mismatched=0 dead_letters=3"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	w.Compared = 0
	if got, want := w.line(10), "produced=10 delivered=10 lost=0 duplicates=0 mismatched=n/a dead_letters=3"; got != want {
		t.Errorf("line with nothing compared %q, want %q", got, want)
	}
}

func TestReportFailure(t *testing.T) {
	var b bytes.Buffer
	reportFailure(&b, "1 records lost, the first t/1 at offset 7", 42, []string{"1.0s kill dev-1", "2.0s leader etcd member 0 for 2s"})
	want := "FAILED:  1 records lost, the first t/1 at offset 7\nseed:    42 (--seed 42 repeats the order of the faults)\n" +
		"faults in order:\n  1.0s kill dev-1\n  2.0s leader etcd member 0 for 2s\n"
	if b.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestAuditVerdict: dev's verdict line counts what the audit found: its
// missing records, extra copies and records not Kafka's, and records
// produced past a partition's committed offset as lost; it names the first
// of each.
func TestAuditVerdict(t *testing.T) {
	rep := &audit.Report{Partitions: []audit.Partition{
		{Topic: "events", Partition: 0, Committed: 100, Delivered: 100, Compared: 100},
		{Topic: "events", Partition: 1, Committed: 100, Delivered: 100, Compared: 97,
			Missing:    audit.Ranges{Count: 3, Ranges: []audit.Range{{From: 7, Next: 10}}},
			Duplicated: audit.Ranges{Count: 2, Ranges: []audit.Range{{From: 20, Next: 22}}}, Copies: 2,
			Mismatched: audit.Ranges{Count: 5, Ranges: []audit.Range{{From: 30, Next: 35}}}},
		{Topic: "events", Partition: 2, Committed: 90, Delivered: 90, Compared: 90},
	}}
	v := auditVerdict(rep, map[int]int64{0: 100, 1: 100, 2: 100})
	if v.Lost != 13 || v.Duplicates != 2 || v.Delivered != 287 || v.Compared != 287 || v.Mismatched != 5 {
		t.Fatalf("lost %d, duplicates %d, delivered %d, compared %d, mismatched %d: want 13, 2, 287, 287, 5",
			v.Lost, v.Duplicates, v.Delivered, v.Compared, v.Mismatched)
	}
	if v.firstLost != "events/1 at offset 7" || v.firstDuplicate != "events/1 at offset 20" || v.firstMismatch != "events/1 at offset 30" {
		t.Fatalf("first lost %q, first duplicate %q, first mismatch %q", v.firstLost, v.firstDuplicate, v.firstMismatch)
	}
	clean := auditVerdict(&audit.Report{Partitions: rep.Partitions[:1]}, map[int]int64{0: 100})
	if clean.Lost != 0 || clean.Duplicates != 0 || clean.failure(true) != "" {
		t.Fatalf("a clean report gives %+v", clean)
	}
}

// TestDevExpect: a replica's warnings and errors while a fault dev
// injected touches it, and for the settling time after it is undone, are
// logged at INFO naming the fault, and counted as expected; the others
// keep their level and are counted as not. A window on every replica (the
// etcd leader's crash) covers them all.
func TestDevExpect(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	e := newExpect(time.Hour)
	base := zap.New(core)
	a, b := e.logger(base, "dev-1").With(zap.String("replica", "dev-1")), e.logger(base, "dev-2")

	a.Warn("before")
	end := e.begin("dev-1", "zombie dev-1")
	a.Warn("during")
	a.Error("during, an error")
	a.Info("info stays info")
	b.Warn("another replica")
	end()
	a.Warn("settling")
	endAll := e.begin(everyReplica, "leader (etcd member 0)")
	b.Warn("every replica")
	endAll()

	type line struct {
		msg, level, expected string
	}
	var got []line
	for _, en := range logs.All() {
		exp, _ := en.ContextMap()["expected"].(string)
		got = append(got, line{en.Message, en.Level.String(), exp})
	}
	want := []line{
		{"before", "warn", ""},
		{"during", "info", "zombie dev-1"},
		{"during, an error", "info", "zombie dev-1"},
		{"info stays info", "info", ""},
		{"another replica", "warn", ""},
		{"settling", "info", "zombie dev-1"},
		{"every replica", "info", "leader (etcd member 0)"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("logged:\n%v\nwant:\n%v", got, want)
	}
	if e.expected.Load() != 4 || e.unexpected.Load() != 2 {
		t.Fatalf("expected %d, unexpected %d; want 4, 2", e.expected.Load(), e.unexpected.Load())
	}

	// Once the settling is over, a warning is a warning again.
	short := newExpect(0)
	c := short.logger(base, "dev-3")
	short.begin("dev-3", "kill dev-3")()
	c.Warn("after")
	if en := logs.All()[len(logs.All())-1]; en.Message != "after" || en.Level != zap.WarnLevel {
		t.Fatalf("after the window: %s at %s, want a warning", en.Message, en.Level)
	}
	var none *expect
	none.begin("dev-1", "kill")() // no chaos: nothing to tell
}
