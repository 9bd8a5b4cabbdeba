package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// resetEnv is a group that no replica runs, over topic orders of three
// partitions of 20 records each, record i written at base + i minutes.
// Partition 2's log starts at 5 (records before it deleted). Baseline:
// orders/0 committed 10, orders/1 committed 15, orders/2 nothing.
type resetEnv struct {
	*opsEnv
	base time.Time
}

func newResetEnv(t *testing.T) *resetEnv {
	t.Helper()
	e := &resetEnv{opsEnv: newOpsEnv(t, "orders", 3), base: time.Now().Add(-20 * time.Minute).Truncate(time.Millisecond)}
	for p := range e.parts {
		e.produce(e.topic, p, 20, func(i int) time.Time { return e.base.Add(time.Duration(i) * time.Minute) })
	}
	e.kafka.DeleteRecords(t, e.topic, 2, 5)
	e.baseline()
	return e
}

func (e *resetEnv) baseline() {
	e.t.Helper()
	e.commit(e.part(0), 10)
	e.commit(e.part(1), 15)
	e.uncommit(e.part(2))
}

// planRowJSON mirrors a row of reset's JSON output.
type planRowJSON struct {
	Topic      string `json:"topic"`
	Partition  int    `json:"partition"`
	Current    *int64 `json:"current"`
	New        int64  `json:"new"`
	LogStart   int64  `json:"log_start"`
	LogEnd     int64  `json:"log_end"`
	Status     string `json:"status"`
	Generation *int64 `json:"generation"`
	Error      string `json:"error"`
}

type planJSON struct {
	Group      string        `json:"group"`
	Executed   bool          `json:"executed"`
	Partitions []planRowJSON `json:"partitions"`
}

