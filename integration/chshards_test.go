package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// Issue 44, test 2: two ClickHouse processes as two shards of one table
// (shards=), a Distributed table over them (remote(), as the engine's own
// cluster would name them), three replicas on the 3-node Apache Kafka.
// Replicas are SIGKILLed and so is one shard's ClickHouse while records
// flow: every record is read once through the Distributed table, and each
// partition's rows are on its shard only (partition mod 2).
func TestClickHouseShardsExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("two ClickHouse processes, three replicas, kills")
	}
	const parts, rate, seconds = 8, 2000, 30
	one, two := harness.StartClickHouse(t), harness.StartClickHouse(t)
	for _, ch := range []*harness.ClickHouse{one, two} {
		ch.Exec(t, chEngineTarget("events", 10000))
	}
	one.Exec(t, fmt.Sprintf("CREATE TABLE events_all AS remote('%s,%s', '%s', 'events')", one.NativeAddr(), two.NativeAddr(), one.Database()))
	e := newEnvOn(t, apacheBackend, "sharded", parts)
	url := chSinkURL(one, "", true) + "&shards=" + two.HTTPAddr()
	procs := map[string]*harness.Process{}
	for _, id := range []string{"a", "b", "c"} {
		procs[id] = e.processSink(id, url)
	}
	await(t, 60*time.Second, "three replicas to share the partitions", func() bool {
		o := e.owners()
		return o["a"] > 0 && o["b"] > 0 && o["c"] > 0
	})
	const total = rate * seconds
	cl := trickleProducer(t, e.kafka)
	loaded := make(chan error, 1)
	began := time.Now()
	go func() {
		n, err := paceJSON(context.Background(), cl, e.topic, parts, rate, 0, total)
		if err == nil && n != total {
			err = fmt.Errorf("%d of %d acknowledged", n, total)
		}
		loaded <- err
	}()
	at := func(d time.Duration) {
		if wait := time.Until(began.Add(d)); wait > 0 {
			time.Sleep(wait) // the faults are spread over the run on purpose
		}
	}
	kill := func(id, next string) {
		procs[id].Kill()
		procs[next] = e.processSink(next, url)
		delete(procs, id)
	}
	at(8 * time.Second)
	kill("a", "a2")
	at(15 * time.Second)
	retried := func() int {
		n := 0
		for _, p := range procs {
			n += sinkRetries(p.Output())
		}
		return n
	}
	failed := retried()
	two.Kill()
	await(t, 30*time.Second, "an insert to shard 1 to fail while its ClickHouse is down", func() bool { return retried() > failed })
	two.Start()
	at(22 * time.Second)
	kill("b", "b2")
	select {
	case err := <-loaded:
		if err != nil {
			t.Fatalf("produce: %v", err)
		}
	case <-time.After(3 * seconds * time.Second):
		t.Fatal("the producer did not finish")
	}
	produced := perPartition(parts, total/parts)
	await(t, 120*time.Second, "every record committed", func() bool { return e.allCommitted(produced) })
	for id, p := range procs {
		if p.Exited() {
			t.Fatalf("replica %s exited:\n%s", id, p.Output())
		}
	}
	got := map[int][4]int64{}
	for _, r := range one.Query(t, `SELECT kafka_partition, count(), uniqExact(kafka_offset), min(kafka_offset), max(kafka_offset)
		FROM events_all GROUP BY kafka_partition`) {
		got[int(chInt(t, r[0]))] = [4]int64{chInt(t, r[1]), chInt(t, r[2]), chInt(t, r[3]), chInt(t, r[4])}
	}
	checkEachOffsetOnce(t, got, produced)
	if n, d := one.QueryInt(t, `SELECT count() FROM events_all`), one.QueryInt(t, `SELECT uniqExact(id) FROM events_all`); n != total || d != total {
		t.Errorf("%d rows with %d distinct ids through the Distributed table, want %d of each", n, d, total)
	}
	for shard, ch := range []*harness.ClickHouse{one, two} {
		if n := ch.QueryInt(t, `SELECT count() FROM events WHERE kafka_partition % 2 != ?`, shard); n != 0 {
			t.Errorf("shard %d holds %d rows of the other shard's partitions", shard, n)
		}
	}
	t.Logf("%d records over %d partitions and 2 shards in %s; shard 0 %d rows, shard 1 %d", total, parts,
		time.Since(began).Round(time.Second), one.QueryInt(t, `SELECT count() FROM events`), two.QueryInt(t, `SELECT count() FROM events`))
}
