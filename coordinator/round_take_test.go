package coordinator

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestTakeRoundRules checks how a round is cut from the queue: one op per
// partition, queue order kept, n + widest <= max-txn-ops, the byte bound,
// and ops whose waiter left dropped.
func TestTakeRoundRules(t *testing.T) {
	// q builds ops from "key/width/size" words; a trailing "x" marks an op
	// cancelled by its waiter.
	q := func(words ...string) []*op {
		var ops []*op
		for _, w := range words {
			o := &op{width: 3, size: 10}
			f := strings.Split(w, "/")
			o.key = f[0]
			if len(f) > 1 {
				o.width = int(f[1][0] - '0')
			}
			if len(f) > 2 {
				n, err := strconv.Atoi(f[2])
				if err != nil {
					t.Fatal(err)
				}
				o.size = n
			}
			if len(f) > 3 && f[3] == "x" {
				o.state = opCancelled
			}
			ops = append(ops, o)
		}
		return ops
	}
	cases := []struct {
		name     string
		maxOps   int
		maxBytes int
		queue    []*op
		round    []string // keys of the round, in order
		rest     []string // keys left queued, in order
	}{
		{"all fit", 128, 1 << 20, q("a", "b", "c"), []string{"a", "b", "c"}, nil},
		{"one op per partition, later one waits", 128, 1 << 20, q("a", "b", "a", "c", "b"), []string{"a", "b", "c"}, []string{"a", "b"}},
		{"n + width 3 <= max", 7, 1 << 20, q("a", "b", "c", "d", "e", "f"), []string{"a", "b", "c", "d"}, []string{"e", "f"}},
		{"width 2 fits one more", 7, 1 << 20, q("a/2", "b/2", "c/2", "d/2", "e/2", "f/2"), []string{"a", "b", "c", "d", "e"}, []string{"f"}},
		{"a wider op behind narrow ones", 6, 1 << 20, q("a/2", "b/2", "c/2", "d/3", "e/2"), []string{"a", "b", "c"}, []string{"d", "e"}},
		{"smallest limit: one op", minTxnOps, 1 << 20, q("a", "b"), []string{"a"}, []string{"b"}},
		{"bytes bound the round", 128, 100, q("a/3/40", "b/3/40", "c/3/40", "d/3/10"), []string{"a", "b"}, []string{"c", "d"}},
		{"an op above the bound goes alone", 128, 100, q("a/3/500", "b/3/10"), []string{"a"}, []string{"b"}},
		{"cancelled ops are dropped", 128, 1 << 20, q("a/3/10/x", "b", "a"), []string{"b", "a"}, nil},
		{"empty queue", 128, 1 << 20, nil, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Session{c: &Coordinator{maxTxnOps: tc.maxOps, maxTxnBytes: tc.maxBytes}, queue: tc.queue, queueBytes: sizeOf(tc.queue)}
			round := s.take()
			// The tally firstDue trusts: what is left, cancelled ops gone.
			if got, want := s.queueBytes, sizeOf(s.queue); got != want {
				t.Fatalf("queue bytes %d after the round, want %d (the ops left)", got, want)
			}
			if got := keysOf(round); !slices.Equal(got, tc.round) {
				t.Fatalf("round %v, want %v", got, tc.round)
			}
			if got := keysOf(s.queue); !slices.Equal(got, tc.rest) {
				t.Fatalf("left queued %v, want %v", got, tc.rest)
			}
			for _, o := range round {
				if o.state != opSent {
					t.Fatalf("op %s in the round is in state %d, want sent", o.key, o.state)
				}
			}
			for _, o := range s.queue {
				if o.state != opQueued {
					t.Fatalf("op %s left queued is in state %d, want queued", o.key, o.state)
				}
			}
		})
	}
}

func sizeOf(ops []*op) int {
	n := 0
	for _, o := range ops {
		n += o.size
	}
	return n
}

// TestTakeKeepsEachPartitionsOrder drains a queue round by round: every
// partition's ops come out in the order they were queued, one per round.
func TestTakeKeepsEachPartitionsOrder(t *testing.T) {
	s := &Session{c: &Coordinator{maxTxnOps: 6, maxTxnBytes: 1 << 20}}
	var want = map[string][]int{}
	for i := range 30 {
		key := string(rune('a' + i%4))
		s.queue = append(s.queue, &op{key: key, width: 3, size: i}) // size tags the op
		want[key] = append(want[key], i)
	}
	got := map[string][]int{}
	for rounds := 0; len(s.queue) > 0; rounds++ {
		if rounds > 30 {
			t.Fatal("queue does not drain")
		}
		round := s.take()
		if len(round) == 0 || len(round)+3 > 6 {
			t.Fatalf("round of %d ops with max-txn-ops 6", len(round))
		}
		seen := map[string]bool{}
		for _, o := range round {
			if seen[o.key] {
				t.Fatalf("two ops of %s in one round", o.key)
			}
			seen[o.key] = true
			got[o.key] = append(got[o.key], o.size)
		}
	}
	for k := range want {
		if !slices.Equal(got[k], want[k]) {
			t.Fatalf("partition %s: ops in order %v, want %v", k, got[k], want[k])
		}
	}
}

func keysOf(ops []*op) []string {
	var ks []string
	for _, o := range ops {
		ks = append(ks, o.key)
	}
	return ks
}
