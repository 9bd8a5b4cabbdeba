// Package replica runs one replica of a group: it joins the group in etcd,
// claims the partitions the plan gives it, reads them from Kafka (one fetch
// request per broker per round trip, within one memory budget), writes
// blocks of records to a sink and commits each block's offset to etcd,
// fenced by its claim, after the write.
//
// A Go service embeds a replica with a sink of its own: any
// sinks.Sink, optionally upgraded with sinks.Resumer (offsets stored with
// the rows: exactly-once), sinks.BatchWriter, sinks.Pinger or
// sinks.DeadLetterCounter. Config.Formats decodes Avro, Protobuf and JSON
// Schema records (Confluent's wire format) into JSON for the sink.
// Configure it with Config, start it with New and Run, watch it with
// Stats, Lag, Timings and Ready; package replica/metrics
// exports those to Prometheus, and Mirror copies the committed offsets to
// Kafka's consumer group for Kafka's own tools.
//
// The guarantees: a record is never lost (a block's offset is committed
// only after the sink has it, AfterWrite), and nothing is committed
// without the claim (every intent, commit and release is an etcd
// transaction conditioned on the claim's epoch). A replica that crashes
// leaves at most the block in flight to replay.
package replica

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Replica is one running instance of a group. Its methods are safe for
// concurrent use; Run is called once at a time.
type Replica struct {
	cfg Config // defaults applied
	// sinkName names the sink in logs and errors: Config.Sink.
	sinkName string
	kafka    kafkaconf.Config // cfg.Kafka, converted
	coord    *coordinator.Coordinator
	sink     sinks.Sink
	codec    *codec // nil: keys and values pass through
	// pattern is cfg.TopicsRegex compiled; nil without one.
	pattern *regexp.Regexp
	// writer is how partitions write blocks: in rounds when the sink is a
	// sinks.BatchWriter, else one Write each. Set by Run.
	writer blockWriter
	// rounds is writer, when the sink stores a round's blocks together
	// (sinks.RoundInserter): blocks then record their intents through it.
	rounds *sinkRounds
	log    *zap.Logger
	stats  counters
	hist   *timings // block rows, sink write and commit latencies

	// consumer fetches every partition the replica owns: one fetch loop
	// per broker, one memory budget. Set while Run runs; guarded by mu
	// for readers other than Run.
	consumer      *kafka.Consumer
	fetchedBefore int64 // fetch requests of consumers of earlier Runs

	mu      sync.Mutex
	session *coordinator.Session
	owned   map[sinks.Partition]*partition

	killOnce sync.Once
	killed   chan struct{}
	// etcd is what the replica last read of etcd's database (etcd.go).
	etcd etcdState
	// reach is what it knows of its path to Kafka (health.go).
	reach reach
}

// Kill stops the replica as a crash would: partitions stop at once without
// finishing their blocks, nothing is released and the lease is left to
// expire, so the group takes LeaseTTL to move its partitions. Run then
// returns. It is for chaos tests and the dev command's --chaos; to stop a
// replica, end Run's context.
func (r *Replica) Kill() { r.killOnce.Do(func() { close(r.killed) }) }

// Close releases what New opened: the Schema Registry client and its
// connections. Call it once Run has returned; Run's own resources (the
// Kafka connections, the session) are released when Run returns, but for a
// connection with a fetch in flight, which closes once the broker answers
// it, within Kafka.FetchMaxWait. The sink and the etcd client are the
// caller's, and stay open. Close again is a no-op.
func (r *Replica) Close() error {
	if r.codec != nil && r.codec.registry != nil {
		return r.codec.registry.Close()
	}
	return nil
}

func (r *Replica) isKilled() bool { return isClosed(r.killed) }

