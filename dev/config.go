// Package dev runs a whole offsetkeeper cluster in one process, on loopback
// only: an embedded etcd, an in-process Kafka-protocol broker (franz-go's
// kfake) with one topic, replicas of one group writing to a sink, a
// producer of JSON records (or, with ValueFormat, of Avro or Protobuf ones
// in Confluent's wire format, their schema in an embedded Schema Registry)
// and, with Chaos, a deck of faults dealt while
// it runs (TCP proxies cut replicas off, pause them, crash the etcd
// leader). When every record produced is committed, Run audits the sink
// against Kafka and etcd and returns the verdict: nothing lost, nothing
// that is not Kafka's, nothing set aside.
//
// `offsetkeeper dev` wires its flags to Run; a test or a program can start
// the same cluster the same way:
//
//	rep, err := dev.Run(ctx, dev.Config{Messages: 2000, Chaos: &dev.Chaos{}})
//
// Nothing here is used in production: `offsetkeeper run` talks to real etcd
// and Kafka.
package dev

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/builtin"
)

// The defaults of Config and Chaos.
const (
	DefaultReplicas   = 3
	DefaultPartitions = 8
	DefaultTopic      = "events"
	DefaultGroup      = "dev"
	DefaultLeaseTTL   = 2 * time.Second
	DefaultTimeout    = 5 * time.Minute
	// DefaultDuration is a chaos run's Duration.
	DefaultDuration = 15 * time.Second
	// DefaultChaosEvery is Chaos.Every: short enough that DefaultDuration
	// has a slot for every kind of fault and one more (9 slots for 8
	// kinds), long enough that lasting faults (a zombie's pause is twice
	// the lease TTL) overlap on at most as many replicas as the run has.
	DefaultChaosEvery = 1500 * time.Millisecond
)

// Limits of Config, checked by Run.
const (
	MaxReplicas   = 100
	MaxPartitions = 10000
	// MinChaosEvery is the shortest Chaos.Every.
	MinChaosEvery = 100 * time.Millisecond
)

// Config is one run. Messages is required; every other field has a
// default.
type Config struct {
	// Replicas is how many replicas of the group run; default
	// DefaultReplicas, at most MaxReplicas.
	Replicas int
	// Partitions is the topic's partition count; default
	// DefaultPartitions, at most MaxPartitions.
	Partitions int
	// Messages is how many records the producer writes, at least 1: the
	// run checks the records it produces, and with none there is nothing
	// to check.
	Messages int
	// Rate is how many records are produced a second. 0: as fast as the
	// broker takes them, or, with Chaos or a Duration, Messages spread
	// evenly over Duration (faults need records in flight).
	Rate int
	// Duration is how long faults are dealt (with Chaos; default
	// DefaultDuration), and what Messages are spread over when Rate is 0.
	// It must be shorter than Timeout. 0 without Chaos: no spreading.
	Duration time.Duration
	// Topic is the topic's name; default DefaultTopic. OwnTopic tells that
	// the caller made it this run's own (a sink that outlives the run must
	// not meet an earlier run's records at the same offsets); the topic:
	// line says so.
	Topic    string
	OwnTopic bool
	// Group is the replicas' group; default DefaultGroup.
	Group string
	// ValueFormat is how the producer encodes each record's value, the
	// JSON object {"n": N, "at": "RFC 3339 time"}: sinks.JSON (the
	// default: that object's bytes), or sinks.Avro or sinks.Protobuf
	// (ValueFormats) in Confluent's wire format, the schema SchemaID held
	// by a Schema Registry the run embeds (Endpoints.Registry) and the
	// replicas decode with, so that the sink gets the same JSON. The
	// trade-off: a file sink then holds the decoded JSON, not Kafka's
	// bytes, and the audit checks its offsets only (the verdict says so).
	ValueFormat sinks.Format
	// LeaseTTL is the replicas' lease TTL: a crashed replica's partitions
	// move after it, and the faults last multiples of it. Default
	// DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Timeout bounds the whole run: not everything committed by then is a
	// *TimeoutError. Default DefaultTimeout.
	Timeout time.Duration
	// Seed seeds the chaos deck, so that a seed repeats the order of the
	// faults; 0 picks one at random. The report prints it.
	Seed uint64
	// Chaos, if not nil, deals faults while the records flow.
	Chaos *Chaos
	// Dir holds the run's data: etcd's in Dir/etcd (which must not exist
	// yet), the default sink's in Dir/sink. Default: a temporary folder,
	// removed when Run returns.
	Dir string
	// Sink is where the replicas write; default a file sink in Dir/sink.
	Sink Sink
	// Keep keeps the default sink's folder when Run returns (the rest of
	// a temporary Dir goes), and says where on Err.
	Keep bool
	// Sinks is the table the sink's URL is looked up in to read it back
	// (audit, dead letters); default builtin.Sinks().
	Sinks sinks.Table
	// Ready, if set, is called once the cluster is up and the sink open,
	// before the replicas start: `offsetkeeper dev` prints how to point
	// the CLI at the cluster.
	Ready func(Endpoints)
	// Hold, if set, is called after the report of a passing run with the
	// cluster still up (etcd, Kafka and the replicas), and Run returns when
	// it does; `offsetkeeper dev --hold` waits for SIGINT in it. Nil: the
	// replicas stop once everything is committed, before the audit.
	Hold func(ctx context.Context, r *Report)
	// Out gets the report's last line (produced=N delivered=N ...), Err
	// the endpoints, a progress line a second, the faults as they happen
	// and the rest of the report. Default io.Discard.
	Out, Err io.Writer
	// Logger is the replicas' logger; default none.
	Logger *zap.Logger
	// Version is what the replicas advertise as theirs to the group.
	Version string

	// Etcd, when set, are the client endpoints of an existing etcd
	// (host:port or http://host:port) the run uses instead of embedding
	// one; the run deletes its group's keys there when it ends. Brokers,
	// when set, are an existing Kafka's, where the run creates Topic (with
	// Partitions and the cluster's default replication) instead of running
	// kfake; the topic stays. The leader fault needs the embedded etcd.
	Etcd    []string
	Brokers []string
}

