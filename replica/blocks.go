package replica

// Block building: polled batches grouped into blocks by the block rules.

import (
	"context"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// block is a block being built: whole polled batches, [from, next).
type block struct {
	from, next int64
	records    []sinks.Record
	bytes      int // what its batches (and, once decoded, their JSON) hold of the memory budget
	// raw and reserved: of bytes, the batches' fetched bytes and the room
	// the cursor set aside for their JSON (kafka.PolledBatch.Reserved).
	raw, reserved int
	// bufs are the buffers its records alias, given back when it is
	// finished (kafka.Recycle).
	bufs []kafka.Buffer
	// full: it ended by size (rows, bytes, the budget), so its etcd writes
	// go at once; a block that ended because the partition went quiet
	// lets them linger for others to share their round.
	full bool
	// afterLogEnd: its first records came after the partition had been
	// read to its log end (a trickle's), not from a backlog.
	afterLogEnd bool
	// batches counts the polled batches with records it took.
	batches int
	// epoch is the Kafka leader epoch of the record before next, -1
	// unknown: committed with next (coordinator.Offsets.LeaderEpoch).
	epoch int32
	// round is, for a sinks.RoundInserter, the round an earlier write of
	// exactly this range recorded with its intent (a failed write's, a
	// previous owner's): the block goes in with it again. Empty for a
	// new block.
	round string
}

// take notes that the block now reaches batch.Next, and the leader epoch
// the batch was written in.
func (b *block) take(batch kafka.PolledBatch) {
	if e, ok := batch.LeaderEpoch(); ok {
		b.epoch = e
	} else if batch.Next > b.next {
		b.epoch = -1
	}
	b.next = batch.Next
}

// epochAt is the leader epoch of the record before offset, when the
// partition knows it: offset is where its last commit left it.
func (pt *partition) epochAt(offset int64) int32 {
	if offset == pt.next.Load() {
		return pt.epoch
	}
	return -1
}

func (b *block) empty() bool { return b.next == b.from && len(b.records) == 0 }

// poll builds one block by the rules: it ends, between batches, at
// MaxBlockRows rows or MaxBlockBytes bytes, when the partition holds its
// share of the memory budget, when it has caught up with the log end,
// FlushInterval after its first row, or after MaxEmptyPolls empty polls in a
// row; in EveryBatch mode after each batch. A failed or stopped poll returns
// what it has so far with the error.
func (pt *partition) poll(ctx context.Context) (*block, error) {
	rules := pt.rules
	b := &block{from: pt.f.Offset(), next: pt.f.Offset(), records: pt.spare, epoch: pt.epochAt(pt.f.Offset())}
	pt.spare = nil
	var first time.Time
	empties := 0
	throttled := false
	for {
		b.full = rules.full(b, throttled)
		if rules.ends(b, first, empties, time.Now()) {
			return b, nil
		}
		if ctx.Err() != nil {
			return b, errStopped
		}
		if pt.resetSeen.Swap(false) {
			if o, changed, err := pt.claim.Refresh(ctx); err != nil {
				pt.resetSeen.Store(true) // try again after the next batch
			} else if changed {
				// Nothing of the block is written yet: drop it and start
				// over where the operator said.
				pt.seekReset(o)
				pt.finish(b)
				*b = block{from: o.Next, next: o.Next, records: pt.spare, epoch: -1}
				pt.spare = nil
				first, empties, throttled = time.Time{}, 0, false
				continue
			}
		}
		fetch := pt.f.Fetch
		if b.empty() && !pt.resetSeen.Load() {
			// Nothing in hand, so no rule waits on an empty poll: sleep
			// until records come (or a reset or a stop wakes us).
			fetch = pt.f.Next
		}
		batch, err := fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return b, errStopped
			}
			return b, err
		}
		if batch.Throttled {
			throttled = true
			continue
		}
		if batch.Reset != nil {
			pt.reset(batch.Reset)
			if b.empty() {
				b.from, b.next, b.epoch = batch.Next, batch.Next, -1
			}
			continue
		}
		if batch.Truncation != nil {
			// What the block holds may not be Kafka's any more: dropped,
			// not written; the partition goes on in a new generation.
			pt.finish(b)
			*b = block{from: batch.Next, next: batch.Next, epoch: -1}
			return b, &truncationError{batch.Truncation}
		}
		if end := batch.LastStable; end >= 0 {
			pt.seeLogEnd(end)
			if pt.cfg.Kafka.IsolationLevel == kafkaconf.ReadCommitted {
				pt.seeHighWatermark(batch.HighWatermark)
			}
		} else if batch.HighWatermark >= 0 {
			pt.seeLogEnd(batch.HighWatermark)
		}
		if batch.Next == batch.From {
			empties++
			continue
		}
		empties = 0
		if caughtUp(batch) {
			// Reaching the log end counts as an empty poll: with the
			// default MaxEmptyPolls, 1, the block ends at once, and the
			// records that come next go into the next one, so a trickle
			// is delivered without waiting out an empty poll.
			empties = 1
		}
		if b.empty() && b.next != batch.From {
			b.from = batch.From
		}
		if err := pt.add(b, batch); err != nil {
			return b, err
		}
		if first.IsZero() {
			first = time.Now()
		}
	}
}

