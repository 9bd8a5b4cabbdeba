package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// OffsetReset reports that the offset to fetch was out of range (deleted by
// retention, or past the log end) and was moved by the start policy.
type OffsetReset struct {
	From   int64 // the offset Kafka refused
	To     int64 // where fetching resumes
	Policy StartPolicy
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

	// Reset is set when the offset was out of range and was moved by the
	// start policy. Such a batch holds no records and From == Next ==
	// Reset.To; the next Fetch continues from there.
	Reset *OffsetReset

	// Bytes is what the batch holds in memory, the fetched bytes and what
	// decompression added: a Cursor counts it against the consumer's
	// budget until Free gives it back.
	Bytes int

	// Throttled is set on an empty batch when the reader holds half the
	// partition's share of the Consumer's budget in batches it has not
	// freed: it ends its block then, and the other half is fetched ahead
	// while that block is written.
	Throttled bool
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

	offset int64 // next offset to fetch, or unset
}

const unset = -1

// errClosed is returned by a Fetcher used after Close.
var errClosed = errors.New("fetcher closed")

// NewFetcher returns a Fetcher of topic/partition. It connects lazily, on
// the first request. Until SeekTo is called it starts where cfg.StartPolicy
// says.
func NewFetcher(cfg Config, topic string, partition int, log *zap.Logger) (*Fetcher, error) {
	kc, err := NewClient(cfg, topic)
	if err != nil {
		return nil, fmt.Errorf("fetch %s/%d: %w", topic, partition, err)
	}
	return newFetcher(kc, true, topic, partition, log)
}

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
		log:       log.With(zap.String("topic", topic), zap.Int("partition", partition)),
		kc:        kc,
		ownsKC:    owns,
		addr:      kc.addr,
		transport: kc.transport,
		client:    kc.client,
		offset:    unset,
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

// Fetch returns the next records, waiting up to MaxWait for some. It
// retries broker and network errors with backoff until ctx ends, resets an
// out-of-range offset by the start policy, and returns ctx.Err() as soon as
// ctx ends.
func (f *Fetcher) Fetch(ctx context.Context) (PolledBatch, error) {
	return f.fetch(ctx, f.cfg.MaxWait)
}

// FetchNow is Fetch without waiting on the broker: an empty answer comes at
// once. A caller that knows it reached the log end uses it to learn that
// nothing more came, without spending MaxWait on it.
func (f *Fetcher) FetchNow(ctx context.Context) (PolledBatch, error) {
	return f.fetch(ctx, 0)
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

func (f *Fetcher) fetch(ctx context.Context, maxWait time.Duration) (PolledBatch, error) {
	start, err := f.ready(ctx)
	if err != nil {
		return PolledBatch{}, err
	}
	if start != unset {
		f.offset = start
	}
	r := f.retrier()
	for {
		from := f.offset
		b, err := f.fetchOnce(ctx, from, maxWait)
		if err == nil {
			f.offset = b.Next
			return b, nil
		}
		if ctx.Err() != nil {
			return PolledBatch{}, ctx.Err()
		}
		if f.closed.Load() {
			return PolledBatch{}, f.errorf(from, errClosed)
		}
		if errors.Is(err, kafkago.OffsetOutOfRange) {
			b, ok, rerr := f.reset(ctx, from)
			if rerr == nil && ok {
				f.offset = b.Next
				return b, nil
			}
			if rerr != nil {
				err = rerr
			}
		}
		if werr := r.wait(ctx, from, err); werr != nil {
			return PolledBatch{}, werr
		}
	}
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

// reset moves an out-of-range offset by the start policy. ok is false when
// from turns out to lie within the log after all (a lagging replica that
// just became leader can answer so for a moment): the fetch is retried.
func (f *Fetcher) reset(ctx context.Context, from int64) (PolledBatch, bool, error) {
	// Whether from is in range depends on the high watermark, whatever
	// the isolation level.
	earliest, hw, err := f.boundsOnce(ctx, ReadUncommitted)
	if err != nil {
		return PolledBatch{}, false, err
	}
	if from >= earliest && from <= hw {
		return PolledBatch{}, false, nil
	}
	to, logEnd := earliest, hw
	if f.cfg.IsolationLevel == ReadCommitted {
		if _, logEnd, err = f.boundsOnce(ctx, ReadCommitted); err != nil {
			return PolledBatch{}, false, err
		}
	}
	if f.cfg.StartPolicy == StartLatest {
		to = logEnd
	}
	f.log.Warn("offset out of range, reset by policy",
		zap.Int64("from", from), zap.Int64("to", to), zap.Stringer("policy", f.cfg.StartPolicy),
		zap.Int64("log_start", earliest), zap.Int64("log_end", logEnd))
	return PolledBatch{
		From:          to,
		Next:          to,
		HighWatermark: hw,
		LastStable:    logEnd,
		Reset:         &OffsetReset{From: from, To: to, Policy: f.cfg.StartPolicy},
	}, true, nil
}

func (f *Fetcher) boundsOnce(ctx context.Context, level IsolationLevel) (earliest, logEnd int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.RequestTimeout)
	defer cancel()
	res, err := f.client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{
		Addr:           f.addr,
		Topics:         map[string][]kafkago.OffsetRequest{f.topic: {kafkago.FirstOffsetOf(f.partition), kafkago.LastOffsetOf(f.partition)}},
		IsolationLevel: level.kafka(),
	})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range res.Topics[f.topic] {
		if p.Partition != f.partition {
			continue
		}
		if p.Error != nil {
			return 0, 0, p.Error
		}
		return p.FirstOffset, p.LastOffset, nil
	}
	return 0, 0, kafkago.UnknownTopicOrPartition
}

