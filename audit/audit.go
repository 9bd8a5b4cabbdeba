// Package audit compares what a sink holds with what Kafka delivered and
// etcd committed, per partition: records missing, held twice, held but not
// committed, held but not delivered (aborted), held but not the record
// Kafka holds at that offset (mismatched, by a checksum of key, value and
// timestamp), and what retention made unverifiable. The core is Merge, a
// pure merge of two rising offset streams that keeps its findings as
// ranges, so memory is bounded by the ranges listed, not by the records;
// Run wires it to etcd, Kafka and a sink URL.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// auditBufferBytes bounds what the audit's Kafka consumer holds when
// Config.Kafka does not say: it reads one partition at a time.
const auditBufferBytes = 64 << 20

// Errors of bad input, each wrapped with the value it refuses.
var (
	// ErrUnknownGroup: the group has no key in etcd.
	ErrUnknownGroup = errors.New("no such group in etcd")
	// ErrNotInGroup: a topic or partition asked for is not the group's.
	ErrNotInGroup = errors.New("not in the group")
	// ErrSinkUnsupported: the sink URL's kind cannot be audited.
	ErrSinkUnsupported = errors.New("cannot be audited")
	// ErrKafkaTimeout: Kafka did not answer one exchange within
	// Config.KafkaTimeout; the error names the brokers asked.
	ErrKafkaTimeout = errors.New("kafka did not answer in time")
)

// kafkaTimeout is err of an exchange with Kafka bounded by xctx, as
// ErrKafkaTimeout naming the brokers when it timed out: xctx's own
// deadline (not ctx, the whole audit's), or a dial or read that the same
// timeout bounds. A timeout that names no broker leaves the reader to
// guess which address was wrong.
func kafkaTimeout(ctx, xctx context.Context, brokers []string, d time.Duration, err error) error {
	var ne net.Error
	timedOut := xctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
	if err == nil || ctx.Err() != nil || !timedOut {
		return err
	}
	return fmt.Errorf("%w: brokers %s, within %s: %w", ErrKafkaTimeout, strings.Join(brokers, ","), d, err)
}

// OpenSink opens the sink of a sink URL for reading, through its entry in
// table. A URL of a sink that keeps nothing to read back is
// ErrSinkUnsupported; one whose directory or table is not there,
// sinks.ErrUnreadable. group is the group whose offsets a sink's own
// offsets table keys, unless the URL says group=.
func OpenSink(ctx context.Context, table sinks.Table, raw, group string) (sinks.Reader, error) {
	shown := sinks.Redact(raw)
	var d *sinks.Descriptor
	if u, err := url.Parse(raw); err == nil {
		d = table.Lookup(u.Scheme)
	}
	if d == nil || d.Audit == nil {
		return nil, fmt.Errorf("sink URL %q %w: want %s", shown, ErrSinkUnsupported, Audited(table))
	}
	return d.Audit(ctx, raw, shown, group)
}

// Audited lists the sink URLs of table that can be audited, for messages:
// file:///DIR, postgres://… or clickhouse://….
func Audited(table sinks.Table) string {
	var forms []string
	for _, d := range table {
		if d.Audit == nil {
			continue
		}
		form, _, _ := strings.Cut(d.Usage, " ")
		if len(form) > 20 {
			form = d.Scheme + "://…"
		}
		forms = append(forms, form)
	}
	if len(forms) < 2 {
		return strings.Join(forms, "")
	}
	return strings.Join(forms[:len(forms)-1], ", ") + " or " + forms[len(forms)-1]
}

