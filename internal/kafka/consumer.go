package kafka

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Consumer reads many partitions with one fetch loop per broker: each loop
// sends one Fetch request covering every partition the broker leads that
// may be fetched, so the cost of a replica follows its brokers and its
// traffic, not its partition count. Each partition is a Cursor in it.
//
// Memory is bounded by Config.MaxBufferBytes, across all cursors: the bytes
// fetched (and decompressed) and not yet given back with Cursor.Free. Each
// cursor may hold an equal share of it; one whose share is used is not
// fetched again until it frees some, so a hot partition cannot starve the
// others. A single record batch larger than the share still comes through,
// alone (Kafka returns the first batch of a response whatever its size).
//
// A Consumer is safe for concurrent use; each Cursor is used by one
// goroutine.
type Consumer struct {
	cfg       Config
	log       *zap.Logger
	kc        *Client // shared with every cursor's Fetcher
	transport *kafkago.Transport
	client    *kafkago.Client

	ctx    context.Context // ends the loops
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	cursors map[sinks.Partition]*Cursor
	brokers map[int32]*brokerLoop
	closed  bool

	refresh chan struct{} // cap 1: some cursor needs its leader looked up

	// toValidate are the cursors whose position waits for validation
	// against their leader's log (truncation.go); validateWake (cap 1)
	// wakes the loop that sends them. Guarded by mu.
	toValidate   []*Cursor
	validateWake chan struct{}

	// The last lookup's answer and when it came, for placing the cursors
	// opened soon after (placeKnown). metaStale: a cursor's leader was
	// found wrong since that lookup was sent. Guarded by mu (metaStale
	// is atomic: askLeaders is called with mu held and without).
	lastMeta   *clusterMeta
	lastMetaAt time.Time
	metaStale  atomic.Bool

	held      atomic.Int64 // bytes held and reserved by requests in flight
	requests  atomic.Int64 // fetch requests sent
	throttled atomic.Int64 // nanoseconds brokers throttled the fetches
	fetched   atomic.Int64 // record bytes received in fetch responses
	wasted    atomic.Int64 // of which batches cut short, fetched again
	lookups   atomic.Int64 // metadata lookups of the leaders
	picks     atomic.Int64 // walks of a loop's cursors (pick)
	validated atomic.Int64 // positions asked of a leader (OffsetForLeaderEpoch)
	// unvalidated: a broker could not answer OffsetForLeaderEpoch, said once.
	unvalidated atomic.Bool
	// fetchErrors counts fetch errors by Cause. Guarded by mu.
	fetchErrors map[string]int64

	fullFetches        atomic.Int64 // requests listing all they fetch
	incrementalFetches atomic.Int64 // requests in a fetch session, listing what changed
	requestBytes       atomic.Int64 // bytes of the fetch requests written
}

// maxInFlight is how many fetch requests a broker loop keeps in flight: one
// long poll over the quiet partitions and one for partitions that became
// fetchable while it waits, so that these do not wait out MaxWait.
const maxInFlight = 2

// NewConsumer returns a consumer of the brokers in cfg; it connects lazily.
// topics are the topics whose metadata its transport keeps (all, if none).
// Close ends it.
func NewConsumer(cfg Config, log *zap.Logger, topics ...string) (*Consumer, error) {
	kc, err := NewClient(cfg, topics...)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Consumer{
		cfg:       kc.cfg,
		kc:        kc,
		transport: kc.transport,
		client:    kc.client,
		log:       log,
		ctx:       ctx,
		cancel:    cancel,
		cursors:   map[sinks.Partition]*Cursor{},
		brokers:   map[int32]*brokerLoop{},
		refresh:   make(chan struct{}, 1),

		validateWake: make(chan struct{}, 1),
	}
	c.wg.Add(2)
	go c.leaders()
	go c.validations()
	return c, nil
}

// Close stops every loop and closes the cursors; it returns once the loops
// have ended.
func (c *Consumer) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	curs := make([]*Cursor, 0, len(c.cursors))
	for _, cur := range c.cursors {
		curs = append(curs, cur)
	}
	c.mu.Unlock()
	for _, cur := range curs {
		cur.Close()
	}
	c.cancel()
	c.wg.Wait()
	return c.kc.Close()
}

