package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/audit"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// auditKafkaTimeout bounds the audit's reads of Kafka.
const auditKafkaTimeout = 30 * time.Second

// Verdict is what a run found in the sink at its end: counts, and the
// first of each violation. It comes from the audit (the sink read back and
// checked against Kafka and etcd, as `offsetkeeper audit` does) for a sink
// the audit can read, else from the writes dev made to the sink (By says
// which, and why).
type Verdict struct {
	// Delivered counts the records produced that are in the sink, Lost
	// those that are not (or are past their partition's committed
	// offset), Duplicates the extra copies.
	Delivered, Lost, Duplicates int64
	// Compared counts the records compared with Kafka's (key, value,
	// timestamp), Mismatched those that were not Kafka's; Compared is 0
	// where the sink keeps no record to compare, or was not audited.
	Compared, Mismatched int64
	// DeadLetters counts the records the sink set aside in its dead-letter
	// table.
	DeadLetters int64
	// By says how the sink was checked: "audit of URL: N records
	// compared ...", or "not audited (why): counted from the writes ...".
	By string

	deadWhere                                string // the dead-letter table and the first reason
	firstLost, firstDuplicate, firstMismatch string
}

// Audited tells whether the verdict is the audit's, the sink read back.
func (v Verdict) Audited() bool { return strings.HasPrefix(v.By, "audit of ") }

// line is the report's last line, on Config.Out.
func (v Verdict) line(produced int64) string {
	mismatched := fmt.Sprint(v.Mismatched)
	if v.Compared == 0 {
		mismatched = "n/a"
	}
	return fmt.Sprintf("produced=%d delivered=%d lost=%d duplicates=%d mismatched=%s dead_letters=%d",
		produced, v.Delivered, v.Lost, v.Duplicates, mismatched, v.DeadLetters)
}

// failure says what makes the run fail, "" if nothing: a lost record, a
// record that is not Kafka's, a record set aside as a dead letter (every
// record dev produces is a JSON object any table of the sink should take),
// or with exactlyOnce (a postgres sink) a duplicate.
func (v Verdict) failure(exactlyOnce bool) string {
	switch {
	case v.Lost > 0:
		return fmt.Sprintf("%d records lost, the first %s", v.Lost, v.firstLost)
	case v.Mismatched > 0:
		return fmt.Sprintf("%d records in the sink are not the ones Kafka holds at their offsets (another run's, or of another topic of the same name), the first %s",
			v.Mismatched, v.firstMismatch)
	case v.DeadLetters > 0:
		return fmt.Sprintf("%d records went to the dead-letter table%s: the sink refused them, though each is a JSON object",
			v.DeadLetters, v.deadWhere)
	case exactlyOnce && v.Duplicates > 0:
		return fmt.Sprintf("%d duplicates in a sink that must have none, the first %s", v.Duplicates, v.firstDuplicate)
	}
	return ""
}

// note counts c copies of record p/off.
func (v *Verdict) note(topic string, p int, off int64, c int) {
	switch {
	case c == 0:
		v.Lost++
		if v.firstLost == "" {
			v.firstLost = fmt.Sprintf("%s/%d at offset %d", topic, p, off)
		}
	default:
		v.Delivered++
		v.Duplicates += int64(c - 1)
		if c > 1 && v.firstDuplicate == "" {
			v.firstDuplicate = fmt.Sprintf("%s/%d at offset %d (%d copies)", topic, p, off, c)
		}
	}
}

// reportFailure prints what a failed run needs to be understood and
// repeated: the first violation, the seed and the faults in order.
func reportFailure(w io.Writer, fail string, seed uint64, faults []string) {
	fmt.Fprintf(w, "FAILED:  %s\nseed:    %d (--seed %d repeats the order of the faults)\n", fail, seed, seed)
	if len(faults) == 0 {
		return
	}
	fmt.Fprintln(w, "faults in order:")
	for _, f := range faults {
		fmt.Fprintln(w, "  "+f)
	}
}

// checker takes the verdict of a run: what the audit finds in the sink
// (the sink against Kafka and etcd, records compared), for a sink it can
// read. A sink it cannot read is counted from what was written to it, and
// the verdict says so and why: a count of writes is not a check of the
// sink. The producer's counts bound the run: every record it produced is
// delivered and committed before the verdict is taken. Dead letters are
// counted either way.
type checker struct {
	sink  Sink              // its URL and Shown
	desc  *sinks.Descriptor // the URL's sink, nil for none
	group string            // the replicas'
	topic string
}

// newChecker is the checker of a run's sink, found in table by its URL's
// scheme.
func newChecker(table sinks.Table, sink Sink, group, topic string) checker {
	c := checker{sink: sink, group: group, topic: topic}
	if u, err := url.Parse(sink.URL); err == nil && sink.URL != "" {
		c.desc = table.Lookup(u.Scheme)
	}
	return c
}

// scheme is the sink's, "" for none.
func (c checker) scheme() string {
	if c.desc == nil {
		return ""
	}
	return c.desc.Scheme
}

// exactlyOnce tells whether a duplicate in the sink fails the run.
func (c checker) exactlyOnce() bool { return c.desc != nil && c.desc.ExactlyOnce }

