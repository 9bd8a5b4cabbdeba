package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
)

// processSink starts `offsetkeeper run` as a separate process writing to
// the sink of sinkURL. Its HTTP endpoints listen on a free loopback port:
// processes share the host, and a second one on the default port would
// exit at once.
func (e *env) processSink(id, sinkURL string, extra ...string) *harness.Process {
	e.t.Helper()
	args := []string{"run",
		"--http-addr", "127.0.0.1:0",
		"--etcd-endpoints", strings.Join(e.etcd.Endpoints(), ","),
		"--brokers", strings.Join(e.kafka.Brokers(), ","),
		"--group", e.group,
		"--topics", e.topic,
		"--sink", sinkURL,
		"--replica-id", id,
		"--lease-ttl", "2s",
		"--flush-interval", "100ms",
		"--fetch-max-wait", "100ms",
		"--log-format", "console",
	}
	return harness.StartProcess(e.t, id, bin, append(args, extra...)...)
}

// pgSink opens a postgres sink for a replica of the env's group; it is
// closed in t.Cleanup, after the replicas started later have stopped.
func (e *env) pgSink(url string) *postgres.Sink {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.New(ctx, url, postgres.WithGroup(e.group))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = s.Close() })
	return s
}

func pgConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// checkExactlyOnce asserts that table holds every offset below want[p] of
// the env's topic exactly once, read from its kafka_partition and
// kafka_offset columns (or partition and "offset" in a raw table).
func (e *env) checkExactlyOnce(conn *pgx.Conn, table, partCol, offCol string, want map[int]int64) {
	e.t.Helper()
	rows, err := conn.Query(context.Background(), fmt.Sprintf(
		`SELECT %s, count(*), count(DISTINCT %s), coalesce(min(%s), -1), coalesce(max(%s), -1) FROM %s GROUP BY 1`,
		partCol, offCol, offCol, offCol, table))
	if err != nil {
		e.t.Fatal(err)
	}
	got := map[int][4]int64{}
	for rows.Next() {
		var p int
		var c [4]int64
		if err := rows.Scan(&p, &c[0], &c[1], &c[2], &c[3]); err != nil {
			e.t.Fatal(err)
		}
		got[p] = c
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	checkEachOffsetOnce(e.t, got, want)
}

// TestPostgresExactlyOnceUnderSIGKILL: replica processes are SIGKILLed at
// random while 200,000 records flow, and replaced; the table, which has no
// key that could hide a duplicate, ends up with every offset exactly once.
// On Apache Kafka's three nodes the leader of partition 0 is SIGKILLed too
// while the records flow, started again and made the leader again by a
// preferred-leader election.
func TestPostgresExactlyOnceUnderSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("processes, kills and 200,000 records")
	}
	eachBackend(t, func(t *testing.T, kb kafkaBackend) {
		const parts, total = 6, 200_000
		pg := harness.StartPostgres(t)
		e := newEnvOn(t, kb, "orders", parts)
		fault := faultOnce{e: e}
		if kb.real {
			fault.f = killLeaderFault(0)
		}
		pg.Exec(t, `CREATE TABLE events (i bigint NOT NULL, kafka_partition integer, kafka_offset bigint)`)
		url := pg.URL() + "&group=" + e.group + "&mode=columns&table=events"

		seed := uint64(time.Now().UnixNano())
		rng := rand.New(rand.NewPCG(seed, seed))
		var procs, all []*harness.Process
		startOne := func() {
			p := e.processSink(fmt.Sprintf("r%d", len(all)+1), url)
			procs = append(procs, p)
			all = append(all, p)
		}
		for range 3 {
			startOne()
		}

		// Produce 200,000 records at about 10,000/s, round-robin.
		cl := e.producer()
		defer cl.Close()
		produced := map[int]int64{}
		prodErr := produceAt10k(cl, total, roundRobin(e.topic, parts))
		for p := range parts {
			produced[p] = total / parts
			if p < total%parts {
				produced[p]++
			}
		}

		// Kill a random replica every 0.5 to 2 s while records flow, and start
		// a new one in its place; after the first, the broker fault.
		kills := 0
		for producing := true; producing; {
			select {
			case err := <-prodErr:
				if err != nil {
					t.Fatalf("produce: %v", err)
				}
				producing = false
				continue
			case <-time.After(time.Duration(500+rng.IntN(1500)) * time.Millisecond):
			}
			i := rng.IntN(len(procs))
			procs[i].Kill()
			kills++
			procs = append(procs[:i], procs[i+1:]...)
			startOne()
			fault.inject(producing)
		}
		fault.check()
		await(t, 60*time.Second, "every record committed", func() bool { return e.allCommitted(produced) })

		conn := pgConn(t, pg.URL())
		e.checkExactlyOnce(conn, "events", "kafka_partition", "kafka_offset", produced)
		var rows, distinct int64
		if err := conn.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT i) FROM events`).Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		if rows != total || distinct != total {
			t.Errorf("%d rows with %d distinct values, want %d of each", rows, distinct, total)
		}
		var dead int64
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM offsetkeeper_dead_letters`).Scan(&dead); err != nil {
			t.Fatal(err)
		}
		if dead != 0 {
			t.Errorf("%d dead letters, want none", dead)
		}
		// How often a new owner found the sink ahead of etcd: the crash fell
		// between the two commits, and only the sink's offset kept the block
		// from being written twice.
		fromSink := 0
		for _, p := range all {
			fromSink += strings.Count(p.Output(), "resuming from the sink's offset")
		}
		t.Logf("%d records, %d SIGKILLs (seed %d), %d replicas started; new owners resumed from the sink's offset %d times",
			total, kills, seed, len(all), fromSink)
	})
}

