package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

var describeHeaders = []string{"TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "OWNER", "EPOCH", "LAST-COMMIT", "IN-FLIGHT"}

// describeJSON mirrors describe's JSON output; pointers tell null apart.
type describeJSON struct {
	Group          string `json:"group"`
	Revision       int64  `json:"revision"`
	KafkaReachable bool   `json:"kafka_reachable"`
	Partitions     []struct {
		Topic       string     `json:"topic"`
		Partition   int        `json:"partition"`
		Committed   *int64     `json:"committed"`
		LogEnd      *int64     `json:"log_end"`
		Lag         *int64     `json:"lag"`
		Owner       *string    `json:"owner"`
		OwnerReads  *bool      `json:"owner_reads_kafka"`
		Epoch       *int64     `json:"epoch"`
		LastCommit  *time.Time `json:"last_commit"`
		CommittedBy *string    `json:"committed_by"`
		Generation  int64      `json:"generation"`
		InFlight    *struct {
			From  int64 `json:"from"`
			Next  int64 `json:"next"`
			Epoch int64 `json:"epoch"`
		} `json:"in_flight"`
	} `json:"partitions"`
}

func decodeStrict(t *testing.T, s string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode JSON: %v\n%s", err, s)
	}
}

// TestOffsetsDescribe runs two replicas, holds one's sink so that its
// partitions lag with a block in flight, and checks every column of the
// table and every field of the JSON against etcd and Kafka; then the same
// with Kafka unreachable.
func TestOffsetsDescribe(t *testing.T) {
	e := newOpsEnv(t, "orders", 4)
	e.kafka.CreateTopic(t, "fresh", 2)
	e.produce("fresh", 0, 3, nil)

	s1, s2 := newRecordingSink(), newRecordingSink()
	e.startReplica("r1", s1)
	e.startReplica("r2", s2)
	t.Cleanup(s1.release) // runs before the replicas stop
	want := map[sinks.Partition]int64{}
	for p := range e.parts {
		e.produce(e.topic, p, 10, nil)
		want[e.part(p)] = 10
	}
	e.awaitCommitted(want)
	awaitCond(t, 30*time.Second, "both replicas own two partitions", func() bool {
		n := map[string]int{}
		for _, c := range e.snapshot().Claims {
			n[c.Replica]++
		}
		return n["r1"] == 2 && n["r2"] == 2
	})

	// r1's writes wait: its partitions get a block in flight and lag.
	s1.hold()
	owner := map[sinks.Partition]string{}
	for p, c := range e.snapshot().Claims {
		owner[p] = c.Replica
	}
	for p := range e.parts {
		e.produce(e.topic, p, 5, nil)
	}
	awaitCond(t, 30*time.Second, "r1 holding its blocks, r2 caught up", func() bool {
		s := e.snapshot()
		for p, o := range owner {
			if o == "r1" {
				if _, ok := s1.held(p); !ok || s.Intents[p].Next != 15 {
					return false
				}
			} else if s.Offsets[p].Next != 15 {
				return false
			}
		}
		return true
	})
	snap := e.snapshot()

	check := func(t *testing.T, r map[string]string, p sinks.Partition) {
		t.Helper()
		end := e.logEnd(p)
		off := snap.Offsets[p]
		claim := snap.Claims[p]
		if r["COMMITTED"] != itoa(off.Next) || r["LOG-END"] != itoa(end) || r["LAG"] != itoa(end-off.Next) {
			t.Errorf("%s: COMMITTED %s LOG-END %s LAG %s, want %d %d %d", p, r["COMMITTED"], r["LOG-END"], r["LAG"], off.Next, end, end-off.Next)
		}
		if r["OWNER"] != claim.Replica || r["EPOCH"] != itoa(claim.Epoch) {
			t.Errorf("%s: OWNER %s EPOCH %s, want %s %d", p, r["OWNER"], r["EPOCH"], claim.Replica, claim.Epoch)
		}
		if !ageRE.MatchString(r["LAST-COMMIT"]) {
			t.Errorf("%s: LAST-COMMIT %q, want an age such as 3s", p, r["LAST-COMMIT"])
		}
		wantFlight := "-"
		if in, ok := snap.Intents[p]; ok {
			wantFlight = fmt.Sprintf("[%d, %d)", in.From, in.Next)
		}
		if r["IN-FLIGHT"] != wantFlight {
			t.Errorf("%s: IN-FLIGHT %q, want %q", p, r["IN-FLIGHT"], wantFlight)
		}
	}

	t.Run("table", func(t *testing.T) {
		r := e.run("offsets", "describe", "--topics", "fresh")
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("describe: %s", r)
		}
		rows := parseTable(t, r.stdout, describeHeaders...)
		if len(rows) != 6 {
			t.Fatalf("%d rows, want 6 (4 of orders, 2 of fresh):\n%s", len(rows), r.stdout)
		}
		// Sorted by topic, then partition.
		order := []string{"fresh/0", "fresh/1", "orders/0", "orders/1", "orders/2", "orders/3"}
		for i, row := range rows {
			if got := row["TOPIC"] + "/" + row["PARTITION"]; got != order[i] {
				t.Errorf("row %d is %s, want %s", i, got, order[i])
			}
		}
		by := rowsBy(rows)
		lagging := 0
		for p := range e.parts {
			check(t, by[e.part(p).String()], e.part(p))
			if by[e.part(p).String()]["LAG"] == "5" && by[e.part(p).String()]["IN-FLIGHT"] == "[10, 15)" {
				lagging++
			}
		}
		if lagging != 2 {
			t.Errorf("%d partitions lag 5 with [10, 15) in flight, want r1's 2:\n%s", lagging, r.stdout)
		}
		// Nothing in etcd for fresh: only Kafka's log end.
		for p, end := range map[string]string{"fresh/0": "3", "fresh/1": "0"} {
			got := by[p]
			if got["COMMITTED"] != "-" || got["LOG-END"] != end || got["LAG"] != "-" || got["OWNER"] != "-" ||
				got["EPOCH"] != "-" || got["LAST-COMMIT"] != "-" || got["IN-FLIGHT"] != "-" {
				t.Errorf("%s: %v, want only LOG-END %s", p, got, end)
			}
		}

		// The alias, and the topics of etcd only.
		r = e.run("offsets", "list")
		if r.code != 0 || len(parseTable(t, r.stdout, describeHeaders...)) != 4 {
			t.Errorf("offsets list: want the 4 partitions of orders: %s", r)
		}
	})

	t.Run("json", func(t *testing.T) {
		r := e.run("offsets", "describe", "-o", "json", "--topics", "fresh")
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("describe -o json: %s", r)
		}
		var got describeJSON
		decodeStrict(t, r.stdout, &got)
		if got.Group != e.group || !got.KafkaReachable || got.Revision < snap.Revision || len(got.Partitions) != 6 {
			t.Fatalf("group %q kafka_reachable %v revision %d, %d partitions; want %q, true, >= %d, 6",
				got.Group, got.KafkaReachable, got.Revision, len(got.Partitions), e.group, snap.Revision)
		}
		for _, row := range got.Partitions {
			p := sinks.Partition{Topic: row.Topic, Partition: row.Partition}
			if p.Topic == "fresh" {
				if row.Committed != nil || row.Lag != nil || row.Owner != nil || row.Epoch != nil || row.LastCommit != nil ||
					row.InFlight != nil || row.LogEnd == nil || *row.LogEnd != e.logEnd(p) {
					t.Errorf("%s: %+v, want nulls but log_end %d", p, row, e.logEnd(p))
				}
				continue
			}
			off, claim, end := snap.Offsets[p], snap.Claims[p], e.logEnd(p)
			switch {
			case row.Committed == nil || *row.Committed != off.Next:
				t.Errorf("%s: committed %v, want %d", p, row.Committed, off.Next)
			case row.LogEnd == nil || *row.LogEnd != end:
				t.Errorf("%s: log_end %v, want %d", p, row.LogEnd, end)
			case row.Lag == nil || *row.Lag != end-off.Next:
				t.Errorf("%s: lag %v, want %d", p, row.Lag, end-off.Next)
			case row.Owner == nil || *row.Owner != claim.Replica || row.Epoch == nil || *row.Epoch != claim.Epoch:
				t.Errorf("%s: owner %v epoch %v, want %s %d", p, row.Owner, row.Epoch, claim.Replica, claim.Epoch)
			case row.OwnerReads == nil || !*row.OwnerReads:
				t.Errorf("%s: owner_reads_kafka %v, want true", p, row.OwnerReads)
			case row.LastCommit == nil || !row.LastCommit.Equal(off.At):
				t.Errorf("%s: last_commit %v, want %v", p, row.LastCommit, off.At)
			case row.CommittedBy == nil || *row.CommittedBy != off.Replica || row.Generation != off.Generation:
				t.Errorf("%s: committed_by %v generation %d, want %s %d", p, row.CommittedBy, row.Generation, off.Replica, off.Generation)
			}
			in, ok := snap.Intents[p]
			if ok != (row.InFlight != nil) || ok && (row.InFlight.From != in.From || row.InFlight.Next != in.Next || row.InFlight.Epoch != in.Epoch) {
				t.Errorf("%s: in_flight %+v, want %v (present %v)", p, row.InFlight, in, ok)
			}
		}
	})

	t.Run("kafka unreachable", func(t *testing.T) {
		args := []string{"offsets", "describe", "--etcd-endpoints", strings.Join(e.etcd.Endpoints(), ","),
			"--group", e.group, "--brokers", harness.Blackhole(t), "--kafka-timeout", "1s"}
		for _, format := range []string{"table", "json"} {
			start := time.Now()
			r := opsRun(t, 20*time.Second, append(args, "-o", format)...)
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("-o %s: took %s with --kafka-timeout 1s", format, took)
			}
			if r.code != 0 {
				t.Fatalf("-o %s: %s", format, r)
			}
			if !strings.HasPrefix(r.stderr, "warning: kafka unreachable at ") || !strings.Contains(r.stderr, "LOG-END and LAG are unknown") ||
				strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("-o %s: stderr %q, want one warning line saying Kafka was unreachable", format, r.stderr)
			}
			if format == "table" {
				rows := parseTable(t, r.stdout, describeHeaders...)
				if len(rows) != 4 {
					t.Fatalf("%d rows, want the 4 partitions etcd knows:\n%s", len(rows), r.stdout)
				}
				for _, row := range rows {
					p := sinks.Partition{Topic: row["TOPIC"], Partition: int(mustAtoi(t, row["PARTITION"]))}
					if row["COMMITTED"] != itoa(snap.Offsets[p].Next) || row["LOG-END"] != "-" || row["LAG"] != "-" ||
						row["OWNER"] != snap.Claims[p].Replica {
						t.Errorf("%s: %v, want committed %d, LOG-END and LAG -, owner %s", p, row, snap.Offsets[p].Next, snap.Claims[p].Replica)
					}
				}
				continue
			}
			var got describeJSON
			decodeStrict(t, r.stdout, &got)
			if got.KafkaReachable || len(got.Partitions) != 4 {
				t.Fatalf("kafka_reachable %v, %d partitions; want false, 4", got.KafkaReachable, len(got.Partitions))
			}
			for _, row := range got.Partitions {
				if row.LogEnd != nil || row.Lag != nil || row.Committed == nil {
					t.Errorf("%s/%d: log_end %v lag %v committed %v, want null, null, a number", row.Topic, row.Partition, row.LogEnd, row.Lag, row.Committed)
				}
			}
		}
	})
}

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return n
}

// An offsets key that does not parse is not silently dropped: describe
// names it on stderr, and a reset of that partition fails with a reason.
func TestOffsetsDescribeNamesUnreadableKeys(t *testing.T) {
	e := newOpsEnv(t, "orders", 2)
	e.commit(e.part(0), 5)
	ctx, cancel := e.ctx()
	defer cancel()
	bad := e.coord.Keys().Offsets(e.part(1))
	if _, err := e.cli.Put(ctx, bad, "{not json"); err != nil {
		t.Fatal(err)
	}
	r := e.run("offsets", "describe")
	if r.code != exitOK || !strings.Contains(r.stderr, "unreadable etcd key") || !strings.Contains(r.stderr, bad) {
		t.Fatalf("describe: %s\nwant exit 0 and a warning naming %s", r, bad)
	}
	r = e.run("offsets", "reset", "--topic", "orders:1", "--to-earliest", "--execute")
	if r.code == exitOK || !strings.Contains(r.stdout+r.stderr, "unreadable") {
		t.Fatalf("reset of the unreadable partition: %s\nwant a failure saying the offsets are unreadable", r)
	}
}
