package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// What a real broker does that the fake does not by default, made to show:
// followers that serve fetches (KIP-392), a session that ends (KIP-368),
// auto-created topics, one broker down among several.

// misroutedFetches counts, for the fetches of topic the cluster receives,
// the partitions asked of a broker that does not lead them.
func misroutedFetches(k *harness.Kafka, topic string) *atomic.Int64 {
	var n atomic.Int64
	c := k.Cluster()
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		node := c.CurrentNode()
		for _, t := range req.(*kmsg.FetchRequest).Topics {
			if t.Topic != topic {
				continue
			}
			for _, p := range t.Partitions {
				if c.LeaderFor(topic, p.Partition) != node {
					n.Add(1)
				}
			}
		}
		return nil, nil, false
	})
	return &n
}

// Followers serve fetches, as Kafka's do for Fetch v11 and later without a
// leader epoch: after the leaders move, the old leaders would go on
// answering a consumer that does not send the epoch, with data that lags.
// With the epoch each old leader refuses at once (FENCED_LEADER_EPOCH) and
// the cursors move: a few misrouted fetches per move, not one per poll.
func TestConsumerLeavesAFollowerThatServes(t *testing.T) {
	const parts = 6
	k := harness.StartKafka(t, harness.NumBrokers(3))
	k.CreateTopic(t, "served", parts)
	for p := range parts {
		k.Cluster().SetFollowers("served", int32(p), []int32{0, 1, 2})
	}
	c := openConsumer(t, testFetchConfig(k))
	curs := make([]*Cursor, parts)
	for p := range parts {
		curs[p] = openCursor(t, c, "served", p, 0)
	}
	misrouted := misroutedFetches(k, "served")
	const rounds = 4
	for round := range rounds {
		for p := range parts {
			vals := make([]string, 50)
			for i := range vals {
				vals[i] = fmt.Sprintf("%d-%02d", round, i)
			}
			k.ProduceValues(t, "served", p, vals...)
		}
		for p, cur := range curs {
			got, _ := drain(t, cur, int64(50*(round+1)))
			if len(got) != 50 || string(got[0].Value) != fmt.Sprintf("%d-00", round) {
				t.Fatalf("round %d partition %d: %d records from %q", round, p, len(got), got[0].Value)
			}
		}
		for p := range parts {
			leader := k.Cluster().LeaderFor("served", int32(p))
			if err := k.Cluster().MoveTopicPartition("served", int32(p), (leader+1)%3); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Idle a while after the last move: the long polls go to the leaders.
	before := misrouted.Load()
	polls := c.Stats().FetchRequests
	harness.Await(t, drainTimeout, "ten more polls", func() bool { return c.Stats().FetchRequests >= polls+10 })
	if n := misrouted.Load(); n > int64(2*parts*rounds) || n-before > int64(parts) {
		t.Fatalf("%d partitions fetched from a broker that does not lead them, %d after the last move settled", n, n-before)
	}
	t.Logf("%d misrouted partition fetches over %d moves of %d partitions", misrouted.Load(), rounds, parts)
}

// The Fetcher too sends the epoch and follows the leader.
func TestFetcherLeavesAFollowerThatServes(t *testing.T) {
	k := harness.StartKafka(t, harness.NumBrokers(3))
	k.CreateTopic(t, "served", 1)
	k.Cluster().SetFollowers("served", 0, []int32{0, 1, 2})
	k.ProduceValues(t, "served", 0, "a", "b")
	f := openFetcher(t, testFetchConfig(k), "served", 0)
	f.SeekTo(0)
	drain(t, f, 2)
	leader := k.Cluster().LeaderFor("served", 0)
	if err := k.Cluster().MoveTopicPartition("served", 0, (leader+1)%3); err != nil {
		t.Fatal(err)
	}
	misrouted := misroutedFetches(k, "served")
	k.ProduceValues(t, "served", 0, "c")
	drain(t, f, 3)
	for range 5 {
		if _, err := f.FetchNow(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := misrouted.Load(); n > 1 {
		t.Fatalf("%d fetches went to the old leader after it moved", n)
	}
}

// One broker of three goes away: its partitions wait for it, and the
// connections to the other two are kept, not dialled again at every retry
// (which is what dropping the whole pool did).
func TestOneBrokerDownKeepsTheOthersConnections(t *testing.T) {
	const parts = 6
	k := harness.StartKafka(t, harness.NumBrokers(3))
	k.CreateTopic(t, "spread", parts)
	cfg, proxies := proxied(t, k)
	cfg.RequestTimeout, cfg.DialTimeout = 500*time.Millisecond, 300*time.Millisecond
	var mu sync.Mutex
	dials := map[string]int{}
	dial := cfg.Dial
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dials[addr]++
		mu.Unlock()
		return dial(ctx, network, addr)
	}
	c := openConsumer(t, cfg)
	curs := make([]*Cursor, parts)
	for p := range parts {
		curs[p] = openCursor(t, c, "spread", p, 0)
		k.ProduceValues(t, "spread", p, "before")
	}
	for _, cur := range curs {
		drain(t, cur, 1)
	}
	// The proxy of the broker leading partition 0 refuses and cuts.
	down := k.Cluster().LeaderFor("spread", 0)
	brokers := k.Brokers()
	proxies[down].Refuse(true)
	proxies[down].Cut()
	mu.Lock()
	before := map[string]int{}
	for a, n := range dials {
		before[a] = n
	}
	mu.Unlock()
	for p := range parts {
		k.ProduceValues(t, "spread", p, "during")
	}
	for p, cur := range curs {
		if k.Cluster().LeaderFor("spread", int32(p)) != down {
			drain(t, cur, 2)
		}
	}
	// Let the cut broker's loop retry a while.
	polls := c.Stats().FetchRequests
	harness.Await(t, drainTimeout, "twenty more fetches", func() bool { return c.Stats().FetchRequests >= polls+20 })
	mu.Lock()
	for i, b := range brokers {
		if int32(i) == down {
			continue
		}
		if n := dials[b] - before[b]; n > 1 {
			t.Errorf("broker %d (up) dialled %d times while broker %d was down", i, n, down)
		}
	}
	mu.Unlock()
	proxies[down].Refuse(false)
	proxies[down].Pass()
	for p, cur := range curs {
		if k.Cluster().LeaderFor("spread", int32(p)) == down {
			if got, _ := drain(t, cur, 2); len(got) != 1 || string(got[0].Value) != "during" {
				t.Fatalf("partition %d after the broker came back: %v", p, values(got))
			}
		}
	}
}

// A broker with connections.max.reauth.ms ends each SASL session after that
// long; the consumer logs in again on the same connection before it ends
// (KIP-368), and keeps fetching without reconnecting.
func TestSASLLoginAgainBeforeTheSessionEnds(t *testing.T) {
	k := harness.StartKafka(t, harness.KfakeOptions(
		kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "admin", "admin-secret"),
		// Sessions of 2 s: a login again falls in their last 5 to 15 %,
		// 100 to 300 ms, which a loaded machine running -race still meets
		// between fetches of 100 ms (400 ms sessions left it 20 to 60).
		kfake.BrokerConfigs(map[string]string{"connections.max.reauth.ms": "2000"}),
	), harness.SeedTopics(1, "auth"))
	var handshakes atomic.Int64
	k.Cluster().ControlKey(kmsg.SASLHandshake.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster().KeepControl()
		handshakes.Add(1)
		return nil, nil, false
	})
	cfg := testFetchConfig(k)
	cfg.SASL = &SASL{Mechanism: SASLSCRAMSHA256, Username: "admin", Password: "admin-secret"}
	c := openConsumer(t, cfg)
	cur := openCursor(t, c, "auth", 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	harness.Await(t, drainTimeout, "twelve logins again", func() bool {
		if _, err := cur.Fetch(ctx); err != nil {
			t.Fatal(err)
		}
		return c.Stats().Relogins >= 12
	})
	// Connections are not counted: the pool opens one beside a busy one
	// (a metadata lookup during a long poll) as load has it. A consumer
	// that reconnected when a session ended would log in about as often
	// as it logs in again.
	st := c.Stats()
	if st.Logins > st.Relogins/3 {
		t.Fatalf("%d connections logged in and %d logins again: the consumer reconnected instead of logging in again", st.Logins, st.Relogins)
	}
	if h := handshakes.Load(); h < st.Logins+st.Relogins {
		t.Fatalf("the broker saw %d SASL handshakes, the consumer counts %d logins and %d again", h, st.Logins, st.Relogins)
	}
}

// A broker that creates topics on demand (auto.create.topics.enable, on by
// default in Kafka) is never made to create one: neither the access check
// nor listing partitions nor a cursor of a missing topic does it.
func TestNoTopicIsCreated(t *testing.T) {
	k := harness.StartKafka(t, harness.KfakeOptions(kfake.AllowAutoTopicCreation()))
	cfg := testFetchConfig(k)
	cfg.UnknownTopicTimeout = 300 * time.Millisecond
	kc, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if err := kc.CheckAccess(ctx, Refused, "misspelt"); err != nil {
		t.Fatalf("CheckAccess of a missing topic: %v", err)
	}
	if _, missing, err := kc.Partitions(ctx, "misspelt"); err != nil || strings.Join(missing, ",") != "misspelt" {
		t.Fatalf("Partitions: missing %v, %v", missing, err)
	}
	c := openConsumer(t, cfg)
	cur := openCursor(t, c, "misspelt", 0, 0)
	harness.Await(t, drainTimeout, "the cursor to fail", func() bool {
		_, err := cur.Fetch(ctx)
		return err != nil
	})
	if info := k.Cluster().TopicInfo("misspelt"); info != nil {
		t.Fatalf("topic misspelt was created: %+v", info)
	}
}

// A broker that serves no Fetch version offsetkeeper can use (v4 to v11:
// Kafka before 0.11) fails the cursor at once with an error that says so,
// rather than retrying a request the broker would drop the connection for.
func TestBrokerWithoutAUsableFetchVersion(t *testing.T) {
	old := kversion.V3_6_0()
	old.SetMaxKeyVersion(kmsg.Fetch.Int16(), 3)
	k := harness.StartKafka(t, harness.KfakeOptions(kfake.MaxVersions(old)), harness.SeedTopics(1, "old"))
	c := openConsumer(t, testFetchConfig(k))
	cur := openCursor(t, c, "old", 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	var err error
	harness.Await(t, drainTimeout, "the cursor to fail", func() bool {
		_, err = cur.Fetch(ctx)
		return err != nil
	})
	var uv *UnsupportedVersionError
	if !errors.As(err, &uv) || uv.API != "Fetch" || uv.BrokerMax != 3 || !strings.Contains(err.Error(), "needs a version between v4 and v11") {
		t.Fatalf("error %v, want the broker's Fetch versions named", err)
	}
}

// What the logs of a retry say about it.
func TestExplain(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&UnsupportedVersionError{Addr: "b:9092", API: "Fetch", Min: 4, Max: 11, BrokerMin: 0, BrokerMax: 3}, "no protocol version"},
		{fmt.Errorf("dial: %w", &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}), "TLS with the broker failed"},
		{fmt.Errorf("login: %w", kafkago.SASLAuthenticationFailed), "refused the login"},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "nothing listens"},
		{context.DeadlineExceeded, "did not answer in time"},
		{io.ErrUnexpectedEOF, "closed the connection"},
		{kafkago.NotLeaderForPartition, "leader moved"},
	} {
		if got := explain(tc.err); !strings.Contains(got, tc.want) {
			t.Errorf("explain(%v) = %q, want it to say %q", tc.err, got, tc.want)
		}
	}
}

