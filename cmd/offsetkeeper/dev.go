//go:build !nodev

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/dev"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// hasDev tells whether this build has the dev command (not -tags nodev).
const hasDev = true

// extraCommands are the commands of this build beyond the production ones:
// dev, which links an embedded etcd and kfake. A -tags nodev build leaves
// it out (nodev.go).
func extraCommands(table sinks.Table) []*cobra.Command {
	return []*cobra.Command{newDevCommand(table)}
}

// faultHelp is the menu of --faults, for --help.
const faultHelp = `  kill       crash a replica (no block finished, nothing released) and start a fresh one
  zombie     pause a replica in the middle of a block (its sink write held,
             then its etcd traffic) for twice --lease-ttl, then resume it: it
             must find itself fenced, its late write refused or harmless
  leader     crash the etcd leader (of three members) and restart it --lease-ttl later
  etcd-cut   cut a replica off from etcd for 1.5 times --lease-ttl
  kafka-cut  cut a replica off from Kafka for --lease-ttl
  reset      'offsets reset' a partition live to an earlier offset (records
             delivered again: duplicates allowed, except with postgres)
  release    'claims release' a partition
  drain      'replicas drain' a replica, undone --lease-ttl later`

// devOptions is `offsetkeeper dev`: its flags, wired to dev.Run.
type devOptions struct {
	logs logFlags
	// etcdEndpoints and brokers are an existing cluster's, when given.
	etcdEndpoints, brokers []string
	replicas               int
	partitions             int
	messages               int
	rate                   int
	topic                  string
	group                  string
	sink                   string
	chaos                  bool
	chaosEvery             time.Duration
	faultsFlag             string
	duration               time.Duration
	hold                   bool
	keep                   bool
	timeout                time.Duration
	leaseTTL               time.Duration
	seed                   uint64
	value                  sinks.Format // --value-format

	sinks       sinks.Table // what --sink may name
	target      sinkTarget
	faults      []string // parsed --faults
	durationSet bool     // --duration given
	// ownTopic tells that the topic was given a suffix of this run's:
	// the sink outlives the run (see complete).
	ownTopic bool
}

const devExample = `  offsetkeeper dev
  offsetkeeper dev --chaos --messages 50000
  offsetkeeper dev --chaos --faults zombie,leader --duration 30s --seed 42
  offsetkeeper dev --sink stdout: --messages 10 --replicas 1
  offsetkeeper dev --value-format avro --messages 10000
  offsetkeeper dev --rate 2000 --hold    # then, in another terminal, the try: line's commands`

const devLong = `Start, in one process and on loopback only: an embedded etcd, an in-process
Kafka-protocol broker (kfake) with a topic of --partitions partitions,
--replicas replicas of one group writing to a file sink in a temporary folder
(or --sink), and a producer of --messages JSON records at --rate per second.

With --value-format avro or protobuf the producer writes each value, the
same JSON object, in that format in Confluent's wire format (magic byte 0,
schema id, for protobuf the message index, the payload), and dev embeds a
Schema Registry on a loopback port (the registry: line) holding its schema,
id 1, subject <topic>-value: the replicas read it there and decode each value
into the JSON it stands for before the sink sees it, as 'run --value-format
avro --schema-registry URL' would. A file sink then holds the decoded JSON,
not Kafka's bytes: the audit checks its records by offset only, and the
verdict says so (mismatched=n/a).

It prints the endpoints first, then one progress line a second: produced,
in sink, committed, lag and the claims of each replica. The cluster ends with
the run: --hold keeps it up after the report, until SIGINT or SIGTERM, so
that the CLI can be pointed at it from another terminal (the try: line says
how). The temporary folder (etcd's data, the default file sink) is removed
at exit, on SIGINT and SIGTERM too, unless --keep.

A --sink that outlives the run (file:///DIR, postgres://, clickhouse://)
gets a topic of this run's own, --topic with the run's UTC time as a suffix
(events-20060102-150405-000), unless --topic is given, so that a second run
never meets the first one's records at the same offsets; with postgres://
and clickhouse://, the group too (dev-<time>), unless --group is given: the
sink's offsets and tokens outlive this run's etcd. Both are printed.

With --chaos, every --chaos-every one fault of --faults (default all) is
dealt at random from a seeded deck (each kind once per round; --seed repeats
the order), for --duration, over which the producer spreads --messages:

` + faultHelp + `

Each fault is printed on stderr as it happens (time, fault, target); a slot
where no fault could run is printed as skipped. A lasting fault holds one
replica, and each replica one at a time. After --duration the faults stop,
those that last are undone, and the run waits for everything to be
committed. The leader fault makes etcd three members. What the replicas log
at WARN or ERROR because of a fault dev injected (a paused replica's lost
session, a cut replica's failed commits) is expected: it is logged at INFO
with "expected" naming the fault (--log-level info shows it) and counted on
the logs: line; WARN and ERROR are kept for the rest.

When every record is committed it audits the sink (what 'offsetkeeper audit'
does: the sink read back and checked against Kafka and etcd, each record
compared with Kafka's by key, value and timestamp where the sink keeps them)
and prints on stderr:

  elapsed=T seed=S replays=R
              R: record writes that repeated an earlier write of the same
              record: blocks replayed after a crash or a lost claim, records
              delivered again after a reset; not duplicates in the sink
  faults:     the count of each fault (--chaos)
  zombies:    N late writes: F fenced by the sink, E failed otherwise, S stored
              writes a paused replica resumed after losing its claim, and
              how the sink took them: refused by its epoch fence, failed,
              or stored (harmless when the audit below finds nothing)
  logs:       warnings and errors of the replicas, expected or not (--chaos)
  verdict:    how the sink was checked: "audit of URL" and how many records
              were compared (none in a file sink with --value-format avro or
              protobuf: it keeps the decoded JSON), or "not audited" and why
              (stdout:, discard:, a table without kafka_offset), then counted
              from the writes dev made to the sink, not read back

and, as its last line on stdout,
produced=N delivered=N lost=L duplicates=D mismatched=M dead_letters=X.
M counts records in the sink that are not Kafka's at their offsets ("n/a"
where none could be compared), X the records the sink set aside in its
dead-letter table. The exit status is 0 only when L, M and X are 0 and, with
a postgres sink, D is 0; otherwise (1) it prints the seed, the faults in order
and the first violation. 1 on a timeout as well; 2 for bad usage.

Nothing here is used in production: 'run' talks to real etcd and Kafka.`