// EndOffsets returns the log end of each partition, ends[i] that of
// tps[i]: the last stable offset under read_committed, else the high
// watermark. A partition whose cursor heard its log end in a fetch answer
// within maxAge is answered from that; the others are asked of the brokers
// (ListOffsets), so a fetching replica asks for none: at 10,000 idle
// partitions the ListOffsets every few seconds cost more than the fetches.
// A partition the brokers did not answer for gets -1.
func (c *Consumer) EndOffsets(ctx context.Context, tps []sinks.Partition, maxAge time.Duration) ([]int64, error) {
	return c.logEnds(ctx, tps, maxAge, c.cfg.IsolationLevel)
}

// HighWatermarks is EndOffsets of the high watermarks, whatever the
// isolation level: beside the last stable offsets of read_committed, they
// tell the records of transactions still open.
func (c *Consumer) HighWatermarks(ctx context.Context, tps []sinks.Partition, maxAge time.Duration) ([]int64, error) {
	return c.logEnds(ctx, tps, maxAge, ReadUncommitted)
}

// logEnds answers EndOffsets at level.
func (c *Consumer) logEnds(ctx context.Context, tps []sinks.Partition, maxAge time.Duration, level IsolationLevel) ([]int64, error) {
	ends := make([]int64, len(tps))
	var ask []sinks.Partition
	c.mu.Lock()
	now := time.Now()
	for i, tp := range tps {
		cur := c.cursors[tp]
		switch {
		case cur == nil || cur.endAt.IsZero() || now.Sub(cur.endAt) > maxAge:
			ends[i] = -1
			ask = append(ask, tp)
		case level == ReadCommitted:
			ends[i] = cur.lso
		default:
			ends[i] = cur.hw
		}
	}
	c.mu.Unlock()
	if len(ask) == 0 {
		return ends, nil
	}
	asked, _, err := c.kc.ListOffsets(ctx, level, ListLatest, ask)
	for i, tp := range tps {
		if end, ok := asked[tp]; ok && ends[i] < 0 {
			ends[i] = end
		}
	}
	return ends, err
}

// Partitions returns the partition ids of each topic, sorted, asked of a
// broker over the consumer's connections; a topic the cluster does not know
// is an error naming it.
func (c *Consumer) Partitions(ctx context.Context, topics ...string) (map[string][]int, error) {
	return c.kc.AllPartitions(ctx, topics...)
}

// EveryTopic returns the partition ids of every topic the cluster has but
// its internal ones, sorted, and the topics whose answer was an error for
// now; see Client.EveryTopic.
func (c *Consumer) EveryTopic(ctx context.Context) (topics map[string][]int, unsettled []string, err error) {
	return c.kc.EveryTopic(ctx)
}

// MissingTopics returns the topics the cluster does not know, asking a
// broker (never creating them).
func (c *Consumer) MissingTopics(ctx context.Context, topics ...string) ([]string, error) {
	_, missing, err := c.kc.Partitions(ctx, topics...)
	return missing, err
}

// Stats are the consumer's counters.
type Stats struct {
	FetchRequests int64         // fetch requests sent, all brokers
	BytesHeld     int64         // fetched and not freed, plus what requests in flight may return
	BudgetBytes   int64         // Config.MaxBufferBytes
	Partitions    int           // cursors open
	Throttled     time.Duration // time brokers throttled the fetches by their quotas (KIP-219), all brokers
	BytesFetched  int64         // record bytes received in fetch responses
	BytesWasted   int64         // of which the bytes of batches cut short at the end of a response, fetched again
	Lookups       int64         // metadata lookups of the partitions' leaders
	Logins        int64         // SASL logins: one per connection
	Relogins      int64         // SASL logins again on open connections, before their sessions ended (KIP-368)

	// FullFetches and IncrementalFetches divide FetchRequests: requests
	// that list every partition they fetch (outside a fetch session, or
	// opening one), and requests in a fetch session (KIP-227) that list
	// only the partitions whose fetch changed.
	FullFetches        int64
	IncrementalFetches int64
	FetchRequestBytes  int64 // bytes of the fetch requests written, all brokers

	// Validations counts the positions checked against their leader's
	// log (OffsetForLeaderEpoch): after a seek to a committed offset, a
	// leader change, an offset out of range.
	Validations int64

	// Picks counts the walks of a broker's partitions that gather a
	// request: about one per request, more when a walk finds nothing to
	// fetch. Each costs a look at every partition of the broker.
	Picks int64
}