// Chaos deals one fault every Every, from a deck of Faults (a seeded
// shuffle, each kind once per round), for Config.Duration.
type Chaos struct {
	// Faults are the kinds dealt (see Faults, ParseFaults); default all.
	Faults []string
	// Every is the time between faults; default DefaultChaosEvery, at
	// least MinChaosEvery.
	Every time.Duration
}

// Sink is where a run's records go and how the run reads them back.
type Sink struct {
	// Open opens the sink once the cluster is up (a database sink may wait
	// for its server); Run closes it. Required unless URL is empty too,
	// for the default file sink.
	Open func(ctx context.Context) (sinks.Sink, error)
	// URL is the sink as the audit reads it (file:///DIR, postgres://…,
	// clickhouse://…): the verdict is the audit's for a sink it can read,
	// else (stdout:, discard:, "", a columns table) a count of the writes
	// the run made, and the verdict says so. A postgres sink must also
	// hold no duplicate.
	URL string
	// Shown is URL as it may be printed (no password); default URL.
	Shown string
}

// shown is the sink as printed.
func (s Sink) shown() string {
	switch {
	case s.Shown != "":
		return s.Shown
	case s.URL != "":
		return s.URL
	}
	return "(no URL)"
}

// Endpoints are where a running cluster listens.
type Endpoints struct {
	// Etcd are the etcd members' client addresses (host:port).
	Etcd []string
	// Brokers are the Kafka brokers' addresses (host:port).
	Brokers []string
	// Registry is the embedded Schema Registry's URL (http://host:port)
	// with an avro or protobuf ValueFormat, "" without.
	Registry string
	// Sink is the sink, as it may be shown.
	Sink string
}

// withDefaults is c with its defaults filled in.
func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Replicas, DefaultReplicas)
	def(&c.Partitions, DefaultPartitions)
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.Sinks == nil {
		c.Sinks = builtin.Sinks()
	}
	if c.ValueFormat == "" {
		c.ValueFormat = sinks.JSON
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Chaos != nil {
		ch := *c.Chaos
		if len(ch.Faults) == 0 {
			ch.Faults = Faults()
		}
		ch.Faults = inMenuOrder(ch.Faults)
		if ch.Every == 0 {
			ch.Every = DefaultChaosEvery
		}
		c.Chaos = &ch
		if c.Duration == 0 {
			c.Duration = DefaultDuration
		}
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Err == nil {
		c.Err = io.Discard
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// inMenuOrder are faults once each, in Faults' order (the deck, and so a
// seed, then do not depend on how the list was written), and after them
// any unknown ones, for validate.
func inMenuOrder(faults []string) []string {
	var out []string
	for _, f := range allFaults {
		if slices.Contains(faults, f) {
			out = append(out, f)
		}
	}
	for _, f := range faults {
		if !slices.Contains(allFaults, f) {
			out = append(out, f)
		}
	}
	return out
}

// validate checks a Config with its defaults.
func (c Config) validate() error {
	switch {
	case c.Replicas < 1 || c.Replicas > MaxReplicas:
		return fmt.Errorf("dev: %d replicas: want 1 to %d", c.Replicas, MaxReplicas)
	case c.Partitions < 1 || c.Partitions > MaxPartitions:
		return fmt.Errorf("dev: %d partitions: want 1 to %d", c.Partitions, MaxPartitions)
	case c.Messages < 1:
		return fmt.Errorf("dev: %d messages: want at least 1", c.Messages)
	case c.Rate < 0:
		return fmt.Errorf("dev: rate %d: want 0 (unlimited) or more", c.Rate)
	case c.Timeout < 0:
		return fmt.Errorf("dev: timeout %s: want a positive duration", c.Timeout)
	case c.Duration < 0:
		return fmt.Errorf("dev: duration %s: want a positive duration", c.Duration)
	case c.Duration >= c.Timeout:
		return fmt.Errorf("dev: duration %s: want less than the timeout %s, which bounds the whole run", c.Duration, c.Timeout)
	case c.Chaos != nil && c.Chaos.Every < MinChaosEvery:
		return fmt.Errorf("dev: chaos every %s: want at least %s", c.Chaos.Every, MinChaosEvery)
	case c.Sink.Open == nil && c.Sink.URL != "":
		return fmt.Errorf("dev: sink %s: no Open", c.Sink.shown())
	}
	if !slices.Contains(valueFormats, c.ValueFormat) {
		return fmt.Errorf("dev: value format %q: want %s", c.ValueFormat, valueFormatList())
	}
	if c.Chaos != nil {
		for _, f := range c.Chaos.Faults {
			if !slices.Contains(allFaults, f) {
				return fmt.Errorf("dev: chaos: unknown fault %q; want one of %s", f, strings.Join(allFaults, ", "))
			}
		}
		if len(c.Etcd) > 0 && slices.Contains(c.Chaos.Faults, FaultLeader) {
			return fmt.Errorf("dev: chaos: fault %q crashes the leader of dev's own etcd, not of one given with Etcd; "+
				"leave it out of the faults", FaultLeader)
		}
	}
	if err := coordinator.ValidTTL(c.LeaseTTL); err != nil {
		return fmt.Errorf("dev: lease TTL: %w", err)
	}
	if err := coordinator.ValidGroup(c.Group); err != nil {
		return fmt.Errorf("dev: group: %w", err)
	}
	return nil
}
