package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/offsetkeeper/offsetkeeper/audit"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// Issue 22, "honest signals": an audit that checks offsets alone passes a
// sink holding, at the right offsets, records that are not Kafka's. These
// tests plant exactly that, as it happens: a topic deleted and created
// again, and a table that kept another run's rows.

// recreateTopic deletes e's topic and creates it again, empty, with as
// many partitions, then writes n records to each partition of the new
// topic, their values naming the new incarnation, through a producer of
// its own (one that wrote to the old topic knows its id).
func (e *env) recreateTopic(n int) {
	e.t.Helper()
	if e.kafka.Cluster() != nil {
		// kfake: the harness deletes topics on Apache Kafka only.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req := kmsg.NewPtrDeleteTopicsRequest()
		req.TimeoutMillis = 30000
		req.TopicNames = []string{e.topic}
		dt := kmsg.NewDeleteTopicsRequestTopic()
		dt.Topic = kmsg.StringPtr(e.topic)
		req.Topics = append(req.Topics, dt)
		resp, err := req.RequestWith(ctx, e.kafka.Client(e.t))
		if err != nil {
			e.t.Fatalf("delete topic %s: %v", e.topic, err)
		}
		for _, rt := range resp.Topics {
			if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
				e.t.Fatalf("delete topic %s: %v", e.topic, err)
			}
		}
	} else {
		e.kafka.DeleteTopic(e.t, e.topic)
	}
	e.kafka.CreateTopic(e.t, e.topic, e.parts)
	prod := e.kafka.NewProducer(e.t, kgo.NoCompression())
	for p := range e.parts {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, `{"p":%d,"i":%d,"incarnation":2}`, p, i)}
		}
		prod.Produce(e.t, e.topic, p, recs...)
	}
	if ends := e.logEnds(); ends[0] != int64(n) {
		e.t.Fatalf("the new topic's partition 0 ends at %d, want %d", ends[0], n)
	}
}

// TestAuditRecreatedTopicIsMismatched: a file sink holds the 20 records of
// each partition of a topic, committed; the topic is deleted and created
// again with 20 other records at the same offsets. The offsets still
// match; the records do not: the audit finds every one mismatched, with
// exact counts and ranges, and exits 1, where it found the sink clean and
// said how many records it compared before.
func TestAuditRecreatedTopicIsMismatched(t *testing.T) {
	eachBackend(t, func(t *testing.T, kb kafkaBackend) {
		e := newEnvOn(t, kb, "incarnation", 2)
		e.produce(20)
		dir := t.TempDir()
		fs, err := file.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		e.deliver(fs)
		sinkURL := "file://" + dir

		code, out, rep := e.auditCLI(e.group, "--sink", sinkURL)
		if code != 0 || rep == nil || !rep.Clean {
			t.Fatalf("audit of the first incarnation: exit %d, want 0 and clean:\n%s", code, out)
		}
		if c, n := rep.Compared(); c != 40 || n != 0 || !rep.Capabilities.Records {
			t.Fatalf("compared %d records, %d not (records checked: %v); want 40, 0, true", c, n, rep.Capabilities.Records)
		}

		e.recreateTopic(20)

		code, out, rep = e.auditCLI(e.group, "--sink", sinkURL)
		if code != 1 || rep == nil || rep.Clean {
			t.Fatalf("audit after the topic was re-created: exit %d, want 1:\n%s", code, out)
		}
		checkFindings(t, rep, e.topic, map[int]map[string][]audit.Range{
			0: {"mismatched": {rg(0, 20)}},
			1: {"mismatched": {rg(0, 20)}},
		})
		if c, _ := rep.Compared(); c != 40 || rep.Mismatched() != 40 {
			t.Errorf("compared %d, mismatched %d; want 40, 40", c, rep.Mismatched())
		}
		p := harness.StartProcess(t, "audit table", bin, "audit", "--sink", sinkURL, "--group", e.group,
			"--etcd-endpoints", strings.Join(e.etcd.Endpoints(), ","), "--brokers", strings.Join(e.kafka.Brokers(), ","))
		if code := p.Wait(60 * time.Second); code != 1 {
			t.Fatalf("audit table: exit %d, want 1:\n%s", code, p.Output())
		}
		for _, w := range []string{"MISMATCHED", "mismatched  20", "[0, 20)", "40 mismatched", "40 records compared with Kafka's (key, value, timestamp)"} {
			if !strings.Contains(p.Output(), w) {
				t.Errorf("table lacks %q:\n%s", w, p.Output())
			}
		}
		t.Logf("audit:\n%s", p.Output())
	})
}

// TestAuditAnotherRunsRowsAreMismatched: issue 22's row 5 as it happened.
// A first run (its own Kafka, etcd and group) fills a raw PostgreSQL
// table; a second run, of another Kafka whose topic has the same name and
// records of the same keys and values at the same offsets (produced later,
// so with other timestamps), writes to the same table: every row collides
// with the first run's (ON CONFLICT DO NOTHING), so nothing of the second
// run is stored, yet its offsets are committed and the table holds a row
// at each. The audit of the second run finds all 40 mismatched and exits
// 1; the first run's still audits clean, all 40 compared.
func TestAuditAnotherRunsRowsAreMismatched(t *testing.T) {
	pg := harness.StartPostgres(t)
	url := pg.URL() + "&table=runs"

	first := newEnv(t, "events", 2)
	first.setGroup("run-1")
	first.produce(20)
	first.deliver(first.pgSink(url))

	second := newEnv(t, "events", 2)
	second.setGroup("run-2")
	second.produce(20)
	second.deliver(second.pgSink(url))
	if got := second.committed(); got[0] != 20 || got[1] != 20 {
		t.Fatalf("the second run committed %v, want 20 each", got)
	}

	code, out, rep := second.auditCLI(second.group, "--sink", url)
	if code != 1 || rep == nil || rep.Clean {
		t.Fatalf("audit of the second run: exit %d, want 1:\n%s", code, out)
	}
	checkFindings(t, rep, second.topic, map[int]map[string][]audit.Range{
		0: {"mismatched": {rg(0, 20)}},
		1: {"mismatched": {rg(0, 20)}},
	})
	for _, p := range rep.Partitions {
		if p.Held != 20 || p.Delivered != 20 || p.Compared != 20 || p.Missing.Count != 0 {
			t.Errorf("%s/%d: held %d, delivered %d, compared %d, missing %d; want 20, 20, 20, 0",
				p.Topic, p.Partition, p.Held, p.Delivered, p.Compared, p.Missing.Count)
		}
	}

	code, out, rep = first.auditCLI(first.group, "--sink", url)
	if code != 0 || rep == nil || !rep.Clean {
		t.Fatalf("audit of the first run: exit %d, want 0 and clean:\n%s", code, out)
	}
	if c, n := rep.Compared(); c != 40 || n != 0 {
		t.Errorf("first run: compared %d, not compared %d; want 40, 0", c, n)
	}
}

// setGroup makes e's replicas, and its view of etcd, those of group g.
func (e *env) setGroup(g string) {
	e.t.Helper()
	c, err := coordinator.New(e.admin, g)
	if err != nil {
		e.t.Fatal(err)
	}
	e.group, e.coord = g, c
}