// New checks cfg (see Config.Validate) and returns a replica that uses cli
// for etcd and writes to sink; log may be nil. It connects to nothing
// until Run. The caller owns cli and sink, and closes them after Run
// returns.
func New(cfg Config, cli *clientv3.Client, sink sinks.Sink, log *zap.Logger) (*Replica, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	coord, err := coordinator.New(cli, cfg.Group, coordinator.WithLogger(log), coordinator.WithMaxTxnOps(cfg.EtcdMaxTxnOps))
	log = log.With(zap.String("group", cfg.Group), zap.String("replica", cfg.ReplicaID))
	if err != nil {
		return nil, err
	}
	c, err := newCodec(cfg.Formats, sink)
	if err != nil {
		return nil, err
	}
	pattern, _ := coordinator.TopicsPattern(cfg.TopicsRegex) // Validate compiled it
	name := cfg.Sink
	if name == "" {
		name = fmt.Sprintf("%T", sink)
	}
	return &Replica{cfg: cfg, sinkName: name, kafka: cfg.Kafka.WithDefaults(), coord: coord, sink: sink, codec: c, pattern: pattern, log: log,
		owned: map[sinks.Partition]*partition{}, killed: make(chan struct{}), hist: newTimings()}, nil
}

// Run joins the group and consumes until ctx ends, then stops gracefully:
// every partition finishes its block in flight (within ShutdownTimeout),
// commits, releases its claim, and the lease is revoked, so other replicas
// take over at once. A session that is lost (etcd unreachable for TTL/2) is
// replaced by a new one as soon as etcd answers again.
func (r *Replica) Run(ctx context.Context) error {
	topics := r.cfg.Topics
	if r.pattern != nil {
		topics = nil // its transport keeps every topic's metadata
	}
	consumer, err := kafka.NewConsumer(r.kafka, r.log, topics...)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.consumer = consumer
	r.mu.Unlock()
	if err := r.checkTopics(ctx, consumer); err != nil {
		consumer.Close()
		return err
	}
	if err := r.checkSink(ctx); err != nil {
		consumer.Close()
		return err
	}
	if r.cfg.BeforeJoin != nil {
		if err := r.cfg.BeforeJoin(ctx); err != nil {
			consumer.Close()
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil // stopped while it ran; a refusal is still an error
			}
			return err
		}
	}
	r.writer = countedSink{r.sink, &r.stats.sinkCalls}
	if bw, ok := r.sink.(sinks.BatchWriter); ok {
		rounds := newSinkRounds(bw, &r.stats.sinkCalls)
		if ri, ok := sinks.As[sinks.RoundInserter](r.sink); ok && ri.InsertsRounds() {
			r.rounds = rounds
			if p, ok := sinks.As[sinks.RoundPacer](r.sink); ok {
				rounds.pace = max(p.RoundInterval(), 0)
			}
		}
		stop, ended := make(chan struct{}), make(chan struct{})
		go func() { defer close(ended); rounds.run(stop) }()
		// Deferred before the partitions stop: runs after them.
		defer func() { close(stop); <-ended }()
		r.writer = rounds
	}
	ends, tended := make(chan struct{}), make(chan struct{})
	// Both end with bg: when ctx ends, or when Run returns an error.
	bg, stopBG := context.WithCancel(ctx)
	go func() { defer close(ends); r.refreshLogEnds(bg, consumer) }()
	go func() { defer close(tended); r.tendEtcd(bg) }()
	progressed := make(chan struct{})
	go func() { defer close(progressed); r.reportProgress(bg) }()
	defer func() { <-ends; <-tended; <-progressed }() // runs last
	defer stopBG()
	defer func() {
		consumer.Close()
		r.mu.Lock()
		r.fetchedBefore += consumer.Stats().FetchRequests
		r.consumer = nil
		r.mu.Unlock()
	}()
	b := backoff.Backoff{Min: 200 * time.Millisecond, Max: max(200*time.Millisecond, r.cfg.LeaseTTL/2)}
	var taken time.Time // since when a live member holds this replica's ID
	for {
		s, err := r.join(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, coordinator.ErrMemberExists) {
				if dup := r.duplicate(ctx, &taken); dup != nil {
					return dup
				}
			}
			// A timeout may be a refused address, which the client does not
			// tell apart: one dial of each endpoint does.
			if errors.Is(err, context.DeadlineExceeded) {
				err = r.explainJoin(ctx, err)
			}
			r.log.Warn("join failed; retrying", zap.Error(err))
			if b.Wait(ctx) != nil {
				return nil
			}
			continue
		}
		b.Reset()
		taken = time.Time{}
		r.runSession(ctx, s, consumer)
		if ctx.Err() != nil || r.isKilled() {
			return nil
		}
		r.log.Warn("session lost; rejoining")
	}
}

