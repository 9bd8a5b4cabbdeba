package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/audit"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// auditEnv is an env whose partition 0 holds 10 records, an aborted
// transaction of 2 records (offsets 10 and 11, its marker 12) and 10 more
// (13 to 22), and whose other partitions hold 20 records each.
func auditEnv(t *testing.T, kb kafkaBackend, parts int) *env {
	t.Helper()
	e := newEnvOn(t, kb, "events", parts)
	e.produce(10)
	recs := []*kgo.Record{{Value: []byte(`{"aborted":1}`)}, {Value: []byte(`{"aborted":2}`)}}
	e.kafka.Transact(t, false, e.topic, 0, recs...)
	for p := 0; p < parts; p++ {
		vals := make([]string, 10)
		for i := range vals {
			vals[i] = fmt.Sprintf(`{"p":%d,"i":%d}`, p, 10+i)
		}
		e.kafka.ProduceValues(t, e.topic, p, vals...)
	}
	// The aborted transaction's marker reaches the partition after its
	// producer is told the transaction ended: its last stable offset, the
	// end read_committed sees, may trail for a moment.
	await(t, 10*time.Second, "partition 0 to end at 23 (10 records, an aborted transaction of 2 and its marker, 10 more)",
		func() bool { return e.logEnds()[0] == 23 })
	return e
}

// deliver runs one replica on sink until every partition is committed to
// its log end, then stops it.
func (e *env) deliver(sink sinks.Sink) map[int]int64 {
	e.t.Helper()
	ends := e.logEnds()
	rn := e.start(e.config("r1"), sink)
	await(e.t, 30*time.Second, fmt.Sprintf("offsets %v committed", ends), func() bool { return e.allCommitted(ends) })
	rn.stop()
	return ends
}

// auditCLI runs offsetkeeper audit for group and returns its exit code,
// stdout and stderr together, and the report when -o json printed one.
func (e *env) auditCLI(group string, args ...string) (int, string, *auditReport) {
	e.t.Helper()
	all := append([]string{"audit", "-o", "json",
		"--etcd-endpoints", strings.Join(e.etcd.Endpoints(), ","),
		"--brokers", strings.Join(e.kafka.Brokers(), ","),
		"--group", group}, args...)
	p := harness.StartProcess(e.t, "audit", bin, all...)
	code := p.Wait(60 * time.Second)
	out := p.Output()
	var rep auditReport
	if i := strings.Index(out, "{"); i >= 0 {
		dec := json.NewDecoder(strings.NewReader(out[i:]))
		if err := dec.Decode(&rep); err == nil {
			return code, out, &rep
		}
	}
	return code, out, nil
}

type auditReport struct {
	audit.Report
	Clean bool `json:"clean"`
}

// findings is what a partition's audit found, the listed ranges of each
// kind (kinds without any left out), for comparing with what was planted.
func findings(p audit.Partition) map[string][]audit.Range {
	out := map[string][]audit.Range{}
	for kind, rs := range map[string]audit.Ranges{"missing": p.Missing, "duplicated": p.Duplicated, "mismatched": p.Mismatched, "in flight": p.InFlight,
		"beyond": p.BeyondCommit, "aborted": p.Aborted, "unverifiable": p.Unverifiable} {
		if rs.Count > 0 {
			out[kind] = rs.Ranges
			var n int64
			for _, r := range rs.Ranges {
				n += r.Len()
			}
			if n != rs.Count {
				out[kind+" count"] = []audit.Range{rg(rs.Count, rs.Count)}
			}
		}
	}
	return out
}

func rg(from, next int64) audit.Range { return audit.Range{From: from, Next: next} }

func (r *auditReport) partition(t *testing.T, topic string, p int) audit.Partition {
	t.Helper()
	for _, got := range r.Partitions {
		if got.Topic == topic && got.Partition == p {
			return got
		}
	}
	t.Fatalf("no partition %s/%d in the report: %+v", topic, p, r.Partitions)
	return audit.Partition{}
}

func checkFindings(t *testing.T, rep *auditReport, topic string, want map[int]map[string][]audit.Range) {
	t.Helper()
	for _, p := range rep.Partitions {
		w := want[p.Partition]
		if w == nil {
			w = map[string][]audit.Range{}
		}
		got := findings(p)
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s/%d: found %v, want %v", topic, p.Partition, got, w)
		}
	}
}

