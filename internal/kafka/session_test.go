package kafka

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// sentFetch is a fetch request as kfake received it.
type sentFetch struct {
	id, epoch int32
	listed    []sinks.Partition
	forgotten []sinks.Partition
	injected  bool // answered with an injected session error
}

// idle tells whether the request is one of a session that lists nothing.
func (f sentFetch) idle() bool { return f.epoch > 0 && len(f.listed) == 0 && len(f.forgotten) == 0 }

// fetchLog records the fetch requests a kfake cluster receives; inject, when
// set, may answer one itself.
type fetchLog struct {
	mu   sync.Mutex
	reqs []sentFetch
}

func watchFetches(k *harness.Kafka, inject func(*kmsg.FetchRequest) kmsg.Response) *fetchLog {
	l := &fetchLog{}
	cl := k.Cluster()
	cl.ControlKey(kmsg.Fetch.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		cl.KeepControl()
		req := kr.(*kmsg.FetchRequest)
		f := sentFetch{id: req.SessionID, epoch: req.SessionEpoch}
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				f.listed = append(f.listed, sinks.Partition{Topic: t.Topic, Partition: int(p.Partition)})
			}
		}
		for _, t := range req.ForgottenTopics {
			for _, p := range t.Partitions {
				f.forgotten = append(f.forgotten, sinks.Partition{Topic: t.Topic, Partition: int(p)})
			}
		}
		var resp kmsg.Response
		if inject != nil {
			resp = inject(req)
		}
		f.injected = resp != nil
		l.mu.Lock()
		l.reqs = append(l.reqs, f)
		l.mu.Unlock()
		return resp, nil, resp != nil
	})
	return l
}

func (l *fetchLog) all() []sentFetch {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs)
}

func (l *fetchLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.reqs)
}

// idleRun is how many of the last requests list nothing, in a session.
func (l *fetchLog) idleRun() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i := len(l.reqs) - 1; i >= 0 && l.reqs[i].idle(); i-- {
		n++
	}
	return n
}

// readTo reads cur until end, freeing what it reads, and checks that the
// records are the values want, in order.
func readTo(t *testing.T, cur *Cursor, end int64, want []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	var got []string
	for from := cur.Offset(); from < end; {
		b, err := cur.Fetch(ctx)
		if err != nil {
			t.Fatalf("%s: fetch at %d (want to %d): %v", cur.Partition(), from, end, err)
		}
		checkBatch(t, b, from)
		for _, r := range b.Records {
			got = append(got, string(r.Value))
		}
		cur.Free(b.Bytes)
		from = b.Next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: read %q, want %q", cur.Partition(), got, want)
	}
}

// round produces n values to each partition and reads them back through
// its cursor: every record once, in order.
func round(t *testing.T, k *harness.Kafka, curs map[int]*Cursor, topic string, r, n int) {
	t.Helper()
	want := map[int][]string{}
	end := map[int]int64{}
	for p := range curs {
		for i := range n {
			want[p] = append(want[p], fmt.Sprintf("r%d-p%d-%02d", r, p, i))
		}
		offs := k.ProduceValues(t, topic, p, want[p]...)
		end[p] = offs[len(offs)-1] + 1
	}
	for p, cur := range curs {
		readTo(t, cur, end[p], want[p])
	}
}

func partitionsOf(topic string, ps ...int) []sinks.Partition {
	out := make([]sinks.Partition, len(ps))
	for i, p := range ps {
		out[i] = sinks.Partition{Topic: topic, Partition: p}
	}
	return out
}