func newDevCommand(table sinks.Table) *cobra.Command {
	o := &devOptions{sinks: table}
	cmd := &cobra.Command{
		Use:     "dev",
		Short:   "Run a whole local cluster in one process and check that nothing is lost",
		Long:    devLong,
		Example: devExample,
		Args:    noArgs,
		RunE:    runE(o),
	}
	fs := cmd.Flags()
	fs.IntVar(&o.replicas, "replicas", dev.DefaultReplicas, "replicas to run")
	fs.IntVar(&o.partitions, "partitions", dev.DefaultPartitions, "partitions of the topic")
	fs.IntVar(&o.messages, "messages", 100000, "records to produce, at least 1")
	fs.IntVar(&o.rate, "rate", 0, "records produced per second (0: as fast as the broker takes them; with --chaos or --duration, --messages spread evenly over --duration)")
	fs.StringVar(&o.topic, "topic", dev.DefaultTopic, "topic name (with a --sink that outlives the run, and unless given, with the run's time as a suffix)")
	fs.StringVar(&o.group, "group", dev.DefaultGroup, "group name (with a postgres or clickhouse --sink, and unless given, dev-<time>)")
	fs.StringVar(&o.sink, "sink", "", "where records go: "+table.Usage()+" (default: file:// in a new temporary folder, removed at exit unless --keep)")
	fs.BoolVar(&o.chaos, "chaos", false, "inject a random fault of --faults every --chaos-every")
	fs.DurationVar(&o.chaosEvery, "chaos-every", dev.DefaultChaosEvery, "time between faults with --chaos")
	fs.StringVar(&o.faultsFlag, "faults", "all", "faults of --chaos: all or a comma list of "+strings.Join(dev.Faults(), ", "))
	fs.DurationVar(&o.duration, "duration", dev.DefaultDuration, "with --chaos (or if given), produce --messages over this long, then stop the faults and wait for everything committed")
	fs.BoolVar(&o.hold, "hold", false, "keep the cluster running after the report, until SIGINT or SIGTERM, for the CLI in another terminal")
	fs.BoolVar(&o.keep, "keep", false, "keep the default file sink's temporary folder after exit (removed by default)")
	fs.DurationVar(&o.timeout, "timeout", dev.DefaultTimeout, "give up (exit 1) if not everything is committed by then")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", dev.DefaultLeaseTTL, "replicas' lease TTL: a crashed replica's partitions move after this")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the chaos schedule (0: random; the report prints it)")
	fs.StringSliceVar(&o.etcdEndpoints, "etcd-endpoints", nil, "run against this existing etcd (host:port or http://host:port, comma separated; plain connections, no TLS or login) instead of an embedded one: the same replicas, faults, verdict and audit; the run's group (dev-<time>) is deleted from it at the end (not read from $OFFSETKEEPER_ETCD_ENDPOINTS, which other commands read)")
	fs.StringSliceVar(&o.brokers, "brokers", nil, "run against this existing Kafka (host:port, comma separated; PLAINTEXT, no TLS or SASL) instead of kfake: dev creates its topic there (events-<time>, the cluster's default replication), and it stays (not read from $OFFSETKEEPER_BROKERS)")
	noEnv(fs, "etcd-endpoints", "brokers")
	o.value = sinks.JSON
	fs.Var(&parsedFlag[sinks.Format]{&o.value, dev.ParseValueFormat, valueFormatNames()}, "value-format", "how the producer encodes values: json, or avro or protobuf in Confluent's wire format, their schema in a Schema Registry dev embeds (the registry: line), decoded by the replicas into the same JSON for the sink")
	o.logs.register(fs, logWarn, logConsole)
	return cmd
}