// explainJoin makes a join's timeout say when every etcd endpoint refuses
// the connection: a wrong address, or etcd down.
func (r *Replica) explainJoin(ctx context.Context, err error) error {
	eps := r.coord.Client().Endpoints()
	if rerr := coordinator.Refused(ctx, eps, time.Second); rerr != nil {
		return fmt.Errorf("etcd at %s refused the connection: nothing listens there: %w", strings.Join(eps, ","), rerr)
	}
	return err
}

// MissingTopicError is Run's error when a topic of Config.Topics does not
// exist: offsetkeeper never creates topics (a misspelt name would be
// created with the broker's defaults, and read forever empty).
type MissingTopicError struct {
	Topics  []string
	Brokers []string
}

func (e *MissingTopicError) Error() string {
	return fmt.Sprintf("topic %s not found in the Kafka cluster at %s: create it first, or check the name (offsetkeeper never creates topics)",
		strings.Join(quoteAll(e.Topics), ", "), strings.Join(e.Brokers, ","))
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strconv.Quote(v)
	}
	return out
}

// checkTopics fails when a topic does not exist. Kafka not answering is not
// a failure here: the replica retries as always.
func (r *Replica) checkTopics(ctx context.Context, c *kafka.Consumer) error {
	cctx, cancel := context.WithTimeout(ctx, r.kafka.WithDefaults().RequestTimeout)
	defer cancel()
	missing, err := c.MissingTopics(cctx, r.cfg.Topics...)
	r.reach.sawMetadata(time.Now(), err)
	if err != nil {
		r.reach.judge(time.Now(), r.cfg.KafkaDownAfter, r.kafka.Brokers, nil)
		r.log.Warn("no broker answered; joining the group as a replica that cannot read, which holds no partitions, and trying again",
			zap.Strings("brokers", r.kafka.Brokers), zap.String("why", kafka.Explain(err)), zap.Error(err))
		return nil
	}
	if len(missing) > 0 {
		return &MissingTopicError{Topics: missing, Brokers: r.kafka.Brokers}
	}
	return nil
}

// refreshLogEnds reads the log ends of the owned partitions every
// LogEndInterval, so that the lag in records is right even for a partition
// that fetches nothing (stuck on a write, or waiting for memory): from the
// fetch answers where one came within the interval, else one ListOffsets
// per broker. It returns when ctx ends or the replica is killed.
func (r *Replica) refreshLogEnds(ctx context.Context, c *kafka.Consumer) {
	t := time.NewTicker(r.cfg.LogEndInterval)
	defer t.Stop()
	var pts []*partition
	var tps []sinks.Partition
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.killed:
			return
		case <-t.C:
		}
		r.mu.Lock()
		pts = pts[:0]
		tps = tps[:0]
		for p, pt := range r.owned {
			pts = append(pts, pt)
			tps = append(tps, p)
		}
		r.mu.Unlock()
		if len(tps) == 0 {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, r.cfg.LogEndInterval)
		ends, err := c.EndOffsets(lctx, tps, r.cfg.LogEndInterval)
		cancel()
		if err != nil {
			r.log.Debug("reading the log ends failed", zap.Error(err))
			continue
		}
		for i, end := range ends {
			if end >= 0 {
				pts[i].seeLogEnd(end)
			}
		}
		if r.cfg.Kafka.IsolationLevel == kafkaconf.ReadCommitted {
			// Beside the last stable offsets: what open transactions hold.
			lctx, cancel := context.WithTimeout(ctx, r.cfg.LogEndInterval)
			hws, err := c.HighWatermarks(lctx, tps, r.cfg.LogEndInterval)
			cancel()
			if err != nil {
				r.log.Debug("reading the high watermarks failed", zap.Error(err))
			}
			for i, hw := range hws {
				pts[i].seeHighWatermark(hw)
			}
		}
		clear(pts) // hold no released partition until the next round
	}
}

// SinkMismatchError is Run's error when the group's live members write to
// another sink than this replica's Config.Sink.
type SinkMismatchError struct {
	Group, Member string
	Theirs, Ours  string
}

