package admin_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// env is a group of one etcd and one Kafka: each operator action is
// called as a library call against them, no process.
type env struct {
	t     *testing.T
	cli   *clientv3.Client
	coord *coordinator.Coordinator
	kafka *harness.Kafka
}

func newEnv(t *testing.T) *env {
	t.Helper()
	etcd := harness.StartEtcd(t, 1)
	kf := harness.StartKafka(t, harness.SeedTopics(2, "t"))
	for p := range 2 {
		vals := make([]string, 10)
		for i := range vals {
			vals[i] = fmt.Sprintf(`{"i":%d}`, i)
		}
		kf.ProduceValues(t, "t", p, vals...)
	}
	cli := etcd.Client(t)
	coord, err := coordinator.New(cli, "g")
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, cli: cli, coord: coord, kafka: kf}
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// join makes a live member that claims ps, and commits next for each.
func (e *env) join(id string, next int64, ps ...sinks.Partition) (*coordinator.Session, []*coordinator.Claim) {
	e.t.Helper()
	s, err := e.coord.Join(e.ctx(), coordinator.Member{ID: id}, coordinator.WithTTL(5*time.Second))
	if err != nil {
		e.t.Fatal(err)
	}
	var claims []*coordinator.Claim
	for _, p := range ps {
		c, err := s.Claim(e.ctx(), p)
		if err != nil {
			e.t.Fatal(err)
		}
		if next > 0 {
			if err := c.Commit(e.ctx(), next, next); err != nil {
				e.t.Fatal(err)
			}
		}
		claims = append(claims, c)
	}
	return s, claims
}

func (e *env) snapshot() *coordinator.Snapshot {
	e.t.Helper()
	s, err := e.coord.Snapshot(e.ctx())
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) kafkaAdmin() *admin.Kafka {
	k := admin.NewKafka(kafkaconf.Config{Brokers: e.kafka.Brokers(), DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second}, "t", "nope")
	e.t.Cleanup(k.Close)
	return k
}

var (
	p0 = sinks.Partition{Topic: "t", Partition: 0}
	p1 = sinks.Partition{Topic: "t", Partition: 1}
)

