package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// kvTable is the table of the upsert tests and benchmark: the key column
// and one column of the value.
const kvTable = `(id bigint PRIMARY KEY, v text)`

// keyedRecords is a compacted topic's stream: updates records of keys 0 to
// keys-1 in random order, one in ten a tombstone (nil value). Even keys
// are the JSON object {"id":N}, odd ones the JSON scalar N, each key always
// the same bytes; a value is {"v":"k<key>-u<update>"} padded with pad
// bytes, so that every update of a key is told apart from the others.
func keyedRecords(rng *rand.Rand, topic string, updates, keys, pad int) []*kgo.Record {
	padding := strings.Repeat("p", pad)
	recs := make([]*kgo.Record, updates)
	for i := range recs {
		id := rng.IntN(keys)
		key := fmt.Appendf(nil, "%d", id)
		if id%2 == 0 {
			key = fmt.Appendf(nil, `{"id":%d}`, id)
		}
		var value []byte
		if rng.IntN(10) != 0 {
			value = fmt.Appendf(nil, `{"v":"k%d-u%d%s"}`, id, i, padding)
		}
		recs[i] = &kgo.Record{Topic: topic, Key: key, Value: value}
	}
	return recs
}

// keyedProducer is a client that partitions by key as Kafka's own
// producer does (murmur2 of the key): every record of a key goes to one
// partition, in the order produced. opts are added to its options.
func keyedProducer(t testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerLinger(time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// kvState is a table of kvTable's shape: the value of each present id.
type kvState map[int64]string

// lastValues computes, from records as produced (each with the partition
// and offset the broker gave it), what a compacted topic leaves of each
// key: the value of its record of the highest offset, or nothing when that
// is a tombstone. It fails the test if a key went to two partitions,
// which would leave the last value undefined. It returns the ids whose
// last record was a tombstone too.
func lastValues(t testing.TB, recs []*kgo.Record) (kvState, []int64) {
	t.Helper()
	last := map[string]*kgo.Record{}
	for _, r := range recs {
		prev := last[string(r.Key)]
		if prev != nil && prev.Partition != r.Partition {
			t.Fatalf("key %s produced to partitions %d and %d", r.Key, prev.Partition, r.Partition)
		}
		if prev == nil || r.Offset > prev.Offset {
			last[string(r.Key)] = r
		}
	}
	live := kvState{}
	var deleted []int64
	for key, r := range last {
		id := keyID(t, key)
		if r.Value == nil {
			deleted = append(deleted, id)
			continue
		}
		var v struct{ V string }
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("value %s: %v", r.Value, err)
		}
		live[id] = v.V
	}
	return live, deleted
}

// keyID reads the id of a key of keyedRecords: {"id":N} or N.
func keyID(t testing.TB, key string) int64 {
	t.Helper()
	var obj struct{ ID *int64 }
	if err := json.Unmarshal([]byte(key), &obj); err == nil && obj.ID != nil {
		return *obj.ID
	}
	var id int64
	if err := json.Unmarshal([]byte(key), &id); err != nil {
		t.Fatalf("key %s: neither {\"id\":N} nor N", key)
	}
	return id
}

// readKV reads a table of kvTable's shape.
func readKV(t testing.TB, url, table string) kvState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT id, coalesce(v, '<NULL>') FROM %s`, table))
	if err != nil {
		t.Fatal(err)
	}
	got := kvState{}
	for rows.Next() {
		var id int64
		var v string
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		got[id] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// diff lists how got differs from want, at most a few lines of it.
func (want kvState) diff(got kvState) []string {
	var out []string
	note := func(s string) {
		if len(out) < 10 {
			out = append(out, s)
		}
	}
	for id, v := range want {
		switch g, ok := got[id]; {
		case !ok:
			note(fmt.Sprintf("id %d: missing, want %q", id, v))
		case g != v:
			note(fmt.Sprintf("id %d: %q, want %q", id, g, v))
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			note(fmt.Sprintf("id %d: %q, want no row", id, g))
		}
	}
	return out
}

// TestPostgresUpsertCompactedStreamUnderSIGKILL: a compacted topic's
// stream, 100,000 updates over 5,000 keys with tombstones, goes through
// three replica processes in upsert mode while replicas are SIGKILLed at
// random and replaced. At the end the table holds, for every key, the
// value of its last record (computed from what was produced), no row for
// a key whose last record was a tombstone, and nothing else. With -short:
// 20,000 updates over 1,000 keys. On Apache Kafka's three nodes partition 0
// is reassigned too while the records flow, off its leader and back (the
// log copied to it again), and its preferred leader elected.
func TestPostgresUpsertCompactedStreamUnderSIGKILL(t *testing.T) {
	eachBackend(t, func(t *testing.T, kb kafkaBackend) {
		updates, keys := 100_000, 5_000
		if testing.Short() {
			updates, keys = 20_000, 1_000
		}
		const parts, minKills = 6, 3
		began := time.Now()
		pg := harness.StartPostgres(t)
		e := newEnvOn(t, kb, "kv", parts)
		fault := faultOnce{e: e}
		if kb.real {
			fault.f = reassignFault(0)
		}
		pg.Exec(t, `CREATE TABLE kv `+kvTable)
		url := pg.URL() + "&group=" + e.group + "&mode=upsert&table=kv"

		seed := uint64(time.Now().UnixNano())
		rng := rand.New(rand.NewPCG(seed, seed))
		recs := keyedRecords(rng, e.topic, updates, keys, 0)

		var procs, all []*harness.Process
		startOne := func() {
			p := e.processSink(fmt.Sprintf("r%d", len(all)+1), url)
			procs = append(procs, p)
			all = append(all, p)
		}
		for range 3 {
			startOne()
		}

		// Produce at about 10,000 records/s, partitioned by key.
		cl := keyedProducer(t, e.kafka.Brokers(), e.producerOpts()...)
		prodErr := produceAt10k(cl, len(recs), func(i int) *kgo.Record { return recs[i] })

		// Kill a random replica every 0.5 to 1.5 s while records flow (and at
		// least minKills times), and start a new one in its place.
		kills := 0
		for producing := true; producing || kills < minKills; {
			if !chaosPause(t, rng, prodErr, &producing, &fault) {
				continue
			}
			i := rng.IntN(len(procs))
			if procs[i].Exited() {
				t.Fatalf("a replica exited before it was killed:\n%s", procs[i].Output())
			}
			procs[i].Kill()
			kills++
			procs = append(procs[:i], procs[i+1:]...)
			startOne()
		}

		fault.check()
		// The log ends are what was produced.
		ends := e.logEnds()
		var endSum int64
		for _, n := range ends {
			endSum += n
		}
		if endSum != int64(updates) {
			t.Fatalf("log ends %v sum to %d, want the %d records produced", ends, endSum, updates)
		}
		await(t, 60*time.Second, "the committed offsets to reach the log ends", func() bool { return e.allCommitted(ends) })
		for _, p := range procs {
			if p.Exited() {
				t.Fatalf("a replica exited:\n%s", p.Output())
			}
		}

		want, deleted := lastValues(t, recs)
		got := readKV(t, pg.URL(), "kv")
		if d := want.diff(got); len(d) > 0 {
			t.Errorf("the table is not the last value of every key:\n%s", strings.Join(d, "\n"))
		}
		conn := pgConn(t, pg.URL())
		ctx := harness.Context(t, 30*time.Second)
		var rows, deletedRows int64
		if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE id = ANY($1)) FROM kv`, deleted).Scan(&rows, &deletedRows); err != nil {
			t.Fatal(err)
		}
		if rows != int64(len(want)) {
			t.Errorf("%d rows, want %d: one per key whose last record is not a tombstone", rows, len(want))
		}
		if deletedRows != 0 {
			t.Errorf("%d rows of the %d keys whose last record is a tombstone, want none", deletedRows, len(deleted))
		}
		if len(deleted) == 0 {
			t.Errorf("no key ends in a tombstone (seed %d): the test proves nothing of deletes", seed)
		}
		// The sink's offsets rows stand at the log ends too.
		for p, n := range ends {
			var next int64
			if err := conn.QueryRow(ctx, `SELECT next FROM offsetkeeper_offsets WHERE "group" = $1 AND topic = $2 AND partition = $3`,
				e.group, e.topic, p).Scan(&next); err != nil || next != n {
				t.Errorf("partition %d: the sink's offsets row says %d (%v), want %d", p, next, err, n)
			}
		}
		var dead int64
		if err := conn.QueryRow(ctx, `SELECT CASE WHEN to_regclass('offsetkeeper_dead_letters') IS NULL THEN 0
			ELSE (SELECT count(*) FROM offsetkeeper_dead_letters) END`).Scan(&dead); err != nil {
			t.Fatal(err)
		}
		if dead != 0 {
			t.Errorf("%d dead letters, want none", dead)
		}
		fromSink := 0
		for _, p := range all {
			fromSink += strings.Count(p.Output(), "resuming from the sink's offset")
		}
		t.Logf("%d updates over %d keys: %d rows, %d keys deleted; %d SIGKILLs (seed %d), %d replicas started; "+
			"new owners resumed from the sink's offset %d times; %s in all",
			updates, keys, rows, len(deleted), kills, seed, len(all), fromSink, time.Since(began).Round(100*time.Millisecond))
	})
}
