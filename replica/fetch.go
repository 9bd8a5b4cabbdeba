package replica

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
	"github.com/segmentio/kafka-go/sasl"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Defaults applied by FetchConfig to its zero fields.
const (
	DefaultFetchMinBytes       = 1
	DefaultFetchMaxBytes       = 1 << 20
	DefaultFetchMaxWait        = 500 * time.Millisecond
	DefaultFetchRequestTimeout = 10 * time.Second
	DefaultFetchBackoffMin     = 100 * time.Millisecond
	DefaultFetchBackoffMax     = 5 * time.Second
	DefaultUnknownTopicTimeout = 30 * time.Second
)

// StartPolicy says where a partition is read from when it has no stored
// offset, and where reading resumes when the stored offset is out of range.
type StartPolicy int

const (
	// StartEarliest starts at the log start offset: nothing still in Kafka
	// is skipped. It is the zero value.
	StartEarliest StartPolicy = iota
	// StartLatest starts at the log end: only records produced from then on
	// are read (under read_committed, the last stable offset).
	StartLatest
)

var startPolicyNames = []string{"earliest", "latest"}

// String returns "earliest" or "latest".
func (p StartPolicy) String() string {
	if p >= 0 && int(p) < len(startPolicyNames) {
		return startPolicyNames[p]
	}
	return fmt.Sprintf("StartPolicy(%d)", int(p))
}

// ParseStartPolicy parses "earliest" or "latest" (case insensitive).
func ParseStartPolicy(s string) (StartPolicy, error) {
	for i, name := range startPolicyNames {
		if strings.EqualFold(strings.TrimSpace(s), name) {
			return StartPolicy(i), nil
		}
	}
	return 0, fmt.Errorf("unknown start policy %q (accepted: %s)", s, strings.Join(startPolicyNames, ", "))
}