// add takes batch into b: its records decoded straight into the block,
// the batch's own slice taken, or copied; its buffers kept until the block
// is finished. A record that cannot be decoded leaves the batch out (read
// again after the block) and is the error.
func (pt *partition) add(b *block, batch kafka.PolledBatch) error {
	had := len(b.records)
	switch {
	case batch.Undecoded():
		// Decoded straight into the block: no copy, nothing to clear.
		if need := had + batch.Len(); need > cap(b.records) {
			// The first batch's size, for a block is often one batch
			// (many partitions, or a trickle's); once a second comes,
			// room for what the block is likely to hold, unless this
			// batch reached the log end and ends it: sized to a share
			// from the first batch, many partitions' slices would write
			// records into cold memory, and trickling partitions would
			// each keep one.
			want := need
			if had > 0 && !caughtUp(batch) {
				want = max(need, pt.likelyRows(batch))
			}
			b.records = slices.Grow(b.records, want-had)
		}
		recs, err := batch.AppendRecords(b.records)
		if err != nil {
			// Not the block's: it is read again after the block,
			// the error said meanwhile.
			pt.giveBack(batch)
			pt.f.SeekTo(b.next)
			return fmt.Errorf("decode %s [%d, %d): %w", pt.p, batch.From, batch.Next, err)
		}
		b.records = recs
	case had == 0 && cap(b.records) < 2*len(batch.Records):
		// The batch's own slice, which is ours, saves a copy: with
		// many partitions a block is often one batch.
		b.records = batch.Records
	default:
		if need := had + len(batch.Records); need > cap(b.records) {
			// Once, to what the block is likely to hold, rather than
			// doubling from one batch's size.
			b.records = slices.Grow(b.records, max(need, pt.likelyRows(batch))-had)
		}
		b.records = append(b.records, batch.Records...)
		kafka.RecycleRecords(batch.Records)
	}
	if had == 0 && len(b.records) > 0 {
		pt.pending.CompareAndSwap(0, b.records[0].Time.UnixNano())
		b.afterLogEnd = batch.AfterLogEnd
	}
	if batch.Len() > 0 {
		b.batches++
		if b.batches == 2 {
			// A block of several answers: the rest of this one is
			// decoded into directly too, as fetched from now on
			// (see finish).
			pt.f.DecodeOnRead(true)
		}
	}
	b.keep(batch)
	b.bytes += batch.Bytes + batch.Reserved
	b.raw += batch.Bytes
	b.reserved += batch.Reserved
	b.take(batch)
	return nil
}

// blockRules are the rules that end a block, between batches: they look
// at the block and at how it was read, nothing else.
type blockRules struct {
	maxRows, maxBytes int
	flushInterval     time.Duration
	maxEmptyPolls     int
	everyBatch        bool // CommitMode EveryBatch: a block per batch
	// hold, for a sink whose calls are paced (sinks.RoundPacer), says
	// that the next call is not due yet: a trickle's block (afterLogEnd)
	// that caught up with the log end stays open, taking what comes, until
	// it is, rather than wait in the queue while newer records wait in
	// Kafka for the call after. A backlog's block ends as it catches up.
	// nil: never held.
	hold func(now time.Time) bool
}