// TestOffsetsReset runs every target and scope as a dry run (the plan
// printed, etcd unchanged) and executed (etcd holds the plan, generation
// bumped, other partitions untouched), from the same baseline each time.
func TestOffsetsReset(t *testing.T) {
	e := newResetEnv(t)
	// A duration back to between record 10 (at -10m) and 9 (at -11m)
	// whatever the seconds between the test's clock and the command's.
	minutesAgo := func(i int) time.Time { return e.base.Add(time.Duration(i) * time.Minute) }

	type want map[int]int64 // partition → new offset; absent: not in the plan
	tests := []struct {
		name     string
		args     []string
		want     want
		warnings []string // each a line of stderr
	}{
		{"to-earliest", []string{"--topic", "orders", "--to-earliest"}, want{0: 0, 1: 0, 2: 5}, nil},
		{"to-latest", []string{"--topic", "orders", "--to-latest"}, want{0: 20, 1: 20, 2: 20}, nil},
		{"to-current", []string{"--topic", "orders", "--to-current"}, want{0: 10, 1: 15},
			[]string{"warning: orders/2 has no committed offset: left out of --to-current"}},
		{"to-offset", []string{"--topic", "orders", "--to-offset", "12"}, want{0: 12, 1: 12, 2: 12}, nil},
		{"to-offset clamped to the log start", []string{"--topic", "orders", "--to-offset", "3"}, want{0: 3, 1: 3, 2: 5},
			[]string{"warning: orders/2: offset 3 is before the log start 5; using 5"}},
		{"to-offset clamped to the log end", []string{"--topic", "orders:0,1", "--to-offset", "100"}, want{0: 20, 1: 20},
			[]string{"warning: orders/0: offset 100 is past the log end 20; using 20", "warning: orders/1: offset 100 is past the log end 20; using 20"}},
		{"shift-by back", []string{"--topic", "orders", "--shift-by", "-3"}, want{0: 7, 1: 12},
			[]string{"warning: orders/2 has no committed offset: left out of --shift-by"}},
		{"shift-by back clamped", []string{"--topic", "orders:0,1", "--shift-by=-12"}, want{0: 0, 1: 3},
			[]string{"warning: orders/0: offset -2 is before the log start 0; using 0"}},
		{"shift-by forward clamped", []string{"--topic", "orders:0,1", "--shift-by", "+7"}, want{0: 17, 1: 20},
			[]string{"warning: orders/1: offset 22 is past the log end 20; using 20"}},
		{"to-datetime", []string{"--topic", "orders", "--to-datetime", minutesAgo(7).Add(30 * time.Second).Format(time.RFC3339Nano)},
			want{0: 8, 1: 8, 2: 8}, nil},
		{"to-datetime with a zone", []string{"--topic", "orders:1", "--to-datetime", minutesAgo(3).In(time.FixedZone("X", 5*3600)).Format(time.RFC3339Nano)},
			want{1: 3}, nil},
		{"to-datetime before the first record", []string{"--topic", "orders", "--to-datetime", "2001-01-01T00:00:00Z"}, want{0: 0, 1: 0, 2: 5}, nil},
		{"to-datetime after the last record gives the log end", []string{"--topic", "orders", "--to-datetime", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)},
			want{0: 20, 1: 20, 2: 20}, nil},
		{"by-duration ISO-8601", []string{"--topic", "orders", "--by-duration", "PT10M30S"}, want{0: 10, 1: 10, 2: 10}, nil},
		{"by-duration ISO-8601 days", []string{"--topic", "orders", "--by-duration", "P0DT0H10M30S"}, want{0: 10, 1: 10, 2: 10}, nil},
		{"by-duration Go", []string{"--topic", "orders", "--by-duration", "10m30s"}, want{0: 10, 1: 10, 2: 10}, nil},
		{"by-duration before the first record", []string{"--topic", "orders", "--by-duration", "P1D"}, want{0: 0, 1: 0, 2: 5}, nil},
		{"topic with partitions", []string{"--topic", "orders:0,2", "--to-offset", "6"}, want{0: 6, 2: 6}, nil},
		{"topic repeated", []string{"--topic", "orders:2", "--topic", "orders:0", "--to-offset", "6"}, want{0: 6, 2: 6}, nil},
		{"all-topics", []string{"--all-topics", "--to-offset", "6"}, want{0: 6, 1: 6, 2: 6}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.baseline()
			before := e.snapshot()
			dump := e.dump()

			// Dry run, table.
			r := e.run(append([]string{"offsets", "reset"}, tc.args...)...)
			if r.code != 0 {
				t.Fatalf("dry run: %s", r)
			}
			rows := parseTable(t, r.stdout, "TOPIC", "PARTITION", "CURRENT", "NEW")
			checkPlan(t, rows, before, tc.want)
			wantStderr := strings.Join(append(append([]string{}, tc.warnings...), "dry run: nothing changed; add --execute to apply this plan"), "\n") + "\n"
			if r.stderr != wantStderr {
				t.Errorf("dry run stderr:\n%s\nwant:\n%s", r.stderr, wantStderr)
			}
			if !e.dump().equal(dump) {
				t.Fatalf("dry run changed etcd")
			}

			// Dry run, JSON.
			r = e.run(append([]string{"offsets", "reset", "-o", "json"}, tc.args...)...)
			if r.code != 0 {
				t.Fatalf("dry run -o json: %s", r)
			}
			var plan planJSON
			decodeStrict(t, r.stdout, &plan)
			if plan.Executed || plan.Group != e.group || len(plan.Partitions) != len(tc.want) {
				t.Fatalf("JSON plan %+v, want %d partitions, not executed", plan, len(tc.want))
			}
			for _, row := range plan.Partitions {
				p := sinks.Partition{Topic: row.Topic, Partition: row.Partition}
				off, committed := before.Offsets[p]
				if row.New != tc.want[row.Partition] || (row.Current != nil) != committed || committed && *row.Current != off.Next ||
					row.Status != "" || row.Generation != nil || row.LogEnd != 20 || row.LogStart != map[int]int64{0: 0, 1: 0, 2: 5}[row.Partition] {
					t.Errorf("JSON row %+v, want new %d, current %v", row, tc.want[row.Partition], off.Next)
				}
			}
			if !e.dump().equal(dump) {
				t.Fatalf("dry run -o json changed etcd")
			}

			// Execute.
			r = e.run(append([]string{"offsets", "reset", "--execute"}, tc.args...)...)
			if r.code != 0 {
				t.Fatalf("execute: %s", r)
			}
			rows = parseTable(t, r.stdout, "TOPIC", "PARTITION", "CURRENT", "NEW", "STATUS")
			checkPlan(t, rows, before, tc.want)
			for _, row := range rows {
				if row["STATUS"] != "reset" {
					t.Errorf("%s/%s: STATUS %q, want reset", row["TOPIC"], row["PARTITION"], row["STATUS"])
				}
			}
			after := e.snapshot()
			for n := range e.parts {
				p := e.part(n)
				o, ok := after.Offsets[p]
				was, had := before.Offsets[p]
				next, planned := tc.want[n]
				switch {
				case !planned && (ok != had || o != was):
					t.Errorf("%s not in the plan but changed: %+v, was %+v", p, o, was)
				case planned && (!ok || o.Next != next || o.Generation != was.Generation+1 || o.Replica != coordinator.OperatorID):
					t.Errorf("%s after execute: %+v, want next %d, generation %d, replica %s", p, o, next, was.Generation+1, coordinator.OperatorID)
				}
			}
		})
	}
}

