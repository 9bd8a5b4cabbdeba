package kafka

import (
	"context"
	"strings"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// A cursor's answers are decoded one after the other into its arena, so a
// reader joins them into one slice without copying, as a replica's block
// does: Joins says whether the next batch lies right after what it holds,
// and Join takes it. Poisoned, an arena given back is overwritten: a block
// whose records changed under it shows that its arena went back while it
// held it, or that a later answer was decoded over it; and the first
// block's records, kept past its release, show that arenas do go back once
// every hold is given back.
func TestBatchesJoinInTheirArena(t *testing.T) {
	PoisonBuffers(true)
	defer PoisonBuffers(false)
	const total = 2000
	k := harness.StartKafka(t, harness.SeedTopics(1, "arena"))
	produceNumbered(t, k, "arena", 1, total, 10, "")
	// About 70 records an answer, three or so answers an arena.
	c := openConsumer(t, Config{Brokers: k.Brokers(), MaxBytes: 1 << 10, BlockRows: 256})
	cur := openCursor(t, c, "arena", 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()

	check := func(what string, recs []sinks.Record, from int) {
		t.Helper()
		for i, r := range recs {
			if want := numbered(0, from+i); string(r.Value) != want {
				t.Fatalf("%s: record %d of %d is %q (offset %d), want %q", what, i, len(recs), r.Value, r.Offset, want)
			}
		}
	}
	var (
		block      []sinks.Record
		slab       Slab
		blockFrom  int
		first      []sinks.Record
		answers    int
		joins      int
		blocks     int
		next       int
		endedEarly int // Joins said yes, and the batch came from a new arena
	)
	end := func() {
		check("a block at its end", block, blockFrom)
		if first == nil {
			first = block
		}
		slab.Release()
		blocks++
		block, slab = nil, Slab{}
	}
	for next < total {
		joinable := slab.IsZero() || cur.Joins(slab)
		if !joinable {
			end()
		}
		b, err := cur.Fetch(ctx)
		if err != nil {
			t.Fatalf("after %d records: %v", next, err)
		}
		cur.Free(b.Bytes + b.Reserved)
		if len(b.Records) == 0 {
			continue
		}
		answers++
		if b.Slab().IsZero() {
			t.Fatalf("answer %d: records not in an arena", answers)
		}
		if cap(b.Records) != len(b.Records) {
			t.Fatalf("answer %d: %d records with room for %d: an append would write over the next answer's", answers, len(b.Records), cap(b.Records))
		}
		check("an answer", b.Records, next)
		if !slab.IsZero() {
			if recs, joined, ok := slab.Join(b.Slab()); ok {
				joins++
				block, slab = recs, joined
				check("a block just joined", block, blockFrom)
				next += len(b.Records)
				continue
			}
			endedEarly++
			end()
		}
		block, slab, blockFrom = b.Records, b.Slab(), next
		next += len(b.Records)
	}
	end()
	if joins == 0 || blocks >= answers {
		t.Fatalf("%d answers made %d blocks with %d joins: none joined", answers, blocks, joins)
	}
	if first[0].Offset != -1 || !strings.HasPrefix(string(first[0].Value), "poisoned") {
		t.Fatalf("the first block's arena was not given back once released: its first record is %q at %d", first[0].Value, first[0].Offset)
	}
	t.Logf("%d answers, %d blocks, %d joins; %d blocks ended on an answer Joins could not see yet", answers, blocks, joins, endedEarly)
}