func (e *SinkMismatchError) Error() string {
	return fmt.Sprintf("group %q writes to %s (member %s), this replica to %s: replicas of a group must write to one sink, "+
		"or each would hold part of every partition; fix the sink, or to move the group to the new sink on purpose start the "+
		"replicas with --allow-sink-change", e.Group, e.Theirs, e.Member, e.Ours)
}

// checkSink refuses a sink other than the live members', and topics other
// than theirs. etcd not answering
// is not a failure here: joining retries as always.
func (r *Replica) checkSink(ctx context.Context) error {
	if (r.cfg.AllowSinkChange || r.cfg.Sink == "") && r.cfg.AllowTopicChange {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseTTL)
	defer cancel()
	members, err := r.coord.Members(cctx)
	if err != nil {
		r.log.Warn("checking the group's sink failed; going on", zap.Error(err))
		return nil
	}
	for _, m := range members {
		if m.ID != r.cfg.ReplicaID && m.Sink != "" && m.Sink != r.cfg.Sink && !r.cfg.AllowSinkChange && r.cfg.Sink != "" {
			return &SinkMismatchError{Group: r.cfg.Group, Member: m.ID, Theirs: m.Sink, Ours: r.cfg.Sink}
		}
		named := len(m.Topics) > 0 || m.TopicsRegex != ""
		if m.ID != r.cfg.ReplicaID && named && !r.cfg.AllowTopicChange &&
			(!sameTopics(m.Topics, r.cfg.Topics) || m.TopicsRegex != r.cfg.TopicsRegex) {
			return &TopicsMismatchError{Group: r.cfg.Group, Member: m.ID, Theirs: m.Topics, Ours: r.cfg.Topics,
				TheirRegex: m.TopicsRegex, OurRegex: r.cfg.TopicsRegex}
		}
	}
	return nil
}

func (r *Replica) join(ctx context.Context) (*coordinator.Session, error) {
	host, _ := os.Hostname()
	m := coordinator.Member{
		ID:        r.cfg.ReplicaID,
		Host:      host,
		PID:       os.Getpid(),
		Version:   r.cfg.Version,
		StartedAt: time.Now().UTC(),
		HTTPAddr:  r.cfg.HTTPAddr,
		Sink:      r.cfg.Sink,
		Topics:    r.cfg.Topics,
		// The pattern, not what it matched: replicas that have not seen
		// a new topic yet still agree.
		TopicsRegex: r.cfg.TopicsRegex,
		// Members that cannot read get no partitions: say so from the
		// start, not after a plan gave this one its share.
		Unreadable: r.reach.verdict(),
	}
	jctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseTTL)
	defer cancel()
	s, err := r.coord.Join(jctx, m, coordinator.WithTTL(r.cfg.LeaseTTL))
	if err != nil {
		return nil, err
	}
	r.stats.sessions.Add(1)
	r.mu.Lock()
	r.session = s
	r.mu.Unlock()
	return s, nil
}

// stopAll ends a session: partitions finish their blocks (or are cut at
// once when hard is already done), then the lease is revoked.
func (r *Replica) stopAll(s *coordinator.Session, cancelHard context.CancelCauseFunc,
	wg *sync.WaitGroup, exited chan *partition) {
	killed := r.isKilled()
	if !killed {
		r.mu.Lock()
		n := 0
		for _, pt := range r.owned {
			if !pt.stopping() {
				pt.stopFor(whyShutdown)
				n++
			}
		}
		r.mu.Unlock()
		r.log.Info("stopping: finishing the blocks in flight, committing and releasing every partition, then leaving the group",
			zap.Int("partitions", n), zap.Duration("shutdown_timeout", r.cfg.ShutdownTimeout))
	}
	timer := time.AfterFunc(r.cfg.ShutdownTimeout, func() { cancelHard(errShutdownTimeout) })
	defer timer.Stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case pt := <-exited:
			r.forget(pt)
			continue
		case <-done:
		}
		break
	}
	for {
		select {
		case pt := <-exited:
			r.forget(pt)
			continue
		default:
		}
		break
	}
	defer func() {
		r.mu.Lock()
		r.session = nil
		r.mu.Unlock()
	}()
	if killed {
		s.Abandon()
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), r.cfg.LeaseTTL/2)
	defer cancel()
	if err := s.Close(cctx); err != nil {
		r.log.Warn("leaving the group failed; the lease expires by itself", zap.Error(err))
	}
}