// blockFileOf is the path of the block file of partition p whose range
// holds off.
func blockFileOf(t *testing.T, dir, topic string, p int, off int64) string {
	t.Helper()
	pdir := filepath.Join(dir, topic, strconv.Itoa(p))
	entries, err := os.ReadDir(pdir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		a, b, ok := strings.Cut(strings.TrimSuffix(en.Name(), ".jsonl"), "-")
		from, _ := strconv.ParseInt(a, 10, 64)
		next, _ := strconv.ParseInt(b, 10, 64)
		if ok && from <= off && off < next {
			return filepath.Join(pdir, en.Name())
		}
	}
	t.Fatalf("no block file of %s/%d holds offset %d", topic, p, off)
	return ""
}

// editLines rewrites the block file holding off with edit applied to its
// lines and the index of off's line (-1 if none).
func editLines(t *testing.T, dir, topic string, p int, off int64, edit func(lines [][]byte, i int) [][]byte) {
	t.Helper()
	path := blockFileOf(t, dir, topic, p, off)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	at := -1
	for i, l := range lines {
		pl, err := file.ParseLine(l)
		if err != nil {
			t.Fatal(err)
		}
		if pl.Record.Offset == off {
			at = i
		}
	}
	if err := os.WriteFile(path, bytes.Join(edit(lines, at), nil), 0o644); err != nil {
		t.Fatal(err)
	}
}

func recordLine(topic string, p int, off int64) []byte {
	return file.AppendLine(nil, topic, p, &sinks.Record{Offset: off, Value: []byte(`{"planted":true}`), Time: time.Now()})
}