// TestPostgresCrashAfterSinkCommitResumesFromSink: the replica dies after
// the sink's transaction committed and before the etcd commit. The next
// owner starts from the sink's offset: it writes nothing twice and does not
// replay the intent.
func TestPostgresCrashAfterSinkCommitResumesFromSink(t *testing.T) {
	pg := harness.StartPostgres(t)
	e := newEnv(t, "orders", 2)
	e.produce(1000)
	url := pg.URL() + "&group=" + e.group

	crashing := &hookSink{inner: e.pgSink(url)}
	e.crashAt(e.config("r1"), crashing, 0, true)
	lost := crashing.blocks(0)
	if len(lost) != 1 {
		t.Fatalf("blocks of partition 0 before the crash: %+v", lost)
	}
	if got := e.committed()[0]; got != lost[0].From {
		t.Fatalf("partition 0 committed %d in etcd, want %d: the crash came before the etcd commit", got, lost[0].From)
	}
	sink := e.pgSink(url)
	next, gen, ok, err := sink.Resume(context.Background(), "orders", 0)
	if err != nil || !ok || next != lost[0].Next || gen != 0 {
		t.Fatalf("sink's Resume = %d, %d, %v, %v; want %d, 0, true: the block is in the sink", next, gen, ok, err, lost[0].Next)
	}

	second := &hookSink{inner: sink}
	e.start(e.config("r2"), second)
	// Without any new record, the next owner commits the sink's offset to
	// etcd (no write: the rows are there), so lag and intent are right.
	await(t, 30*time.Second, "etcd to catch up with the sink", func() bool { return e.committed()[0] == lost[0].Next })
	if bs := second.blocks(0); len(bs) != 0 && bs[0].From < lost[0].Next {
		t.Fatalf("the catch-up wrote %+v, want no write below the sink's offset", bs)
	}
	e.produce(500)
	want := perPartition(2, 1500)
	await(t, 30*time.Second, "the next owner to commit everything", func() bool { return e.allCommitted(want) })
	bs := second.blocks(0)
	if len(bs) == 0 || bs[0].From != lost[0].Next {
		t.Fatalf("next owner's blocks of partition 0 %+v: want the first to start at the sink's offset %d, not replay [%d, %d)",
			bs, lost[0].Next, lost[0].From, lost[0].Next)
	}
	for _, b := range bs {
		if b.From < lost[0].Next {
			t.Errorf("the next owner wrote [%d, %d) again, which the sink held", b.From, b.Next)
		}
	}
	conn := pgConn(t, pg.URL())
	e.checkExactlyOnce(conn, "offsetkeeper_records", "partition", `"offset"`, want)
	t.Logf("crashed after the sink committed [%d, %d); the next owner resumed at %d", lost[0].From, lost[0].Next, bs[0].From)
}