// A reset is planned from etcd and Kafka's log bounds, then applied by a
// fenced transaction per partition: the offsets move and the generation
// rises; a plan whose offsets changed since it was read is refused for
// that partition; a scope Kafka does not have is an InputError.
func TestResetPlanAndApply(t *testing.T) {
	e := newEnv(t)
	s, _ := e.join("r1", 8, p0, p1)
	k := e.kafkaAdmin()

	var warned []string
	r := admin.Reset{Target: admin.Target{Kind: admin.ShiftBy, Shift: -5}, Topics: []admin.TopicScope{{Topic: "t", Arg: "t"}}}
	plan, err := r.Plan(e.ctx(), "g", e.snapshot(), k, func(w string) { warned = append(warned, w) })
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Partitions) != 2 || plan.Partitions[0].New != 3 || *plan.Partitions[0].Current != 8 || plan.Partitions[1].LogEnd != 10 {
		t.Fatalf("plan = %+v, want both partitions from 8 to 3, log end 10", plan.Partitions)
	}
	if len(warned) != 0 {
		t.Errorf("warnings %q, want none", warned)
	}
	if err := plan.Apply(e.ctx(), e.coord, 5*time.Second, func(err error) error { return err }); err != nil {
		t.Fatal(err)
	}
	for _, p := range []sinks.Partition{p0, p1} {
		if o := e.snapshot().Offsets[p]; o.Next != 3 || o.Generation != 1 {
			t.Errorf("%s after the reset: %+v, want next 3, generation 1", p, o)
		}
	}
	for _, row := range plan.Partitions {
		if row.Status != admin.StatusReset || row.Generation == nil || *row.Generation != 1 {
			t.Errorf("row %+v, want reset to generation 1", row)
		}
	}

	// A plan read before another reset is refused, partition by partition.
	r = admin.Reset{Target: admin.Target{Kind: admin.ToOffset, Offset: 9}, Topics: []admin.TopicScope{{Topic: "t", Partitions: []int{0}, Arg: "t:0"}}}
	stale, err := r.Plan(e.ctx(), "g", e.snapshot(), k, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	r.Target.Offset = 1
	fresh, _ := r.Plan(e.ctx(), "g", e.snapshot(), k, func(string) {})
	if err := fresh.Apply(e.ctx(), e.coord, 5*time.Second, func(err error) error { return err }); err != nil {
		t.Fatal(err)
	}
	err = stale.Apply(e.ctx(), e.coord, 5*time.Second, func(err error) error { return err })
	if err == nil || !strings.Contains(err.Error(), "offsets changed since the plan was read") || stale.Partitions[0].Status != admin.StatusConflict {
		t.Fatalf("a stale plan: %v, %+v; want a conflict", err, stale.Partitions)
	}
	if o := e.snapshot().Offsets[p0]; o.Next != 1 {
		t.Errorf("t/0 after the refused plan: next %d, want 1 (the fresh plan's)", o.Next)
	}

	// Bad input: a topic Kafka does not have.
	r = admin.Reset{Target: admin.Target{Kind: admin.ToEarliest}, Topics: []admin.TopicScope{{Topic: "nope", Arg: "nope"}}}
	_, err = r.Plan(e.ctx(), "g", e.snapshot(), k, func(string) {})
	var bad *admin.InputError
	if !errors.As(err, &bad) || !strings.Contains(err.Error(), `topic "nope" not found in Kafka`) {
		t.Errorf("a topic Kafka lacks: %v, want an InputError naming it", err)
	}
	_ = s.Close(e.ctx())
}

// Drain refuses the last member that reads unless forced, marks the
// member, and AwaitDrained sees its claims go; Release asks the owner to
// hand a claim over, and Await sees the new owner.
func TestDrainAndRelease(t *testing.T) {
	e := newEnv(t)
	s1, claims := e.join("r1", 4, p0, p1)

	var bad *admin.InputError
	if err := admin.Drain(e.ctx(), e.coord, "r1", false, false); !errors.As(err, &bad) || !strings.Contains(err.Error(), "last member") {
		t.Fatalf("draining the last member: %v, want an InputError", err)
	}
	if err := admin.Drain(e.ctx(), e.coord, "nobody", false, true); !errors.As(err, &bad) || !strings.Contains(err.Error(), "not a live member") {
		t.Fatalf("draining no member: %v, want an InputError", err)
	}
	s2, _ := e.join("r2", 0)
	if err := admin.Drain(e.ctx(), e.coord, "r1", false, false); err != nil {
		t.Fatal(err)
	}
	if m := member(e.snapshot(), "r1"); !m.Draining {
		t.Fatalf("r1 after Drain: %+v, want draining", m)
	}

	// Release: the owner (played here) hands t/0 over to r2.
	h, err := admin.Release(e.ctx(), e.coord, e.snapshot(), p0)
	if err != nil || h.From != "r1" || h.FromEpoch != claims[0].Epoch() {
		t.Fatalf("Release = %+v, %v; want from r1 at epoch %d", h, err, claims[0].Epoch())
	}
	if err := claims[0].Release(e.ctx()); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Claim(e.ctx(), p0); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(e.ctx(), 10*time.Second)
	defer cancel()
	if err := h.Await(wctx, e.coord, 5*time.Second); err != nil || !h.Done || h.To != "r2" {
		t.Fatalf("Await = %v, %+v; want handed over to r2", err, h)
	}
	if _, err := admin.Release(e.ctx(), e.coord, e.snapshot(), sinks.Partition{Topic: "t", Partition: 7}); !errors.As(err, &bad) {
		t.Errorf("releasing a partition without a claim: %v, want an InputError", err)
	}

	// The drained replica gives t/1 up; AwaitDrained sees it.
	var seen []int
	rctx := e.ctx()
	go func() { _ = claims[1].Release(rctx) }()
	left, err := admin.AwaitDrained(wctx, e.coord, "r1", func(n int) { seen = append(seen, n) })
	if err != nil || left != 0 || len(seen) == 0 || seen[len(seen)-1] != 0 {
		t.Fatalf("AwaitDrained = %d, %v (seen %v); want 0", left, err, seen)
	}
	_ = s1.Close(e.ctx())
	_ = s2.Close(e.ctx())
}

