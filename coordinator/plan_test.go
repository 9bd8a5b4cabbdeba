package coordinator

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// The property tests draw their inputs from a seeded generator. The seed is
// new on every run, for coverage, and is logged and named in every failure;
// set PLAN_TEST_SEED to it to replay a failing run.
func planTestSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PLAN_TEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PLAN_TEST_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with PLAN_TEST_SEED=%d)", seed, seed)
	return seed
}

// planTestRand returns the generator of case i of a run seeded with seed, so a
// failure names a case that can be replayed on its own.
func planTestRand(seed uint64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(i)))
}

// planRandMembers returns n members with distinct IDs and revisions that may
// tie, so the ID tie-break is exercised.
func planRandMembers(r *rand.Rand, n int) []Member {
	ms := make([]Member, 0, n)
	seen := map[string]bool{}
	for len(ms) < n {
		id := fmt.Sprintf("m%03d", r.IntN(1000))
		if seen[id] {
			continue
		}
		seen[id] = true
		ms = append(ms, Member{ID: id, Revision: 1 + r.Int64N(int64(2*n))})
	}
	return ms
}

// planRandPartitions returns p distinct partitions over a few topics.
func planRandPartitions(r *rand.Rand, p int) []sinks.Partition {
	topics := []string{"orders", "payments", "audit"}
	next := map[string]int{}
	parts := make([]sinks.Partition, 0, p)
	for range p {
		topic := topics[r.IntN(len(topics))]
		parts = append(parts, sinks.Partition{Topic: topic, Partition: next[topic]})
		next[topic]++
	}
	r.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	return parts
}

// planRandClaims claims a random share of parts, by live members and by dead
// ones, plus some partitions that are not in parts any more. The live
// members' shares are skewed, so some are over their quota.
func planRandClaims(r *rand.Rand, members []Member, parts []sinks.Partition) map[sinks.Partition]string {
	claims := map[sinks.Partition]string{}
	free := r.Float64()
	dead := r.Float64() / 2
	for _, p := range parts {
		switch x := r.Float64(); {
		case x < free:
		case x < free+dead*(1-free):
			claims[p] = fmt.Sprintf("dead%d", r.IntN(3))
		case len(members) > 0:
			// Squaring skews towards the first members.
			i := int(float64(len(members)) * r.Float64() * r.Float64())
			claims[p] = members[i].ID
		}
	}
	for i := range r.IntN(4) {
		owner := fmt.Sprintf("dead%d", i)
		if len(members) > 0 && r.IntN(2) == 0 {
			owner = members[r.IntN(len(members))].ID
		}
		claims[sinks.Partition{Topic: "gone", Partition: i}] = owner
	}
	return claims
}

// planOldestFirst returns member IDs by join order, the test's own reading
// of the contract.
func planOldestFirst(members []Member) []string {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int {
		if a.Revision != b.Revision {
			return cmp.Compare(a.Revision, b.Revision)
		}
		return cmp.Compare(a.ID, b.ID)
	})
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

// planWantCounts returns the quota of every member: floor(P/N), plus one for
// the P mod N oldest.
func planWantCounts(members []Member, p int) map[string]int {
	want := map[string]int{}
	ids := planOldestFirst(members)
	for i, id := range ids {
		want[id] = p / len(ids)
		if i < p%len(ids) {
			want[id]++
		}
	}
	return want
}

func planCounts(plan map[sinks.Partition]string) map[string]int {
	counts := map[string]int{}
	for _, owner := range plan {
		counts[owner]++
	}
	return counts
}