// A fetch session survives partitions joining and leaving: one session is
// opened for the consumer's life, the partitions that join are listed once
// and those that leave are forgotten, every record arrives once and in
// order, and once idle the requests list no partition at all (the eight
// partitions' limits, 1 MiB each, fit one request's 16 MiB: all go in each
// long poll).
func TestSessionPartitionsJoinAndLeave(t *testing.T) {
	const topic, parts = "joining", 8
	k := harness.StartKafka(t, harness.SeedTopics(parts, topic))
	log := watchFetches(k, nil)
	c := openConsumer(t, testFetchConfig(k))
	curs := map[int]*Cursor{}
	for p := range 4 {
		curs[p] = openCursor(t, c, topic, p, 0)
	}
	round(t, k, curs, topic, 0, 10)
	harness.Await(t, drainTimeout, "idle requests that list nothing", func() bool { return log.idleRun() >= 5 })
	first := log.all()
	opens := slices.IndexFunc(first, func(f sentFetch) bool { return f.epoch == 0 })
	if opens < 0 {
		t.Fatalf("no request opened a session: %+v", first)
	}
	id := first[len(first)-1].id

	// Partitions join.
	joined := log.len()
	for p := 4; p < parts; p++ {
		curs[p] = openCursor(t, c, topic, p, 0)
	}
	round(t, k, curs, topic, 1, 10)
	harness.Await(t, drainTimeout, "idle requests after the join", func() bool { return log.idleRun() >= 3 })
	listed := map[sinks.Partition]bool{}
	for _, f := range log.all()[joined:] {
		if f.epoch > 0 {
			for _, tp := range f.listed {
				listed[tp] = true
			}
		}
	}
	for _, tp := range partitionsOf(topic, 4, 5, 6, 7) {
		if !listed[tp] {
			t.Errorf("%s joined but no request of the session listed it", tp)
		}
	}

	// Partitions leave.
	left := log.len()
	for _, p := range []int{0, 1} {
		if err := curs[p].Close(); err != nil {
			t.Fatal(err)
		}
		delete(curs, p)
	}
	harness.Await(t, drainTimeout, "a request forgetting the closed partitions", func() bool {
		var forgot []sinks.Partition
		for _, f := range log.all()[left:] {
			forgot = append(forgot, f.forgotten...)
		}
		return slices.Contains(forgot, sinks.Partition{Topic: topic, Partition: 0}) && slices.Contains(forgot, sinks.Partition{Topic: topic, Partition: 1})
	})
	round(t, k, curs, topic, 2, 10)
	harness.Await(t, drainTimeout, "idle requests after the leave", func() bool { return log.idleRun() >= 3 })

	all := log.all()
	for i, f := range all {
		switch {
		case f.epoch == 0 && i != opens:
			t.Errorf("request %d opened a session again (id %d): the session did not survive", i, f.id)
		case f.epoch > 0 && f.id != id:
			t.Errorf("request %d in session %d, want %d", i, f.id, id)
		}
	}
	forgot := left + slices.IndexFunc(all[left:], func(f sentFetch) bool { return len(f.forgotten) > 0 })
	for _, f := range all[forgot+1:] {
		for _, tp := range f.listed {
			if tp.Partition < 2 {
				t.Fatalf("%s listed after its cursor closed: %+v", tp, f)
			}
		}
	}
	st := c.Stats()
	if st.IncrementalFetches == 0 || st.FullFetches+st.IncrementalFetches != st.FetchRequests {
		t.Fatalf("stats: %d full and %d incremental of %d fetch requests", st.FullFetches, st.IncrementalFetches, st.FetchRequests)
	}
	t.Logf("%d requests: %d full, %d incremental, %d bytes", st.FetchRequests, st.FullFetches, st.IncrementalFetches, st.FetchRequestBytes)
}

// An idle request in a session costs a few bytes whatever the number of
// partitions; without sessions (the comparison) it lists them all.
func TestSessionIdleRequestsAreSmall(t *testing.T) {
	const topic, parts = "many", 200
	k := harness.StartKafka(t, harness.SeedTopics(parts, topic))
	cfg := testFetchConfig(k)
	// A request carries partitions while their limits fit its own (16
	// MiB): 64 KiB each lets all 200 go in one long poll.
	cfg.FetchMaxPartitionBytes = 64 << 10
	perRequest := func(full bool) float64 {
		cfg.NoFetchSessions = full
		c := openConsumer(t, cfg)
		for p := range parts {
			openCursor(t, c, topic, p, 0)
		}
		// The first requests: the cursors come one by one, and each
		// answer makes them quiet.
		harness.Await(t, drainTimeout, "a few requests", func() bool { return c.Stats().FetchRequests >= 5 })
		st := c.Stats()
		harness.Await(t, drainTimeout, "ten more requests", func() bool { return c.Stats().FetchRequests >= st.FetchRequests+10 })
		end := c.Stats()
		if full && end.IncrementalFetches > 0 {
			t.Fatalf("%d incremental fetches with sessions off", end.IncrementalFetches)
		}
		c.Close()
		return float64(end.FetchRequestBytes-st.FetchRequestBytes) / float64(end.FetchRequests-st.FetchRequests)
	}
	with, without := perRequest(false), perRequest(true)
	t.Logf("idle request of %d partitions: %.0f bytes in a session, %.0f bytes without", parts, with, without)
	if with > 200 || without < 10*with {
		t.Fatalf("idle request of %d partitions: %.0f bytes in a session, %.0f without: want under 200, and a tenth", parts, with, without)
	}
}