// A small request beside one in flight that carries records waits, at
// holdCursors cursors and more, for at most holdMax; never beside a long poll, with
// few cursors, or when it carries a sixteenth of them.
func TestSmallRequestsWaitBesideOneInFlight(t *testing.T) {
	b := &brokerLoop{inFlight: []*fetchRequest{{}}}
	now := time.Now()
	if !b.holdSmall(now, 10_000, 10) || !b.holding(now) || !b.holdNext.After(now) {
		t.Fatal("10 parts of 10,000 cursors beside a request in flight: not held")
	}
	if b.holding(b.holdNext) {
		t.Error("still holding at the next tick: the pick must run again")
	}
	if b.holdSmall(now.Add(holdMax), 10_000, 10) {
		t.Errorf("held past holdMax (%v)", holdMax)
	}
	for _, c := range []struct {
		name       string
		n, parts   int
		inFlight   int
		quietPolls int32
	}{
		{"few cursors", holdCursors - 1, 1, 1, 0},
		{"a sixteenth of them", 16_000, 1000, 1, 0},
		{"nothing in flight", 10_000, 10, 0, 0},
		{"beside a long poll", 10_000, 10, 1, 1},
	} {
		b := &brokerLoop{inFlight: make([]*fetchRequest, c.inFlight)}
		b.quietPolls.Store(c.quietPolls)
		if b.holdSmall(now, c.n, c.parts) {
			t.Errorf("%s: held", c.name)
		}
	}
}