// Stats reads the counters.
func (c *Consumer) Stats() Stats {
	c.mu.Lock()
	n := len(c.cursors)
	c.mu.Unlock()
	return Stats{FetchRequests: c.requests.Load(), FullFetches: c.fullFetches.Load(), IncrementalFetches: c.incrementalFetches.Load(),
		FetchRequestBytes: c.requestBytes.Load(), BytesHeld: c.held.Load(), BudgetBytes: int64(c.cfg.MaxBufferBytes), Partitions: n,
		Throttled: time.Duration(c.throttled.Load()), Lookups: c.lookups.Load(),
		BytesFetched: c.fetched.Load(), BytesWasted: c.wasted.Load(), Picks: c.picks.Load(), Validations: c.validated.Load(),
		Logins: c.kc.dialer.logins.Load(), Relogins: c.kc.dialer.relogins.Load()}
}

// Open adds a partition to the consumer and returns its cursor, which
// starts where SeekTo puts it (or by the start policy). Opening a partition
// that is open already is an error.
func (c *Consumer) Open(topic string, partition int) (*Cursor, error) {
	tp := sinks.Partition{Topic: topic, Partition: partition}
	// Every cursor's Fetcher (its slow paths: resets, gaps, bounds) shares
	// the consumer's client.
	f, err := newFetcher(c.kc, false, topic, partition, c.log)
	if err != nil {
		return nil, err
	}
	cur := &Cursor{c: c, tp: tp, f: f, leader: -1, epoch: -1, fetchAt: unset, hw: -1, lso: -1, signal: make(chan struct{}, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("open %s: %w", tp, errClosed)
	}
	if _, ok := c.cursors[tp]; ok {
		return nil, fmt.Errorf("open %s: already open", tp)
	}
	c.cursors[tp] = cur
	if !c.placeKnown(cur) {
		c.lookUp()
	}
	return cur, nil
}

// leadersReuse is how long a lookup's answer places the cursors opened
// after it without another: 10,000 partitions claimed in waves opened their
// cursors in a dozen lookups of the whole topic within a tenth of a second,
// each a few milliseconds of the broker's CPU and of ours.
const leadersReuse = time.Second

// placeKnown puts a new cursor with the loop of its leader as the last
// lookup found it, when that lookup is younger than leadersReuse (and
// MetadataTTL), no leader was found wrong since, and it knows the
// partition; it reports whether it did. A leader that moved since answers
// that it does not lead, and the cursor is looked up again, as after any
// lookup. c.mu is held.
func (c *Consumer) placeKnown(cur *Cursor) bool {
	m := c.lastMeta
	if m == nil || c.metaStale.Load() || time.Since(c.lastMetaAt) >= min(leadersReuse, c.metadataInterval()) {
		return false
	}
	pm, ok := m.partition(cur.tp)
	if !ok || pm.leader < 0 || (pm.epoch >= 0 && cur.epoch > pm.epoch) {
		return false
	}
	if id := m.topics[cur.tp.Topic].id; !id.IsZero() {
		cur.topicID = id
	}
	cur.moveTo(c.loop(pm.leader), pm.epoch)
	return true
}

// budgetFreed wakes the loops that found the budget used up: bytes given
// back by one broker's partitions may be another's to fetch with. c.mu is
// held.
func (c *Consumer) budgetFreed() {
	for _, b := range c.brokers {
		if b.budgetWait {
			b.budgetWait = false
			b.poke()
		}
	}
}

// share is the part of the budget one cursor may hold. c.mu is held.
func (c *Consumer) share() int64 {
	n := int64(max(1, len(c.cursors)))
	return max(int64(c.cfg.MaxBufferBytes)/n, 1)
}

// askLeaders has the leaders looked up again: some cursor's leader was
// found wrong, or is unknown.
func (c *Consumer) askLeaders() {
	c.metaStale.Store(true)
	c.lookUp()
}

// lookUp wakes the loop that looks the leaders up.
func (c *Consumer) lookUp() {
	select {
	case c.refresh <- struct{}{}:
	default:
	}
}

// leaders keeps every cursor with the loop of its partition's leader. It
// looks the leaders up when asked (a cursor without one, a leader that
// answered that it no longer leads, a request overdue) and every
// MetadataTTL, and retries with a backoff while some partition has no
// known leader. It runs until the consumer closes.
func (c *Consumer) leaders() {
	defer c.wg.Done()
	every := time.NewTicker(c.metadataInterval())
	defer every.Stop()
	var retry <-chan time.Time
	attempt := 0
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.refresh:
		case <-retry:
		case <-every.C:
		}
		retry = nil
		pending, err := c.assign(c.ctx)
		if c.ctx.Err() != nil {
			return
		}
		if err != nil || pending {
			d := backoff(c.cfg, attempt)
			attempt++
			if err != nil && (attempt == 1 || attempt%10 == 0) {
				c.log.Warn("reading partition leaders failed; retrying", zap.Duration("backoff", d), zap.Int("attempt", attempt),
					zap.String("why", explain(err)), zap.Error(err))
			}
			retry = time.After(d)
			continue
		}
		attempt = 0
	}
}

