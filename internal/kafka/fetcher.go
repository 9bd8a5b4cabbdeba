package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// ResetReason says why an offset was out of range.
type ResetReason int

const (
	// ResetLogStart: the log start moved past the offset (retention, or
	// DeleteRecords): the records in between are gone from Kafka, and
	// reading resumes at the log start.
	ResetLogStart ResetReason = iota
	// ResetTruncated: the offset is past the log end, which moved back (an
	// unclean leader election truncated records that had been read), and no
	// leader epoch says where the logs diverged: reading resumes at the log
	// end.
	ResetTruncated
)

func (r ResetReason) String() string {
	if r == ResetTruncated {
		return "log truncated"
	}
	return "log start moved past it"
}

// OffsetReset reports that the offset to fetch was out of range and where
// reading resumes. The start policy plays no part: records already read are
// not read again from the start of the log. A Cursor whose position has a
// leader epoch first asks whether the log diverged (a Truncation then, not
// a reset); past the log end without one, the records a truncated log
// holds from its new end up to the offset are not read.
type OffsetReset struct {
	From   int64 // the offset Kafka refused
	To     int64 // where fetching resumes
	Reason ResetReason
}

// TopicRecreatedError reports that a partition's topic was deleted and
// created again under the same name: its id changed. The offsets read so far
// do not apply to the new topic, so nothing is read from it until an
// operator resets the partition's offset.
type TopicRecreatedError struct {
	Topic    string
	Was, Now TopicID
}

func (e *TopicRecreatedError) Error() string {
	return fmt.Sprintf("topic %q was deleted and created again (its id was %s, it is %s): its offsets start anew, "+
		"so nothing is read from it until its partitions' offsets are reset (offsetkeeper offsets reset --topic %s --to-earliest --execute)",
		e.Topic, e.Was, e.Now, e.Topic)
}

// PolledBatch is what one Fetch returns: the records of one partition in
// [From, Next). Offsets in that range without a record are transaction
// markers, aborted or compacted records; Next moves past them even when
// Records is empty. An empty fetch (nothing new within MaxWait) has
// Next == From.
type PolledBatch struct {
	From    int64
	Next    int64
	Records []sinks.Record

	// HighWatermark is the partition's high watermark and LastStable its
	// last stable offset, as the broker reported them with this batch
	// (-1 when unknown). A read_committed reader is at the log end when
	// Next == LastStable, a read_uncommitted one when Next ==
	// HighWatermark.
	HighWatermark int64
	LastStable    int64

	// AfterLogEnd is set by a Cursor when the partition had been read to
	// its log end before this batch came: its records were produced since
	// (a trickle's), not waiting in a backlog.
	AfterLogEnd bool

	// Reset is set when the offset was out of range and was moved by the
	// start policy. Such a batch holds no records and From == Next ==
	// Reset.To; the next Fetch continues from there.
	Reset *OffsetReset

	// Truncation is set when the leader's log no longer holds what was
	// read: it diverges from it at Truncation.To, below the reader's
	// position. Such a batch holds no records, From is the position and
	// Next == Truncation.To, where the next Fetch continues.
	Truncation *Truncation

	// Bytes is what the batch holds in memory, the fetched bytes and what
	// decompression added: a Cursor counts it against the consumer's
	// budget until Free gives it back.
	Bytes int
	// Reserved is what the budget set aside beside Bytes for the JSON the
	// reader decodes the records into (Cursor.Decoded settles it); Free
	// gives back Bytes+Reserved. Zero when the reader does not decode.
	Reserved int

	// Throttled is set on an empty batch when the reader holds half the
	// partition's share of the Consumer's budget in batches it has not
	// freed: it ends its block then, and the other half is fetched ahead
	// while that block is written.
	Throttled bool

	// largest is the size of the largest whole batch the response held,
	// truncated that of a batch it held only the start of (0: none).
	largest, truncated int
	// wasted is the bytes of a batch cut short at the end of the
	// response: fetched for nothing.
	wasted int
	// wire is the bytes of the batch as fetched, before decompression.
	wire int
	// epoch is the leader epoch of its last batch, which holds the record
	// before Next; epochKnown is false when it held no v2 batch.
	epoch      int32
	epochKnown bool
	// buf is the buffer the records alias, nil when none (pool.go).
	buf []byte
	// parts are the records still to decode when the reader decodes them
	// (Cursor.DecodeOnRead); Records is nil then. count: at most how many.
	parts []lazyPart
	count int
}

