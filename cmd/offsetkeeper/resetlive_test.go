package main

import (
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// TestOffsetsResetLive resets a partition while its owner consumes it: the
// owner fails its next commit with ErrOffsetsChanged, rolls back and seeks,
// in the same session and under the same claim.
//
//   - --to-earliest: the owner re-delivers from offset 0.
//   - --to-latest, while the owner is behind (its sink write held): the
//     records between its block and the log end are skipped.
//   - --to-current, while the owner is writing a block past the committed
//     offset: the block is rolled back and read again, so every record from
//     the committed offset on reaches the sink.
func TestOffsetsResetLive(t *testing.T) {
	e := newOpsEnv(t, "live", 2)
	sink := newRecordingSink()
	rep := e.startReplica("r1", sink)
	t.Cleanup(sink.release) // runs before the replica stops
	p0, p1 := e.part(0), e.part(1)

	e.produce(e.topic, 0, 100, nil)
	e.produce(e.topic, 1, 50, nil)
	e.awaitCommitted(map[sinks.Partition]int64{p0: 100, p1: 50})
	epoch := e.snapshot().Claims[p0].Epoch
	if epoch == 0 {
		t.Fatal("live/0 not claimed")
	}
	for off := range int64(100) {
		if n := sink.count(p0, off); n != 1 {
			t.Fatalf("live/0 offset %d written %d times before any reset, want 1", off, n)
		}
	}
	// sameSession checks that the owner went on without a restart: one
	// session, the same claim, and it saw the operator's resets.
	sameSession := func(t *testing.T, resets int64) {
		t.Helper()
		st := rep.r.Stats()
		if st.Sessions != 1 {
			t.Errorf("replica sessions %d, want 1: it restarted", st.Sessions)
		}
		if got := e.snapshot().Claims[p0]; got.Replica != "r1" || got.Epoch != epoch {
			t.Errorf("live/0 claim %+v, want r1's claim of epoch %d", got, epoch)
		}
		if st.OffsetsChanged < resets {
			t.Errorf("replica saw %d resets, want at least %d", st.OffsetsChanged, resets)
		}
	}
	generation := func() int64 { return e.snapshot().Offsets[p0].Generation }

	t.Run("to-earliest re-delivers from the start", func(t *testing.T) {
		resetLive(t, e, "--to-earliest", 0, 1)
		// The owner is caught up and idle: its watch wakes it, and it
		// reads from 0 again at once (CI saw it commit the 100 records
		// again before the reset's own check read etcd).
		e.produce(e.topic, 0, 10, nil)
		awaitCond(t, 30*time.Second, "live/0 re-delivered from 0 and committed at 110", func() bool {
			return sink.count(p0, 0) == 2 && e.snapshot().Offsets[p0].Next >= 110
		})
		for off := range int64(110) {
			if n := sink.count(p0, off); n < 2 && off < 100 || n < 1 {
				t.Fatalf("live/0 offset %d written %d times, want it re-delivered", off, n)
			}
		}
		for off := range int64(50) {
			if n := sink.count(p1, off); n != 1 {
				t.Errorf("live/1 offset %d written %d times, want 1: it was not reset", off, n)
			}
		}
		if g := generation(); g != 1 {
			t.Errorf("generation %d after the owner's commits, want the reset's 1", g)
		}
		sameSession(t, 1)
	})

	t.Run("to-latest skips ahead", func(t *testing.T) {
		sink.hold()
		e.produce(e.topic, 0, 10, nil) // 110..119: the owner's block, held
		var held [2]int64
		awaitCond(t, 30*time.Second, "the owner's write held", func() bool {
			var ok bool
			held, ok = sink.held(p0)
			return ok
		})
		e.produce(e.topic, 0, 20, nil) // up to 140, while the owner is behind
		end := e.logEnd(p0)
		resetLive(t, e, "--to-latest", end, 2) // latest: the log end
		sink.release()
		e.produce(e.topic, 0, 5, nil) // after the new offset
		awaitCond(t, 30*time.Second, "live/0 committed past the records produced after the reset", func() bool {
			return e.snapshot().Offsets[p0].Next >= end+5
		})
		for off := held[1]; off < end; off++ {
			if n := sink.count(p0, off); n != 0 {
				t.Errorf("live/0 offset %d written %d times, want 0: skipped by --to-latest", off, n)
			}
		}
		for off := end; off < end+5; off++ {
			if n := sink.count(p0, off); n != 1 {
				t.Errorf("live/0 offset %d written %d times, want 1", off, n)
			}
		}
		sameSession(t, 2)
	})

	t.Run("to-current loses nothing", func(t *testing.T) {
		from := e.snapshot().Offsets[p0].Next
		sink.hold()
		e.produce(e.topic, 0, 10, nil)
		var held [2]int64
		awaitCond(t, 30*time.Second, "the owner's write held", func() bool {
			var ok bool
			held, ok = sink.held(p0)
			return ok
		})
		if held[0] != from {
			t.Fatalf("held block [%d, %d), want it to start at the committed %d", held[0], held[1], from)
		}
		e.produce(e.topic, 0, 10, nil)
		end := e.logEnd(p0)
		before := make(map[int64]int)
		for off := from; off < end; off++ {
			before[off] = sink.count(p0, off)
		}
		resetLive(t, e, "--to-current", from, 3) // current: unchanged
		sink.release()
		awaitCond(t, 30*time.Second, "live/0 committed up to the log end", func() bool {
			return e.snapshot().Offsets[p0].Next >= end
		})
		for off := from; off < end; off++ {
			n := sink.count(p0, off) - before[off]
			switch {
			case off >= held[0] && off < held[1] && n != 2:
				// Written once when the gate opened (its commit then
				// failed), once more after the seek.
				t.Errorf("live/0 offset %d of the held block written %d times, want 2", off, n)
			case n < 1:
				t.Errorf("live/0 offset %d lost after --to-current", off)
			}
		}
		sameSession(t, 3)
	})
}

// resetLive resets live/0 with target while the group runs and checks the
// stored offset: next, and the generation the reset bumped it to.
func resetLive(t *testing.T, e *opsEnv, target string, next, generation int64) {
	t.Helper()
	r := e.run("offsets", "reset", "--topic", "live:0", target, "--execute", "-o", "json")
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	var plan planJSON
	decodeStrict(t, r.stdout, &plan)
	if len(plan.Partitions) != 1 {
		t.Fatalf("reset %s: %+v, want one partition", target, plan)
	}
	row := plan.Partitions[0]
	if !plan.Executed || row.Status != admin.StatusReset || row.New != next || row.Generation == nil || *row.Generation != generation {
		t.Fatalf("reset %s: %+v, want live/0 reset to %d, generation %d", target, row, next, generation)
	}
	// The owner sees the reset through its watch and may have delivered
	// from the new offset already: etcd holds the reset's generation and
	// an offset at or past it.
	if o := e.snapshot().Offsets[e.part(0)]; o.Next < next || o.Generation != generation {
		t.Fatalf("live/0 after the reset %s: %+v, want next from %d on, generation %d", target, o, next, generation)
	}
}