// planCheck checks the contract of one plan: it covers exactly parts, gives
// every member its exact quota, and keeps, of each live member's claims, the
// lowest ones up to its quota.
func planCheck(members []Member, parts []sinks.Partition, claims, plan map[sinks.Partition]string) error {
	if len(members) == 0 || len(parts) == 0 {
		if len(plan) != 0 {
			return fmt.Errorf("want an empty plan, got %d partitions", len(plan))
		}
		return nil
	}
	if len(plan) != len(parts) {
		return fmt.Errorf("plan has %d partitions, want %d", len(plan), len(parts))
	}
	for _, p := range parts {
		if _, ok := plan[p]; !ok {
			return fmt.Errorf("%v is not planned", p)
		}
	}
	want := planWantCounts(members, len(parts))
	got := planCounts(plan)
	for owner := range got {
		if _, live := want[owner]; !live {
			return fmt.Errorf("planned to %q, not a member", owner)
		}
	}
	lo, hi := len(parts), 0
	for id, n := range want {
		if got[id] != n {
			return fmt.Errorf("member %s owns %d, want %d (counts %v)", id, got[id], n, got)
		}
		lo, hi = min(lo, got[id]), max(hi, got[id])
	}
	if hi-lo > 1 {
		return fmt.Errorf("unbalanced: counts from %d to %d", lo, hi)
	}
	held := map[string][]sinks.Partition{}
	for _, p := range parts {
		if owner, ok := claims[p]; ok {
			held[owner] = append(held[owner], p)
		}
	}
	for id, n := range want {
		mine := held[id]
		slices.SortFunc(mine, sinks.Partition.Compare)
		for i, p := range mine {
			if kept := plan[p] == id; kept != (i < n) {
				return fmt.Errorf("member %s (quota %d): its claim #%d %v kept=%v", id, n, i, p, kept)
			}
		}
	}
	return nil
}

func TestPlanQuotasRandom(t *testing.T) {
	seed := planTestSeed(t)
	for i := range 3000 {
		r := planTestRand(seed, i)
		n, p := 1+r.IntN(20), r.IntN(301)
		if i%50 == 0 {
			n = 0
		}
		members := planRandMembers(r, n)
		parts := planRandPartitions(r, p)
		claims := planRandClaims(r, members, parts)
		plan := Plan(members, parts, claims)
		if err := planCheck(members, parts, claims, plan); err != nil {
			t.Fatalf("seed %d case %d (N=%d P=%d): %v", seed, i, n, p, err)
		}
	}
}

// planShuffled returns a copy of members, parts and claims in another order,
// with some members and partitions listed twice.
func planShuffled(r *rand.Rand, members []Member, parts []sinks.Partition, claims map[sinks.Partition]string) ([]Member, []sinks.Partition, map[sinks.Partition]string) {
	ms := slices.Clone(members)
	ps := slices.Clone(parts)
	if len(ms) > 0 && r.IntN(2) == 0 {
		ms = append(ms, ms[r.IntN(len(ms))])
	}
	if len(ps) > 0 && r.IntN(2) == 0 {
		ps = append(ps, ps[r.IntN(len(ps))])
	}
	r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
	r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	// A map built in another insertion order iterates in another order.
	keys := slices.Collect(maps.Keys(claims))
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	cs := make(map[sinks.Partition]string, len(claims))
	for _, k := range keys {
		cs[k] = claims[k]
	}
	return ms, ps, cs
}

func TestPlanDeterministic(t *testing.T) {
	seed := planTestSeed(t)
	for i := range 500 {
		r := planTestRand(seed, i)
		members := planRandMembers(r, 1+r.IntN(20))
		parts := planRandPartitions(r, r.IntN(301))
		claims := planRandClaims(r, members, parts)
		want := Plan(members, parts, claims)
		for range 5 {
			ms, ps, cs := planShuffled(r, members, parts, claims)
			if got := Plan(ms, ps, cs); !maps.Equal(got, want) {
				t.Fatalf("seed %d case %d: shuffled inputs give another plan", seed, i)
			}
		}
	}
}

// planRandBefore draws a group of n members (least to 20) and p partitions
// (0 to 300), and the plan that stands before a member comes or goes.
func planRandBefore(r *rand.Rand, least int) (n, p int, members []Member, parts []sinks.Partition, before map[sinks.Partition]string) {
	n, p = least+r.IntN(21-least), r.IntN(301)
	members = planRandMembers(r, n)
	parts = planRandPartitions(r, p)
	return n, p, members, parts, Plan(members, parts, planRandClaims(r, members, parts))
}