// Config is one audit.
type Config struct {
	// Etcd is the client of the cluster holding the group; Group its name.
	Etcd  *clientv3.Client
	Group string
	// Kafka is how the topics are read (brokers, TLS, SASL);
	// IsolationLevel is forced to read_committed.
	Kafka kafkaconf.Config
	// KafkaTimeout bounds each exchange with Kafka: the partitions, the
	// log bounds, and each fetch beyond its wait for records (MaxWait).
	// Zero waits until ctx ends; the fetches retry broker errors meanwhile.
	KafkaTimeout time.Duration
	// Sink is the sink to audit (OpenSink). Run does not close it.
	Sink sinks.Reader
	// Scope limits the audit to these topics, each whole (Partitions nil)
	// or to some partitions; nil audits every partition of the group's
	// topics. A topic or partition not the group's is ErrNotInGroup.
	Scope []Scope
	// MaxRanges is how many ranges each finding lists per partition
	// (default DefaultMaxRanges); counts are exact regardless.
	MaxRanges int
	// Progress, if not nil, is called as records are read and partitions
	// done, from Run's goroutine, often: throttle what it prints.
	Progress func(Progress)
	// Log receives the Kafka client's logs; nil for none.
	Log *zap.Logger
}

// Scope is a topic of the audit, whole or some of its partitions.
type Scope struct {
	Topic      string
	Partitions []int
}

// Progress is how far an audit is.
type Progress struct {
	Records        int64 // offsets read, from the sink and from Kafka
	PartitionsDone int
	Partitions     int
}

// Report is an audit's outcome: one Partition per partition audited, in
// topic and partition order.
type Report struct {
	Group        string             `json:"group"`
	Sink         string             `json:"sink"`
	Capabilities sinks.Capabilities `json:"checks"`
	Partitions   []Partition        `json:"partitions"`
}

// Clean tells that no partition has a finding.
func (r *Report) Clean() bool {
	for i := range r.Partitions {
		if !r.Partitions[i].Clean() {
			return false
		}
	}
	return true
}

// Lost counts the delivered records the sink does not hold.
func (r *Report) Lost() int64 {
	var n int64
	for _, p := range r.Partitions {
		n += p.Missing.Count
	}
	return n
}

// Mismatched counts the offsets whose record in the sink is not Kafka's.
func (r *Report) Mismatched() int64 {
	var n int64
	for _, p := range r.Partitions {
		n += p.Mismatched.Count
	}
	return n
}

// Compared counts the records compared with Kafka's, and NotCompared
// those held and delivered that were not (the sink keeps no comparable
// copy).
func (r *Report) Compared() (compared, notCompared int64) {
	for _, p := range r.Partitions {
		compared += p.Compared
		notCompared += p.NotCompared
	}
	return compared, notCompared
}

// ComparedNote says how many records were compared with Kafka's, and
// which were not and why (Capabilities.RecordsNote): an audit that checked
// offsets alone must not read as one that checked the records. It is the
// line `offsetkeeper audit` and dev's verdict print.
func (r *Report) ComparedNote() string {
	compared, not := r.Compared()
	why := r.Capabilities.RecordsNote
	switch {
	case not == 0:
		return fmt.Sprintf("%d records compared with Kafka's (key, value, timestamp)", compared)
	case compared == 0:
		return fmt.Sprintf("records not compared, only their offsets: %s", why)
	default:
		return fmt.Sprintf("%d records compared with Kafka's (key, value, timestamp), %d not: %s", compared, not, why)
	}
}

// DeadLetters counts the offsets held in the sink's dead-letter table.
func (r *Report) DeadLetters() int64 {
	var n int64
	for _, p := range r.Partitions {
		n += p.DeadLetters
	}
	return n
}

// Duplicates counts the copies the sink holds beyond the first of each
// offset.
func (r *Report) Duplicates() int64 {
	var n int64
	for _, p := range r.Partitions {
		n += p.Copies
	}
	return n
}