// fetchOnce sends one fetch request and decodes its answer.
func (f *Fetcher) fetchOnce(ctx context.Context, from int64, maxWait time.Duration) (PolledBatch, error) {
	p, err := f.request(ctx, from, maxWait, f.cfg.MinBytes, f.cfg.MaxBytes)
	if err != nil {
		return PolledBatch{}, err
	}
	return f.decodePartition(from, p)
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
		maxBytes: f.cfg.MaxBufferBytes}
	if err := d.decode(p.Records); err != nil {
		return PolledBatch{}, err
	}
	b.Records, b.Next = d.records, d.next
	b.Bytes = len(p.Records) + d.inflated
	return b, nil
}

// request sends one fetch of the partition at offset and returns its part of
// the response, turning error codes into errors.
func (f *Fetcher) request(ctx context.Context, offset int64, maxWait time.Duration, minBytes, maxBytes int) (*rawFetchPartition, error) {
	rctx, cancel := context.WithTimeout(ctx, maxWait+f.cfg.RequestTimeout)
	defer cancel()
	m, err := f.transport.RoundTrip(rctx, f.addr, &rawFetchRequest{clientID: f.cfg.ClientID, Request: fetchapi.Request{
		ReplicaID:      -1,
		MaxWaitTime:    int32(maxWait / time.Millisecond),
		MinBytes:       int32(minBytes),
		MaxBytes:       int32(maxBytes),
		IsolationLevel: int8(f.cfg.IsolationLevel.kafka()),
		SessionID:      -1,
		SessionEpoch:   -1,
		Topics: []fetchapi.RequestTopic{{
			Topic: f.topic,
			Partitions: []fetchapi.RequestPartition{{
				Partition:          int32(f.partition),
				CurrentLeaderEpoch: -1,
				FetchOffset:        offset,
				LogStartOffset:     -1,
				PartitionMaxBytes:  int32(maxBytes),
			}},
		}},
	}})
	if err != nil {
		return nil, err
	}
	res, ok := m.(*rawFetchResponse)
	if !ok {
		return nil, fmt.Errorf("unexpected response %T", m)
	}
	if res.ErrorCode != 0 {
		return nil, kafkago.Error(res.ErrorCode)
	}
	for i := range res.Topics {
		t := &res.Topics[i]
		if t.Topic != f.topic {
			continue
		}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if int(p.Partition) != f.partition {
				continue
			}
			if p.ErrorCode != 0 {
				return nil, kafkago.Error(p.ErrorCode)
			}
			return p, nil
		}
	}
	return nil, fmt.Errorf("response without the partition: %w", protocol.ErrNoPartition)
}