// writeBlock writes a block file of partition p holding the offsets,
// as a replica would, with the range [from, next).
func writeBlock(t *testing.T, dir, topic string, p int, from, next int64, offs ...int64) {
	t.Helper()
	var b []byte
	for _, o := range offs {
		b = append(b, recordLine(topic, p, o)...)
	}
	name := filepath.Join(dir, topic, strconv.Itoa(p), fmt.Sprintf("%020d-%020d.jsonl", from, next))
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// putIntent writes the intent of a block [from, next) being written, as a
// replica that crashed before its commit leaves it.
func (e *env) putIntent(p int, from, next int64) {
	e.t.Helper()
	v, _ := json.Marshal(coordinator.Intent{From: from, Next: next, Epoch: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	key := coordinator.KeysFor(e.group).Intent(sinks.Partition{Topic: e.topic, Partition: p})
	if _, err := e.admin.Put(ctx, key, string(v)); err != nil {
		e.t.Fatal(err)
	}
}

// TestAuditFileSink: a replica fills a file sink, which audits clean; then
// each finding is planted in the files (a line deleted, a line copied, an
// aborted record, records past the commit with and without an intent,
// records removed by retention) and the audit reports exactly those.
func TestAuditFileSink(t *testing.T) {
	eachBackend(t, func(t *testing.T, kb kafkaBackend) {
		e := auditEnv(t, kb, 2)
		dir := t.TempDir()
		fs, err := file.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		ends := e.deliver(fs)
		sinkURL := "file://" + dir

		code, out, rep := e.auditCLI(e.group, "--sink", sinkURL)
		if code != 0 || rep == nil || !rep.Clean {
			t.Fatalf("audit of a clean sink: exit %d, want 0 and clean:\n%s", code, out)
		}
		if p := rep.partition(t, e.topic, 0); p.Held != 20 || p.Delivered != 20 || p.Committed != 23 {
			t.Fatalf("partition 0: held %d, delivered %d, committed %d; want 20, 20, 23", p.Held, p.Delivered, p.Committed)
		}

		// Partition 0: offset 5's line deleted, 15's copied, the aborted
		// record 10 written, a block past the commit.
		editLines(t, dir, e.topic, 0, 5, func(ls [][]byte, i int) [][]byte { return slices.Delete(ls, i, i+1) })
		editLines(t, dir, e.topic, 0, 15, func(ls [][]byte, i int) [][]byte { return slices.Insert(ls, i, ls[i]) })
		editLines(t, dir, e.topic, 0, 10, func(ls [][]byte, _ int) [][]byte {
			for i, l := range ls {
				if pl, _ := file.ParseLine(l); pl.Record.Offset > 10 {
					return slices.Insert(ls, i, recordLine(e.topic, 0, 10))
				}
			}
			return append(ls, recordLine(e.topic, 0, 10))
		})
		writeBlock(t, dir, e.topic, 0, ends[0], ends[0]+2, ends[0], ends[0]+1)
		// Partition 1: a block in flight (its intent in etcd) and retention
		// up to 5, with offset 2's line gone: not missing, Kafka has it no more.
		e.putIntent(1, ends[1], ends[1]+3)
		writeBlock(t, dir, e.topic, 1, ends[1], ends[1]+3, ends[1], ends[1]+1, ends[1]+2)
		e.kafka.DeleteRecords(t, e.topic, 1, 5)
		editLines(t, dir, e.topic, 1, 2, func(ls [][]byte, i int) [][]byte { return slices.Delete(ls, i, i+1) })

		code, out, rep = e.auditCLI(e.group, "--sink", sinkURL)
		if code != 1 || rep == nil || rep.Clean {
			t.Fatalf("audit with findings: exit %d, want 1:\n%s", code, out)
		}
		checkFindings(t, rep, e.topic, map[int]map[string][]audit.Range{
			0: {"missing": {rg(5, 6)}, "duplicated": {rg(15, 16)}, "aborted": {rg(10, 11)}, "beyond": {rg(23, 25)}},
			1: {"in flight": {rg(20, 23)}, "unverifiable": {rg(0, 2), rg(3, 5)}},
		})
		if p := rep.partition(t, e.topic, 0); p.Copies != 1 {
			t.Errorf("partition 0: %d extra copies, want 1", p.Copies)
		}

		// The table names each finding.
		p := harness.StartProcess(t, "audit table", bin, "audit", "--sink", sinkURL, "--group", e.group,
			"--etcd-endpoints", strings.Join(e.etcd.Endpoints(), ","), "--brokers", strings.Join(e.kafka.Brokers(), ","))
		if code := p.Wait(60 * time.Second); code != 1 {
			t.Fatalf("audit table: exit %d, want 1:\n%s", code, p.Output())
		}
		for _, w := range []string{"missing", "duplicated", "aborted", "not committed (in flight)", "not committed (beyond the commit)", "unverifiable", "[23, 25)"} {
			if !strings.Contains(p.Output(), w) {
				t.Errorf("table lacks %q:\n%s", w, p.Output())
			}
		}
		t.Logf("audit:\n%s", p.Output())

		// Bad input: exit 2 naming the value.
		for _, tc := range []struct {
			name  string
			group string
			args  []string
			want  []string
		}{
			{"unknown group", "nosuch", []string{"--sink", sinkURL}, []string{`--group "nosuch"`, "no such group", e.group}},
			{"missing directory", e.group, []string{"--sink", "file://" + dir + "/nosuch"}, []string{dir + "/nosuch", "no such file or directory"}},
			{"topic not in the group", e.group, []string{"--sink", sinkURL, "--topic", "orders"}, []string{`"orders"`, "not in group", e.topic}},
			{"partition not in the topic", e.group, []string{"--sink", sinkURL, "--topic", e.topic + ":7"}, []string{e.topic + "/7", "not in the group"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, out, _ := e.auditCLI(tc.group, tc.args...)
				if code != 2 {
					t.Fatalf("exit %d, want 2:\n%s", code, out)
				}
				for _, w := range tc.want {
					if !strings.Contains(out, w) {
						t.Errorf("output lacks %q:\n%s", w, out)
					}
				}
			})
		}
	})
}

// TestAuditPostgresRaw: the same with a raw table: a row deleted, the
// aborted record inserted, a row past the commit; in flight is what the
// sink's offsets table committed beyond etcd. Duplicates cannot exist
// (the primary key) and the report says it checks none.
func TestAuditPostgresRaw(t *testing.T) {
	eachBackend(t, func(t *testing.T, kb kafkaBackend) {
		pg := harness.StartPostgres(t)
		e := auditEnv(t, kb, 2)
		url := pg.URL() + "&group=" + e.group + "&table=raw_events"
		ends := e.deliver(e.pgSink(url))

		code, out, rep := e.auditCLI(e.group, "--sink", url)
		if code != 0 || rep == nil || !rep.Clean {
			t.Fatalf("audit of a clean table: exit %d, want 0 and clean:\n%s", code, out)
		}
		if rep.Capabilities.Duplicates || !rep.Capabilities.Missing {
			t.Errorf("raw table checks %+v, want missing and no duplicates", rep.Capabilities)
		}

		if c, n := rep.Compared(); c != 40 || n != 0 || !rep.Capabilities.Records {
			t.Errorf("compared %d, not compared %d (records checked: %v); want 40, 0, true", c, n, rep.Capabilities.Records)
		}

		ins := `INSERT INTO raw_events (topic, partition, "offset", value_bytes, "timestamp", headers) VALUES ($1, $2, $3, '\x00', now(), '[]')`
		pg.Exec(t, `DELETE FROM raw_events WHERE partition = 0 AND "offset" = 5`)
		// A row whose value is not the record's: another run's, say.
		pg.Exec(t, `UPDATE raw_events SET value_bytes = '\x7b7d' WHERE partition = 1 AND "offset" = 3`)
		pg.Exec(t, ins, e.topic, 0, 10)
		pg.Exec(t, ins, e.topic, 0, ends[0]+4)
		// Partition 1: the sink committed a block etcd has not yet.
		pg.Exec(t, ins, e.topic, 1, ends[1])
		pg.Exec(t, `UPDATE offsetkeeper_offsets SET next = $1 WHERE "group" = $2 AND partition = 1`, ends[1]+1, e.group)

		code, out, rep = e.auditCLI(e.group, "--sink", url)
		if code != 1 || rep == nil {
			t.Fatalf("audit with findings: exit %d, want 1:\n%s", code, out)
		}
		checkFindings(t, rep, e.topic, map[int]map[string][]audit.Range{
			0: {"missing": {rg(5, 6)}, "aborted": {rg(10, 11)}, "beyond": {rg(27, 28)}},
			1: {"mismatched": {rg(3, 4)}, "in flight": {rg(20, 21)}},
		})

		code, out, _ = e.auditCLI(e.group, "--sink", pg.URL()+"&table=nosuch")
		if code != 2 || !strings.Contains(out, `"nosuch" does not exist`) {
			t.Errorf("audit of a table that is not there: exit %d, want 2 naming it:\n%s", code, out)
		}
	})
}

// TestAuditPostgresColumns: a columns table with kafka_offset: a row
// deleted, a row copied, the aborted record inserted, a row past the
// commit; a table without kafka_offset cannot be audited.
func TestAuditPostgresColumns(t *testing.T) {
	eachBackend(t, func(t *testing.T, kb kafkaBackend) {
		pg := harness.StartPostgres(t)
		e := auditEnv(t, kb, 2)
		pg.Exec(t, `CREATE TABLE ev (p integer, i integer, kafka_topic text, kafka_partition integer, kafka_offset bigint)`)
		url := pg.URL() + "&group=" + e.group + "&mode=columns&table=ev"
		ends := e.deliver(e.pgSink(url))

		code, out, rep := e.auditCLI(e.group, "--sink", url)
		if code != 0 || rep == nil || !rep.Clean {
			t.Fatalf("audit of a clean table: exit %d, want 0 and clean:\n%s", code, out)
		}
		// A columns table holds fields of the values: the records are not
		// compared, and the report says so rather than count them as
		// matched.
		if c, n := rep.Compared(); c != 0 || n != 40 || rep.Capabilities.Records || !strings.Contains(rep.Capabilities.RecordsNote, "columns table") {
			t.Errorf("compared %d, not compared %d, capabilities %+v; want 0, 40, records not compared and why", c, n, rep.Capabilities)
		}

		ins := `INSERT INTO ev (kafka_topic, kafka_partition, kafka_offset) VALUES ($1, $2, $3)`
		pg.Exec(t, `DELETE FROM ev WHERE kafka_partition = 1 AND kafka_offset = 7`)
		pg.Exec(t, `INSERT INTO ev SELECT * FROM ev WHERE kafka_partition = 0 AND kafka_offset = 3`)
		pg.Exec(t, ins, e.topic, 0, 11)
		pg.Exec(t, ins, e.topic, 1, ends[1])

		code, out, rep = e.auditCLI(e.group, "--sink", url)
		if code != 1 || rep == nil {
			t.Fatalf("audit with findings: exit %d, want 1:\n%s", code, out)
		}
		checkFindings(t, rep, e.topic, map[int]map[string][]audit.Range{
			0: {"duplicated": {rg(3, 4)}, "aborted": {rg(11, 12)}},
			1: {"missing": {rg(7, 8)}, "beyond": {rg(20, 21)}},
		})

		pg.Exec(t, `CREATE TABLE plain (p integer, i integer)`)
		code, out, _ = e.auditCLI(e.group, "--sink", pg.URL()+"&mode=columns&table=plain")
		if code != 2 || !strings.Contains(out, "no kafka_offset column") || !strings.Contains(out, `"plain"`) {
			t.Errorf("audit of a table without kafka_offset: exit %d, want 2 naming it:\n%s", code, out)
		}
	})
}

// TestAuditPostgresUpsert: an upsert table keeps one row per key, so a row
// gone is not reported missing (the report says missing is not checked),
// while the aborted record and a row past the commit still are.
func TestAuditPostgresUpsert(t *testing.T) {
	eachBackend(t, func(t *testing.T, kb kafkaBackend) {
		pg := harness.StartPostgres(t)
		e := auditEnv(t, kb, 1)
		pg.Exec(t, `CREATE TABLE kv (p integer, i integer, kafka_topic text, kafka_partition integer, kafka_offset bigint, PRIMARY KEY (p, i))`)
		url := pg.URL() + "&group=" + e.group + "&mode=upsert&table=kv&key_from=value"
		ends := e.deliver(e.pgSink(url))

		code, out, rep := e.auditCLI(e.group, "--sink", url)
		if code != 0 || rep == nil || !rep.Clean {
			t.Fatalf("audit of a clean table: exit %d, want 0 and clean:\n%s", code, out)
		}
		if rep.Capabilities.Missing {
			t.Errorf("upsert table checks %+v, want no missing", rep.Capabilities)
		}

		ins := `INSERT INTO kv (p, i, kafka_topic, kafka_partition, kafka_offset) VALUES (9, $1, $2, 0, $3)`
		pg.Exec(t, `DELETE FROM kv WHERE kafka_offset = 4`)
		pg.Exec(t, ins, 1, e.topic, 11)
		pg.Exec(t, ins, 2, e.topic, ends[0]+1)

		code, out, rep = e.auditCLI(e.group, "--sink", url)
		if code != 1 || rep == nil {
			t.Fatalf("audit with findings: exit %d, want 1:\n%s", code, out)
		}
		checkFindings(t, rep, e.topic, map[int]map[string][]audit.Range{
			0: {"aborted": {rg(11, 12)}, "beyond": {rg(24, 25)}},
		})
		if p := rep.partition(t, e.topic, 0); p.MissingChecked {
			t.Error("upsert partition: missing_checked true, want false")
		}
	})
}

// TestAuditClickHouse: a columns table of the ClickHouse sink: a row
// deleted, a row copied, the aborted record inserted, a row past the
// commit; a table that is not there cannot be audited.
func TestAuditClickHouse(t *testing.T) {
	eachBackend(t, func(t *testing.T, kb kafkaBackend) {
		ch := harness.StartClickHouse(t)
		ch.Exec(t, chEvents)
		e := auditEnv(t, kb, 2)
		url := chSinkURL(ch, "", false)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sink, err := clickhouse.New(ctx, url, clickhouse.WithGroup(e.group))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sink.Close() })
		ends := e.deliver(sink)

		code, out, rep := e.auditCLI(e.group, "--sink", url)
		if code != 0 || rep == nil || !rep.Clean {
			t.Fatalf("audit of a clean table: exit %d, want 0 and clean:\n%s", code, out)
		}
		// The ClickHouse reader reads offsets: no record is compared, and
		// the report says so.
		if c, n := rep.Compared(); c != 0 || n != 40 || rep.Capabilities.Records || rep.Capabilities.RecordsNote == "" {
			t.Errorf("compared %d, not compared %d, capabilities %+v; want 0, 40, records not compared and why", c, n, rep.Capabilities)
		}

		ch.Exec(t, `ALTER TABLE events DELETE WHERE kafka_partition = 1 AND kafka_offset = 7 SETTINGS mutations_sync = 1`)
		ch.Exec(t, `INSERT INTO events SELECT * FROM events WHERE kafka_partition = 0 AND kafka_offset = 3`)
		ch.Exec(t, fmt.Sprintf(`INSERT INTO events VALUES (99, '%s', 0, 11, 0)`, e.topic))
		ch.Exec(t, fmt.Sprintf(`INSERT INTO events VALUES (98, '%s', 1, %d, 0)`, e.topic, ends[1]))

		code, out, rep = e.auditCLI(e.group, "--sink", url)
		if code != 1 || rep == nil {
			t.Fatalf("audit with findings: exit %d, want 1:\n%s", code, out)
		}
		checkFindings(t, rep, e.topic, map[int]map[string][]audit.Range{
			0: {"duplicated": {rg(3, 4)}, "aborted": {rg(11, 12)}},
			1: {"missing": {rg(7, 8)}, "beyond": {rg(20, 21)}},
		})

		code, out, _ = e.auditCLI(e.group, "--sink", strings.Replace(url, "table=events", "table=nosuch", 1))
		if code != 2 || !strings.Contains(out, "nosuch") || !strings.Contains(out, "does not exist") {
			t.Errorf("audit of a table that is not there: exit %d, want 2 naming it:\n%s", code, out)
		}
		ch.Exec(t, `CREATE TABLE plain (i UInt64) ENGINE = MergeTree ORDER BY i`)
		code, out, _ = e.auditCLI(e.group, "--sink", strings.Replace(url, "table=events", "table=plain", 1))
		if code != 2 || !strings.Contains(out, "plain") || !strings.Contains(out, "no kafka_offset column") {
			t.Errorf("audit of a table without kafka_offset: exit %d, want 2 naming it:\n%s", code, out)
		}
	})
}
