package integration_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// chEvents is the table of the ClickHouse tests, for the sink's columns
// mode: the records' field i and the record's own columns. Plain
// MergeTree, which never folds rows together: a duplicate stays one.
// Its deduplication window (which the sink requires) holds far more
// blocks than a test writes, so every retried block is still in it.
const chEvents = `CREATE TABLE events (i UInt64, kafka_topic String, kafka_partition Int32, kafka_offset Int64, kafka_generation Int64)
	ENGINE = MergeTree ORDER BY (kafka_partition, kafka_offset)
	SETTINGS non_replicated_deduplication_window = 10000`

// chSinkURL is the --sink URL of the table events in ch's database, at
// addr (a proxy's, or ch's own when empty), over the native protocol or,
// with http, over HTTP.
func chSinkURL(ch *harness.ClickHouse, addr string, http bool) string {
	switch {
	case addr != "":
	case http:
		addr = ch.HTTPAddr()
	default:
		addr = ch.NativeAddr()
	}
	u := fmt.Sprintf("clickhouse://%s/%s?table=events&mode=columns", addr, ch.Database())
	if http {
		u += "&protocol=http"
	}
	return u
}

// chInt reads an integer column of a row of harness.ClickHouse.Query.
func chInt(t *testing.T, v any) int64 {
	t.Helper()
	rv := reflect.ValueOf(v)
	switch {
	case rv.CanInt():
		return rv.Int()
	case rv.CanUint():
		return int64(rv.Uint())
	}
	t.Fatalf("a %T, want an integer", v)
	return 0
}

// chRows is how many rows events holds.
func chRows(t *testing.T, ch *harness.ClickHouse) int64 {
	t.Helper()
	return ch.QueryInt(t, `SELECT count() FROM events`)
}

// checkCHExactlyOnce asserts that events holds every offset below want[p]
// of the env's topic exactly once, counted by kafka_topic,
// kafka_partition and kafka_offset, and nothing else.
func (e *env) checkCHExactlyOnce(ch *harness.ClickHouse, want map[int]int64) {
	e.t.Helper()
	got := map[int][4]int64{}
	for _, r := range ch.Query(e.t, `SELECT kafka_topic, kafka_partition, count(), uniqExact(kafka_offset), min(kafka_offset), max(kafka_offset)
		FROM events GROUP BY kafka_topic, kafka_partition`) {
		if r[0] != e.topic {
			e.t.Errorf("%d rows of topic %q", chInt(e.t, r[2]), r[0])
			continue
		}
		got[int(chInt(e.t, r[1]))] = [4]int64{chInt(e.t, r[2]), chInt(e.t, r[3]), chInt(e.t, r[4]), chInt(e.t, r[5])}
	}
	checkEachOffsetOnce(e.t, got, want)
	if e.t.Failed() {
		// Where the duplicates are, to tell a replayed block from a zombie's.
		for _, r := range ch.Query(e.t, `SELECT kafka_partition, min(kafka_offset), max(kafka_offset), count() FROM
			(SELECT kafka_partition, kafka_offset FROM events GROUP BY kafka_partition, kafka_offset HAVING count() > 1)
			GROUP BY kafka_partition`) {
			e.t.Logf("partition %d: %d offsets duplicated, between %d and %d", chInt(e.t, r[0]), chInt(e.t, r[3]), chInt(e.t, r[1]), chInt(e.t, r[2]))
		}
	}
}

// member reports whether a replica of id holds a member key: its lease
// is alive.
func (e *env) member(id string) bool {
	for _, m := range e.snapshot().Members {
		if m.ID == id {
			return true
		}
	}
	return false
}

// produceJSON writes n records {"i":<from+k>} to partition p.
func (e *env) produceJSON(p, from, n int) {
	e.t.Helper()
	recs := make([]*kgo.Record, n)
	for k := range recs {
		recs[k] = &kgo.Record{Value: fmt.Appendf(nil, `{"i":%d}`, from+k)}
	}
	e.kafka.Produce(e.t, e.topic, p, recs...)
}