func TestPlanStickyJoin(t *testing.T) {
	seed := planTestSeed(t)
	for i := range 1000 {
		r := planTestRand(seed, i)
		n, p, members, parts, before := planRandBefore(r, 1)

		// A new member key has the newest revision; a joiner at a random
		// place in the join order must not move more.
		joiner := Member{ID: "joiner"}
		for _, m := range members {
			joiner.Revision = max(joiner.Revision, m.Revision+1)
		}
		if i%2 == 1 {
			joiner.Revision = r.Int64N(joiner.Revision + 1)
		}
		grown := append(slices.Clone(members), joiner)
		after := Plan(grown, parts, before)
		if err := planCheck(grown, parts, before, after); err != nil {
			t.Fatalf("seed %d case %d (N=%d P=%d): %v", seed, i, n, p, err)
		}
		moved := 0
		for part, owner := range after {
			if owner != before[part] {
				moved++
				if owner != joiner.ID {
					t.Fatalf("seed %d case %d (N=%d P=%d): %v moved from %s to %s, not to the joiner", seed, i, n, p, part, before[part], owner)
				}
			}
		}
		if limit := (p + n) / (n + 1); moved > limit {
			t.Fatalf("seed %d case %d (N=%d P=%d): %d partitions moved, want at most ceil(P/(N+1)) = %d", seed, i, n, p, moved, limit)
		}
	}
}

func TestPlanStickyLeave(t *testing.T) {
	seed := planTestSeed(t)
	for i := range 1000 {
		r := planTestRand(seed, i)
		n, p, members, parts, before := planRandBefore(r, 2)

		k := r.IntN(n)
		leaver := members[k].ID
		rest := slices.Delete(slices.Clone(members), k, k+1)
		// The leaver's claims stay in the snapshot until its lease expires.
		after := Plan(rest, parts, before)
		if err := planCheck(rest, parts, before, after); err != nil {
			t.Fatalf("seed %d case %d (N=%d P=%d): %v", seed, i, n, p, err)
		}
		for part, owner := range before {
			if owner != leaver && after[part] != owner {
				t.Fatalf("seed %d case %d (N=%d P=%d): %v moved from %s to %s, but %s left", seed, i, n, p, part, owner, after[part], leaver)
			}
		}
	}
}

func TestPlanTable(t *testing.T) {
	// a and b joined first; d is the newest.
	members := []Member{
		{ID: "d", Revision: 40},
		{ID: "b", Revision: 20},
		{ID: "c", Revision: 30},
		{ID: "a", Revision: 10},
	}
	parts := func(topic string, n int) []sinks.Partition {
		ps := make([]sinks.Partition, n)
		for i := range ps {
			ps[i] = sinks.Partition{Topic: topic, Partition: i}
		}
		return ps
	}
	t10 := parts("t", 10)
	t12 := parts("t", 12)
	owners := func(ps []sinks.Partition, ids ...string) map[sinks.Partition]string {
		m := map[sinks.Partition]string{}
		for i, id := range ids {
			if id != "" {
				m[ps[i]] = id
			}
		}
		return m
	}

	tests := []struct {
		name       string
		members    []Member
		partitions []sinks.Partition
		claims     map[sinks.Partition]string
		want       map[sinks.Partition]string
	}{
		{
			name:       "P=10 N=4 from nothing: the oldest two get 3",
			members:    members,
			partitions: t10,
			want:       owners(t10, "a", "b", "a", "b", "c", "d", "a", "b", "c", "d"),
		},
		{
			name:       "P=10 N=4 stalled at 3,3,3,1: c sheds its highest to d",
			members:    members,
			partitions: t10,
			claims:     owners(t10, "a", "a", "a", "b", "b", "b", "c", "c", "c", "d"),
			want:       owners(t10, "a", "a", "a", "b", "b", "b", "c", "c", "d", "d"),
		},
		{
			name:       "P=10 N=4 with the youngest holding 3: d sheds to b",
			members:    members,
			partitions: t10,
			claims:     owners(t10, "d", "d", "d", "a", "a", "a", "c", "c", "", ""),
			want:       owners(t10, "d", "d", "b", "a", "a", "a", "c", "c", "b", "b"),
		},
		{
			name:       "a dead member's partitions spread over the survivors",
			members:    members[:3], // d, b, c; a is gone
			partitions: t12,
			claims:     owners(t12, "a", "a", "a", "b", "b", "b", "c", "c", "c", "d", "d", "d"),
			want:       owners(t12, "b", "c", "d", "b", "b", "b", "c", "c", "c", "d", "d", "d"),
		},
		{
			name:       "the largest deficit is served first",
			members:    members,
			partitions: t12,
			claims:     owners(t12, "a", "a", "a", "b", "b", "", "", "", "", "", "", ""),
			want:       owners(t12, "a", "a", "a", "b", "b", "c", "d", "c", "d", "b", "c", "d"),
		},
		{
			name:       "revision ties are broken by ID",
			members:    []Member{{ID: "y", Revision: 5}, {ID: "x", Revision: 5}},
			partitions: parts("t", 3),
			want:       owners(parts("t", 3), "x", "x", "y"),
		},
		{
			name:       "duplicates count once",
			members:    []Member{{ID: "x", Revision: 1}, {ID: "x", Revision: 1}},
			partitions: []sinks.Partition{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 0}},
			want:       map[sinks.Partition]string{{Topic: "t", Partition: 0}: "x"},
		},
		{
			name:       "partitions sort by topic, then number",
			members:    []Member{{ID: "x", Revision: 1}, {ID: "y", Revision: 2}},
			partitions: []sinks.Partition{{Topic: "b", Partition: 0}, {Topic: "a", Partition: 10}, {Topic: "a", Partition: 9}},
			want:       map[sinks.Partition]string{{Topic: "a", Partition: 9}: "x", {Topic: "a", Partition: 10}: "x", {Topic: "b", Partition: 0}: "y"},
		},
		{
			name:       "no members",
			partitions: t10,
			claims:     owners(t10, "a", "b"),
			want:       map[sinks.Partition]string{},
		},
		{
			name:    "no partitions",
			members: members,
			claims:  owners(t10, "a", "b"),
			want:    map[sinks.Partition]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Plan(tt.members, tt.partitions, tt.claims)
			if got == nil {
				t.Fatal("Plan returned a nil map")
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("Plan:\n got %v\nwant %v", planFormat(got), planFormat(tt.want))
			}
		})
	}
}