// TestABacklogIsFetchedTwoRequestsAtATime: eight partitions with records
// to read and nothing in flight go in two requests of four, the second at
// once, so that the broker reads one answer while the other is decoded; a
// long poll of quiet partitions stays one request. A request's MaxBytes is
// its bound, not the sum of its partitions' limits that the budget
// reserves.
func TestABacklogIsFetchedTwoRequestsAtATime(t *testing.T) {
	setup := func(quiet bool) (*brokerLoop, []*Cursor) {
		c, b := loopOfOne()
		c.cfg.MaxBufferBytes, c.cfg.FetchMaxPartitionBytes = 256<<20, 1<<20
		c.cfg.NoFetchSessions = true
		var curs []*Cursor
		for p := range 8 {
			cur := &Cursor{c: c, tp: sinks.Partition{Topic: "t", Partition: p}, loop: b, leader: 1, epoch: -1, hw: -1, lso: -1, quiet: quiet,
				signal: make(chan struct{}, 1)}
			c.cursors[cur.tp] = cur
			b.cursors = append(b.cursors, cur)
			curs = append(curs, cur)
		}
		return b, curs
	}
	now := time.Now()
	b, curs := setup(false)
	first, _, more := b.pick(now)
	if first == nil || len(first.parts) != 4 || !more {
		t.Fatalf("first pick of 8 cursors with nothing in flight: %d parts, more %v; want 4, more", partsOf(first), more)
	}
	if first.reserve != 4<<20 || first.bound != 16<<20 {
		t.Errorf("first request reserves %d and asks at most %d bytes; want 4 MiB (its 4 limits) and 16 MiB (the request's bound)", first.reserve, first.bound)
	}
	b.inFlight = append(b.inFlight, first)
	second, _, more := b.pick(now)
	if second == nil || len(second.parts) != 4 || more {
		t.Fatalf("second pick, one request in flight: %d parts, more %v; want the other 4, no more", partsOf(second), more)
	}
	seen := map[*Cursor]bool{}
	for _, p := range append(append([]*fetchPart{}, first.parts...), second.parts...) {
		if seen[p.cur] {
			t.Fatalf("%v in both requests", p.cur.tp)
		}
		seen[p.cur] = true
	}
	if len(seen) != len(curs) {
		t.Fatalf("the two requests carry %d of %d cursors", len(seen), len(curs))
	}

	b, _ = setup(true)
	poll, _, _ := b.pick(now)
	if partsOf(poll) != 8 {
		t.Fatalf("a long poll of 8 quiet cursors: %d parts, want all 8 in one", partsOf(poll))
	}
}