// A session error (the broker lost the session, or counts its epochs
// otherwise) drops the session: the next request opens a new one, closing
// the old, and lists every partition; nothing is lost or read twice.
func TestSessionErrorFallsBackToFullFetch(t *testing.T) {
	for _, code := range []int16{kerr.FetchSessionIDNotFound.Code, kerr.InvalidFetchSessionEpoch.Code} {
		t.Run(kerr.ErrorForCode(code).(*kerr.Error).Message, func(t *testing.T) {
			const topic, parts = "lost", 4
			k := harness.StartKafka(t, harness.SeedTopics(parts, topic))
			var armed atomic.Bool
			log := watchFetches(k, func(req *kmsg.FetchRequest) kmsg.Response {
				if req.SessionEpoch > 0 && armed.CompareAndSwap(true, false) {
					resp := req.ResponseKind().(*kmsg.FetchResponse)
					resp.ErrorCode = code
					return resp
				}
				return nil
			})
			c := openConsumer(t, testFetchConfig(k))
			curs := map[int]*Cursor{}
			for p := range parts {
				curs[p] = openCursor(t, c, topic, p, 0)
			}
			round(t, k, curs, topic, 0, 5)
			harness.Await(t, drainTimeout, "idle requests in a session", func() bool { return log.idleRun() >= 2 })
			armed.Store(true)
			harness.Await(t, drainTimeout, "the session error answered", func() bool { return !armed.Load() })
			round(t, k, curs, topic, 1, 5)
			harness.Await(t, drainTimeout, "idle requests in the new session", func() bool { return log.idleRun() >= 2 })

			all := log.all()
			i := slices.IndexFunc(all, func(f sentFetch) bool { return f.injected })
			lost := all[i]
			j := i + 1 + slices.IndexFunc(all[i+1:], func(f sentFetch) bool { return f.epoch >= 0 })
			if j == i {
				t.Fatalf("no session request after the error: %+v", all[i:])
			}
			next := all[j]
			if next.epoch != 0 || next.id != lost.id {
				t.Fatalf("after %s in session %d, the next request: session %d epoch %d; want epoch 0 closing %d",
					kerr.ErrorForCode(code), lost.id, next.id, next.epoch, lost.id)
			}
			slices.SortFunc(next.listed, func(a, b sinks.Partition) int { return a.Partition - b.Partition })
			if want := partitionsOf(topic, 0, 1, 2, 3); !slices.Equal(next.listed, want) {
				t.Fatalf("the request opening the new session listed %v, want %v", next.listed, want)
			}
			last := all[len(all)-1]
			if last.id == lost.id || last.id == 0 {
				t.Fatalf("the session after the error has id %d (the lost one %d)", last.id, lost.id)
			}
		})
	}
}

// A broker whose sessions fail every time gets full fetches after
// maxSessionErrors of them, and the records still come.
func TestSessionOffAfterRepeatedErrors(t *testing.T) {
	const topic = "flaky"
	k := harness.StartKafka(t, harness.SeedTopics(1, topic))
	var injected atomic.Int64
	log := watchFetches(k, func(req *kmsg.FetchRequest) kmsg.Response {
		if req.SessionEpoch <= 0 {
			return nil
		}
		injected.Add(1)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.ErrorCode = kerr.InvalidFetchSessionEpoch.Code
		return resp
	})
	c := openConsumer(t, testFetchConfig(k))
	curs := map[int]*Cursor{0: openCursor(t, c, topic, 0, 0)}
	round(t, k, curs, topic, 0, 5)
	harness.Await(t, drainTimeout, "ten sessionless requests", func() bool {
		all := log.all()
		n := 0
		for i := len(all) - 1; i >= 0 && all[i].epoch == -1; i-- {
			n++
		}
		return n >= 10
	})
	round(t, k, curs, topic, 1, 5)
	if n := injected.Load(); n != maxSessionErrors {
		t.Fatalf("%d session errors before sessions were off, want %d", n, maxSessionErrors)
	}
}