func newBlockRules(cfg *Config, rounds *sinkRounds) blockRules {
	r := blockRules{maxRows: cfg.MaxBlockRows, maxBytes: cfg.MaxBlockBytes, flushInterval: cfg.FlushInterval,
		maxEmptyPolls: cfg.MaxEmptyPolls, everyBatch: cfg.CommitMode == EveryBatch}
	if rounds != nil && rounds.pace > 0 {
		r.hold = rounds.notDue
	}
	return r
}

// full tells that b reached a bound: its rows, its bytes, or, throttled
// (the partition holds its share of the budget), anything at all.
func (r blockRules) full(b *block, throttled bool) bool {
	return len(b.records) >= r.maxRows || b.bytes >= r.maxBytes || (throttled && !b.empty())
}

// ends tells whether b, marked full or not, ends now: full, FlushInterval
// after its first row (first; zero for none yet), after MaxEmptyPolls
// empty polls in a row (empties), or after each batch in EveryBatch mode.
// A block without rows ends only full.
func (r blockRules) ends(b *block, first time.Time, empties int, now time.Time) bool {
	return b.full || (!first.IsZero() && now.Sub(first) >= r.flushInterval) ||
		(empties >= r.maxEmptyPolls && !b.empty() && (empties > r.maxEmptyPolls || !b.afterLogEnd || r.hold == nil || !r.hold(now))) ||
		(r.everyBatch && !b.empty())
}

// likelyRows is how many records a block of batches like this one holds:
// as many as fit in half the partition's share of the budget or
// MaxBlockBytes, at most MaxBlockRows, and one batch more, for a block ends
// between batches, once past its bound. Without that batch, the slice of
// every full block grew again at its last batch, and each of its records
// was copied once more.
func (pt *partition) likelyRows(batch kafka.PolledBatch) int {
	cfg := pt.cfg
	bytes := min(pt.f.Share()/2, int64(cfg.MaxBlockBytes))
	per := max(int64(batch.Bytes+batch.Reserved)/int64(max(batch.Len(), 1)), 1)
	return int(min(bytes/per, int64(cfg.MaxBlockRows))) + batch.Len()
}

// giveBack returns the memory of a polled batch that joins no block (its
// records could not be decoded): its share of the budget and its buffer.
func (pt *partition) giveBack(batch kafka.PolledBatch) {
	pt.f.Free(batch.Bytes + batch.Reserved)
	kafka.Recycle([]kafka.Buffer{batch.Buffer()})
}

// keep takes the buffer of a batch whose records joined the block.
func (b *block) keep(batch kafka.PolledBatch) {
	if buf := batch.Buffer(); !buf.IsZero() {
		b.bufs = append(b.bufs, buf)
	}
}

// seeLogEnd records the partition's log end; a partition whose committed
// offset reached it is caught up, not stalled.
func (pt *partition) seeLogEnd(end int64) {
	if old := pt.logEnd.Swap(end); old != end {
		pt.lsoMoved.Store(time.Now().UnixNano())
	}
	if end <= pt.next.Load() {
		pt.progress.Store(time.Now().UnixNano())
	}
}

// seeHighWatermark records the high watermark beside the last stable
// offset (read_committed): records between them belong to transactions
// still open. A last stable offset that caught up with it counts as moved.
func (pt *partition) seeHighWatermark(hw int64) {
	if hw < 0 {
		return
	}
	pt.hw.Store(hw)
	if hw <= pt.logEnd.Load() {
		pt.lsoMoved.Store(time.Now().UnixNano())
	}
}

// reset says, once, that the partition's offset was out of range and where
// reading resumes.
func (pt *partition) reset(r *kafka.OffsetReset) {
	pt.stats.offsetResets.Add(1)
	if r.Reason == kafka.ResetLogStart {
		pt.stats.offsetsSkipped.Add(r.To - r.From)
		pt.log.Error("records gone from Kafka before they were read: the log start moved past the offset (retention or DeleteRecords); resuming at the log start",
			zap.Int64("from", r.From), zap.Int64("next", r.To), zap.Int64("skipped", r.To-r.From))
		return
	}
	// Without a leader epoch to ask Kafka where the logs diverge (offsets
	// committed before epochs were stored): a truncation all the same.
	pt.stats.truncations[pastLogEnd].Add(1)
	pt.log.Error("the offset is past the log end and no leader epoch tells where the log diverged: the log was truncated "+
		"(an unclean leader election); resuming at the log end",
		zap.Int64("from", r.From), zap.Int64("next", r.To))
}

