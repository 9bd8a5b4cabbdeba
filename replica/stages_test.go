package replica

import (
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// The block rules, alone: each bound ends a block, between batches; a block
// without rows ends only when full.
func TestBlockRules(t *testing.T) {
	r := blockRules{maxRows: 3, maxBytes: 100, flushInterval: time.Second, maxEmptyPolls: 2}
	now := time.Now()
	rows := func(n, bytes int) *block {
		return &block{from: 0, next: int64(n), records: make([]sinks.Record, n), bytes: bytes}
	}
	for _, tc := range []struct {
		name      string
		rules     blockRules
		b         *block
		throttled bool
		first     time.Time
		empties   int
		full, end bool
	}{
		{"rows", r, rows(3, 10), false, now, 0, true, true},
		{"bytes", r, rows(1, 100), false, now, 0, true, true},
		{"throttled with rows", r, rows(1, 10), true, now, 0, true, true},
		{"throttled without rows", r, &block{}, true, time.Time{}, 0, false, false},
		{"flush interval", r, rows(1, 10), false, now.Add(-time.Second), 0, false, true},
		{"before the flush interval", r, rows(1, 10), false, now.Add(-time.Second / 2), 0, false, false},
		{"empty polls", r, rows(1, 10), false, now, 2, false, true},
		{"empty polls without rows", r, &block{}, false, time.Time{}, 5, false, false},
		{"every batch", blockRules{maxRows: 3, maxBytes: 100, flushInterval: time.Second, maxEmptyPolls: 2, everyBatch: true}, rows(1, 10), false, now, 0, false, true},
		{"nothing yet", r, rows(1, 10), false, now, 1, false, false},
	} {
		tc.b.full = tc.rules.full(tc.b, tc.throttled)
		if tc.b.full != tc.full {
			t.Errorf("%s: full %v, want %v", tc.name, tc.b.full, tc.full)
		}
		if got := tc.rules.ends(tc.b, tc.first, tc.empties, now); got != tc.end {
			t.Errorf("%s: ends %v, want %v", tc.name, got, tc.end)
		}
	}
	cfg := Config{MaxBlockRows: 7, MaxBlockBytes: 9, FlushInterval: time.Minute, MaxEmptyPolls: 4, CommitMode: EveryBatch}
	if got := newBlockRules(&cfg, nil); got.hold != nil || got.maxRows != 7 || got.maxBytes != 9 || got.flushInterval != time.Minute ||
		got.maxEmptyPolls != 4 || !got.everyBatch {
		t.Errorf("newBlockRules = %+v", got)
	}
	// A paced sink's next call not due: a block that caught up stays
	// open (one empty poll), and ends on a second empty poll, or when
	// the call is near.
	due := time.Now().Add(time.Second)
	held := blockRules{maxRows: 100, maxBytes: 1 << 20, flushInterval: time.Minute, maxEmptyPolls: 1,
		hold: func(now time.Time) bool { return now.Before(due) }}
	open := &block{from: 0, next: 1, records: make([]sinks.Record, 1), afterLogEnd: true}
	for _, tc := range []struct {
		empties int
		now     time.Time
		end     bool
	}{{1, due.Add(-time.Millisecond), false}, {2, due.Add(-time.Millisecond), true}, {1, due, true}} {
		if got := held.ends(open, due.Add(-time.Second), tc.empties, tc.now); got != tc.end {
			t.Errorf("held: %d empties at due%+v: ends %v, want %v", tc.empties, tc.now.Sub(due), got, tc.end)
		}
	}
	// A backlog's block is not held.
	backlog := &block{from: 0, next: 1, records: make([]sinks.Record, 1)}
	if !held.ends(backlog, due.Add(-time.Second), 1, due.Add(-time.Millisecond)) {
		t.Error("a backlog's block that caught up was held")
	}
}

// What range comes next, alone: the previous owner's intent first when it
// starts where the partition resumes, then the exact range of a block whose
// write failed unless an operator's reset moved the partition, else a fresh
// poll.
func TestNextRange(t *testing.T) {
	for _, tc := range []struct {
		in    coordinator.Intent
		ok    bool
		start int64
		want  bool
	}{
		{coordinator.Intent{From: 10, Next: 20}, true, 10, true},
		{coordinator.Intent{From: 10, Next: 20}, true, 12, false},
		{coordinator.Intent{From: 10, Next: 10}, true, 10, false},
		{coordinator.Intent{}, false, 0, false},
	} {
		if got := replaysIntent(tc.in, tc.ok, tc.start); got != tc.want {
			t.Errorf("replaysIntent(%+v, %v, %d) = %v, want %v", tc.in, tc.ok, tc.start, got, tc.want)
		}
	}
	again := &block{from: 5, next: 9}
	if got := nextSource(again, false); got != exactReread {
		t.Errorf("a failed write: %v, want the exact re-read", got)
	}
	if got := nextSource(again, true); got != freshPoll {
		t.Errorf("a failed write, then a reset: %v, want a fresh poll", got)
	}
	if got := nextSource(nil, false); got != freshPoll {
		t.Errorf("nothing failed: %v, want a fresh poll", got)
	}
}