// checkPlan checks a printed plan against the offsets it was made from.
func checkPlan(t *testing.T, rows []map[string]string, before *coordinator.Snapshot, want map[int]int64) {
	t.Helper()
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %v", len(rows), len(want), rows)
	}
	for _, row := range rows {
		n := int(mustAtoi(t, row["PARTITION"]))
		p := sinks.Partition{Topic: row["TOPIC"], Partition: n}
		cur := "-"
		if o, ok := before.Offsets[p]; ok {
			cur = itoa(o.Next)
		}
		next, ok := want[n]
		if !ok || row["NEW"] != itoa(next) || row["CURRENT"] != cur {
			t.Errorf("%s: CURRENT %s NEW %s, want %s %d (in the plan: %v)", p, row["CURRENT"], row["NEW"], cur, next, ok)
		}
	}
}

// TestOffsetsResetExportFromFile round-trips a plan: --export prints the
// CSV that --from-file applies, with or without the header line.
func TestOffsetsResetExportFromFile(t *testing.T) {
	e := newResetEnv(t)
	dump := e.dump()
	r := e.run("offsets", "reset", "--topic", "orders", "--shift-by", "-4", "--export")
	if r.code != 0 {
		t.Fatalf("--export: %s", r)
	}
	const want = "topic,partition,offset\norders,0,6\norders,1,11\n"
	if r.stdout != want {
		t.Fatalf("--export printed:\n%s\nwant:\n%s", r.stdout, want)
	}
	if r.stderr != "warning: orders/2 has no committed offset: left out of --shift-by\n" {
		t.Errorf("--export stderr %q", r.stderr)
	}
	if !e.dump().equal(dump) {
		t.Fatal("--export changed etcd")
	}

	plans := map[string]string{
		"exported":             r.stdout,
		"without header, CRLF": "orders,0,6\r\norders,1,11\r\n",
		"comments and blanks":  "# reviewed\ntopic,partition,offset\n\norders,0,6\n orders , 1 , 11\n",
	}
	for name, content := range plans {
		t.Run(name, func(t *testing.T) {
			e.baseline()
			before := e.snapshot()
			dump := e.dump()
			path := writeFile(t, "plan.csv", content)
			r := e.run("offsets", "reset", "--from-file", path)
			if r.code != 0 {
				t.Fatalf("--from-file dry run: %s", r)
			}
			checkPlan(t, parseTable(t, r.stdout, "TOPIC", "PARTITION", "CURRENT", "NEW"), before, map[int]int64{0: 6, 1: 11})
			if !e.dump().equal(dump) {
				t.Fatal("--from-file dry run changed etcd")
			}
			// What --from-file plans, --export prints back the same.
			if r := e.run("offsets", "reset", "--from-file", path, "--export"); r.code != 0 || r.stdout != want {
				t.Errorf("--from-file --export: %s\nwant:\n%s", r, want)
			}
			r = e.run("offsets", "reset", "--from-file", path, "--execute")
			if r.code != 0 {
				t.Fatalf("--from-file --execute: %s", r)
			}
			after := e.snapshot()
			if after.Offsets[e.part(0)].Next != 6 || after.Offsets[e.part(1)].Next != 11 ||
				after.Offsets[e.part(0)].Generation != 1 || after.Offsets[e.part(1)].Generation != 1 {
				t.Errorf("after --from-file --execute: %+v, want orders/0 at 6 and orders/1 at 11, generation 1", after.Offsets)
			}
			if _, ok := after.Offsets[e.part(2)]; ok {
				t.Errorf("orders/2 was reset, but not in the file")
			}
		})
	}

	t.Run("clamped from the file", func(t *testing.T) {
		e.baseline()
		path := writeFile(t, "plan.csv", "orders,2,1\norders,0,99\n")
		r := e.run("offsets", "reset", "--from-file", path, "--execute")
		if r.code != 0 {
			t.Fatalf("%s", r)
		}
		for _, w := range []string{"warning: orders/0: offset 99 is past the log end 20; using 20\n", "warning: orders/2: offset 1 is before the log start 5; using 5\n"} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("stderr %q, want %q", r.stderr, w)
			}
		}
		after := e.snapshot()
		if after.Offsets[e.part(0)].Next != 20 || after.Offsets[e.part(2)].Next != 5 || after.Offsets[e.part(2)].Generation != 1 {
			t.Errorf("after: %+v, want orders/0 at 20, orders/2 at 5 generation 1", after.Offsets)
		}
	})
}