// complete parses --sink. A sink that outlives the run gets a topic of the
// run's own, unless --topic is given: the raw tables' key and the file
// sink's directories are (topic, partition, offset), so a second run's
// records at the same offsets would meet the first one's (a table keeps
// the first and drops the second). A postgres or clickhouse sink with the
// default group gets a group of its own as well: the sink's tables outlive
// this run's etcd, and an earlier run's epochs would fence this one
// (postgres), or its deduplication tokens drop this run's blocks of the
// same ranges (clickhouse).
func (o *devOptions) complete(cmd *cobra.Command) error {
	var err error
	if o.target, err = parseSinkFlag(o.sinks, o.sink); err != nil {
		return err
	}
	if cmd.Flags().Changed("faults") && !o.chaos {
		return usagef("--faults %q: only with --chaos", o.faultsFlag)
	}
	if o.faults, err = dev.ParseFaults(o.faultsFlag); err != nil {
		return usagef("--faults %q: %v", o.faultsFlag, err)
	}
	o.durationSet = cmd.Flags().Changed("duration")
	if cmd.Flags().Changed("etcd-endpoints") && len(o.etcdEndpoints) == 0 {
		return usagef("--etcd-endpoints is empty: want host:port of an existing etcd, or leave it out for an embedded one")
	}
	if cmd.Flags().Changed("brokers") && len(o.brokers) == 0 {
		return usagef("--brokers is empty: want host:port of an existing Kafka, or leave it out for kfake")
	}
	// The run's time to the millisecond, readable in a table or a
	// directory listing: runs take seconds.
	run := strings.Replace(time.Now().UTC().Format("20060102-150405.000"), ".", "-", 1)
	if (o.target.Sink != nil && o.target.Sink.ByGroup || len(o.etcdEndpoints) > 0) && o.group == dev.DefaultGroup {
		// An etcd or a table that outlives the run: a group of its own.
		o.group = "dev-" + run
	}
	if (o.target.outlivesRun() || len(o.brokers) > 0) && !cmd.Flags().Changed("topic") {
		// A Kafka or a sink that outlives the run: a topic of its own.
		o.topic += "-" + run
		o.ownTopic = true
	}
	o.target.group = o.group
	return nil
}

// valueFormatNames are what --value-format accepts.
func valueFormatNames() []string {
	var names []string
	for _, f := range dev.ValueFormats() {
		names = append(names, f.String())
	}
	return names
}

// outlivesRun tells whether the sink keeps its records after dev exits:
// a --sink given as a file directory or a database.
func (t sinkTarget) outlivesRun() bool { return t.Sink != nil && t.Sink.Keeps }

func (o *devOptions) validate() error {
	switch {
	case o.replicas < 1 || o.replicas > dev.MaxReplicas:
		return usagef("--replicas %d: want 1 to %d", o.replicas, dev.MaxReplicas)
	case o.partitions < 1 || o.partitions > dev.MaxPartitions:
		return usagef("--partitions %d: want 1 to %d", o.partitions, dev.MaxPartitions)
	case o.messages < 1:
		return usagef("--messages %d: want at least 1: dev checks the records it produces, and with none there is nothing to check", o.messages)
	case o.rate < 0:
		return usagef("--rate %d: want 0 (unlimited) or more", o.rate)
	case o.timeout <= 0:
		return usagef("--timeout %s: want a positive duration", o.timeout)
	case o.chaosEvery < dev.MinChaosEvery:
		return usagef("--chaos-every %s: want at least %s", o.chaosEvery, dev.MinChaosEvery)
	case o.duration <= 0:
		return usagef("--duration %s: want a positive duration", o.duration)
	case (o.chaos || o.durationSet) && o.duration >= o.timeout:
		return usagef("--duration %s: want less than --timeout %s, which bounds the whole run", o.duration, o.timeout)
	}
	if err := coordinator.ValidTopic(o.topic); err != nil {
		return usagef("--topic %q: %v", o.topic, err)
	}
	if err := coordinator.ValidTTL(o.leaseTTL); err != nil {
		return usage(fmt.Errorf("--lease-ttl: %w", err))
	}
	if err := coordinator.ValidGroup(o.group); err != nil {
		return usage(fmt.Errorf("--group: %w", err))
	}
	return nil
}