// Run audits cfg.Sink for cfg.Group: per partition, the sink's offsets are
// merged with the offsets Kafka delivers (read_committed) from the log start
// up to the committed offset in etcd.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	coord, err := coordinator.New(cfg.Etcd, cfg.Group)
	if err != nil {
		return nil, fmt.Errorf("audit group %q: %w", cfg.Group, err)
	}
	snap, err := coord.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit group %s: %w", cfg.Group, err)
	}
	if len(snap.Members)+len(snap.Claims)+len(snap.Offsets)+len(snap.Intents) == 0 {
		return nil, fmt.Errorf("group %q: %w", cfg.Group, ErrUnknownGroup)
	}
	kcfg := cfg.Kafka
	kcfg.IsolationLevel = kafkaconf.ReadCommitted
	kcfg.StartPolicy = kafkaconf.StartEarliest
	if kcfg.MaxBufferBytes == 0 {
		// One partition is read at a time: a smaller budget than a
		// replica's does.
		kcfg.MaxBufferBytes = auditBufferBytes
	}
	topics := snapTopics(snap)
	cons, err := kafka.NewConsumer(kcfg, cfg.Log, topics...)
	if err != nil {
		return nil, fmt.Errorf("audit group %s: %w", cfg.Group, err)
	}
	defer cons.Close()
	pctx, cancel := kafkaContext(ctx, cfg.KafkaTimeout)
	parts, err := scope(pctx, kcfg, cfg.Group, topics, cfg.Scope)
	err = kafkaTimeout(ctx, pctx, kcfg.Brokers, cfg.KafkaTimeout, err)
	cancel()
	if err != nil {
		return nil, err
	}
	if err := cfg.Sink.CheckScope(parts); err != nil {
		return nil, err
	}
	caps := cfg.Sink.Capabilities()
	rep := &Report{Group: cfg.Group, Sink: cfg.Sink.Describe(), Capabilities: caps, Partitions: make([]Partition, 0, len(parts))}
	prog := Progress{Partitions: len(parts)}
	report := func(n int64) {
		prog.Records += n
		if cfg.Progress != nil {
			cfg.Progress(prog)
		}
	}
	for _, tp := range parts {
		p, err := auditPartition(ctx, cfg, cons, snap, tp, caps, report)
		if err != nil {
			return nil, err
		}
		rep.Partitions = append(rep.Partitions, *p)
		prog.PartitionsDone++
		report(0)
	}
	return rep, nil
}

func auditPartition(ctx context.Context, cfg Config, cons *kafka.Consumer, snap *coordinator.Snapshot, tp sinks.Partition, caps sinks.Capabilities, progress func(int64)) (*Partition, error) {
	cp := tp
	cur, err := cons.Open(tp.Topic, tp.Partition)
	if err != nil {
		return nil, fmt.Errorf("audit %s: %w", tp, err)
	}
	bctx, cancel := kafkaContext(ctx, cfg.KafkaTimeout)
	start, end, err := cur.Bounds(bctx)
	err = kafkaTimeout(ctx, bctx, cfg.Kafka.Brokers, cfg.KafkaTimeout, err)
	cancel()
	if err != nil {
		_ = cur.Close()
		return nil, fmt.Errorf("audit %s: log bounds: %w", tp, err)
	}
	b := Bounds{LogStart: start, CheckMissing: caps.Missing}
	// The partition's keys again, now, just before its sink is read: in a
	// running group, blocks committed since the snapshot would otherwise
	// read as beyond the commit.
	off, in, truncated, err := partitionState(ctx, cfg.Etcd, cfg.Group, cp, snap)
	if err != nil {
		_ = cur.Close()
		return nil, err
	}
	b.Committed = off
	if truncated != nil && truncated.Lost() > 0 {
		b.Truncated = Range{From: truncated.At, Next: truncated.Committed}
	}
	if in != nil {
		b.InFlight = Range{From: in.From, Next: in.Next}
	} else if next, ok, err := cfg.Sink.SinkNext(ctx, tp.Topic, tp.Partition); err != nil {
		_ = cur.Close()
		return nil, err
	} else if ok && next > b.Committed {
		// Committed in the sink, not yet in etcd.
		b.InFlight = Range{From: b.Committed, Next: next}
	}
	// Kafka cannot deliver past its log end: a commit beyond it (a
	// topic recreated) leaves those offsets undelivered.
	delivered := newDeliveredStream(cur, start, min(b.Committed, end), caps.Records)
	if cfg.KafkaTimeout > 0 {
		delivered.timeout = cfg.KafkaTimeout + cfg.Kafka.WithDefaults().FetchMaxWait
		delivered.brokers = cfg.Kafka.Brokers
	}
	defer delivered.Close()
	held, err := cfg.Sink.Offsets(ctx, tp.Topic, tp.Partition)
	if err != nil {
		return nil, err
	}
	defer held.Close()
	return Merge(ctx, tp.Topic, tp.Partition, b, held, delivered, cfg.MaxRanges, progress)
}