// MarshalText implements encoding.TextMarshaler.
func (p StartPolicy) MarshalText() ([]byte, error) {
	if p < 0 || int(p) >= len(startPolicyNames) {
		return nil, fmt.Errorf("invalid start policy %d", int(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseStartPolicy.
func (p *StartPolicy) UnmarshalText(b []byte) error {
	v, err := ParseStartPolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// IsolationLevel says which records of transactional producers are read.
type IsolationLevel int8

const (
	// ReadCommitted reads only committed records, up to the last stable
	// offset. It is the zero value and the default.
	ReadCommitted IsolationLevel = iota
	// ReadUncommitted reads every record up to the high watermark,
	// including records of open and aborted transactions.
	ReadUncommitted
)

var isolationNames = []string{"read_committed", "read_uncommitted"}

// String returns "read_committed" or "read_uncommitted".
func (l IsolationLevel) String() string {
	if l >= 0 && int(l) < len(isolationNames) {
		return isolationNames[l]
	}
	return fmt.Sprintf("IsolationLevel(%d)", int(l))
}

// ParseIsolationLevel parses "read_committed" or "read_uncommitted" (case
// insensitive).
func ParseIsolationLevel(s string) (IsolationLevel, error) {
	for i, name := range isolationNames {
		if strings.EqualFold(strings.TrimSpace(s), name) {
			return IsolationLevel(i), nil
		}
	}
	return 0, fmt.Errorf("unknown isolation level %q (accepted: %s)", s, strings.Join(isolationNames, ", "))
}

// MarshalText implements encoding.TextMarshaler.
func (l IsolationLevel) MarshalText() ([]byte, error) {
	if l < 0 || int(l) >= len(isolationNames) {
		return nil, fmt.Errorf("invalid isolation level %d", int(l))
	}
	return []byte(l.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseIsolationLevel.
func (l *IsolationLevel) UnmarshalText(b []byte) error {
	v, err := ParseIsolationLevel(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

func (l IsolationLevel) kafka() kafka.IsolationLevel {
	if l == ReadUncommitted {
		return kafka.ReadUncommitted
	}
	return kafka.ReadCommitted
}

// FetchConfig configures how partitions are read. Zero fields take the
// defaults named after them.
type FetchConfig struct {
	// Brokers are the bootstrap addresses, host:port. At least one.
	Brokers []string

	// Dial opens connections to brokers; nil uses a net.Dialer. TLS and
	// SASL are layered on top of what it returns.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// DialTimeout bounds connecting, including the TLS and SASL handshakes
	// (default 5s, kafka-go's).
	DialTimeout time.Duration
	// TLS enables TLS when not nil.
	TLS *tls.Config
	// SASL enables SASL authentication when not nil.
	SASL sasl.Mechanism
	// ClientID is sent to the brokers with every request.
	ClientID string
	// MetadataTTL bounds how long cached cluster metadata is used (default
	// 6s, kafka-go's). Leader changes reported by a broker refresh it at
	// once regardless.
	MetadataTTL time.Duration

	// Transport, when set, is shared by every fetcher made with this
	// config (see SharedTransport); nil gives each its own. The fields above
	// are then the shared transport's business.
	Transport *kafka.Transport

	// MinBytes is how many bytes a fetch waits for, up to MaxWait
	// (default DefaultFetchMinBytes).
	MinBytes int
	// MaxBytes bounds the bytes one fetch returns (default
	// DefaultFetchMaxBytes). A record batch larger than that is still
	// returned whole.
	MaxBytes int
	// MaxWait is how long a fetch waits on the broker for MinBytes
	// (default DefaultFetchMaxWait).
	MaxWait time.Duration
	// RequestTimeout bounds a request beyond what the broker is asked to
	// wait (default DefaultFetchRequestTimeout): a fetch is given up after
	// MaxWait+RequestTimeout and retried.
	RequestTimeout time.Duration

	// IsolationLevel is ReadCommitted by default.
	IsolationLevel IsolationLevel
	// StartPolicy is where a partition without a stored offset starts and
	// where an out-of-range offset is reset to (default StartEarliest).
	StartPolicy StartPolicy

	// BackoffMin and BackoffMax bound the exponential, jittered backoff
	// between retries of failed requests (default 100ms and 5s).
	BackoffMin time.Duration
	BackoffMax time.Duration
	// UnknownTopicTimeout is how long a fetch keeps retrying while the
	// topic or partition is unknown to the cluster before failing (default
	// DefaultUnknownTopicTimeout). Other retriable errors are retried until
	// the context ends.
	UnknownTopicTimeout time.Duration
}

func (c FetchConfig) withDefaults() FetchConfig {
	if c.MinBytes <= 0 {
		c.MinBytes = DefaultFetchMinBytes
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultFetchMaxBytes
	}
	if c.MaxWait <= 0 {
		c.MaxWait = DefaultFetchMaxWait
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultFetchRequestTimeout
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = DefaultFetchBackoffMin
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = DefaultFetchBackoffMax
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = c.BackoffMin
	}
	if c.UnknownTopicTimeout <= 0 {
		c.UnknownTopicTimeout = DefaultUnknownTopicTimeout
	}
	return c
}

func (c FetchConfig) validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("no kafka brokers configured")
	}
	for _, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return fmt.Errorf("kafka broker %q: %w", b, err)
		}
	}
	if c.IsolationLevel != ReadCommitted && c.IsolationLevel != ReadUncommitted {
		return fmt.Errorf("invalid isolation level %d", int(c.IsolationLevel))
	}
	if c.StartPolicy != StartEarliest && c.StartPolicy != StartLatest {
		return fmt.Errorf("invalid start policy %d", int(c.StartPolicy))
	}
	return nil
}

// SharedTransport returns a Transport for fetchers of topics to share (set
// it as FetchConfig.Transport): one metadata cache and connection pool per
// replica instead of one per partition. The caller closes its idle
// connections when done.
func (c FetchConfig) SharedTransport(topics ...string) *kafka.Transport {
	return c.withDefaults().transport(topics...)
}

func (c FetchConfig) transport(topics ...string) *kafka.Transport {
	return &kafka.Transport{
		Dial:           c.Dial,
		DialTimeout:    c.DialTimeout,
		TLS:            c.TLS,
		SASL:           c.SASL,
		ClientID:       c.ClientID,
		MetadataTTL:    c.MetadataTTL,
		MetadataTopics: topics,
	}
}

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
}

// Fetcher reads one topic-partition with kafka-go's Transport, following
// leader changes. It is not safe for concurrent use, except that Bounds may
// run alongside Fetch and Close may be called at any time.
type Fetcher struct {
	cfg       FetchConfig
	topic     string
	partition int
	log       *zap.Logger

	addr      net.Addr
	transport *kafka.Transport
	client    *kafka.Client
	closed    atomic.Bool

	stop context.CancelFunc // ends the transport's goroutines

	offset int64 // next offset to fetch, or unset
}

const unset = -1

// errClosed is returned by a Fetcher used after Close.
var errClosed = errors.New("fetcher closed")

// NewFetcher returns a Fetcher of topic/partition. It connects lazily, on
// the first request. Until SeekTo is called it starts where cfg.StartPolicy
// says.
func NewFetcher(cfg FetchConfig, topic string, partition int, log *zap.Logger) (*Fetcher, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("fetch %s/%d: %w", topic, partition, err)
	}
	if topic == "" || partition < 0 {
		return nil, fmt.Errorf("fetch %s/%d: invalid topic or partition", topic, partition)
	}
	if log == nil {
		log = zap.NewNop()
	}
	cfg = cfg.withDefaults()
	t, stop := cfg.Transport, context.CancelFunc(func() {})
	if t == nil {
		var bg context.Context
		t = cfg.transport(topic)
		bg, stop = context.WithCancel(context.Background())
		t.Context = bg
	}
	return &Fetcher{
		cfg:       cfg,
		topic:     topic,
		partition: partition,
		log:       log.With(zap.String("topic", topic), zap.Int("partition", partition)),
		addr:      kafka.TCP(cfg.Brokers...),
		transport: t,
		client:    &kafka.Client{Transport: t},
		stop:      stop,
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
	if !f.closed.Swap(true) && f.cfg.Transport == nil {
		f.stop()
		f.transport.CloseIdleConnections()
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

func (f *Fetcher) fetch(ctx context.Context, maxWait time.Duration) (PolledBatch, error) {
	if f.closed.Load() {
		return PolledBatch{}, f.errorf(f.offset, errClosed)
	}
	if err := ctx.Err(); err != nil {
		return PolledBatch{}, err
	}
	if f.offset == unset {
		start, err := f.startOffset(ctx)
		if err != nil {
			return PolledBatch{}, err
		}
		f.log.Info("no offset, starting by policy", zap.Stringer("policy", f.cfg.StartPolicy), zap.Int64("offset", start))
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
		if errors.Is(err, kafka.OffsetOutOfRange) {
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
	res, err := f.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Addr:           f.addr,
		Topics:         map[string][]kafka.OffsetRequest{f.topic: {kafka.FirstOffsetOf(f.partition), kafka.LastOffsetOf(f.partition)}},
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
	return 0, 0, kafka.UnknownTopicOrPartition
}

// fetchOnce sends one fetch request and decodes its answer.
func (f *Fetcher) fetchOnce(ctx context.Context, from int64, maxWait time.Duration) (PolledBatch, error) {
	p, err := f.request(ctx, from, maxWait, f.cfg.MinBytes, f.cfg.MaxBytes)
	if err != nil {
		return PolledBatch{}, err
	}
	b := PolledBatch{From: from, Next: from, HighWatermark: p.HighWatermark, LastStable: p.LastStableOffset}
	if p.LastStableOffset < 0 {
		b.LastStable = p.HighWatermark // before fetch v4
	}
	d := decoder{from: from, committed: f.cfg.IsolationLevel == ReadCommitted, aborted: p.AbortedTransactions}
	if err := d.decode(p.Records); err != nil {
		return PolledBatch{}, err
	}
	b.Records, b.Next = d.records, d.next
	if d.next == from && d.stuckBase >= 0 {
		// The batch holding from has no record at or after it: its tail
		// was removed by compaction, and the broker does not move past
		// it: find where the next batch starts.
		end := b.HighWatermark
		if f.cfg.IsolationLevel == ReadCommitted {
			end = b.LastStable
		}
		next, err := f.skipGap(ctx, from, d.stuckBase, end)
		if err != nil {
			return PolledBatch{}, err
		}
		f.log.Debug("skipped compacted tail of a batch", zap.Int64("from", from), zap.Int64("next", next))
		b.Next = next
	}
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
		return nil, kafka.Error(res.ErrorCode)
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
				return nil, kafka.Error(p.ErrorCode)
			}
			return p, nil
		}
	}
	return nil, fmt.Errorf("response without the partition: %w", protocol.ErrNoPartition)
}

// skipGap finds the first offset after the batch based at gapBase, which
// holds from but no record at or after it. A fetch at an offset inside that
// batch returns the batch again; at or past its end it returns a later batch
// or nothing. The answer lies in (from, end]: the search probes
// exponentially then bisects, so a gap of n offsets costs about 2*log2(n)
// small fetches.
func (f *Fetcher) skipGap(ctx context.Context, from, gapBase, end int64) (int64, error) {
	past := func(x int64) (bool, error) {
		p, err := f.request(ctx, x, 0, 0, 1)
		if errors.Is(err, kafka.OffsetOutOfRange) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		base, ok, err := firstBatchBase(p.Records)
		if err != nil {
			return false, err
		}
		return !ok || base > gapBase, nil
	}
	if end <= from {
		return from, nil // nothing known past from: fetch it again later
	}
	lo, hi := from, from+1 // invariant: !past(lo); past(hi) once the loop ends
	for step := int64(1); hi < end; {
		p, err := past(hi)
		if err != nil {
			return 0, err
		}
		if p {
			break
		}
		lo = hi
		step *= 2
		hi = min(lo+step, end)
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		p, err := past(mid)
		if err != nil {
			return 0, err
		}
		if p {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// retrier spaces the retries of one operation.
type retrier struct {
	f            *Fetcher
	attempt      int
	unknownSince time.Time
}

func (f *Fetcher) retrier() *retrier { return &retrier{f: f} }

// wait returns the error to give up with, or nil after sleeping before the
// next attempt. It refreshes the cluster metadata so the next attempt goes
// to the current leader.
func (r *retrier) wait(ctx context.Context, offset int64, err error) error {
	f := r.f
	if !retriable(err) {
		return f.errorf(offset, err)
	}
	if unknownTopic(err) {
		if r.unknownSince.IsZero() {
			r.unknownSince = time.Now()
		} else if time.Since(r.unknownSince) > f.cfg.UnknownTopicTimeout {
			return f.errorf(offset, fmt.Errorf("%w (for %s): %w", kafka.UnknownTopicOrPartition, f.cfg.UnknownTopicTimeout, err))
		}
	} else {
		r.unknownSince = time.Time{}
	}
	d := f.backoff(r.attempt)
	r.attempt++
	level := zap.WarnLevel
	if r.attempt == 1 && errors.Is(err, kafka.OffsetOutOfRange) {
		level = zap.InfoLevel
	}
	f.log.Log(level, "kafka request failed, retrying",
		zap.Int64("offset", offset), zap.Int("attempt", r.attempt), zap.Duration("backoff", d), zap.Error(err))
	// Drop the connection pool: the next request reloads the metadata
	// and so finds the current leader, and reconnects.
	f.transport.CloseIdleConnections()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	if f.closed.Load() {
		return f.errorf(offset, errClosed)
	}
	return nil
}

// backoff returns the delay before retry number attempt (from 0): it doubles
// from BackoffMin up to BackoffMax, and is drawn uniformly from its upper
// half so that fetchers failing together spread out.
func (f *Fetcher) backoff(attempt int) time.Duration {
	d := f.cfg.BackoffMax
	if attempt < 30 {
		if e := f.cfg.BackoffMin << attempt; e > 0 && e < d {
			d = e
		}
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(d-half)+1))
}

// retriable tells whether a failed request may succeed later: network
// errors, timeouts, leadership moves and the like.
func retriable(err error) bool {
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafka.OffsetOutOfRange, kafka.BrokerNotAvailable, kafka.ReplicaNotAvailable:
			return true
		}
		return ke.Temporary()
	}
	if unknownTopic(err) || errors.Is(err, protocol.ErrNoLeader) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

func unknownTopic(err error) bool {
	return errors.Is(err, kafka.UnknownTopicOrPartition) ||
		errors.Is(err, protocol.ErrNoTopic) || errors.Is(err, protocol.ErrNoPartition)
}

// Partitions returns the partition ids of each topic, sorted. A topic the
// cluster does not know is an error naming it.
func Partitions(ctx context.Context, cfg FetchConfig, topics ...string) (map[string][]int, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	cfg = cfg.withDefaults()
	t := cfg.transport(topics...)
	defer t.CloseIdleConnections()
	c := &kafka.Client{Transport: t, Timeout: cfg.RequestTimeout}
	res, err := c.Metadata(ctx, &kafka.MetadataRequest{Addr: kafka.TCP(cfg.Brokers...), Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", strings.Join(topics, ", "), err)
	}
	out := make(map[string][]int, len(topics))
	for _, t := range res.Topics {
		if !slices.Contains(topics, t.Name) {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("list partitions of topic %q: %w", t.Name, t.Error)
		}
		ids := make([]int, len(t.Partitions))
		for i, p := range t.Partitions {
			ids[i] = p.ID
		}
		slices.Sort(ids)
		out[t.Name] = ids
	}
	for _, name := range topics {
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("list partitions of topic %q: %w", name, kafka.UnknownTopicOrPartition)
		}
	}
	return out, nil
}