// TestPostgresPoisonRecordsDeadLettered: in columns mode, records the table
// refuses go to the dead-letter table with the reason, their good
// neighbours in the same blocks go to the table, and the committed offset
// reaches the log end.
func TestPostgresPoisonRecordsDeadLettered(t *testing.T) {
	pg := harness.StartPostgres(t)
	e := newEnv(t, "orders", 2)
	pg.Exec(t, `CREATE TABLE orders (id integer NOT NULL, amount numeric CHECK (amount >= 0), kafka_partition integer, kafka_offset bigint)`)
	url := pg.URL() + "&mode=columns&table=orders"
	kinds := []struct {
		value  string
		reason string // "" for a good record
	}{
		{`{"id": %d, "amount": 10}`, ""},
		{`not json %d`, "not JSON"},
		{`{"id": %d, "amount": 1.5}`, ""},
		{`{"id": "x%d"}`, "invalid input syntax for type integer"},
		{`{"id": %d, "amount": -1}`, "check constraint"},
		{`{"id": %d}`, ""},
		{`[%d]`, "JSON array"},
	}
	const perPart = 700
	want := map[int]map[int64]string{} // partition → offset → reason
	for p := range 2 {
		want[p] = map[int64]string{}
		recs := make([]*kgo.Record, perPart)
		for i := range recs {
			k := kinds[(i+p)%len(kinds)]
			recs[i] = &kgo.Record{Value: fmt.Appendf(nil, k.value, i)}
			want[p][int64(i)] = k.reason
		}
		e.kafka.Produce(t, e.topic, p, recs...)
	}
	sink := e.pgSink(url)
	rn := e.start(e.config("r1"), sink)
	ends := perPartition(2, perPart)
	await(t, 30*time.Second, "the offsets past good and bad records", func() bool { return e.allCommitted(ends) })
	rn.stop()

	conn := pgConn(t, pg.URL())
	var good, bad int
	for p := range 2 {
		for off, why := range want[p] {
			var inTable, inDead int64
			var reason string
			if err := conn.QueryRow(context.Background(),
				`SELECT (SELECT count(*) FROM orders WHERE kafka_partition = $1 AND kafka_offset = $2),
				        (SELECT count(*) FROM offsetkeeper_dead_letters WHERE partition = $1 AND "offset" = $2),
				        coalesce((SELECT error FROM offsetkeeper_dead_letters WHERE partition = $1 AND "offset" = $2), '')`,
				p, off).Scan(&inTable, &inDead, &reason); err != nil {
				t.Fatal(err)
			}
			switch {
			case why == "" && (inTable != 1 || inDead != 0):
				t.Errorf("good record %d/%d: %d in the table, %d dead letters", p, off, inTable, inDead)
			case why != "" && (inTable != 0 || inDead != 1 || !strings.Contains(reason, why)):
				t.Errorf("poison record %d/%d: %d in the table, %d dead letters, reason %q (want %q)", p, off, inTable, inDead, reason, why)
			case why == "":
				good++
			default:
				bad++
			}
		}
		next, _, _, err := sink.Resume(context.Background(), e.topic, p)
		if err != nil || next != perPart {
			t.Errorf("partition %d: the sink's next %d (%v), want %d", p, next, err, perPart)
		}
	}
	if got := sink.DeadLetters(); got != int64(bad) {
		t.Errorf("DeadLetters() = %d, want %d", got, bad)
	}
	t.Logf("%d good records in the table, %d poison records dead-lettered", good, bad)
}

// TestPostgresRestartDuringRun: PostgreSQL crashes and comes back three
// times while two replicas write; their writes retry, and the table (no key
// to hide a duplicate) holds every record exactly once.
func TestPostgresRestartDuringRun(t *testing.T) {
	pg := harness.StartPostgres(t)
	e := newEnv(t, "orders", 4)
	pg.Exec(t, `CREATE TABLE events (i bigint NOT NULL, kafka_partition integer, kafka_offset bigint)`)
	url := pg.URL() + "&mode=columns&table=events&retry_timeout=60s"
	sa, sb := e.pgSink(url), e.pgSink(url)
	e.start(e.config("a"), sa)
	e.start(e.config("b"), sb)
	l := e.startLoad(3000)
	await(t, 20*time.Second, "2/2", func() bool { return balanced(e.owners(), map[string]int{"a": 2, "b": 2}) })

	conn := pgConn(t, pg.URL())
	rows := func() int64 {
		var n int64
		_ = conn.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&n)
		return n
	}
	for i := range 3 {
		before := rows()
		await(t, 20*time.Second, "rows to flow", func() bool { return rows() > before })
		pg.Restart()
		conn = pgConn(t, pg.URL())
		t.Logf("restart %d done", i+1)
	}
	before := rows()
	await(t, 20*time.Second, "rows to flow after the last restart", func() bool { return rows() > before })
	produced := l.stop(t)
	await(t, 60*time.Second, "everything committed", func() bool { return e.allCommitted(produced) })
	e.checkExactlyOnce(conn, "events", "kafka_partition", "kafka_offset", produced)
	retries := sa.Retries() + sb.Retries()
	if retries == 0 {
		t.Error("no write retried across three restarts")
	}
	var n int64
	for _, c := range produced {
		n += c
	}
	t.Logf("%d records across 3 restarts of PostgreSQL; %d write attempts retried", n, retries)
}

// checkEachOffsetOnce checks what a table holds per partition, got[p] =
// {rows, distinct offsets, lowest, highest}, against want[p] records
// produced: each of the offsets 0..want[p]-1 exactly once, and no rows of
// another partition.
func checkEachOffsetOnce(t testing.TB, got map[int][4]int64, want map[int]int64) {
	t.Helper()
	for p, n := range want {
		c := got[p]
		if n == 0 && c == ([4]int64{}) {
			continue
		}
		if c != [4]int64{n, n, 0, n - 1} {
			t.Errorf("partition %d: %d rows, %d distinct offsets from %d to %d; want each of 0..%d once", p, c[0], c[1], c[2], c[3], n-1)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("rows of partition %d, which got no records", p)
		}
	}
}