// Fetcher reads one topic-partition with kafka-go's Transport, following
// leader changes. It is not safe for concurrent use, except that Bounds may
// run alongside Fetch and Close may be called at any time.
type Fetcher struct {
	cfg       Config
	topic     string
	partition int
	log       *zap.Logger

	kc        *Client
	ownsKC    bool // Close closes kc: the Fetcher is not a Consumer's
	addr      net.Addr
	transport *kafkago.Transport
	client    *kafkago.Client
	closed    atomic.Bool
	// decodeOnRead: answers are checked and decompressed where they come
	// in, and their records decoded by the reader (Cursor.DecodeOnRead).
	decodeOnRead atomic.Bool

	offset int64 // next offset to fetch, or unset
	// leader and epoch are where Fetch sends its requests, from the
	// metadata; leader is -1 until looked up, and after a failure.
	leader, epoch int32
}

const unset = -1

// errClosed is returned by a Fetcher used after Close.
var errClosed = errors.New("fetcher closed")

// newFetcher returns a Fetcher of topic/partition on kc; Close closes kc
// when owns.
func newFetcher(kc *Client, owns bool, topic string, partition int, log *zap.Logger) (*Fetcher, error) {
	if topic == "" || partition < 0 {
		if owns {
			_ = kc.Close()
		}
		return nil, fmt.Errorf("fetch %s/%d: invalid topic or partition", topic, partition)
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Fetcher{
		cfg:       kc.cfg,
		topic:     topic,
		partition: partition,
		log:       log.WithLazy(zap.String("topic", topic), zap.Int("partition", partition)), // one per partition: encoded when it logs
		kc:        kc,
		ownsKC:    owns,
		addr:      kc.addr,
		transport: kc.transport,
		client:    kc.client,
		offset:    unset,
		leader:    -1,
		epoch:     -1,
	}, nil
}

// SeekTo makes the next Fetch start at offset; a negative offset makes it
// start where the start policy says. (It is not named Seek, which go vet
// reserves for io.Seeker's signature.)
func (f *Fetcher) SeekTo(offset int64) {
	if offset < 0 {
		offset = unset
	}
	f.offset = offset
}

// Rewind is SeekTo(from). It makes a Fetcher a guard.Rewinder: a block
// that was not committed is read again.
func (f *Fetcher) Rewind(from int64) { f.SeekTo(from) }

// Offset returns the offset the next Fetch starts at, or -1 when that is
// left to the start policy.
func (f *Fetcher) Offset() int64 { return f.offset }

// Close releases the connections. Fetch and Bounds fail afterwards; a Fetch
// already waiting on the broker returns after at most MaxWait (cancel its
// context to end it at once).
func (f *Fetcher) Close() error {
	if !f.closed.Swap(true) && f.ownsKC {
		_ = f.kc.Close()
	}
	return nil
}

func (f *Fetcher) errorf(offset int64, err error) error {
	if offset == unset {
		return fmt.Errorf("fetch %s/%d: %w", f.topic, f.partition, err)
	}
	return fmt.Errorf("fetch %s/%d at %d: %w", f.topic, f.partition, offset, err)
}

// ready checks that a fetch may go on and finds where it starts when that is
// left to the start policy: it returns the offset to move to, or -1.
func (f *Fetcher) ready(ctx context.Context) (int64, error) {
	if f.closed.Load() {
		return unset, f.errorf(f.offset, errClosed)
	}
	if err := ctx.Err(); err != nil {
		return unset, err
	}
	if f.offset != unset {
		return unset, nil
	}
	start, err := f.startOffset(ctx)
	if err != nil {
		return unset, err
	}
	f.log.Info("no offset, starting by policy", zap.Stringer("policy", f.cfg.StartPolicy), zap.Int64("offset", start))
	return start, nil
}

// Bounds returns the partition's log start offset and its log end: the high
// watermark, or under read_committed the last stable offset.
func (f *Fetcher) Bounds(ctx context.Context) (earliest, logEnd int64, err error) {
	if f.closed.Load() {
		return 0, 0, f.errorf(unset, errClosed)
	}
	r := f.retrier()
	for {
		earliest, logEnd, err = f.boundsOnce(ctx, f.cfg.IsolationLevel)
		if err == nil {
			return earliest, logEnd, nil
		}
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		if werr := r.wait(ctx, unset, err); werr != nil {
			return 0, 0, werr
		}
	}
}

func (f *Fetcher) startOffset(ctx context.Context) (int64, error) {
	earliest, logEnd, err := f.Bounds(ctx)
	if err != nil {
		return 0, err
	}
	if f.cfg.StartPolicy == StartLatest {
		return logEnd, nil
	}
	return earliest, nil
}

// oorConfirmations is how many answers in a row must refuse an offset past
// the high watermark before it counts as truncated: a new leader's high
// watermark may lag the old one's for a moment after an election.
const oorConfirmations = 2

// reset finds where to resume after the broker refused from as out of
// range, streak times in a row. Below the log start, reading resumes at the
// log start; past the log end (streak confirms it), at the log end. ok is
// false when from lies within the log after all, or it is too soon to tell:
// the fetch is tried again.
func (f *Fetcher) reset(ctx context.Context, from int64, streak int) (PolledBatch, bool, error) {
	// Whether from is in range depends on the high watermark, whatever
	// the isolation level.
	earliest, hw, err := f.boundsOnce(ctx, ReadUncommitted)
	if err != nil {
		return PolledBatch{}, false, err
	}
	var r OffsetReset
	switch {
	case from < earliest:
		r = OffsetReset{From: from, To: earliest, Reason: ResetLogStart}
	case from > hw && streak >= oorConfirmations:
		r = OffsetReset{From: from, To: hw, Reason: ResetTruncated}
	default:
		return PolledBatch{}, false, nil
	}
	logEnd := hw
	if f.cfg.IsolationLevel == ReadCommitted {
		if _, logEnd, err = f.boundsOnce(ctx, ReadCommitted); err != nil {
			return PolledBatch{}, false, err
		}
	}
	f.log.Debug("offset out of range; resuming where the log is", zap.Stringer("reason", r.Reason),
		zap.Int64("from", from), zap.Int64("to", r.To), zap.Int64("log_start", earliest), zap.Int64("log_end", hw))
	return PolledBatch{From: r.To, Next: r.To, HighWatermark: hw, LastStable: logEnd, Reset: &r}, true, nil
}

func (f *Fetcher) boundsOnce(ctx context.Context, level IsolationLevel) (earliest, logEnd int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.RequestTimeout)
	defer cancel()
	tp := sinks.Partition{Topic: f.topic, Partition: f.partition}
	for i, ts := range []int64{ListEarliest, ListLatest} {
		got, errs, err := f.kc.listOffsetsOnce(ctx, level, ts, []sinks.Partition{tp})
		if err == nil {
			err = errs[tp]
		}
		if err != nil {
			return 0, 0, err
		}
		off, ok := got[tp]
		if !ok {
			return 0, 0, errNoLeader
		}
		if i == 0 {
			earliest = off
		} else {
			logEnd = off
		}
	}
	return earliest, logEnd, nil
}

