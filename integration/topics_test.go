package integration_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

// topicLoad produces to the partitions of the topics it is given, a few
// records each every 100 ms, until stopped.
type topicLoad struct {
	cl   *kgo.Client
	mu   sync.Mutex
	to   map[string]int // topic: partitions
	stop chan struct{}
	done chan error
}

func startTopicLoad(t *testing.T, k *harness.Kafka) *topicLoad {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.ProduceRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l := &topicLoad{cl: cl, to: map[string]int{}, stop: make(chan struct{}), done: make(chan error, 1)}
	go l.run()
	t.Cleanup(func() { l.halt(); cl.Close() })
	return l
}

// set makes the load produce to n partitions of topic (0: none), once the
// client writes to them.
func (l *topicLoad) set(t *testing.T, topic string, n int) {
	t.Helper()
	if n > 0 {
		// A record to its last partition, until the client knows of it.
		harness.Await(t, 30*time.Second, fmt.Sprintf("the producer to write to partition %d of %s", n-1, topic), func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := l.cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: int32(n - 1), Value: []byte(`{"probe":true}`)}).FirstErr()
			if err != nil {
				l.cl.ForceMetadataRefresh()
			}
			return err == nil
		})
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n == 0 {
		delete(l.to, topic)
		return
	}
	l.to[topic] = n
}

func (l *topicLoad) run() {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-l.stop:
			l.done <- nil
			return
		case <-tick.C:
		}
		l.mu.Lock()
		var recs []*kgo.Record
		for topic, n := range l.to {
			for p := range n {
				for k := range 5 {
					recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(p), Value: fmt.Appendf(nil, `{"seq":%d,"k":%d}`, seq, k)})
				}
			}
		}
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := l.cl.ProduceSync(ctx, recs...).FirstErr()
		cancel()
		if err != nil {
			l.done <- err
			return
		}
	}
}

// halt stops the load; its error is the first produce that failed.
func (l *topicLoad) halt() error {
	select {
	case <-l.stop:
		return nil
	default:
	}
	close(l.stop)
	return <-l.done
}