// run runs dev.Run with the flags. dev.Run removes its temporary folder
// (etcd's data and the default file sink) whatever the exit (an error,
// SIGINT and SIGTERM end ctx), unless --keep keeps the sink.
func (o *devOptions) run(ctx context.Context, cmd *cobra.Command) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	log := o.logs.newLogger(stderr)
	defer func() { _ = log.Sync() }()

	cfg := dev.Config{
		Replicas:    o.replicas,
		Partitions:  o.partitions,
		Messages:    o.messages,
		Rate:        o.rate,
		Topic:       o.topic,
		OwnTopic:    o.ownTopic,
		Group:       o.group,
		ValueFormat: o.value,
		LeaseTTL:    o.leaseTTL,
		Timeout:     o.timeout,
		Seed:        o.seed,
		Keep:        o.keep,
		Etcd:        o.etcdEndpoints,
		Brokers:     o.brokers,
		Sinks:       o.sinks,
		Ready:       func(e dev.Endpoints) { o.printTry(stderr, e) },
		Out:         stdout,
		Err:         stderr,
		Logger:      log,
		Version:     version,
	}
	if o.target.Sink != nil {
		cfg.Sink = dev.Sink{
			Open:  func(ctx context.Context) (sinks.Sink, error) { return o.target.open(ctx, stdout) },
			URL:   o.target.URL,
			Shown: o.target.Shown(),
		}
	}
	if o.chaos || o.durationSet {
		cfg.Duration = o.duration
	}
	if o.chaos {
		cfg.Chaos = &dev.Chaos{Faults: o.faults, Every: o.chaosEvery}
	}
	if o.hold {
		cfg.Hold = func(ctx context.Context, _ *dev.Report) {
			fmt.Fprintln(stderr, "holding: etcd, Kafka and the replicas stay up until SIGINT or SIGTERM")
			<-ctx.Done()
		}
	}
	_, err := dev.Run(ctx, cfg)
	var timeout *dev.TimeoutError
	switch {
	case err != nil && ctx.Err() != nil && !o.hold && interrupted(ctx):
		// Ctrl-C before the report: not a pass (exit 130). SIGTERM stays a
		// stop (exit 0), as for run; with --hold either is its end.
		return &interruptedError{"dev ended by SIGINT before its report; nothing was checked"}
	case err != nil && ctx.Err() != nil:
		return nil // stopped, waiting for the sink's server or later
	case errors.As(err, &timeout):
		return fmt.Errorf("not everything committed within --timeout %s (%s)", o.timeout, timeout.Status)
	}
	return err
}

// interrupted tells whether ctx (runE's) ended with SIGINT.
func interrupted(ctx context.Context) bool {
	cause := context.Cause(ctx)
	return cause != nil && strings.Contains(cause.Error(), os.Interrupt.String())
}

// printTry prints how to point the CLI at this run's cluster: at once
// with --hold, which keeps it up; else the flag to add, since the
// endpoints end with the run, seconds later.
func (o *devOptions) printTry(w io.Writer, e dev.Endpoints) {
	cli, endpoints, brokers, registry := cliName(), strings.Join(e.Etcd, ","), strings.Join(e.Brokers, ","), e.Registry
	if !o.hold {
		fmt.Fprintf(w, "try:     this cluster ends with the run; add --hold to keep it up, then in another terminal: "+
			"%s offsets describe --etcd-endpoints %s --brokers %s --group %s\n", cli, endpoints, brokers, o.group)
		return
	}
	fmt.Fprintf(w, "try:     export OFFSETKEEPER_ETCD_ENDPOINTS=%s OFFSETKEEPER_BROKERS=%s OFFSETKEEPER_GROUP=%s\n", endpoints, brokers, o.group)
	fmt.Fprintf(w, "         %s offsets describe\n", cli)
	if registry != "" {
		fmt.Fprintf(w, "         curl %s/schemas/ids/%d\n", registry, dev.SchemaID)
	}
	if o.target.Sink == nil || o.target.outlivesRun() { // the default is a file sink
		fmt.Fprintf(w, "         %s audit --sink '%s'\n", cli, e.Sink)
	}
}

// cliName is how the try: line calls the CLI: offsetkeeper when it is on
// PATH, else as `go run` built this one (go install ./cmd/offsetkeeper
// puts it on PATH).
func cliName() string {
	if _, err := exec.LookPath("offsetkeeper"); err == nil {
		return "offsetkeeper"
	}
	if exe, err := os.Executable(); err == nil && strings.Contains(exe, "go-build") {
		return "go run ./cmd/offsetkeeper"
	}
	if exe, err := os.Executable(); err == nil {
		return exe
	}
	return "offsetkeeper"
}