// decodePartition decodes the partition's part of a fetch response sent at
// from.
func (f *Fetcher) decodePartition(from int64, p *rawFetchPartition) (PolledBatch, error) {
	b := PolledBatch{From: from, Next: from, HighWatermark: p.HighWatermark, LastStable: p.LastStableOffset}
	if p.LastStableOffset < 0 {
		b.LastStable = p.HighWatermark // before fetch v4
	}
	// Decompressed bytes count against the budget: a batch that would
	// inflate past all of it fails, rather than the replica's memory.
	d := decoder{from: from, committed: f.cfg.IsolationLevel == ReadCommitted, aborted: p.AbortedTransactions,
		maxBytes: f.cfg.MaxBufferBytes, lazy: f.decodeOnRead.Load()}
	if err := d.decode(p.Records); err != nil {
		return PolledBatch{}, err
	}
	if d.aliasRaw {
		b.buf = p.Records
	} else {
		putBytes(p.Records) // the records alias what it was decompressed into
	}
	b.Records, b.Next = d.records, d.next
	b.epoch, b.epochKnown = d.epoch, d.epoch >= 0
	if d.lazy {
		b.Records, b.parts, b.count = nil, d.parts, d.count
	}
	b.Bytes = len(p.Records) + d.inflated
	b.wire = len(p.Records)
	b.largest, b.truncated, b.wasted = d.largest, d.truncated, d.partial
	return b, nil
}

// locate looks the partition's leader and its epoch up.
func (f *Fetcher) locate(ctx context.Context) error {
	m, err := f.kc.metadata(ctx, []string{f.topic})
	if err != nil {
		return err
	}
	pm, ok := m.partition(sinks.Partition{Topic: f.topic, Partition: f.partition})
	switch {
	case !ok:
		if t := m.topics[f.topic]; t != nil && t.err != nil {
			return t.err
		}
		return kafkago.UnknownTopicOrPartition
	case pm.leader < 0:
		return protocol.ErrNoLeader
	}
	f.leader, f.epoch = pm.leader, pm.epoch
	return nil
}

// forgetLeader makes the next request look the leader up again.
func (f *Fetcher) forgetLeader() { f.leader, f.epoch = -1, -1 }