// perTable reads a routed table's rows per partition: rows, distinct
// offsets, lowest and highest, by ClickHouse's own query or PostgreSQL's.
func pgPerPartition(t *testing.T, conn *pgx.Conn, table string) map[int][4]int64 {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT partition, count(*), count(DISTINCT "offset"), min("offset"), max("offset") FROM `+
		pgx.Identifier{table}.Sanitize()+` GROUP BY 1`)
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	got := map[int][4]int64{}
	for rows.Next() {
		var p int
		var c [4]int64
		if err := rows.Scan(&p, &c[0], &c[1], &c[2], &c[3]); err != nil {
			t.Fatal(err)
		}
		got[p] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func chPerPartition(t *testing.T, ch *harness.ClickHouse, table, topic string) map[int][4]int64 {
	t.Helper()
	got := map[int][4]int64{}
	for _, r := range ch.Query(t, fmt.Sprintf(`SELECT kafka_topic, kafka_partition, count(), uniqExact(kafka_offset), min(kafka_offset), max(kafka_offset)
		FROM %s.%s GROUP BY kafka_topic, kafka_partition`, ch.Database(), table)) {
		if r[0] != topic {
			t.Errorf("table %s: %d rows of topic %q", table, chInt(t, r[2]), r[0])
			continue
		}
		got[int(chInt(t, r[1]))] = [4]int64{chInt(t, r[2]), chInt(t, r[3]), chInt(t, r[4]), chInt(t, r[5])}
	}
	return got
}

func wantOf(ends map[int32]int64) map[int]int64 {
	want := map[int]int64{}
	for p, n := range ends {
		want[int(p)] = n
	}
	return want
}

func holdsAll(got map[int][4]int64, want map[int]int64) bool {
	for p, n := range want {
		if n > 0 && got[p][1] < n {
			return false
		}
	}
	return true
}

// TestApacheTopicsRegexRoutedExactlyOnce: two groups of three replica
// processes read --topics-regex 'ordersN\..*' on the 3-node Apache Kafka,
// one into PostgreSQL, one into ClickHouse, each with table={topic}.
// Topics are created while they run (6 and 3 partitions), one grown to 8,
// one deleted once read, and a topic the pattern does not match created
// and written; replicas are SIGKILLed and started again meanwhile. Every
// record of every matching topic is in its own table of each store once
// (ClickHouse's tables have no key to hide a duplicate), nothing of the
// other topic is read, and the deleted topic's partitions are released
// and reported.
func TestApacheTopicsRegexRoutedExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("six replica processes, topics created and deleted on a 3-node cluster")
	}
	k := realKafka(t)
	pg := harness.StartPostgres(t)
	ch := harness.StartClickHouse(t)
	etcd := harness.StartEtcd(t, 1)
	base := strings.ReplaceAll(uniqueTopic("orders"), "-", "")
	tmp, eu, us := base+".tmp", base+".eu", base+".us"
	payments := "payments" + strings.TrimPrefix(base, "orders")
	pattern := regexp.QuoteMeta(base) + `\..*`

	k.CreateTopic(t, tmp, 2)
	for p := range 2 {
		recs := make([]*kgo.Record, 200)
		for i := range recs {
			recs[i] = &kgo.Record{Value: fmt.Appendf(nil, `{"i":%d}`, i)}
		}
		k.Produce(t, tmp, p, recs...)
	}

	groups := map[string]string{ // group: sink
		"routed-pg": pg.URL() + "&table={topic}",
		"routed-ch": fmt.Sprintf("clickhouse://%s/%s?table={topic}&protocol=http", ch.HTTPAddr(), ch.Database()),
	}
	start := func(group, id string) *harness.Process {
		return harness.StartProcess(t, group+"-"+id, bin, "run",
			"--http-addr", "127.0.0.1:0",
			"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
			"--brokers", strings.Join(k.Brokers(), ","),
			"--group", group, "--topics-regex", pattern, "--metadata-interval", "1s",
			"--sink", groups[group], "--replica-id", id,
			"--lease-ttl", "2s", "--flush-interval", "100ms", "--fetch-max-wait", "100ms", "--log-format", "console")
	}
	type proc struct {
		group, id string
		p         *harness.Process
	}
	var procs []*proc
	var all []*harness.Process
	for _, g := range []string{"routed-pg", "routed-ch"} {
		for i := range 3 {
			p := &proc{group: g, id: fmt.Sprintf("r%d", i+1)}
			p.p = start(g, p.id)
			procs, all = append(procs, p), append(all, p.p)
		}
	}
	conn := pgConn(t, pg.URL())
	tmpTable := sinks.TableName(tmp)
	tmpWant := map[int]int64{0: 200, 1: 200}
	await(t, 60*time.Second, "both stores to hold "+tmp, func() bool {
		return holdsAll(pgPerPartitionOrNone(conn, tmpTable), tmpWant) && holdsAll(chPerPartitionOrNone(t, ch, tmpTable), tmpWant)
	})

	load := startTopicLoad(t, k)
	k.CreateTopic(t, eu, 6)
	k.CreateTopic(t, us, 3)
	k.CreateTopic(t, payments, 2)
	load.set(t, eu, 6)
	load.set(t, us, 3)
	load.set(t, payments, 2)

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("seed %d", seed)
	kills := 0
	for step := 0; step < 12; step++ {
		time.Sleep(time.Duration(700+rng.IntN(800)) * time.Millisecond)
		switch step {
		case 4:
			k.AddPartitions(t, us, 5)
			load.set(t, us, 8)
		case 7:
			k.DeleteTopic(t, tmp)
		}
		i := rng.IntN(len(procs))
		pr := procs[i]
		if pr.p.Exited() {
			t.Fatalf("replica %s of %s exited before it was killed:\n%s", pr.id, pr.group, pr.p.Output())
		}
		pr.p.Signal(syscall.SIGKILL)
		pr.p.Wait(10 * time.Second)
		pr.p = start(pr.group, pr.id)
		all = append(all, pr.p)
		kills++
	}
	if err := load.halt(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	for _, topic := range []string{eu, us} {
		want := wantOf(k.EndOffsets(t, topic))
		table := sinks.TableName(topic)
		await(t, 90*time.Second, "both stores to hold every record of "+topic, func() bool {
			return holdsAll(pgPerPartitionOrNone(conn, table), want) && holdsAll(chPerPartitionOrNone(t, ch, table), want)
		})
		checkEachOffsetOnce(t, pgPerPartition(t, conn, table), want)
		checkEachOffsetOnce(t, chPerPartition(t, ch, table, topic), want)
	}
	// The deleted topic's rows stay, once each.
	checkEachOffsetOnce(t, pgPerPartition(t, conn, tmpTable), tmpWant)
	checkEachOffsetOnce(t, chPerPartition(t, ch, tmpTable, tmp), tmpWant)

	// Nothing of the topic the pattern does not match.
	payTable := sinks.TableName(payments)
	var exists bool
	if err := conn.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, payTable).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("PostgreSQL has a table %s: %s was read", payTable, payments)
	}
	if n := ch.QueryInt(t, fmt.Sprintf(`SELECT count() FROM system.tables WHERE database = '%s' AND name = '%s'`, ch.Database(), payTable)); n != 0 {
		t.Errorf("ClickHouse has a table %s: %s was read", payTable, payments)
	}

	// The deleted topic released: no claim of it in either group, and a
	// replica said so.
	cli := etcd.Client(t)
	for g := range groups {
		c, err := coordinator.New(cli, g)
		if err != nil {
			t.Fatal(err)
		}
		await(t, 30*time.Second, g+" to hold no claim of "+tmp, func() bool {
			snap, err := c.Snapshot(context.Background())
			if err != nil {
				return false
			}
			for p := range snap.Claims {
				if p.Topic == tmp {
					return false
				}
				if p.Topic == payments {
					t.Errorf("%s claimed %s", g, p)
				}
			}
			return true
		})
	}
	said := 0
	for _, p := range all {
		if strings.Contains(p.Output(), "topics gone from Kafka") && strings.Contains(p.Output(), tmp) {
			said++
		}
	}
	if said == 0 {
		t.Errorf("no replica said %s was gone", tmp)
	}
	t.Logf("%d SIGKILLs; %s and %s read into tables %s and %s of both stores; %d replicas said %s was gone",
		kills, eu, us, sinks.TableName(eu), sinks.TableName(us), said, tmp)
}

// pgPerPartitionOrNone is pgPerPartition of a table that may not exist
// yet: none then.
func pgPerPartitionOrNone(conn *pgx.Conn, table string) map[int][4]int64 {
	var exists bool
	if err := conn.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil || !exists {
		return nil
	}
	rows, err := conn.Query(context.Background(), `SELECT partition, count(*), count(DISTINCT "offset") FROM `+pgx.Identifier{table}.Sanitize()+` GROUP BY 1`)
	if err != nil {
		return nil
	}
	got := map[int][4]int64{}
	for rows.Next() {
		var p int
		var c [4]int64
		if rows.Scan(&p, &c[0], &c[1]) == nil {
			got[p] = c
		}
	}
	return got
}

func chPerPartitionOrNone(t *testing.T, ch *harness.ClickHouse, table string) map[int][4]int64 {
	got := map[int][4]int64{}
	rows, err := ch.TryQuery(t, fmt.Sprintf(`SELECT kafka_partition, count(), uniqExact(kafka_offset) FROM %s.%s GROUP BY kafka_partition`, ch.Database(), table))
	if err != nil {
		return nil
	}
	for _, r := range rows {
		got[int(chInt(t, r[0]))] = [4]int64{chInt(t, r[1]), chInt(t, r[2])}
	}
	return got
}

// routedRecord is a record produced for TestApacheRouteByFieldExactlyOnce:
// where Kafka put it, and its tenant ("" for none).
type routedRecord struct {
	partition int
	offset    int64
	tenant    string
}

// TestApacheRouteByFieldExactlyOnce: records of one topic on the 3-node
// Apache Kafka carry a tenant in {a, b, c}, and every tenth none; two
// groups of three replica processes route them by that field, one into
// PostgreSQL, one into ClickHouse (table=events_{route}&route_field=tenant),
// while replicas are SIGKILLed and started again. Each tenant's table
// holds exactly the offsets of that tenant's records, each once (a block
// is written in parts, one per table: in PostgreSQL all of them and the
// partition's offsets row in one transaction; in ClickHouse each an
// insert with the block's token, deduplicated by its table when the block
// comes again), and the records without the field are in the default
// table.
func TestApacheRouteByFieldExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("six replica processes under SIGKILL on a 3-node cluster")
	}
	k := realKafka(t)
	pg := harness.StartPostgres(t)
	ch := harness.StartClickHouse(t)
	etcd := harness.StartEtcd(t, 1)
	topic := uniqueTopic("tenants")
	const parts = 4
	k.CreateTopic(t, topic, parts)
	prefix := fmt.Sprintf("rt%d_", time.Now().UnixNano()%1_000_000)
	groups := map[string]string{
		"route-pg": pg.URL() + "&table=" + prefix + "{route}&route_field=tenant",
		"route-ch": fmt.Sprintf("clickhouse://%s/%s?table=%s{route}&route_field=tenant&protocol=http", ch.HTTPAddr(), ch.Database(), prefix),
	}
	start := func(group, id string) *harness.Process {
		return harness.StartProcess(t, group+"-"+id, bin, "run",
			"--http-addr", "127.0.0.1:0",
			"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
			"--brokers", strings.Join(k.Brokers(), ","),
			"--group", group, "--topics", topic, "--sink", groups[group], "--replica-id", id,
			"--lease-ttl", "2s", "--flush-interval", "100ms", "--fetch-max-wait", "100ms", "--log-format", "console")
	}
	type proc struct {
		group, id string
		p         *harness.Process
	}
	var procs []*proc
	for _, g := range []string{"route-pg", "route-ch"} {
		for i := range 3 {
			p := &proc{group: g, id: fmt.Sprintf("r%d", i+1)}
			p.p = start(g, p.id)
			procs = append(procs, p)
		}
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProduceRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var mu sync.Mutex
	var produced []routedRecord
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				done <- nil
				return
			case <-time.After(20 * time.Millisecond):
			}
			var recs []*kgo.Record
			for p := range parts {
				for j := range 10 {
					i := n*100 + p*10 + j
					tenant := []string{"a", "b", "c"}[i%3]
					v := fmt.Sprintf(`{"i":%d,"tenant":%q}`, i, tenant)
					if i%10 == 0 {
						tenant, v = "", fmt.Sprintf(`{"i":%d}`, i)
					}
					recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte(v)})
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			res := cl.ProduceSync(ctx, recs...)
			cancel()
			if err := res.FirstErr(); err != nil {
				done <- err
				return
			}
			mu.Lock()
			for _, r := range res { // in the order the answers came
				tenant, _ := sinks.FieldValue(r.Record.Value, "tenant")
				produced = append(produced, routedRecord{int(r.Record.Partition), r.Record.Offset, tenant})
			}
			mu.Unlock()
		}
	}()

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("seed %d", seed)
	for range 8 {
		time.Sleep(time.Duration(700+rng.IntN(800)) * time.Millisecond)
		pr := procs[rng.IntN(len(procs))]
		if pr.p.Exited() {
			t.Fatalf("replica %s of %s exited before it was killed:\n%s", pr.id, pr.group, pr.p.Output())
		}
		pr.p.Signal(syscall.SIGKILL)
		pr.p.Wait(10 * time.Second)
		pr.p = start(pr.group, pr.id)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("produce: %v", err)
	}

	// What each table must hold: per partition, the offsets of its tenant's
	// records.
	want := map[string]map[int][]int64{}
	for _, r := range produced {
		table := prefix + cmp.Or(r.tenant, "default")
		if want[table] == nil {
			want[table] = map[int][]int64{}
		}
		want[table][r.partition] = append(want[table][r.partition], r.offset)
	}
	conn := pgConn(t, pg.URL())
	pgOffsets := func(table string) (map[int][]int64, error) {
		rows, err := conn.Query(context.Background(), `SELECT partition, "offset" FROM `+pgx.Identifier{table}.Sanitize()+` WHERE topic = $1 ORDER BY 1, 2`, topic)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		got := map[int][]int64{}
		for rows.Next() {
			var p int
			var o int64
			if err := rows.Scan(&p, &o); err != nil {
				return nil, err
			}
			got[p] = append(got[p], o)
		}
		return got, rows.Err()
	}
	chOffsets := func(table string) (map[int][]int64, error) {
		rows, err := ch.TryQuery(t, fmt.Sprintf(`SELECT kafka_partition, kafka_offset FROM %s.%s WHERE kafka_topic = ? ORDER BY 1, 2`, ch.Database(), table), topic)
		if err != nil {
			return nil, err
		}
		got := map[int][]int64{}
		for _, r := range rows {
			p := int(chInt(t, r[0]))
			got[p] = append(got[p], chInt(t, r[1]))
		}
		return got, nil
	}
	for _, w := range want {
		for p := range w {
			slices.Sort(w[p])
		}
	}
	for table, w := range want {
		for _, s := range []struct {
			name string
			read func(string) (map[int][]int64, error)
		}{{"PostgreSQL", pgOffsets}, {"ClickHouse", chOffsets}} {
			var got map[int][]int64
			harness.Await(t, 90*time.Second, s.name+"'s "+table+" to hold its records", func() bool {
				g, err := s.read(table)
				if err != nil {
					return false
				}
				got = g
				for p, offs := range w {
					if len(got[p]) < len(offs) {
						return false
					}
				}
				return true
			})
			for p := range parts {
				if !slices.Equal(got[p], w[p]) {
					t.Errorf("%s's %s, partition %d: %d offsets, want the %d of its records, each once", s.name, table, p, len(got[p]), len(w[p]))
				}
			}
		}
	}
	if len(want) != 4 {
		t.Errorf("records went to %d tables, want a, b, c and default", len(want))
	}
	t.Logf("%d records routed by tenant into %d tables of each store, 8 SIGKILLs", len(produced), len(want))
}

// TestTopicsRegexOnKfake: two replicas of a pattern and no topic list
// join before any topic matches, claim the partitions of a matching topic
// created later within their metadata interval and deliver its records,
// never claim a topic that does not match, and count the topic they
// read; a third replica giving another pattern is refused, naming both.
func TestTopicsRegexOnKfake(t *testing.T) {
	e := newEnv(t, "payments", 2)
	cfg := func(id, pattern string) replica.Config {
		c := e.config(id)
		c.Topics, c.TopicsRegex, c.MetadataInterval = nil, pattern, 200*time.Millisecond
		return c
	}
	r1 := e.start(cfg("r1", `ev\..*`), discard.New())
	r2 := e.start(cfg("r2", `ev\..*`), discard.New())
	await(t, 20*time.Second, "both replicas to join", func() bool { return e.member("r1") && e.member("r2") })
	e.kafka.CreateTopic(t, "ev.a", 3)
	want := map[sinks.Partition]int64{}
	for p := range 3 {
		e.kafka.ProduceValues(t, "ev.a", p, "x", "y", "z")
		want[sinks.Partition{Topic: "ev.a", Partition: p}] = 3
	}
	e.kafka.ProduceValues(t, "payments", 0, "not read")
	await(t, 30*time.Second, "ev.a's records committed", func() bool {
		snap := e.snapshot()
		for p, n := range want {
			if snap.Offsets[p].Next < n {
				return false
			}
		}
		return true
	})
	for p := range e.snapshot().Claims {
		if p.Topic != "ev.a" {
			t.Errorf("claimed %s, which does not match", p)
		}
	}
	for _, r := range []*running{r1, r2} {
		if st := r.r.Stats(); st.Topics != 1 {
			t.Errorf("a replica reads %d topics, want 1 (ev.a)", st.Topics)
		}
	}

	other, err := replica.New(cfg("r3", `ev\.b.*`), e.etcd.Client(t), discard.New(), e.logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = other.Run(ctx)
	var mismatch *replica.TopicsMismatchError
	if !errors.As(err, &mismatch) || !strings.Contains(err.Error(), `those matching "ev\\.b.*"`) || !strings.Contains(err.Error(), `those matching "ev\\..*"`) {
		t.Errorf("a replica of another pattern: %v, want a *replica.TopicsMismatchError naming both patterns", err)
	}
}