func member(s *coordinator.Snapshot, id string) coordinator.Member {
	for _, m := range s.Members {
		if m.ID == id {
			return m
		}
	}
	return coordinator.Member{}
}

// Describe joins etcd's view with Kafka's log ends; Replicas, Groups and
// DeleteGroup see the same group; a group with live replicas is not
// deleted, one without is, in one transaction.
func TestDescribeListAndDelete(t *testing.T) {
	e := newEnv(t)
	s, _ := e.join("r1", 4, p0)
	k := e.kafkaAdmin()

	d, missing, kerr := admin.Describe(e.ctx(), "g", e.snapshot(), k, admin.DescribeTopics(e.snapshot(), []string{"nope"}))
	if kerr != nil || len(missing) != 1 || missing[0] != "nope" || !d.KafkaReachable {
		t.Fatalf("Describe: missing %v, Kafka %v", missing, kerr)
	}
	if len(d.Partitions) != 2 {
		t.Fatalf("Describe: %d partitions, want t/0 (claimed) and t/1 (Kafka's only)", len(d.Partitions))
	}
	if r := d.Partitions[0]; *r.Committed != 4 || *r.LogEnd != 10 || *r.Lag != 6 || *r.Owner != "r1" {
		t.Errorf("t/0: %+v, want committed 4, log end 10, lag 6, owner r1", r)
	}
	if r := d.Partitions[1]; r.Committed != nil || *r.LogEnd != 10 || r.Owner != nil {
		t.Errorf("t/1: %+v, want no commit, log end 10, no owner", r)
	}

	rs, err := admin.Replicas(e.ctx(), e.cli, e.snapshot())
	if err != nil || len(rs) != 1 || rs[0].ID != "r1" || rs[0].ClaimCount != 1 || rs[0].LeaseTTLLeft == nil {
		t.Fatalf("Replicas = %+v, %v; want r1 with one claim", rs, err)
	}
	gs, err := admin.Groups(e.ctx(), e.cli, []string{"g"})
	if err != nil || len(gs) != 1 || gs[0] != (admin.GroupSummary{Group: "g", Replicas: 1, Partitions: 1}) {
		t.Fatalf("Groups = %+v, %v", gs, err)
	}

	var bad *admin.InputError
	if _, err := admin.DeleteGroup(e.ctx(), e.cli, e.coord, e.snapshot(), false); !errors.As(err, &bad) {
		t.Fatalf("deleting a live group: %v, want an InputError", err)
	}
	if err := s.Close(e.ctx()); err != nil {
		t.Fatal(err)
	}
	dry, err := admin.DeleteGroup(e.ctx(), e.cli, e.coord, e.snapshot(), true)
	if err != nil || dry.Deleted || dry.Keys == 0 || dry.Offsets != 1 {
		t.Fatalf("dry run = %+v, %v; want keys counted, nothing deleted", dry, err)
	}
	done, err := admin.DeleteGroup(e.ctx(), e.cli, e.coord, e.snapshot(), false)
	if err != nil || !done.Deleted {
		t.Fatalf("DeleteGroup = %+v, %v", done, err)
	}
	if n, _ := e.cli.Get(e.ctx(), e.coord.Keys().Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()); n.Count != 0 {
		t.Errorf("%d keys left after the delete", n.Count)
	}
}