// TestClickHouseExactlyOnceUnderSIGKILLAndSIGSTOP: 100,000 records flow
// through three replica processes (one over the native protocol, the others
// over HTTP) into a ClickHouse table that has no key
// to hide a duplicate, while replicas are SIGKILLed and replaced, or
// SIGSTOPped until their lease has expired and then resumed as zombies
// that hold a block. Every offset ends up in the table exactly once: a
// new owner writes the intent's range again with its token, and
// ClickHouse drops the second copy of a block whoever sends it. On Apache
// Kafka's three nodes the leader of partition 1 is SIGSTOPped too while the
// records flow, until the controllers fence it and another broker leads,
// and then resumed. Only replicas over HTTP are SIGKILLed: the test's
// engine (clickhouse-local) aborts when a native-protocol client is killed
// mid-insert, which a clickhouse-server survives (see harness.ClickHouse's
// supervise); the replica over the native protocol is paused as a zombie.
// Aborts of the engine, should any happen, are logged and counted as the
// engine's faults, which the sink must survive too.
func TestClickHouseExactlyOnceUnderSIGKILLAndSIGSTOP(t *testing.T) {
	if testing.Short() {
		t.Skip("processes, kills and 100,000 records")
	}
	eachBackend(t, func(t *testing.T, kb kafkaBackend) {
		const parts, total, minKills, minStops = 6, 100_000, 3, 2
		began := time.Now()
		ch := harness.StartClickHouse(t)
		ch.Exec(t, chEvents)
		e := newEnvOn(t, kb, "orders", parts)
		fault := faultOnce{e: e}
		if kb.real {
			fault.f = pauseLeaderFault(1)
		}

		seed := uint64(time.Now().UnixNano())
		rng := rand.New(rand.NewPCG(seed, seed))
		var procs, all []*harness.Process
		ids := map[*harness.Process]string{}
		overHTTP := map[*harness.Process]bool{}
		// One replica speaks the native protocol, the others HTTP: a block
		// replayed over one is deduplicated against its first copy over the
		// other.
		startOne := func(http bool) {
			id := fmt.Sprintf("r%d", len(all)+1)
			p := e.processSink(id, chSinkURL(ch, "", http))
			procs = append(procs, p)
			all = append(all, p)
			ids[p] = id
			overHTTP[p] = http
		}
		for i := range 3 {
			startOne(i > 0)
		}

		// Produce 100,000 records at about 10,000/s, round-robin.
		cl := e.producer()
		defer cl.Close()
		prodErr := produceAt10k(cl, total, roundRobin(e.topic, parts))
		produced := perPartition(parts, total/parts)
		for p := range total % parts {
			produced[p]++
		}

		// Every 0.5 to 1.5 s while records flow (and until there were enough
		// of each), SIGKILL a random replica and start a new one in its
		// place, or SIGSTOP one until its member key is gone (its lease
		// expired, its partitions are free for the others) and SIGCONT it.
		kills, stops := 0, 0
		for producing := true; producing || kills < minKills || stops < minStops; {
			if !chaosPause(t, rng, prodErr, &producing, &fault) {
				continue
			}
			i := rng.IntN(len(procs))
			p := procs[i]
			if p.Exited() {
				t.Fatalf("replica %s exited before it was signalled:\n%s", ids[p], p.Output())
			}
			stop := rng.IntN(3) == 0 || !overHTTP[p]
			if !producing {
				stop = stops < minStops
			}
			if !stop && !overHTTP[p] {
				continue // killed only over HTTP (above)
			}
			if stop {
				p.Signal(syscall.SIGSTOP)
				await(t, 15*time.Second, ids[p]+"'s lease to expire", func() bool { return !e.member(ids[p]) })
				p.Signal(syscall.SIGCONT)
				stops++
				continue
			}
			p.Kill()
			kills++
			procs = append(procs[:i], procs[i+1:]...)
			startOne(true)
		}
		fault.check()
		await(t, 60*time.Second, "every record committed", func() bool { return e.allCommitted(produced) })
		for _, p := range procs {
			if p.Exited() {
				t.Fatalf("replica %s exited:\n%s", ids[p], p.Output())
			}
		}
		e.checkCHExactlyOnce(ch, produced)
		if n, d := chRows(t, ch), ch.QueryInt(t, `SELECT uniqExact(i) FROM events`); n != total || d != total {
			t.Errorf("%d rows with %d distinct values of i, want %d of each", n, d, total)
		}
		// How often a new owner found the table ahead of etcd (the crash fell
		// between the insert and the commit), and how often an insert was
		// retried by the sink.
		fromSink, retries := 0, 0
		for _, p := range all {
			fromSink += strings.Count(p.Output(), "resuming from the sink's offset")
			retries += strings.Count(p.Output(), "retrying with the same token")
		}
		t.Logf("%d records, %d SIGKILLs and %d SIGSTOPs past the lease (seed %d), %d replicas started; "+
			"new owners resumed from the table's offset %d times, %d inserts retried; the engine aborted %d times; %s in all",
			total, kills, stops, seed, len(all), fromSink, retries, ch.Aborts.Load(), time.Since(began).Round(100*time.Millisecond))
	})
}