// The session's bookkeeping, request by request.
func TestSessionBookkeeping(t *testing.T) {
	cur := func(p int) *Cursor { return &Cursor{tp: sinks.Partition{Topic: "t", Partition: p}} }
	c0, c1, c2 := cur(0), cur(1), cur(2)
	part := func(c *Cursor, from int64) *fetchPart { return &fetchPart{cur: c, from: from, max: 100, epoch: 3} }
	req := func(ps ...*fetchPart) *fetchRequest { return &fetchRequest{parts: ps} }
	names := func(ps []*fetchPart) string {
		var s []string
		for _, p := range ps {
			s = append(s, fmt.Sprint(p.cur.tp.Partition))
		}
		return strings.Join(s, ",")
	}
	var s fetchSession
	send := func(r *fetchRequest, answerID int32, sessionErr int16) (listed, forgotten string, id, epoch int32) {
		t.Helper()
		if !s.usable() {
			t.Fatal("session busy or off")
		}
		s.begin(r)
		if s.usable() {
			t.Fatal("session usable with a request in flight")
		}
		id, epoch = r.sessionID, r.sessionEpoch
		r.answerID, r.sessionErr = answerID, sessionErr
		s.answered(r)
		var f []string
		for _, tp := range r.forgotten {
			f = append(f, fmt.Sprint(tp.Partition))
		}
		return names(r.listed), strings.Join(f, ","), id, epoch
	}
	check := func(what, listed, forgotten string, id, epoch int32, wantListed, wantForgotten string, wantID, wantEpoch int32) {
		t.Helper()
		if listed != wantListed || forgotten != wantForgotten || id != wantID || epoch != wantEpoch {
			t.Fatalf("%s: listed %q forgotten %q session %d epoch %d; want %q %q %d %d",
				what, listed, forgotten, id, epoch, wantListed, wantForgotten, wantID, wantEpoch)
		}
	}
	l, f, id, ep := send(req(part(c0, 10), part(c1, 20)), 0, 0)
	check("declined open", l, f, id, ep, "0,1", "", 0, 0)
	l, f, id, ep = send(req(part(c0, 10), part(c1, 20)), 7, 0)
	check("open", l, f, id, ep, "0,1", "", 0, 0)
	l, f, id, ep = send(req(part(c0, 10), part(c1, 20)), 7, 0)
	check("idle", l, f, id, ep, "", "", 7, 1)
	l, f, id, ep = send(req(part(c0, 15), part(c2, 0)), 7, 0)
	check("moved, joined, left", l, f, id, ep, "0,2", "1", 7, 2)
	p := part(c2, 0)
	p.max = 50
	l, f, id, ep = send(req(part(c0, 15), p), 7, 0)
	check("limit changed", l, f, id, ep, "2", "", 7, 3)
	l, f, id, ep = send(req(part(c0, 15), p), 0, kerr.FetchSessionIDNotFound.Code)
	check("lost", l, f, id, ep, "", "", 7, 4)
	l, f, id, ep = send(req(part(c0, 15), p), 9, 0)
	check("reopened, closing the lost one", l, f, id, ep, "0,2", "", 7, 0)
	l, f, id, ep = send(req(part(c0, 15), p), 0, 0)
	check("the broker ended it", l, f, id, ep, "", "", 9, 1)
	l, f, id, ep = send(req(part(c0, 15)), 11, 0)
	check("anew", l, f, id, ep, "0", "", 9, 0)

	// A failure elsewhere while the session's request is out: anew once
	// it is back, whatever its answer.
	r := req(part(c0, 15))
	s.begin(r)
	s.failed()
	r.answerID = 11
	s.answered(r)
	if s.epoch != 0 {
		t.Fatalf("epoch %d after a failure beside the session's request, want 0", s.epoch)
	}
	if got := nextSessionEpoch(math.MaxInt32); got != 1 {
		t.Fatalf("the epoch after the largest is %d, want 1", got)
	}
	s = fetchSession{}
	for range maxSessionErrors {
		send(req(part(c0, 15)), 13, 0)
		send(req(part(c0, 15)), 13, kerr.InvalidFetchSessionEpoch.Code)
	}
	if s.usable() {
		t.Fatalf("session usable after %d session errors in a row", maxSessionErrors)
	}
}