func (c checker) verdict(ctx context.Context, cli *clientv3.Client, brokers []string, produced map[int]int64, rec *recorder) (Verdict, error) {
	raw, shown := c.sink.URL, c.sink.shown()
	var v Verdict
	var s sinks.Reader
	err := audit.ErrSinkUnsupported
	if c.desc != nil && c.desc.Audit != nil {
		s, err = c.desc.Audit(ctx, raw, shown, c.group)
	}
	switch {
	case errors.Is(err, audit.ErrSinkUnsupported), errors.Is(err, sinks.ErrUnreadable):
		v = rec.tally(c.topic, produced)
		why := err.Error()
		switch {
		case raw == "":
			why = "no sink URL to read it back by"
		case errors.Is(err, audit.ErrSinkUnsupported):
			why = c.scheme() + ": keeps nothing to read back"
		}
		v.By = fmt.Sprintf("not audited (%s): counted from the writes dev made to the sink, not read back from it", why)
	case err != nil:
		return Verdict{}, fmt.Errorf("audit the sink: %w", err)
	default:
		defer s.Close()
		rep, err := audit.Run(ctx, audit.Config{Etcd: cli, Group: c.group, Kafka: kafkaconf.Config{Brokers: brokers}, KafkaTimeout: auditKafkaTimeout,
			Sink: s, Scope: []audit.Scope{{Topic: c.topic}}})
		if err != nil {
			return Verdict{}, fmt.Errorf("audit the sink: %w", err)
		}
		v = auditVerdict(rep, produced)
		v.By = "audit of " + shown + ": " + rep.ComparedNote()
		if v.Lost > 0 || v.Duplicates > 0 || v.Mismatched > 0 {
			// A second opinion, to tell a fault of the pipeline from one of
			// the audit: what a reader of the sink sees.
			if rb, ok, err := c.readBack(ctx, produced); err == nil && ok {
				v.By += fmt.Sprintf("; read back: delivered=%d lost=%d duplicates=%d, first lost %s", rb.Delivered, rb.Lost, rb.Duplicates, rb.firstLost)
			}
		}
	}
	if err := c.deadLetters(ctx, rec, &v); err != nil {
		return Verdict{}, err
	}
	return v, nil
}

// deadLetters counts the records of this run that the sink set aside:
// where the sink keeps them (a dead-letter table, with the first reason),
// else from what the sink counted.
func (c checker) deadLetters(ctx context.Context, rec *recorder, v *Verdict) error {
	if c.desc == nil || c.desc.DeadLetters == nil {
		return nil
	}
	n, where, err := c.desc.DeadLetters(ctx, c.sink.URL, c.topic)
	if err != nil {
		return err
	}
	if n < 0 {
		n = 0
		if dl, ok := sinks.As[sinks.DeadLetterCounter](rec); ok {
			n = dl.DeadLetters()
		}
	}
	v.DeadLetters, v.deadWhere = n, " "+where
	return nil
}

// auditVerdict is the verdict of an audit report; a record produced but
// past a partition's committed offset (which the run waits for) is lost.
func auditVerdict(rep *audit.Report, produced map[int]int64) Verdict {
	var v Verdict
	for i := range rep.Partitions {
		p := &rep.Partitions[i]
		v.Lost += p.Missing.Count
		v.Duplicates += p.Copies
		v.Delivered += p.Delivered - p.Missing.Count
		v.Compared += p.Compared
		v.Mismatched += p.Mismatched.Count
		if len(p.Missing.Ranges) > 0 && v.firstLost == "" {
			v.firstLost = fmt.Sprintf("%s/%d at offset %d", p.Topic, p.Partition, p.Missing.Ranges[0].From)
		}
		if len(p.Duplicated.Ranges) > 0 && v.firstDuplicate == "" {
			v.firstDuplicate = fmt.Sprintf("%s/%d at offset %d", p.Topic, p.Partition, p.Duplicated.Ranges[0].From)
		}
		if len(p.Mismatched.Ranges) > 0 && v.firstMismatch == "" {
			v.firstMismatch = fmt.Sprintf("%s/%d at offset %d", p.Topic, p.Partition, p.Mismatched.Ranges[0].From)
		}
		if short := produced[p.Partition] - p.Committed; short > 0 {
			v.Lost += short
			if v.firstLost == "" {
				v.firstLost = fmt.Sprintf("%s/%d at offset %d (not committed)", p.Topic, p.Partition, p.Committed)
			}
		}
	}
	return v
}

// readBack counts what a reader of the sink sees: a file sink or a
// raw-mode database sink read back; ok is false for a sink that cannot be
// read back so (a columns table, stdout:, discard:).
func (c checker) readBack(ctx context.Context, produced map[int]int64) (Verdict, bool, error) {
	if c.desc == nil || c.desc.ReadBack == nil {
		return Verdict{}, false, nil
	}
	var v Verdict
	for _, p := range sortedKeys(produced) {
		n := produced[p]
		records, ok, err := c.desc.ReadBack(ctx, c.sink.URL, c.topic, p)
		if err != nil {
			return Verdict{}, false, fmt.Errorf("read the sink back: %s/%d: %w", c.topic, p, err)
		}
		if !ok {
			return Verdict{}, false, nil // a columns table: no records to read back
		}
		seen := make(map[int64]int, len(records))
		for _, r := range records {
			seen[r.Offset]++
		}
		for off := int64(0); off < n; off++ {
			v.note(c.topic, p, off, seen[off])
		}
	}
	return v, true, nil
}

// sortedKeys are m's partitions in order, so the first violation is the
// same from one reading to the next.
func sortedKeys(m map[int]int64) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