// TestClickHouseLostInsertAnswerDeduplicated: an INSERT reaches
// ClickHouse and is stored, but its answer is lost and its connection cut
// (an Interceptor between the replica and the server); the retry, with the
// same token, is dropped by the server. Over the native protocol and HTTP.
func TestClickHouseLostInsertAnswerDeduplicated(t *testing.T) {
	for _, tc := range []struct {
		name    string
		http    bool
		request string // what the sink's INSERT sends first
		turn    int    // the server's reply that answers it
	}{
		{name: "native", request: "INSERT INTO", turn: 2},
		{name: "http", http: true, request: "query=INSERT", turn: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := harness.StartClickHouse(t)
			ch.Exec(t, chEvents)
			e := newEnv(t, "orders", 2)
			target := ch.NativeAddr()
			if tc.http {
				target = ch.HTTPAddr()
			}
			ic := harness.NewInterceptor(t, target)
			a := e.processSink("a", chSinkURL(ch, ic.Addr(), tc.http))
			e.produceJSON(0, 0, 1000)
			e.produceJSON(1, 0, 1000)
			await(t, 30*time.Second, "the first records committed", func() bool { return e.allCommitted(perPartition(2, 1000)) })

			ic.LoseAnswer(tc.request, tc.turn)
			e.produceJSON(0, 1000, 500)
			await(t, 20*time.Second, "the answer to an INSERT to be lost", func() bool { return ic.Lost() == 1 })
			// New connections are refused now: the retry cannot reach the
			// server before the block is seen there.
			await(t, 20*time.Second, "the block whose answer was lost to be in the table", func() bool { return chRows(t, ch) == 2500 })
			if got := e.committed()[0]; got != 1000 {
				t.Fatalf("partition 0 committed %d while its block's answer was lost, want 1000", got)
			}
			ic.Allow()
			await(t, 30*time.Second, "the retried block committed", func() bool { return e.allCommitted(map[int]int64{0: 1500, 1: 1000}) })
			if a.Exited() {
				t.Fatalf("the replica exited:\n%s", a.Output())
			}
			e.checkCHExactlyOnce(ch, map[int]int64{0: 1500, 1: 1000})
			if !strings.Contains(a.Output(), "retrying with the same token") {
				t.Errorf("the sink never said it retried the insert; the replica's output:\n%s", a.Output())
			}
		})
	}
}

// httpRequestComplete reports whether b holds a whole HTTP request (its
// body by Content-Length, or chunked up to the last chunk).
func httpRequestComplete(b []byte) bool {
	head, body, ok := bytes.Cut(b, []byte("\r\n\r\n"))
	if !ok {
		return false
	}
	for _, line := range strings.Split(strings.ToLower(string(head)), "\r\n") {
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimSpace(value)
		switch name {
		case "content-length":
			n, err := strconv.Atoi(value)
			return err == nil && len(body) >= n
		case "transfer-encoding":
			if strings.Contains(value, "chunked") {
				return bytes.HasSuffix(body, []byte("0\r\n\r\n"))
			}
		}
	}
	return false
}