// A fetch session on a real cluster survives a leader moving away and
// back and a broker killed and started again: the partitions follow their
// leaders from session to session, every record arrives once and in order,
// and the requests are incremental again after each fault.
func TestSessionApacheLeaderMoveAndBrokerRestart(t *testing.T) {
	k := apacheKafka(t)
	const topic, parts = "sessions", 6
	k.CreateTopic(t, topic, parts)
	cfg, _ := apacheConfig(k)
	obs, logs := observer.New(zapcore.DebugLevel)
	test := zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Core()
	c, err := NewConsumer(cfg, zap.New(zapcore.NewTee(test, obs)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	acked := produceLoop(t, k, topic, parts, stop)
	f, wg := follow(t, ctx, c, topic, parts)
	harness.Await(t, 30*time.Second, "every partition to move", func() bool { return f.allMovedSince(parts, time.Time{}) })
	incremental := func(what string) {
		t.Helper()
		n := c.Stats().IncrementalFetches
		harness.Await(t, 30*time.Second, "incremental fetches after "+what, func() bool { return c.Stats().IncrementalFetches >= n+10 })
	}
	incremental("the start")
	// opened counts the sessions opened with broker id.
	opened := func(id int32) int {
		n := 0
		for _, e := range logs.FilterMessage("fetch session opened").All() {
			if b, ok := e.ContextMap()["broker"]; ok && fmt.Sprint(b) == fmt.Sprint(id) {
				n++
			}
		}
		return n
	}
	settle := func(what string) {
		t.Helper()
		start := time.Now()
		harness.Await(t, cfg.MetadataTTL+30*time.Second, "the cursors to follow "+what, func() bool {
			return leadersAgree(t, k, c, topic, parts)
		})
		harness.Await(t, 30*time.Second, "every partition to move after "+what, func() bool { return f.allMovedSince(parts, start) })
		incremental(what)
	}

	// A leader moves to another broker and back.
	from := k.Leader(t, topic, 0)
	to := (from + 1) % 3
	k.MoveLeader(t, topic, 0, to)
	settle("a leader move")
	k.MoveLeader(t, topic, 0, from)
	settle("the leader moving back")

	// A broker killed, and started again.
	victim := k.Node(int(k.Leader(t, topic, 0)))
	before := opened(victim.ID())
	victim.Kill()
	harness.Await(t, 30*time.Second, "Kafka to move the leaders off the killed broker", func() bool {
		for p := range parts {
			if k.Leader(t, topic, p) == victim.ID() {
				return false
			}
		}
		return true
	})
	settle("the broker's SIGKILL")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	k.AwaitHealthy(t)
	k.ElectPreferredLeaders(t, topic)
	settle("the broker's restart")
	harness.Await(t, 30*time.Second, "a session opened with the restarted broker", func() bool { return opened(victim.ID()) > before })

	close(stop)
	want := acked()
	harness.Await(t, time.Minute, "every acknowledged record", func() bool { return f.reached(want) || f.err != nil })
	cancel()
	wg.Wait()
	if f.err != nil {
		t.Fatal(f.err)
	}
	st := c.Stats()
	t.Logf("%d fetch requests: %d full, %d incremental; %d bytes of requests; %d sessions opened",
		st.FetchRequests, st.FullFetches, st.IncrementalFetches, st.FetchRequestBytes, logs.FilterMessage("fetch session opened").Len())
}

// BenchmarkSessionBeginIdle is a long poll's bookkeeping at 10,000 idle
// partitions: every partition in the request, none changed.
func BenchmarkSessionBeginIdle(b *testing.B) {
	const n = 10000
	parts := make([]*fetchPart, n)
	for i := range parts {
		parts[i] = &fetchPart{cur: &Cursor{tp: sinks.Partition{Topic: "idle", Partition: i}}, from: 5, max: 1 << 20, epoch: 1}
	}
	var s fetchSession
	s.begin(&fetchRequest{parts: parts})
	s.answered(&fetchRequest{answerID: 7})
	for b.Loop() {
		r := &fetchRequest{parts: parts}
		s.begin(r)
		if len(r.listed) != 0 && s.epoch > 0 {
			b.Fatalf("%d listed", len(r.listed))
		}
		r.answerID = 7
		s.answered(r)
	}
}

// A cursor that leaves the loop (its leader moved, it closed) is forgotten
// by the next request; one that leaves and comes back, or a new cursor of
// the same partition, before that request is listed and not forgotten: the
// broker adds a request's partitions before it forgets, so listing and
// forgetting one partition would drop it from the session.
func TestSessionCursorLeavesAndReturns(t *testing.T) {
	cur := func(p int) *Cursor { return &Cursor{tp: sinks.Partition{Topic: "t", Partition: p}} }
	c0, c1, c2 := cur(0), cur(1), cur(2)
	part := func(c *Cursor) *fetchPart { return &fetchPart{cur: c, from: 10, max: 100, epoch: 3} }
	var s fetchSession
	send := func(ps ...*fetchPart) (listed, forgotten []int) {
		t.Helper()
		r := &fetchRequest{parts: ps}
		s.begin(r)
		r.answerID = 7
		s.answered(r)
		for _, p := range r.listed {
			listed = append(listed, p.cur.tp.Partition)
		}
		for _, tp := range r.forgotten {
			forgotten = append(forgotten, tp.Partition)
		}
		return listed, forgotten
	}
	check := func(what string, listed, forgotten []int, wantListed, wantForgotten []int) {
		t.Helper()
		if !slices.Equal(listed, wantListed) || !slices.Equal(forgotten, wantForgotten) {
			t.Fatalf("%s: listed %v forgotten %v; want %v %v", what, listed, forgotten, wantListed, wantForgotten)
		}
	}
	send(part(c0), part(c1), part(c2)) // opens
	l, f := send(part(c0), part(c1), part(c2))
	check("idle", l, f, nil, nil)
	s.leave(c1)
	l, f = send(part(c0), part(c2))
	check("c1 left", l, f, nil, []int{1})
	s.leave(c2)
	l, f = send(part(c0), part(c2))
	check("c2 left and came back", l, f, []int{2}, nil)
	s.leave(c0)
	again := cur(0)
	l, f = send(part(again), part(c2))
	check("c0 closed, a new cursor of partition 0", l, f, []int{0}, nil)
	l, f = send(part(again), part(c2))
	check("idle again", l, f, nil, nil)
	if len(s.members) != 2 || c0.sess != nil || c1.sess != nil {
		t.Fatalf("members %d, want 2; left cursors still marked: %v %v", len(s.members), c0.sess != nil, c1.sess != nil)
	}
}

// A partition that an incremental answer leaves out has nothing new only if
// an earlier answer told its log end: Kafka lists a partition new to the
// session in its first answer, while kfake may leave it out at the
// request's bound. Taken for quiet, such a partition waited out a long poll
// in flight beside its backlog. A full answer that leaves a partition out
// says nothing of it.
func TestAnswerLeavingAPartitionOut(t *testing.T) {
	c, b := loopOfOne()
	const at = 100
	for _, tc := range []struct {
		name           string
		epoch          int32 // the answer's session epoch; -1: a full answer
		end            int64 // the log end an earlier answer told; -1: none
		quiet, starved bool
	}{
		{"incremental, no log end told yet", 2, -1, false, true},
		{"incremental, at the log end told", 2, at, true, false},
		{"incremental, behind the log end told", 2, at + 50, false, true},
		{"full, at the log end told", -1, at, false, true},
		{"full, no log end told yet", -1, -1, false, true},
	} {
		cur := &Cursor{c: c, tp: sinks.Partition{Topic: "t", Partition: 0}, loop: b, leader: 1, epoch: -1, fetchAt: at, hw: tc.end, lso: tc.end,
			signal: make(chan struct{}, 1)}
		p := &fetchPart{cur: cur, seq: cur.seq, from: at, limit: 1 << 20, max: 1 << 20}
		r := &fetchRequest{parts: []*fetchPart{p}, reserve: 1 << 20, sessionID: 7, sessionEpoch: tc.epoch}
		cur.flight = r
		c.held.Add(r.reserve)
		b.handle(r)
		if cur.quiet != tc.quiet || cur.starved != tc.starved {
			t.Errorf("%s: quiet %v, starved %v; want %v, %v", tc.name, cur.quiet, cur.starved, tc.quiet, tc.starved)
		}
	}
}

// TestStarvedPartitionAsksForTheAnswersLargestBatch hands a loop an answer
// in which one partition got a batch of 120,000 bytes and another, with
// records at its offset, got nothing within its limit (kfake sends no part
// of a batch beyond the limit; the response does not tell its size). The
// second asks next for the larger of twice its limit and the answer's
// largest batch when it holds nothing (else for twice its limit): doubling
// from a share of 26 KB took three more requests to reach a producer's
// 120 KB batch, for each of 10,000 partitions.
func TestStarvedPartitionAsksForTheAnswersLargestBatch(t *testing.T) {
	for _, tc := range []struct {
		name           string
		largest, limit int
		held           int64 // what the starved cursor holds already
		want           int64
	}{
		{"a larger batch in the answer", 120_000, 26_000, 0, 120_000},
		{"twice the limit is more", 40_000, 26_000, 0, 52_000},
		{"no batch in the answer", 0, 26_000, 0, 52_000},
		// Its limit keeps what it decodes within its share: a batch past
		// that is only for a cursor that holds nothing.
		{"a larger batch, the cursor holding some", 120_000, 26_000, 10_000, 52_000},
	} {
		c, b := loopOfOne()
		open := func(partition int) *Cursor {
			return &Cursor{c: c, tp: sinks.Partition{Topic: "t", Partition: partition}, loop: b, leader: 1, epoch: -1, fetchAt: 0, hw: -1, lso: -1,
				signal: make(chan struct{}, 1)}
		}
		got, starved := open(0), open(1)
		starved.held = tc.held
		r := &fetchRequest{reserve: 1 << 20, sessionEpoch: -1, got: int64(tc.largest)}
		part := func(cur *Cursor) *fetchPart {
			p := &fetchPart{cur: cur, seq: cur.seq, from: 0, limit: int32(tc.limit), max: int32(tc.limit), present: true, hw: 1000, lso: 1000}
			cur.flight = r
			r.parts = append(r.parts, p)
			return p
		}
		withRecords := part(got)
		if tc.largest > 0 {
			withRecords.batch = PolledBatch{From: 0, Next: 1000, largest: tc.largest}
		}
		part(starved)
		c.held.Add(r.reserve)
		b.handle(r)
		if !starved.starved || starved.big != tc.want {
			t.Errorf("%s: starved %v, asks next for %d bytes; want starved, %d", tc.name, starved.starved, starved.big, tc.want)
		}
	}
}

// TestBatchAfterTheLogEndIsMarked: a batch is marked AfterLogEnd when its
// cursor's last answer had found it at the log end (its records came since:
// a trickle's), and not when the cursor had never been answered or was
// behind (a backlog's), so a replica lets only the former's commit wait
// for company.
func TestBatchAfterTheLogEndIsMarked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		quiet bool // the cursor's last answer found it at the log end
	}{
		{"after the log end", true},
		{"from a backlog", false},
	} {
		c, b := loopOfOne()
		cur := &Cursor{c: c, tp: sinks.Partition{Topic: "t", Partition: 0}, loop: b, leader: 1, epoch: -1, fetchAt: 100, hw: 100, lso: 100,
			quiet: tc.quiet, signal: make(chan struct{}, 1)}
		r := &fetchRequest{reserve: 1 << 20, sessionEpoch: -1}
		p := &fetchPart{cur: cur, seq: cur.seq, from: 100, limit: 1 << 20, max: 1 << 20, present: true, hw: 101, lso: 101,
			batch: PolledBatch{From: 100, Next: 101, HighWatermark: 101, LastStable: 101}}
		r.parts = []*fetchPart{p}
		cur.flight = r
		c.held.Add(r.reserve)
		b.handle(r)
		if len(cur.queue) != 1 {
			t.Fatalf("%s: %d batches queued, want 1", tc.name, len(cur.queue))
		}
		if got := cur.queue[0].AfterLogEnd; got != tc.quiet {
			t.Errorf("%s: AfterLogEnd %v, want %v", tc.name, got, tc.quiet)
		}
		if !cur.quiet {
			t.Errorf("%s: the cursor read to the log end is not quiet", tc.name)
		}
	}
}

// loopOfOne is a consumer with no connection and the loop of its one
// broker (1), for tests that drive pick and handle by hand: requests of at
// most 16 MiB.
func loopOfOne() (*Consumer, *brokerLoop) {
	c := &Consumer{log: zap.NewNop(), brokers: map[int32]*brokerLoop{}, cursors: map[sinks.Partition]*Cursor{}}
	c.cfg.FetchMaxBytes = 16 << 20
	b := newBrokerLoop(c, 1)
	c.brokers[1] = b
	return c, b
}