// metadataInterval is how often the leaders are looked up when nothing
// asks for it: MetadataTTL, by default kafka-go's 6 s.
func (c *Consumer) metadataInterval() time.Duration {
	if c.cfg.MetadataTTL > 0 {
		return c.cfg.MetadataTTL
	}
	return 6 * time.Second
}

// assign looks up the leaders of the cursors' partitions and moves each
// cursor whose leader or leader epoch changed to its leader's loop. pending
// reports cursors still without a leader.
func (c *Consumer) assign(ctx context.Context) (pending bool, err error) {
	c.mu.Lock()
	var topics []string
	for tp := range c.cursors {
		if !slices.Contains(topics, tp.Topic) {
			topics = append(topics, tp.Topic)
		}
	}
	c.mu.Unlock()
	if len(topics) == 0 {
		return false, nil
	}
	c.lookups.Add(1)
	c.metaStale.Store(false) // what went wrong before this lookup, it sees
	m, err := c.kc.metadata(ctx, topics)
	if err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, cur := range c.cursors {
			if cur.leader < 0 {
				return true, err
			}
		}
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.lastMeta, c.lastMetaAt = m, now
	for tp, cur := range c.cursors {
		if cur.closed || cur.recreated != nil {
			continue
		}
		t := m.topics[tp.Topic]
		if t != nil && t.err == nil && !t.id.IsZero() {
			switch {
			case cur.topicID.IsZero():
				cur.topicID = t.id
			case cur.topicID != t.id:
				// Deleted and created again under the same name: the
				// offsets read so far mean nothing in the new topic.
				cur.recreated = &TopicRecreatedError{Topic: tp.Topic, Was: cur.topicID, Now: t.id}
				if cur.loop != nil {
					cur.loop.remove(cur)
				}
				cur.fail(cur.recreated)
				continue
			}
		}
		pm, ok := m.partition(tp)
		if !ok || pm.leader < 0 {
			if cur.loop != nil && (!ok || t == nil) {
				cur.loop.remove(cur)
			}
			if cur.leader < 0 {
				if !ok {
					if cur.unknownSince.IsZero() {
						cur.unknownSince = now
					} else if now.Sub(cur.unknownSince) > c.cfg.UnknownTopicTimeout {
						cur.fail(fmt.Errorf("%w (no leader for %s)", kafkago.UnknownTopicOrPartition, c.cfg.UnknownTopicTimeout))
						cur.unknownSince = now
					}
				}
				pending = true
			}
			continue
		}
		cur.unknownSince = time.Time{}
		if cur.leader == pm.leader && cur.epoch == pm.epoch {
			if cur.following() && now.After(cur.preferredUntil) {
				cur.loop.unfollow(cur) // ask the leader again
			}
			continue
		}
		if pm.epoch >= 0 && cur.epoch > pm.epoch {
			// An answer older than what the cursor knows, from a broker
			// behind the others, even while the cursor has no leader (a
			// leader error took it out of its loop): it would send the
			// cursor back to the old leader. The next lookup settles it.
			pending = pending || cur.leader < 0
			continue
		}
		if cur.loop != nil {
			cur.loop.remove(cur)
		}
		cur.moveTo(c.loop(pm.leader), pm.epoch)
	}
	return pending, nil
}

// loop returns the loop of broker id, starting it if needed. c.mu is held.
func (c *Consumer) loop(id int32) *brokerLoop {
	b, ok := c.brokers[id]
	if !ok {
		b = newBrokerLoop(c, id)
		c.brokers[id] = b
		c.wg.Add(1)
		go b.run(c.ctx)
	}
	return b
}