// finish gives a finished block's bytes back to the budget and keeps its
// records slice for the next block: a sink keeps no slice of a block once
// its write returns, and a block of 65,536 rows would otherwise grow a new
// slice of several megabytes every time.
func (pt *partition) finish(b *block) {
	// Blocks of several answers are decoded into directly from now on;
	// blocks of one take the answer's own slice (kafka.Cursor.DecodeOnRead).
	// Where a block is one answer, decoding on read costs more: the
	// answers' bytes have gone cold by the time their partition reads
	// them.
	if b.batches > 0 {
		pt.f.DecodeOnRead(b.batches > 1)
	}
	pt.f.Free(b.bytes)
	b.bytes = 0
	kafka.Recycle(b.bufs)
	clear(b.bufs)
	b.bufs = b.bufs[:0]
	if cap(pt.decodeBuf) > keptDecodeBuf {
		// Given back with the budget: a buffer kept would be memory the
		// budget no longer counts.
		pt.decodeBuf = nil
	}
	if cap(b.records)*recordSize <= int(pt.f.Share()/2) {
		clear(b.records) // keep no record's bytes alive
		pt.spare = b.records[:0]
	} else {
		// Larger than a block of the partition's share now holds (its
		// share shrank as partitions joined, or the block was a replay):
		// given back, not kept. 10,000 partitions each keeping the slice
		// of a 1,000-record block held 1.1 GB the budget never saw.
		kafka.RecycleRecords(b.records)
		pt.spare = nil
	}
	b.records = nil
}

// recordSize is what a record of a block's slice takes besides its bytes.
const recordSize = int(unsafe.Sizeof(sinks.Record{}))

// pollRange reads exactly [from, next), cutting the last batch at next and
// seeking there: for the replay of an intent, and for the retry of a block
// whose write failed (consume's again).
func (pt *partition) pollRange(ctx context.Context, from, next int64) (*block, error) {
	b := &block{from: from, next: from, epoch: pt.epochAt(from)}
	for b.next < next {
		batch, err := pt.f.Fetch(ctx)
		if err != nil {
			return b, fmt.Errorf("replay %s [%d, %d): %w", pt.p, from, next, err)
		}
		if batch.Reset != nil {
			pt.reset(batch.Reset)
			return b, fmt.Errorf("replay %s [%d, %d): offsets out of range, reset to %d: %w", pt.p, from, next, batch.Reset.To, errRangeGone)
		}
		if batch.Truncation != nil {
			return b, &truncationError{batch.Truncation}
		}
		had := len(b.records)
		recs, err := batch.AppendRecords(slices.Grow(b.records, batch.Len()))
		if err != nil {
			pt.giveBack(batch)
			return b, fmt.Errorf("replay %s [%d, %d): %w", pt.p, from, next, err)
		}
		// Offsets rise: the records from next on are cut off.
		cut := had
		for cut < len(recs) && recs[cut].Offset < next {
			cut++
		}
		clear(recs[cut:])
		b.records = recs[:cut]
		kafka.RecycleRecords(batch.Records)
		b.keep(batch)
		// The range was a block of the previous owner's (or this one's,
		// taken when the share was larger), which may be larger than this
		// replica's share of the budget now: it is read
		// whole all the same, off the budget, so that the replay cannot
		// wait on memory only its own commit frees.
		pt.f.Free(batch.Bytes + batch.Reserved)
		b.take(batch)
		b.next = min(batch.Next, next)
	}
	pt.f.SeekTo(next)
	return b, nil
}

// caughtUp reports whether a batch reached what can be read now: the last
// stable offset (read_committed) or the high watermark.
func caughtUp(b kafka.PolledBatch) bool {
	end := b.LastStable
	if end < 0 {
		end = b.HighWatermark
	}
	return end >= 0 && b.Next >= end
}
