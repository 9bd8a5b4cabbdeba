package integration_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/audit"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// truncationCase is one topic of TestApacheUncleanElectionTruncatesLog:
// after what records produced once the new leader took over, and whether
// the replica is replaced rather than resumed.
type truncationCase struct {
	name    string
	after   int
	restart bool

	e     *env
	url   string
	table string
	proc  *harness.Process
}

// TestApacheUncleanElectionTruncatesLog: on the 3-node cluster, three
// topics of one partition on two brokers (RF 2, min.insync.replicas 1,
// unclean elections allowed), each read by a replica into PostgreSQL
// (raw). 1,000 records go to both brokers; the follower is paused until
// the controllers drop it from the ISR; 500 more go to the leader alone,
// and the replicas commit 1,500. The replicas are paused, the leader
// SIGKILLed, the follower resumed and elected uncleanly: its log ends at
// 1,000, and offsets 1,000 to 1,499 will hold other records. Then (a) 800
// new records, the new log past the committed offset; (b) 100, the new log
// end below it; (c) 100, and the replica SIGKILLed and replaced, so that
// the new owner's claim finds the truncation. In every case the table
// holds exactly the records Kafka's own read_committed consumer reads from
// the final log, each once, the old log's 500 kept apart with their
// generation; the replica says so once at ERROR, naming the 500 offsets
// Kafka lost, and counts it.
func TestApacheUncleanElectionTruncatesLog(t *testing.T) {
	if testing.Short() {
		t.Skip("an unclean election on the 3-node cluster")
	}
	k := realKafka(t)
	pg := harness.StartPostgres(t)
	leaderNode, followerNode := k.Node(0), k.Node(1)
	leader, follower := leaderNode.ID(), followerNode.ID()
	cases := []*truncationCase{{name: "a", after: 800}, {name: "b", after: 100}, {name: "c", after: 100, restart: true}}
	for i, c := range cases {
		topic := uniqueTopic("unclean-" + c.name)
		k.CreateTopicOn(t, topic, []int32{leader, follower},
			"min.insync.replicas", "1", "unclean.leader.election.enable", "true")
		c.e = newEnvWith(t, harness.StartEtcd(t, 1), k, topic, 1)
		c.table = fmt.Sprintf("unclean_%d", i)
		c.url = fmt.Sprintf("%s&group=g&table=%s&offsets_table=%s_offsets&dead_letter_table=%s_dead", pg.URL(), c.table, c.table, c.table)
		ttl := "60s" // the pause below does not outlast it: the replica keeps its claim
		if c.restart {
			ttl = "5s"
		}
		c.proc = c.e.processSink("r-"+c.name, c.url, "--lease-ttl", ttl)
	}
	produce := func(p *harness.Producer, c *truncationCase, what string, n int) {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Value: fmt.Appendf(nil, `{"case":%q,"phase":%q,"i":%d}`, c.name, what, i)}
		}
		p.Produce(t, c.e.topic, 0, recs...)
	}
	before := k.NewProducer(t, kgo.NoCompression())
	for _, c := range cases {
		produce(before, c, "both", 1000)
	}
	followerNode.Pause()
	for _, c := range cases {
		await(t, 30*time.Second, fmt.Sprintf("the paused broker %d out of the ISR of %s", follower, c.e.topic), func() bool {
			isr := k.ISR(t, c.e.topic, 0)
			return len(isr) == 1 && isr[0] == leader
		})
	}
	for _, c := range cases {
		produce(before, c, "leader-only", 500)
	}
	for _, c := range cases {
		await(t, 60*time.Second, c.e.topic+" committed at 1500", func() bool { return c.e.allCommitted(map[int]int64{0: 1500}) })
		c.proc.Signal(syscall.SIGSTOP)
	}
	leaderNode.Kill()
	followerNode.Resume()
	for _, c := range cases {
		// The controllers fence the killed leader after its session (4 s):
		// until then the partition is still its.
		await(t, 60*time.Second, fmt.Sprintf("the killed broker %d no longer the leader of %s", leader, c.e.topic), func() bool {
			return k.Leader(t, c.e.topic, 0) != leader
		})
		k.ElectUncleanLeader(t, c.e.topic, 0)
		await(t, 60*time.Second, fmt.Sprintf("broker %d the leader of %s", follower, c.e.topic), func() bool {
			return k.Leader(t, c.e.topic, 0) == follower
		})
		if end := k.EndOffsets(t, c.e.topic)[0]; end != 1000 {
			t.Fatalf("%s: log end %d after the unclean election, want 1000 (the follower's log)", c.e.topic, end)
		}
	}
	after := k.NewProducer(t, kgo.NoCompression())
	for _, c := range cases {
		produce(after, c, "new-leader", c.after)
		if c.restart {
			c.proc.Kill()
			c.proc = c.e.processSink("r-"+c.name+"-2", c.url, "--lease-ttl", "5s")
		} else {
			c.proc.Signal(syscall.SIGCONT)
		}
	}

	conn := pgConn(t, pg.URL())
	for _, c := range cases {
		end := int64(1000 + c.after)
		var o coordinator.Offsets
		await(t, 60*time.Second, fmt.Sprintf("%s committed at %d in a new generation", c.e.topic, end), func() bool {
			o = c.e.snapshot().Offsets[sinks.Partition{Topic: c.e.topic, Partition: 0}]
			return o.Next == end && o.Generation == 1
		})
		if o.Truncated == nil || o.Truncated.At != 1000 || o.Truncated.Committed != 1500 || o.Truncated.Lost() != 500 {
			t.Errorf("%s: the offsets record the truncation as %+v, want at 1000, committed 1500, 500 lost", c.e.topic, o.Truncated)
		}

		// The table against Kafka's own consumer, record by record.
		ref := k.ReferenceConsume(t, c.e.topic, "read_committed")
		if len(ref) != int(end) {
			t.Fatalf("%s: Kafka's consumer read %d records, want %d", c.e.topic, len(ref), end)
		}
		rows, err := conn.Query(context.Background(), fmt.Sprintf(`SELECT "offset", value_bytes FROM %s WHERE topic = $1 AND partition = 0 ORDER BY "offset"`, c.table), c.e.topic)
		if err != nil {
			t.Fatal(err)
		}
		var held []harness.RefRecord
		for rows.Next() {
			var off int64
			var v []byte
			if err := rows.Scan(&off, &v); err != nil {
				t.Fatal(err)
			}
			held = append(held, harness.RefRecord{Offset: off, ValueLen: len(v), ValueCRC: crc32.ChecksumIEEE(v)})
		}
		rows.Close()
		if len(held) != len(ref) {
			t.Errorf("%s: the table holds %d rows, Kafka's log %d records", c.e.topic, len(held), len(ref))
		}
		bad := 0
		for i := range min(len(held), len(ref)) {
			r := ref[i]
			if held[i].Offset != r.Offset || held[i].ValueCRC != r.ValueCRC || held[i].ValueLen != r.ValueLen {
				if bad++; bad <= 5 {
					t.Errorf("%s: row %d is offset %d (value crc %08x), Kafka's record offset %d (crc %08x)",
						c.e.topic, i, held[i].Offset, held[i].ValueCRC, r.Offset, r.ValueCRC)
				}
			}
		}
		var moved, movedGen int64
		var lo, hi int64
		if err := conn.QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*), coalesce(min("offset"), -1), coalesce(max("offset"), -1), coalesce(max(generation), -1) FROM %s_truncated
			 WHERE topic = $1 AND value->>'phase' = 'leader-only'`, c.table), c.e.topic).Scan(&moved, &lo, &hi, &movedGen); err != nil {
			t.Fatal(err)
		}
		if moved != 500 || lo != 1000 || hi != 1499 || movedGen != 0 {
			t.Errorf("%s: %s_truncated holds %d of the old log's records, offsets %d to %d, generation %d; want the 500 at 1000 to 1499 of generation 0",
				c.e.topic, c.table, moved, lo, hi, movedGen)
		}

		// Said once at ERROR, naming what Kafka lost, and counted.
		const said = "Kafka's log of the partition was truncated"
		out := c.proc.Output()
		if n := outputCount(out, said); n != 1 {
			t.Errorf("%s: %d lines say %q, want 1:\n%s", c.e.topic, n, said, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, said) {
				for _, w := range []string{"ERROR", `"lost_by_kafka": 500`, `"diverges_at": 1000`, `"committed": 1500`, `"lost_range": "[1000, 1500)"`} {
					if !strings.Contains(l, w) {
						t.Errorf("%s: the line lacks %s: %s", c.e.topic, w, l)
					}
				}
			}
		}
		m := scrape(t, c.e.memberHTTP(memberID(c))+"/metrics")
		// Found at the claim by the replica that replaced the paused one;
		// by the one resumed, when it met the new leader.
		cause := "leader_changed"
		if c.restart {
			cause = "claimed"
		}
		if got := m.value("offsetkeeper_log_truncations_total", "group", "g", "cause", cause); got != 1 {
			t.Errorf("%s: offsetkeeper_log_truncations_total{cause=%q} %v, want 1", c.e.topic, cause, got)
		}
		for _, other := range []string{"claimed", "leader_changed", "out_of_range", "past_log_end"} {
			if got := m.value("offsetkeeper_log_truncations_total", "group", "g", "cause", other); other != cause && got != 0 {
				t.Errorf("%s: offsetkeeper_log_truncations_total{cause=%q} %v, want 0", c.e.topic, other, got)
			}
		}
		if got := m.value("offsetkeeper_offsets_truncated_total", "group", "g"); got != 500 {
			t.Errorf("%s: offsetkeeper_offsets_truncated_total %v, want 500", c.e.topic, got)
		}
		// The audit: clean, and it names what Kafka dropped.
		code, out, rep := c.e.auditCLI("g", "--sink", c.url)
		if code != 0 || rep == nil || !rep.Clean {
			t.Errorf("%s: audit exit %d, want 0 and clean:\n%s", c.e.topic, code, out)
		} else if p := rep.partition(t, c.e.topic, 0); p.TruncatedByKafka.Count != 500 ||
			!slices.Equal(p.TruncatedByKafka.Ranges, []audit.Range{{From: 1000, Next: 1500}}) || p.Held != end {
			t.Errorf("%s: audit: %d held, truncated by Kafka %d %v; want %d held, 500 [1000, 1500)",
				c.e.topic, p.Held, p.TruncatedByKafka.Count, p.TruncatedByKafka.Ranges, end)
		}
		t.Logf("%s (%d after the election, restart %v): %d records of Kafka's log in the table, each once; 500 of the old log kept apart",
			c.e.topic, c.after, c.restart, len(held))
	}
}

// memberID is the replica id of c's running process.
func memberID(c *truncationCase) string {
	if c.restart {
		return "r-" + c.name + "-2"
	}
	return "r-" + c.name
}