// TestOffsetsResetConflict: two resets of the same partition from the same
// read; one wins, the other is refused with ErrConflict, through the
// coordinator and through the CLI.
func TestOffsetsResetConflict(t *testing.T) {
	e := newResetEnv(t)
	p1 := e.part(1)

	t.Run("coordinator", func(t *testing.T) {
		e.baseline()
		a, b := e.snapshot(), e.snapshot()
		ctx, cancel := e.ctx()
		defer cancel()
		if _, err := e.coord.ResetOffsets(ctx, p1, 2, a.Offsets[p1]); err != nil {
			t.Fatalf("first reset: %v", err)
		}
		if _, err := e.coord.ResetOffsets(ctx, p1, 4, b.Offsets[p1]); !errors.Is(err, coordinator.ErrConflict) {
			t.Fatalf("second reset from the same read: %v, want ErrConflict", err)
		}
		if o := e.snapshot().Offsets[p1]; o.Next != 2 || o.Generation != 1 {
			t.Fatalf("after: %+v, want the first reset's 2, generation 1", o)
		}
	})

	// The CLI reads its plan, then another operator resets orders/1 before
	// it writes: orders/1 conflicts, the others are applied, exit 1.
	others := map[string]func(t *testing.T){
		"coordinator in between": func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := e.coord.ResetOffsets(ctx, p1, 9, e.snapshot().Offsets[p1]); err != nil {
				t.Errorf("the other reset: %v", err)
			}
		},
		"CLI in between": func(t *testing.T) {
			if r := e.run("offsets", "reset", "--topic", "orders:1", "--to-offset", "9", "--execute"); r.code != 0 {
				t.Errorf("the other reset: %s", r)
			}
		},
	}
	for name, other := range others {
		t.Run(name, func(t *testing.T) {
			e.baseline()
			testHookBeforeApply = func() {
				testHookBeforeApply = nil // the other reset runs no hook
				other(t)
			}
			t.Cleanup(func() { testHookBeforeApply = nil })
			r := e.run("offsets", "reset", "--topic", "orders", "--to-offset", "3", "--execute")
			if r.code != exitError {
				t.Fatalf("exit %d, want 1: %s", r.code, r)
			}
			rows := rowsBy(parseTable(t, r.stdout, "TOPIC", "PARTITION", "CURRENT", "NEW", "STATUS"))
			for p, status := range map[string]string{"orders/0": "reset", "orders/1": "conflict", "orders/2": "reset"} {
				if rows[p]["STATUS"] != status {
					t.Errorf("%s: STATUS %q, want %q", p, rows[p]["STATUS"], status)
				}
			}
			for _, w := range []string{"not reset, offsets changed since the plan was read", ": orders/1;", "reset: orders/0, orders/2"} {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q does not say %q", r.stderr, w)
				}
			}
			s := e.snapshot()
			if s.Offsets[e.part(0)].Next != 3 || s.Offsets[e.part(2)].Next != 5 || s.Offsets[p1].Next != 9 || s.Offsets[p1].Generation != 1 {
				t.Errorf("after: %+v, want orders/0 at 3, orders/2 at 5 (clamped), orders/1 at the other reset's 9 (generation 1)", s.Offsets)
			}
		})
	}

	t.Run("JSON reports the conflict", func(t *testing.T) {
		e.baseline()
		testHookBeforeApply = func() {
			testHookBeforeApply = nil
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := e.coord.ResetOffsets(ctx, p1, 16, e.snapshot().Offsets[p1]); err != nil {
				t.Errorf("the other reset: %v", err)
			}
		}
		t.Cleanup(func() { testHookBeforeApply = nil })
		r := e.run("offsets", "reset", "--topic", "orders:1", "--to-earliest", "--execute", "-o", "json")
		if r.code != exitError {
			t.Fatalf("exit %d, want 1: %s", r.code, r)
		}
		var plan planJSON
		decodeStrict(t, r.stdout, &plan)
		if !plan.Executed || len(plan.Partitions) != 1 || plan.Partitions[0].Status != "conflict" ||
			!strings.Contains(plan.Partitions[0].Error, coordinator.ErrConflict.Error()) || plan.Partitions[0].Generation != nil {
			t.Errorf("JSON %+v, want orders/1 status conflict", plan)
		}
		if !strings.Contains(r.stderr, "nothing was reset") {
			t.Errorf("stderr %q, want it to say nothing was reset", r.stderr)
		}
		if o := e.snapshot().Offsets[p1]; o.Next != 16 || o.Generation != 1 {
			t.Errorf("orders/1 %+v, want the other reset's 16", o)
		}
	})

	// The owner committing between the plan and the write is no conflict:
	// a live group is reset all the same.
	t.Run("owner commit in between", func(t *testing.T) {
		e.baseline()
		testHookBeforeApply = func() {
			testHookBeforeApply = nil
			e.commit(p1, 16)
		}
		t.Cleanup(func() { testHookBeforeApply = nil })
		r := e.run("offsets", "reset", "--topic", "orders:1", "--to-earliest", "--execute")
		if r.code != exitOK {
			t.Fatalf("exit %d, want 0: %s", r.code, r)
		}
		if o := e.snapshot().Offsets[p1]; o.Next != 0 || o.Generation != 1 || o.Replica != coordinator.OperatorID {
			t.Errorf("orders/1 %+v, want the reset to 0 at generation 1", o)
		}
	})
}