func partsOf(r *fetchRequest) int {
	if r == nil {
		return 0
	}
	return len(r.parts)
}

// A cursor wakes its loop when what changed made it fetchable, and only
// then: woken for a batch taken or bytes given back while the cursor is
// still in flight or over its share, before it has a position, or while
// it is quiet beside a long poll, the loop walked every cursor for nothing.
func TestCursorWakesItsLoopOnlyWhenFetchable(t *testing.T) {
	c, b := loopOfOne()
	c.cfg.MaxBufferBytes, c.cfg.FetchMaxPartitionBytes = 1<<20, 1<<20
	cur := &Cursor{c: c, tp: sinks.Partition{Topic: "t", Partition: 0}, epoch: -1, hw: -1, lso: -1, fetchAt: unset, expect: unset,
		signal: make(chan struct{}, 1)}
	c.cursors[cur.tp] = cur
	woken := func() bool {
		select {
		case <-b.wake:
			return true
		default:
			return false
		}
	}
	hold := func(n int64) {
		cur.held += n
		c.held.Add(n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()

	b.add(cur)
	if woken() {
		t.Error("a cursor added without a position woke its loop")
	}
	cur.align(5)
	if !woken() {
		t.Fatal("a cursor given a position did not wake its loop")
	}

	cur.flight = &fetchRequest{}
	hold(100)
	cur.release(50)
	if woken() {
		t.Error("bytes given back by a cursor in flight woke its loop")
	}
	cur.flight = nil
	cur.release(50)
	if !woken() {
		t.Error("bytes given back by a cursor not in flight did not wake its loop")
	}

	hold(c.share() + 100)
	cur.release(50)
	if woken() {
		t.Error("bytes given back by a cursor still over its share woke its loop")
	}
	cur.release(cur.held)
	if !woken() {
		t.Error("a cursor back under its share did not wake its loop")
	}

	cur.quiet = true
	b.quietPolls.Store(1)
	hold(100)
	cur.release(100)
	if woken() {
		t.Error("a quiet cursor woke its loop while a long poll was out")
	}
	b.quietPolls.Store(0)
	hold(100)
	cur.release(100)
	if !woken() {
		t.Error("a quiet cursor did not wake its loop with no long poll out")
	}
}