// TestClickHouseZombieInsertAfterReplayDeduplicated: replica a has put
// its intent and sent its INSERT, which an Interceptor holds, whole,
// before ClickHouse sees it; a is then SIGSTOPped. Its lease expires, b
// claims the partition, finds the intent and writes exactly its range
// again, and commits. Only then does a's INSERT reach ClickHouse, and a
// resume: the server answers it 200, and drops it as the block it
// already has. One copy.
func TestClickHouseZombieInsertAfterReplayDeduplicated(t *testing.T) {
	ch := harness.StartClickHouse(t)
	ch.Exec(t, chEvents)
	e := newEnv(t, "orders", 2)
	// a writes over HTTP, whose INSERT is one request the Interceptor can
	// hold whole; b over the native protocol, straight to the server.
	ic := harness.NewInterceptor(t, ch.HTTPAddr())
	a := e.processSink("a", chSinkURL(ch, ic.Addr(), true))
	e.produceJSON(0, 0, 100)
	e.produceJSON(1, 0, 100)
	await(t, 30*time.Second, "a to commit the first records", func() bool { return e.allCommitted(perPartition(2, 100)) })

	ic.Hold("query=INSERT")
	e.produceJSON(0, 100, 200)
	await(t, 20*time.Second, "a's INSERT to be held whole", func() bool {
		h := ic.Holding()
		return len(h) == 1 && httpRequestComplete(h[0])
	})
	a.Signal(syscall.SIGSTOP)
	snap := e.snapshot()
	p0 := sinks.Partition{Topic: e.topic, Partition: 0}
	intent, ok := snap.Intents[p0]
	claim := snap.Claims[p0]
	if !ok || intent.From != 100 || intent.Next <= 100 || claim.Replica != "a" || intent.Epoch != claim.Epoch {
		t.Fatalf("a's intent %v (found %v), claim %+v: want a's intent from 100, put before its INSERT", intent, ok, claim)
	}
	if n := chRows(t, ch); n != 200 {
		t.Fatalf("%d rows while a's INSERT is held, want 200", n)
	}

	e.processSink("b", chSinkURL(ch, "", false))
	await(t, 20*time.Second, "b to own both partitions after a's lease expired", func() bool {
		return balanced(e.owners(), map[string]int{"b": 2})
	})
	await(t, 20*time.Second, "b to replay a's block and commit it", func() bool {
		o := e.snapshot().Offsets[p0]
		return o.Replica == "b" && o.Next >= intent.Next
	})
	if n := ch.QueryInt(t, `SELECT count() FROM events WHERE kafka_partition = 0 AND kafka_offset >= ? AND kafka_offset < ?`,
		intent.From, intent.Next); n != intent.Next-intent.From {
		t.Fatalf("%d rows of a's block %v after b's replay, want %d", n, intent, intent.Next-intent.From)
	}

	ic.Release()
	await(t, 20*time.Second, "ClickHouse to answer a's late INSERT", func() bool { return len(ic.Answers()) == 1 })
	if ans := ic.Answers()[0]; !strings.HasPrefix(ans, "HTTP/1.1 200") {
		t.Errorf("ClickHouse answered a's late INSERT %q, want 200: a duplicate block is dropped, not refused", ans)
	}
	a.Signal(syscall.SIGCONT)
	await(t, 20*time.Second, "a to notice it lost its session", func() bool { return strings.Contains(a.Output(), "session lost") })
	e.produceJSON(0, 300, 100)
	e.produceJSON(1, 100, 100)
	want := map[int]int64{0: 400, 1: 200}
	await(t, 30*time.Second, "everything committed", func() bool { return e.allCommitted(want) })
	e.checkCHExactlyOnce(ch, want)
	t.Logf("a's block %v: replayed by b, then a's INSERT answered %q", intent, strings.SplitN(ic.Answers()[0], "\r\n", 2)[0])
}

// TestClickHouseRestartDuringRun: ClickHouse is SIGKILLed and started
// again three times while two replica processes write, one over the
// native protocol, one over HTTP; their writes retry, and the table holds
// every record exactly once.
func TestClickHouseRestartDuringRun(t *testing.T) {
	if testing.Short() {
		t.Skip("replica processes and engine restarts")
	}
	ch := harness.StartClickHouse(t)
	ch.Exec(t, chEvents)
	e := newEnv(t, "orders", 4)
	a, b := e.processSink("a", chSinkURL(ch, "", false)), e.processSink("b", chSinkURL(ch, "", true))
	l := e.startLoad(3000)
	await(t, 20*time.Second, "2/2", func() bool { return balanced(e.owners(), map[string]int{"a": 2, "b": 2}) })
	retried := func() int {
		return sinkRetries(a.Output()) + sinkRetries(b.Output())
	}
	// Between restarts, a second's worth of records goes in; each time
	// ClickHouse stays down until a write has failed on it, so that every
	// restart finds the replicas writing (a quick restart can fall
	// between two writes).
	for i := range 3 {
		before := chRows(t, ch)
		await(t, 30*time.Second, "rows to flow", func() bool { return chRows(t, ch) >= before+3000 })
		failed := retried()
		ch.Kill()
		await(t, 30*time.Second, "an insert to fail while ClickHouse is down", func() bool { return retried() > failed })
		ch.Start()
		// Block ids recorded without their part, which make an insert of
		// their token be dropped without its rows: the sink's check
		// repairs those (harness.DedupOrphans).
		t.Logf("restart %d done; block ids without their part: %v", i+1, ch.DedupOrphans(t, "events"))
	}
	before := chRows(t, ch)
	await(t, 30*time.Second, "rows to flow after the last restart", func() bool { return chRows(t, ch) >= before+3000 })
	produced := l.stop(t)
	await(t, 60*time.Second, "everything committed", func() bool { return e.allCommitted(produced) })
	for _, p := range []*harness.Process{a, b} {
		if p.Exited() {
			t.Fatalf("a replica exited:\n%s", p.Output())
		}
	}
	e.checkCHExactlyOnce(ch, produced)
	retries := retried()
	if retries == 0 {
		t.Error("no insert retried across three restarts")
	}
	var n int64
	for _, c := range produced {
		n += c
	}
	repairs := sinkRepairs(a.Output()) + sinkRepairs(b.Output())
	t.Logf("%d records across 3 restarts of ClickHouse; %d insert attempts retried; %d repairs of rows dropped with an orphan block id",
		n, retries, repairs)
}