// TestOffsetsResetBadInput: every bad input exits with status 2, names the
// value and what is accepted, prints nothing on stdout, and leaves etcd as
// it was, byte for byte and revision for revision.
func TestOffsetsResetBadInput(t *testing.T) {
	e := newResetEnv(t)
	e.kafka.CreateTopic(t, "other", 1) // in Kafka, not in the group
	file := func(content string) string { return writeFile(t, "plan.csv", content) }
	reset := func(args ...string) []string { return append([]string{"offsets", "reset"}, args...) }
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown group", reset("--topic", "orders", "--to-earliest", "--group", "nope"), []string{`"nope"`, "no such group", "want one of: g"}},
		{"describe unknown group", []string{"offsets", "describe", "--group", "nope"}, []string{`"nope"`, "want one of: g"}},
		{"replicas unknown group", []string{"replicas", "list", "--group", "nope"}, []string{`"nope"`, "want one of: g"}},
		{"groups unknown group", []string{"groups", "list", "--group", "nope"}, []string{`"nope"`, "want one of: g"}},
		{"bad group name", reset("--topic", "orders", "--to-earliest", "--group", "a/b"), []string{`"a/b"`, "A-Z a-z 0-9 . _ -"}},
		{"unknown topic", reset("--topic", "nope", "--to-earliest"), []string{`"nope"`, "not found in Kafka", "the group's topics in etcd: orders"}},
		{"unknown partition", reset("--topic", "orders:0,7", "--to-earliest"), []string{`"orders:0,7"`, "partition 7", "orders has 3 partitions (0 to 2)"}},
		{"bad partition", reset("--topic", "orders:x", "--to-earliest"), []string{`"orders:x"`, `partition "x"`, "TOPIC:P,P,..."}},
		{"negative partition", reset("--topic", "orders:-1", "--to-earliest"), []string{`"orders:-1"`, `"-1"`, "0 or more"}},
		{"no partitions after colon", reset("--topic", "orders:", "--to-earliest"), []string{`"orders:"`, "TOPIC:P,P,..."}},
		{"bad topic name", reset("--topic", "a b", "--to-earliest"), []string{`"a b"`, "A-Z a-z 0-9 . _ -"}},
		{"negative offset", reset("--topic", "orders", "--to-offset", "-5"), []string{"--to-offset -5", "never negative", "0 or more"}},
		{"non-numeric offset", reset("--topic", "orders", "--to-offset", "abc"), []string{`--to-offset "abc"`, "integer 0 or more"}},
		{"empty offset", reset("--topic", "orders", "--to-offset", ""), []string{`--to-offset ""`, "integer 0 or more"}},
		{"non-numeric shift", reset("--topic", "orders", "--shift-by", "1.5"), []string{`--shift-by "1.5"`, "an integer"}},
		{"bad datetime", reset("--topic", "orders", "--to-datetime", "yesterday"), []string{`--to-datetime "yesterday"`, "RFC 3339", "2026-12-01T10:00:00Z"}},
		{"datetime without zone", reset("--topic", "orders", "--to-datetime", "2026-12-01T10:00:00"), []string{`"2026-12-01T10:00:00"`, "RFC 3339"}},
		{"impossible datetime", reset("--topic", "orders", "--to-datetime", "2026-13-01T10:00:00Z"), []string{`"2026-13-01T10:00:00Z"`, "RFC 3339"}},
		{"datetime before 1970", reset("--topic", "orders", "--to-datetime", "1969-12-31T23:00:00Z"), []string{`"1969-12-31T23:00:00Z"`, "before 1970"}},
		{"bad duration", reset("--topic", "orders", "--by-duration", "1x"), []string{`--by-duration "1x"`, "PT1H", "1h30m"}},
		{"empty ISO duration", reset("--topic", "orders", "--by-duration", "P"), []string{`"P"`, "PT1H"}},
		{"ISO duration with T only", reset("--topic", "orders", "--by-duration", "P1DT"), []string{`"P1DT"`, "PT1H"}},
		{"ISO duration in months", reset("--topic", "orders", "--by-duration", "P1M"), []string{`"P1M"`, "P1DT12H"}},
		{"negative duration", reset("--topic", "orders", "--by-duration", "-1h"), []string{`"-1h"`, "not positive"}},
		{"zero duration", reset("--topic", "orders", "--by-duration", "PT0S"), []string{`"PT0S"`, "not positive"}},
		{"two targets", reset("--topic", "orders", "--to-earliest", "--to-latest"), []string{"--to-earliest and --to-latest conflict", "exactly one of", "--by-duration"}},
		{"three targets", reset("--topic", "orders", "--to-offset", "1", "--shift-by", "1", "--from-file", "x"), []string{"--to-offset and --shift-by and --from-file conflict"}},
		{"no target", reset("--topic", "orders"), []string{"no target", "exactly one of --to-earliest, --to-latest, --to-current, --to-offset, --shift-by, --to-datetime, --by-duration, --from-file"}},
		{"no target with execute", reset("--topic", "orders", "--execute"), []string{"no target"}},
		{"execute and export", reset("--topic", "orders", "--to-earliest", "--execute", "--export"), []string{"--execute and --export conflict"}},
		{"export and json", reset("--topic", "orders", "--to-earliest", "--export", "-o", "json"), []string{"--export and -o json conflict"}},
		{"no scope", reset("--to-earliest", "--execute"), []string{"no scope", "--topic TOPIC", "--all-topics"}},
		{"topic and all-topics", reset("--topic", "orders", "--all-topics", "--to-earliest"), []string{"--topic, --all-topics and --topics-regex conflict"}},
		{"from-file and topic", reset("--topic", "orders", "--from-file", file("orders,0,1\n")), []string{"--from-file and --topic conflict"}},
		{"missing file", reset("--from-file", "/nonexistent/plan.csv"), []string{`"/nonexistent/plan.csv"`, "topic,partition,offset"}},
		{"empty file", reset("--from-file", file("topic,partition,offset\n")), []string{"no partitions", "topic,partition,offset"}},
		{"file: two fields", reset("--from-file", file("topic,partition,offset\norders,0,1\norders,1\n")), []string{"line 3", `"orders,1"`, "2 fields", "topic,partition,offset"}},
		{"file: bad partition", reset("--from-file", file("orders,x,1\n")), []string{"line 1", `partition "x"`}},
		{"file: negative offset", reset("--from-file", file("orders,0,1\n\norders,1,-4\n")), []string{"line 3", `offset "-4"`, "0 or more"}},
		{"file: non-numeric offset", reset("--from-file", file("orders,0,ten\n")), []string{"line 1", `offset "ten"`}},
		{"file: duplicate", reset("--from-file", file("orders,0,1\norders,0,2\n")), []string{"line 2", "already on line 1"}},
		{"file: bad quoting", reset("--from-file", file("orders,0,1\n\"orders,1,2\n")), []string{"line 2"}},
		{"file: unknown topic", reset("--from-file", file("orders,0,1\nnope,0,1\n")), []string{"line 2", `"nope"`, "not found in Kafka"}},
		{"file: unknown partition", reset("--from-file", file("orders,0,1\norders,5,1\n")), []string{"line 2", "partition 5", "0 to 2"}},
		{"file: bad topic", reset("--from-file", file("a b,0,1\n")), []string{"line 1", `"a b"`}},
		{"unknown output", reset("--topic", "orders", "--to-earliest", "-o", "yaml"), []string{`-o "yaml"`, "table or json"}},
		{"describe unknown output", []string{"offsets", "describe", "-o", "yaml"}, []string{`-o "yaml"`, "table or json"}},
		{"replicas unknown output", []string{"replicas", "list", "-o", "wide"}, []string{`-o "wide"`, "table or json"}},
		{"groups unknown output", []string{"groups", "list", "-o", "csv"}, []string{`-o "csv"`, "table or json"}},
		{"describe bad topics", []string{"offsets", "describe", "--topics", "a b"}, []string{`"a b"`}},
		{"unknown flag", reset("--topic", "orders", "--to-earliest", "--dry-run"), []string{"unknown flag", "--dry-run"}},
		{"argument", reset("orders", "--to-earliest"), []string{`["orders"]`, "takes no arguments"}},
		{"unknown subcommand", []string{"offsets", "rewind"}, []string{`"rewind"`, "describe, import, reset"}},
		{"bad etcd timeout", reset("--topic", "orders", "--to-earliest", "--etcd-timeout", "0s"), []string{"--etcd-timeout 0s", "positive"}},
		{"bad kafka timeout", reset("--topic", "orders", "--to-earliest", "--kafka-timeout", "-1s"), []string{"--kafka-timeout -1s", "positive"}},
		{"bad brokers", reset("--topic", "orders", "--to-earliest", "--brokers", "kafka"), []string{`--brokers "kafka"`, "host:port"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := e.dump()
			// The command's words, the cluster flags, then the case's
			// flags: a flag given twice takes the last value.
			args := append(append(append([]string{}, tc.args[:2]...), e.flags()...), tc.args[2:]...)
			if tc.args[1] == "rewind" {
				args = tc.args
			}
			r := opsRun(t, 30*time.Second, args...)
			if r.code != exitUsage {
				t.Fatalf("exit %d, want 2: %s", r.code, r)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			if !strings.HasPrefix(r.stderr, "Error: ") || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("stderr %q, want one line starting with Error:", r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q does not mention %q", r.stderr, w)
				}
			}
			if after := e.dump(); !after.equal(before) {
				t.Errorf("etcd changed: revision %d → %d", before.revision, after.revision)
			}
		})
	}

	t.Run("execute from the environment", func(t *testing.T) {
		before := e.dump()
		t.Setenv("OFFSETKEEPER_EXECUTE", "true")
		r := e.run("offsets", "reset", "--topic", "orders", "--to-earliest")
		if r.code != exitUsage || !strings.Contains(r.stderr, "OFFSETKEEPER_EXECUTE=true") || !strings.Contains(r.stderr, "command line") {
			t.Errorf("%s, want exit 2 naming OFFSETKEEPER_EXECUTE", r)
		}
		if !e.dump().equal(before) {
			t.Errorf("etcd changed")
		}
	})

	t.Run("kafka unreachable changes nothing", func(t *testing.T) {
		before := e.dump()
		r := opsRun(t, 20*time.Second, "offsets", "reset", "--topic", "orders", "--to-earliest", "--execute",
			"--etcd-endpoints", strings.Join(e.etcd.Endpoints(), ","), "--group", e.group, "--brokers", harness.Blackhole(t), "--kafka-timeout", "1s")
		if r.code != exitError || !strings.Contains(r.stderr, "kafka unreachable") || !strings.Contains(r.stderr, "nothing changed") {
			t.Errorf("%s, want exit 1 saying Kafka is unreachable and nothing changed", r)
		}
		if !e.dump().equal(before) {
			t.Errorf("etcd changed")
		}
	})
}

// TestShortDuration covers the ages in LAST-COMMIT and STARTED.
func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 0: "0s", 3 * time.Second: "3s", 150 * time.Second: "2m", 5 * time.Hour: "5h", 47 * time.Hour: "47h", 72 * time.Hour: "3d",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
	if got := age(time.Now(), time.Time{}); got != "-" {
		t.Errorf("age of the zero time = %q, want -", got)
	}
}