// planFormat prints a plan in partition order.
func planFormat(plan map[sinks.Partition]string) string {
	keys := slices.SortedFunc(maps.Keys(plan), sinks.Partition.Compare)
	s := "{"
	for i, k := range keys {
		if i > 0 {
			s += " "
		}
		s += k.String() + ":" + plan[k]
	}
	return s + "}"
}

// TestPlanScale checks a plan of 1,000 partitions over 10 members for
// correctness; its speed is BenchmarkPlan's business.
func TestPlanScale(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	members := planRandMembers(r, 10)
	parts := planRandPartitions(r, 1000)
	claims := planRandClaims(r, members, parts)
	if err := planCheck(members, parts, claims, Plan(members, parts, claims)); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkPlan(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	members := planRandMembers(r, 10)
	parts := planRandPartitions(r, 1000)
	claims := planRandClaims(r, members, parts)
	for b.Loop() {
		Plan(members, parts, claims)
	}
}

func TestDiff(t *testing.T) {
	p := func(n int) sinks.Partition { return sinks.Partition{Topic: "t", Partition: n} }
	plan := map[sinks.Partition]string{p(0): "a", p(1): "a", p(2): "a", p(3): "b", p(10): "a"}
	claims := map[sinks.Partition]string{
		p(1):                          "a", // kept
		p(2):                          "b", // b must release it first
		p(3):                          "a", // planned to b
		{Topic: "gone", Partition: 0}: "a", // not planned at all
		p(4):                          "c",
	}
	tests := []struct {
		member         string
		claim, release []sinks.Partition
	}{
		{member: "a", claim: []sinks.Partition{p(0), p(10)}, release: []sinks.Partition{{Topic: "gone", Partition: 0}, p(3)}},
		{member: "b", claim: nil, release: []sinks.Partition{p(2)}},
		{member: "c", claim: nil, release: []sinks.Partition{p(4)}},
		{member: "z", claim: nil, release: nil},
	}
	for _, tt := range tests {
		t.Run(tt.member, func(t *testing.T) {
			claim, release := Diff(plan, claims, tt.member)
			if !slices.Equal(claim, tt.claim) || !slices.Equal(release, tt.release) {
				t.Errorf("Diff(%s) = claim %v release %v, want claim %v release %v", tt.member, claim, release, tt.claim, tt.release)
			}
		})
	}
}

// planWorld simulates one group's etcd state and its replicas.
type planWorld struct {
	parts   []sinks.Partition
	members []Member                   // live member keys
	claims  map[sinks.Partition]string // claim keys
	expiry  map[string]int             // gone member -> round its lease expires
	history []planSnapshot             // every state so far, for stale reads
}

type planSnapshot struct {
	members []Member
	claims  map[sinks.Partition]string
}

func (w *planWorld) record() {
	w.history = append(w.history, planSnapshot{slices.Clone(w.members), maps.Clone(w.claims)})
}

// act is one replica's reaction to snap: release what it holds and the plan
// gives to others, then claim, with a create-if-absent, the partitions
// planned to it that were free in snap.
func (w *planWorld) act(me string, snap planSnapshot) {
	plan := Plan(snap.members, w.parts, snap.claims)
	claim, _ := Diff(plan, snap.claims, me)
	// A replica knows its own claims first hand.
	_, release := Diff(plan, w.claims, me)
	for _, p := range release {
		delete(w.claims, p)
	}
	for _, p := range claim {
		if _, taken := w.claims[p]; !taken {
			w.claims[p] = me
		}
	}
	w.record()
}

// TestPlanConvergence runs replicas that plan from snapshots which may be
// stale, in random interleavings, while members join and die and the claims
// of the dead expire some rounds later. Once that turmoil stops (round
// calm), each round all replicas see the round's first snapshot, as a watch
// eventually delivers the same revision to all. Then the claims must equal
// the plan after two rounds: in the first, every live replica releases what
// the plan gives to others, so the claims that are left fit the quotas and
// the next plan keeps all of them; in the second, the replicas claim the
// rest, each what is planned to it, without collisions since all plan alike.
func TestPlanConvergence(t *testing.T) {
	seed := planTestSeed(t)
	for i := range 400 {
		r := planTestRand(seed, i)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d case %d: "+format, append([]any{seed, i}, args...)...)
		}

		n, p := 1+r.IntN(8), r.IntN(61)
		members := planRandMembers(r, n)
		rev := int64(0)
		for _, m := range members {
			rev = max(rev, m.Revision)
		}
		w := &planWorld{
			parts:   planRandPartitions(r, p),
			members: members,
			expiry:  map[string]int{},
		}
		w.claims = planRandClaims(r, members, w.parts)
		calm := r.IntN(8)
		live := map[string]bool{}
		for _, m := range members {
			live[m.ID] = true
		}
		for _, owner := range w.claims {
			if !live[owner] {
				w.expiry[owner] = r.IntN(calm + 1)
			}
		}
		w.record()

		converged := -1
		for round := 0; round < calm+4; round++ {
			for id, at := range w.expiry {
				if at <= round {
					maps.DeleteFunc(w.claims, func(_ sinks.Partition, owner string) bool { return owner == id })
					delete(w.expiry, id)
				}
			}
			if round < calm {
				switch x := r.IntN(10); {
				case x < 3:
					rev++
					w.members = append(w.members, Member{ID: "j" + strconv.FormatInt(rev, 10), Revision: rev})
				case x < 5 && len(w.members) > 1:
					k := r.IntN(len(w.members))
					w.expiry[w.members[k].ID] = round + r.IntN(calm-round+1)
					w.members = slices.Delete(w.members, k, k+1)
				}
			}
			w.record()
			start := len(w.history) - 1
			for _, k := range r.Perm(len(w.members)) {
				snap := w.history[start]
				if round < calm {
					snap = w.history[r.IntN(len(w.history))]
				}
				w.act(w.members[k].ID, snap)
			}

			plan := Plan(w.members, w.parts, w.claims)
			if round >= calm {
				if err := planCheck(w.members, w.parts, w.claims, plan); err != nil {
					fail("round %d: %v", round, err)
				}
			}
			switch done := maps.Equal(plan, w.claims); {
			case converged >= 0 && !done:
				fail("round %d: left the fixed point reached in round %d", round, converged)
			case converged < 0 && done && round >= calm:
				converged = round
			}
		}
		if converged < 0 || converged > calm+1 {
			fail("claims equal the plan in round %d, want by round %d (calm from round %d)\nclaims %v\nplan   %v",
				converged, calm+1, calm, planFormat(w.claims), planFormat(Plan(w.members, w.parts, w.claims)))
		}
	}
}