// partitionState reads the committed offset, the intent (nil for none) and
// the truncation of Kafka's log its generation began at (nil for none) of
// p. A key that does not parse is taken as the snapshot had it (the
// snapshot lists it as unreadable).
func partitionState(ctx context.Context, cli *clientv3.Client, group string, p sinks.Partition, snap *coordinator.Snapshot) (int64, *coordinator.Intent, *coordinator.Truncation, error) {
	keys := coordinator.KeysFor(group)
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(keys.Offsets(p)), clientv3.OpGet(keys.Intent(p))).Commit()
	if err != nil {
		return 0, nil, nil, fmt.Errorf("audit %s: read its offsets in etcd: %w", p, err)
	}
	next, truncated := snap.Offsets[p].Next, snap.Offsets[p].Truncated
	var intent *coordinator.Intent
	if in, ok := snap.Intents[p]; ok {
		intent = &in
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		var o coordinator.Offsets
		if json.Unmarshal(kvs[0].Value, &o) == nil {
			next, truncated = o.Next, o.Truncated
		}
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if len(kvs) == 0 {
		intent = nil
	} else {
		var in coordinator.Intent
		if json.Unmarshal(kvs[0].Value, &in) == nil {
			intent = &in
		}
	}
	return next, intent, truncated, nil
}

// kafkaContext is ctx bounded by d, if d is positive.
func kafkaContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// snapTopics lists the topics the group's keys name, sorted.
func snapTopics(s *coordinator.Snapshot) []string {
	var out []string
	add := func(p sinks.Partition) {
		if !slices.Contains(out, p.Topic) {
			out = append(out, p.Topic)
		}
	}
	for p := range s.Offsets {
		add(p)
	}
	for p := range s.Claims {
		add(p)
	}
	for p := range s.Intents {
		add(p)
	}
	slices.Sort(out)
	return out
}

// scope lists the partitions to audit: those Kafka has of the group's
// topics, narrowed by the scope asked for.
func scope(ctx context.Context, kcfg kafkaconf.Config, group string, topics []string, asked []Scope) ([]sinks.Partition, error) {
	for _, s := range asked {
		if !slices.Contains(topics, s.Topic) {
			return nil, fmt.Errorf("topic %q: %w %s (its topics in etcd: %s)", s.Topic, ErrNotInGroup, group, strings.Join(topics, ", "))
		}
	}
	kc, err := kafka.NewClient(kcfg, topics...)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer kc.Close()
	known, missing, err := kc.Partitions(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("partitions of %v: %w", topics, err)
	}
	var out []sinks.Partition
	seen := map[sinks.Partition]bool{}
	add := func(tp sinks.Partition) {
		if !seen[tp] {
			seen[tp] = true
			out = append(out, tp)
		}
	}
	for _, t := range topics {
		for _, id := range known[t] {
			add(sinks.Partition{Topic: t, Partition: id})
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("audit: topics of group %s not in Kafka: %v", group, missing)
	}
	if asked != nil {
		var in []sinks.Partition
		for _, tp := range out {
			for _, s := range asked {
				if s.Topic == tp.Topic && (s.Partitions == nil || slices.Contains(s.Partitions, tp.Partition)) {
					in = append(in, tp)
				}
			}
		}
		for _, s := range asked {
			for _, id := range s.Partitions {
				if !seen[sinks.Partition{Topic: s.Topic, Partition: id}] {
					return nil, fmt.Errorf("partition %s/%d: %w (topic %s has partitions %v)", s.Topic, id, ErrNotInGroup, s.Topic, known[s.Topic])
				}
			}
		}
		out = in
	}
	slices.SortFunc(out, func(a, b sinks.Partition) int {
		return a.Compare(b)
	})
	return out, nil
}
