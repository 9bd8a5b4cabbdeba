//go:build !nodev

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/audit"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
)

// hasDev tells whether this build has the dev command (not -tags nodev).
const hasDev = true

// extraCommands are the commands of this build beyond the production ones:
// dev, which links an embedded etcd and kfake. A -tags nodev build leaves
// it out (nodev.go).
func extraCommands() []*cobra.Command { return []*cobra.Command{newDevCommand()} }

// devChaosEvery is --chaos-every's default: short enough that the default
// --duration (15s) has a slot for every kind of fault and one more (9
// slots for 8 kinds), long enough that lasting faults (a zombie's pause is
// twice the lease TTL) overlap on at most as many replicas as dev runs.
const devChaosEvery = 1500 * time.Millisecond

// devOptions is `offsetkeeper dev`.
type devOptions struct {
	logs       logFlags
	replicas   int
	partitions int
	messages   int
	rate       int
	topic      string
	group      string
	sink       string
	chaos      bool
	chaosEvery time.Duration
	faultsFlag string
	duration   time.Duration
	hold       bool
	keep       bool
	timeout    time.Duration
	leaseTTL   time.Duration
	seed       uint64

	target      sinkTarget
	faults      []string // parsed --faults
	durationSet bool     // --duration given
	// ownTopic tells that the topic was given a suffix of this run's:
	// the sink outlives the run (see complete).
	ownTopic bool
}

func newDevCommand() *cobra.Command {
	o := &devOptions{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a whole local cluster in one process and check that nothing is lost",
		Long: `Start, in one process and on loopback only: an embedded etcd, an in-process
Kafka-protocol broker (kfake) with a topic of --partitions partitions,
--replicas replicas of one group writing to a file sink in a temporary folder
(or --sink), and a producer of --messages JSON records at --rate per second.

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
              were compared, or "not audited" and why (stdout:, discard:,
              a table without kafka_offset), then counted from the writes dev
              made to the sink, not read back

and, as its last line on stdout,
produced=N delivered=N lost=L duplicates=D mismatched=M dead_letters=X.
M counts records in the sink that are not Kafka's at their offsets ("n/a"
where none could be compared), X the records the sink set aside in its
dead-letter table. The exit status is 0 only when L, M and X are 0 and, with
a postgres sink, D is 0; otherwise (1) it prints the seed, the faults in order
and the first violation. 1 on a timeout as well; 2 for bad usage.

Nothing here is used in production: 'run' talks to real etcd and Kafka.`,
		Example: `  offsetkeeper dev
  offsetkeeper dev --chaos --messages 50000
  offsetkeeper dev --chaos --faults zombie,leader --duration 30s --seed 42
  offsetkeeper dev --sink stdout: --messages 10 --replicas 1
  offsetkeeper dev --rate 2000 --hold    # then, in another terminal, the try: line's commands`,
		Args: noArgs,
		RunE: runE(o),
	}
	fs := cmd.Flags()
	fs.IntVar(&o.replicas, "replicas", 3, "replicas to run")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of the topic")
	fs.IntVar(&o.messages, "messages", 100000, "records to produce, at least 1")
	fs.IntVar(&o.rate, "rate", 0, "records produced per second (0: as fast as the broker takes them; with --chaos or --duration, --messages spread evenly over --duration)")
	fs.StringVar(&o.topic, "topic", "events", "topic name (with a --sink that outlives the run, and unless given, with the run's time as a suffix)")
	fs.StringVar(&o.group, "group", "dev", "group name (with a postgres or clickhouse --sink, and unless given, dev-<time>)")
	fs.StringVar(&o.sink, "sink", "", "where records go: "+sinkURLHelp+" (default: file:// in a new temporary folder, removed at exit unless --keep)")
	fs.BoolVar(&o.chaos, "chaos", false, "inject a random fault of --faults every --chaos-every")
	fs.DurationVar(&o.chaosEvery, "chaos-every", devChaosEvery, "time between faults with --chaos")
	fs.StringVar(&o.faultsFlag, "faults", "all", "faults of --chaos: all or a comma list of "+strings.Join(allFaults, ", "))
	fs.DurationVar(&o.duration, "duration", 15*time.Second, "with --chaos (or if given), produce --messages over this long, then stop the faults and wait for everything committed")
	fs.BoolVar(&o.hold, "hold", false, "keep the cluster running after the report, until SIGINT or SIGTERM, for the CLI in another terminal")
	fs.BoolVar(&o.keep, "keep", false, "keep the default file sink's temporary folder after exit (removed by default)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up (exit 1) if not everything is committed by then")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 2*time.Second, "replicas' lease TTL: a crashed replica's partitions move after this")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the chaos schedule (0: random; the report prints it)")
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
	if o.target, err = parseSinkFlag(o.sink); err != nil {
		return err
	}
	if cmd.Flags().Changed("faults") && !o.chaos {
		return usagef("--faults %q: only with --chaos", o.faultsFlag)
	}
	if o.faults, err = parseFaults(o.faultsFlag); err != nil {
		return err
	}
	o.durationSet = cmd.Flags().Changed("duration")
	// The run's time to the millisecond, readable in a table or a
	// directory listing: runs take seconds.
	run := strings.Replace(time.Now().UTC().Format("20060102-150405.000"), ".", "-", 1)
	if (o.target.scheme == "postgres" || o.target.scheme == "clickhouse") && o.group == "dev" {
		o.group = "dev-" + run
	}
	if o.target.outlivesRun() && !cmd.Flags().Changed("topic") {
		o.topic += "-" + run
		o.ownTopic = true
	}
	o.target.group = o.group
	return nil
}

// outlivesRun tells whether the sink keeps its records after dev exits:
// a --sink given as a file directory or a database.
func (t sinkTarget) outlivesRun() bool {
	return t.scheme == "file" || t.scheme == "postgres" || t.scheme == "clickhouse"
}

func (o *devOptions) validate() error {
	switch {
	case o.replicas < 1 || o.replicas > 100:
		return usagef("--replicas %d: want 1 to 100", o.replicas)
	case o.partitions < 1 || o.partitions > 10000:
		return usagef("--partitions %d: want 1 to 10000", o.partitions)
	case o.messages < 1:
		return usagef("--messages %d: want at least 1: dev checks the records it produces, and with none there is nothing to check", o.messages)
	case o.rate < 0:
		return usagef("--rate %d: want 0 (unlimited) or more", o.rate)
	case o.timeout <= 0:
		return usagef("--timeout %s: want a positive duration", o.timeout)
	case o.chaosEvery < 100*time.Millisecond:
		return usagef("--chaos-every %s: want at least 100ms", o.chaosEvery)
	case o.duration <= 0:
		return usagef("--duration %s: want a positive duration", o.duration)
	case (o.chaos || o.durationSet) && o.duration >= o.timeout:
		return usagef("--duration %s: want less than --timeout %s, which bounds the whole run", o.duration, o.timeout)
	}
	if err := validTopic(o.topic); err != nil {
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

// sinkURL is the sink as a URL the audit reads, and as it may be shown.
func (t sinkTarget) sinkURL() (raw, shown string) {
	if t.scheme == "file" {
		raw = "file://" + t.dir
		return raw, raw
	}
	if t.url == "" {
		return t.scheme + ":", t.scheme + ":"
	}
	return t.url, shownSink(t.url)
}

func (o *devOptions) run(ctx context.Context, cmd *cobra.Command) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	log := o.logs.newLogger(stderr)
	defer func() { _ = log.Sync() }()
	deadline, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	started := time.Now()

	// One temporary folder for the run: etcd's data and the default file
	// sink. It goes at exit, whatever the exit (an error, SIGINT and
	// SIGTERM end ctx and so come back here), unless --keep keeps the
	// sink.
	tmp, err := os.MkdirTemp("", "offsetkeeper-dev-")
	if err != nil {
		return fmt.Errorf("dev: temporary folder: %w", err)
	}
	defaultSink := o.target.scheme == ""
	defer func() {
		if o.keep && defaultSink {
			_ = os.RemoveAll(filepath.Join(tmp, "etcd"))
			fmt.Fprintf(stderr, "kept:    %s (--keep)\n", o.target)
			return
		}
		_ = os.RemoveAll(tmp)
	}()
	etcdDir := filepath.Join(tmp, "etcd")
	if err := os.Mkdir(etcdDir, 0o700); err != nil {
		return fmt.Errorf("dev: etcd folder: %w", err)
	}
	if defaultSink {
		dir := filepath.Join(tmp, "sink")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("dev: sink folder: %w", err)
		}
		o.target = sinkTarget{scheme: "file", dir: dir}
	}
	members := 1
	if o.chaos && slices.Contains(o.faults, faultLeader) {
		members = 3 // a quorum that survives its leader
	}
	etcd, endpoints, err := startDevEtcd(etcdDir, members)
	if err != nil {
		return err
	}
	defer etcd.close()
	endpoint := strings.Join(endpoints, ",")
	broker, brokers, err := startDevKafka(o.topic, o.partitions)
	if err != nil {
		return err
	}
	defer broker.Close()
	topicNote := ""
	if o.ownTopic {
		topicNote = "; this run's own: the sink outlives it"
	}
	// The endpoints first: opening the sink may wait for its server.
	fmt.Fprintf(stderr, "etcd:    %s\nkafka:   %s\ntopic:   %s (%d partitions%s)\ngroup:   %s\nsink:    %s\n",
		endpoint, strings.Join(brokers, ","), o.topic, o.partitions, topicNote, o.group, o.target)
	sink, err := o.target.open(ctx, stdout)
	if err != nil {
		return err
	}
	rec := newRecorder(sink)
	defer rec.Close()
	o.printTry(stderr, endpoint, strings.Join(brokers, ","))

	expect := newDevExpect(3 * o.leaseTTL)
	cfg := replica.Config{
		Group:         o.group,
		Topics:        []string{o.topic},
		Kafka:         replica.Kafka{Brokers: brokers, FetchMaxWait: 200 * time.Millisecond},
		LeaseTTL:      o.leaseTTL,
		FlushInterval: 200 * time.Millisecond,
		Version:       version,
	}
	fleet := &devFleet{cfg: cfg, members: endpoints, sink: rec, log: log, down: map[int]bool{}}
	if o.chaos {
		fleet.expect = expect
	}
	defer fleet.stopAll()
	for range o.replicas {
		if err := fleet.start(ctx); err != nil {
			return err
		}
	}
	watcher, err := fleet.client()
	if err != nil {
		return err
	}
	defer watcher.Close()
	coord, err := coordinator.New(watcher, o.group)
	if err != nil {
		return err
	}

	seed := o.seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	var chaos *devChaos
	if o.chaos {
		chaos = newDevChaos(o.faults, seed, fleet, etcd, coord, o.topic, o.leaseTTL, stderr)
		chaos.expect = expect
		defer chaos.finish()
	}

	prod := newDevProducer(brokers, o.topic, o.partitions)
	prodDone := make(chan error, 1)
	rate := o.rate
	if rate == 0 && (o.chaos || o.durationSet) {
		// Faults need records in flight: spread them over --duration.
		rate = max(1, int((int64(o.messages)*int64(time.Second)+int64(o.duration)-1)/int64(o.duration)))
	}
	if o.chaos {
		fmt.Fprintf(stderr, "chaos:   seed %d, faults %s, one every %s for %s, producing %d records/s\n",
			seed, strings.Join(o.faults, ","), o.chaosEvery, o.duration, rate)
	}
	go func() { prodDone <- prod.run(deadline, o.messages, rate) }()
	producing := true

	ticker := time.NewTicker(o.chaosEvery)
	defer ticker.Stop()
	// The slots are the ticks before --duration ends, counted: a tick
	// that comes with its end, by the clock, would deal a fault undone at
	// once, or not, as the timers race.
	slots := int((o.duration - 1) / o.chaosEvery)
	faultsOver := time.After(o.duration)
	faulting := o.chaos
	progress := time.NewTicker(time.Second)
	defer progress.Stop()

	for {
		select {
		case <-deadline.Done():
			if ctx.Err() != nil {
				return nil // interrupted
			}
			return fmt.Errorf("not everything committed within --timeout %s (%s)", o.timeout, o.status(ctx, coord, prod, rec, fleet))
		case err := <-prodDone:
			producing = false
			if err != nil {
				return err
			}
		case <-faultsOver:
			if faulting {
				faulting = false
				chaos.finish()
				fmt.Fprintf(stderr, "chaos:   faults over after %s; waiting for everything committed\n", o.duration)
			}
		case <-ticker.C:
			if !faulting || slots == 0 {
				continue
			}
			slots--
			if err := chaos.tick(ctx); err != nil {
				return err
			}
		case <-progress.C:
			line, done := o.progress(ctx, coord, prod, rec, fleet, producing || faulting)
			fmt.Fprintln(stderr, line)
			if !done {
				continue
			}
			if !o.hold {
				fleet.stopAll()
			}
			v, err := o.verdict(ctx, watcher, brokers, prod.counts(), rec)
			if err != nil {
				return err
			}
			fmt.Fprintf(stderr, "elapsed=%s seed=%d replays=%d (record writes that repeated an earlier one: blocks replayed after faults, records re-delivered after resets)\n",
				time.Since(started).Round(time.Millisecond), seed, rec.replayed())
			if chaos != nil {
				fmt.Fprintf(stderr, "faults:  %s\n", chaos.summary())
				if slices.Contains(o.faults, faultZombie) {
					fmt.Fprintf(stderr, "zombies: %s (writes a paused replica resumed after losing its claim)\n", &fleet.late)
				}
				fmt.Fprintf(stderr, "logs:    %s\n", expect)
			}
			fmt.Fprintf(stderr, "verdict: %s\n", v.by)
			fmt.Fprintln(stdout, v.line(prod.total()))
			if fail := v.failure(o.target.scheme == "postgres"); fail != "" {
				var history []string
				if chaos != nil {
					history = chaos.faultsInOrder()
				}
				reportFailure(stderr, fail, seed, history)
				return fmt.Errorf("%s (seed %d)", fail, seed)
			}
			if o.hold {
				fmt.Fprintln(stderr, "holding: etcd, Kafka and the replicas stay up until SIGINT or SIGTERM")
				<-ctx.Done()
			}
			return nil
		}
	}
}

// printTry prints how to point the CLI at this run's cluster: at once
// with --hold, which keeps it up; else the flag to add, since the
// endpoints end with the run, seconds later.
func (o *devOptions) printTry(w io.Writer, endpoints, brokers string) {
	if !o.hold {
		fmt.Fprintf(w, "try:     this cluster ends with the run; add --hold to keep it up, then in another terminal: "+
			"offsetkeeper offsets describe --etcd-endpoints %s --brokers %s --group %s\n", endpoints, brokers, o.group)
		return
	}
	fmt.Fprintf(w, "try:     export OFFSETKEEPER_ETCD_ENDPOINTS=%s OFFSETKEEPER_BROKERS=%s OFFSETKEEPER_GROUP=%s\n", endpoints, brokers, o.group)
	fmt.Fprintln(w, "         offsetkeeper offsets describe")
	if o.target.outlivesRun() {
		_, shown := o.target.sinkURL()
		fmt.Fprintf(w, "         offsetkeeper audit --sink '%s'\n", shown)
	}
}

// progress is one progress line; done is true when everything produced is
// committed.
func (o *devOptions) progress(ctx context.Context, coord *coordinator.Coordinator, prod *devProducer, rec *recorder, fleet *devFleet, producing bool) (string, bool) {
	line := o.status(ctx, coord, prod, rec, fleet)
	if producing {
		return line, false
	}
	committed, err := committedAll(ctx, coord, o.topic, prod.counts())
	return line, err == nil && committed
}

func (o *devOptions) status(ctx context.Context, coord *coordinator.Coordinator, prod *devProducer, rec *recorder, fleet *devFleet) string {
	var committed int64
	claims := map[string]int{}
	if snap, err := coord.Snapshot(ctx); err == nil {
		for _, off := range snap.Offsets {
			committed += off.Next
		}
		for _, c := range snap.Claims {
			claims[c.Replica]++
		}
	}
	var per []string
	for _, id := range fleet.ids() {
		per = append(per, fmt.Sprintf("%s:%d", id, claims[id]))
	}
	produced := prod.total()
	return fmt.Sprintf("produced=%d in_sink=%d committed=%d lag=%d claims=%s",
		produced, rec.distinct(), committed, produced-committed, strings.Join(per, ","))
}

// verdict is what dev found in the sink at the end of the run: counts,
// and the first of each violation.
type verdict struct {
	delivered, lost, duplicates int64
	// compared counts the records compared with Kafka's (key, value,
	// timestamp), mismatched those that were not Kafka's; compared is 0
	// where the sink keeps no record to compare, or was not audited.
	compared, mismatched int64
	// deadLetters counts the records the sink set aside in its
	// dead-letter table; deadWhere names the table and the first reason.
	deadLetters int64
	deadWhere   string

	firstLost, firstDuplicate, firstMismatch string
	by                                       string // how it was found: the audit, or why not
}

// line is the report's last line, on stdout.
func (v verdict) line(produced int64) string {
	mismatched := fmt.Sprint(v.mismatched)
	if v.compared == 0 {
		mismatched = "n/a"
	}
	return fmt.Sprintf("produced=%d delivered=%d lost=%d duplicates=%d mismatched=%s dead_letters=%d",
		produced, v.delivered, v.lost, v.duplicates, mismatched, v.deadLetters)
}

// failure says what makes the run fail, "" if nothing: a lost record, a
// record that is not Kafka's, a record set aside as a dead letter (every
// record dev produces is a JSON object any table of the sink should take),
// or with exactlyOnce (a postgres sink) a duplicate.
func (v verdict) failure(exactlyOnce bool) string {
	switch {
	case v.lost > 0:
		return fmt.Sprintf("%d records lost, the first %s", v.lost, v.firstLost)
	case v.mismatched > 0:
		return fmt.Sprintf("%d records in the sink are not the ones Kafka holds at their offsets (another run's, or of another topic of the same name), the first %s",
			v.mismatched, v.firstMismatch)
	case v.deadLetters > 0:
		return fmt.Sprintf("%d records went to the dead-letter table%s: the sink refused them, though each is a JSON object",
			v.deadLetters, v.deadWhere)
	case exactlyOnce && v.duplicates > 0:
		return fmt.Sprintf("%d duplicates in a sink that must have none, the first %s", v.duplicates, v.firstDuplicate)
	}
	return ""
}

// note counts c copies of record p/off.
func (v *verdict) note(topic string, p int, off int64, c int) {
	switch {
	case c == 0:
		v.lost++
		if v.firstLost == "" {
			v.firstLost = fmt.Sprintf("%s/%d at offset %d", topic, p, off)
		}
	default:
		v.delivered++
		v.duplicates += int64(c - 1)
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

// verdict is what the audit finds in the sink (offsetkeeper audit: the
// sink against Kafka and etcd, records compared), for a sink it can read.
// A sink it cannot read is counted from what was written to it, and the
// verdict says so and why: a count of writes is not a check of the sink.
// The producer's counts bound the run: every record it produced is
// delivered and committed before the verdict is taken. Dead letters are
// counted either way.
func (o *devOptions) verdict(ctx context.Context, cli *clientv3.Client, brokers []string, produced map[int]int64, rec *recorder) (verdict, error) {
	raw, shown := o.target.sinkURL()
	var v verdict
	s, err := audit.OpenSink(ctx, raw, shown, o.group)
	switch {
	case errors.Is(err, audit.ErrSinkUnsupported), errors.Is(err, audit.ErrSinkUnreadable):
		v = rec.tally(o.topic, produced)
		why := err.Error()
		if errors.Is(err, audit.ErrSinkUnsupported) {
			why = o.target.scheme + ": keeps nothing to read back"
		}
		v.by = fmt.Sprintf("not audited (%s): counted from the writes dev made to the sink, not read back from it", why)
	case err != nil:
		return verdict{}, fmt.Errorf("audit the sink: %w", err)
	default:
		defer s.Close()
		rep, err := audit.Run(ctx, audit.Config{Etcd: cli, Group: o.group, Kafka: kafka.Config{Brokers: brokers}, KafkaTimeout: 30 * time.Second,
			Sink: s, Scope: []audit.Scope{{Topic: o.topic}}})
		if err != nil {
			return verdict{}, fmt.Errorf("audit the sink: %w", err)
		}
		v = auditVerdict(rep, produced)
		v.by = "audit of " + shown + ": " + comparedNote(rep)
		if v.lost > 0 || v.duplicates > 0 || v.mismatched > 0 {
			// A second opinion, to tell a fault of the pipeline from one of
			// the audit: what a reader of the sink sees.
			if rb, ok, err := o.readBack(ctx, produced); err == nil && ok {
				v.by += fmt.Sprintf("; read back: delivered=%d lost=%d duplicates=%d, first lost %s", rb.delivered, rb.lost, rb.duplicates, rb.firstLost)
			}
		}
	}
	if err := o.deadLetters(ctx, rec, &v); err != nil {
		return verdict{}, err
	}
	return v, nil
}

// deadLetters counts the records of this run that the sink set aside: in
// a postgres sink from its dead-letter table (this run's topic, with the
// first reason), else from what the sink counted.
func (o *devOptions) deadLetters(ctx context.Context, rec *recorder, v *verdict) error {
	switch o.target.scheme {
	case "postgres":
		t, err := postgres.ParseTables(o.target.url)
		if err != nil {
			return fmt.Errorf("count the dead letters: %w", err)
		}
		conn, err := pgx.Connect(ctx, t.ConnString)
		if err != nil {
			return fmt.Errorf("count the dead letters in %s: %w", t.DeadLetters, err)
		}
		defer conn.Close(context.Background())
		var reason *string
		err = conn.QueryRow(ctx, `SELECT count(*), min(error) FROM `+t.DeadLetters+` WHERE topic = $1`, o.topic).Scan(&v.deadLetters, &reason)
		if err != nil {
			return fmt.Errorf("count the dead letters in %s: %w", t.DeadLetters, err)
		}
		if v.deadLetters > 0 && reason != nil {
			v.deadWhere = fmt.Sprintf(" %s (the first reason: %s)", t.DeadLetters, *reason)
		}
	case "clickhouse":
		if dl, ok := sinks.As[sinks.DeadLetterCounter](rec); ok {
			v.deadLetters = dl.DeadLetters()
		}
		table := clickhouse.DefaultDeadLetterTable
		if u, err := url.Parse(o.target.url); err == nil && u.Query().Get("dead_letter_table") != "" {
			table = u.Query().Get("dead_letter_table")
		}
		v.deadWhere = " " + table
	}
	return nil
}

// auditVerdict is the verdict of an audit report; a record produced but
// past a partition's committed offset (which the run waits for) is lost.
func auditVerdict(rep *audit.Report, produced map[int]int64) verdict {
	var v verdict
	for i := range rep.Partitions {
		p := &rep.Partitions[i]
		v.lost += p.Missing.Count
		v.duplicates += p.Copies
		v.delivered += p.Delivered - p.Missing.Count
		v.compared += p.Compared
		v.mismatched += p.Mismatched.Count
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
			v.lost += short
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
func (o *devOptions) readBack(ctx context.Context, produced map[int]int64) (verdict, bool, error) {
	var read func(p int) ([]sinks.Record, error)
	switch {
	case o.target.scheme == "file":
		read = func(p int) ([]sinks.Record, error) { return file.ReadAll(o.target.dir, o.topic, p) }
	case o.target.scheme == "postgres":
		read = func(p int) ([]sinks.Record, error) { return postgres.ReadAll(ctx, o.target.url, o.topic, p) }
	case o.target.scheme == "clickhouse":
		read = func(p int) ([]sinks.Record, error) { return clickhouse.ReadAll(ctx, o.target.url, o.topic, p) }
	default:
		return verdict{}, false, nil
	}
	var v verdict
	for _, p := range sortedKeys(produced) {
		n := produced[p]
		records, err := read(p)
		if errors.Is(err, postgres.ErrURL) || errors.Is(err, clickhouse.ErrURL) {
			return verdict{}, false, nil // a columns table: no records to read back
		}
		if err != nil {
			return verdict{}, false, fmt.Errorf("read the sink back: %s/%d: %w", o.topic, p, err)
		}
		seen := make(map[int64]int, len(records))
		for _, r := range records {
			seen[r.Offset]++
		}
		for off := int64(0); off < n; off++ {
			v.note(o.topic, p, off, seen[off])
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

func (t sinkTarget) String() string {
	_, shown := t.sinkURL()
	return shown
}

func sum(m map[int]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// committedAll reports whether every partition's committed offset reached
// what was produced to it.
func committedAll(ctx context.Context, c *coordinator.Coordinator, topic string, produced map[int]int64) (bool, error) {
	snap, err := c.Snapshot(ctx)
	if err != nil {
		return false, err
	}
	for p, n := range produced {
		if n > 0 && snap.Offsets[coordinator.Partition{Topic: topic, Partition: p}].Next < n {
			return false, nil
		}
	}
	return true, nil
}

// devFleet runs in-process replicas, each with its own etcd client, as
// separate processes would. Each replica reaches every etcd member through a
// proxy of its own and Kafka through a dialer of its own, and writes through
// a gate of its own, so that --chaos can fault one replica at a time.
type devFleet struct {
	cfg     replica.Config
	members []string // etcd members' client addresses, host:port
	sink    sinks.Sink
	log     *zap.Logger
	late    devLate // a zombie's held writes
	// expect, with --chaos, tells which replicas' warnings are the
	// expected work of a fault dev injected; nil without.
	expect *devExpect

	mu      sync.Mutex
	next    int
	down    map[int]bool // etcd members stopped by the leader fault
	running []*devReplica
}

type devReplica struct {
	r       *replica.Replica
	cli     *clientv3.Client
	proxies []*devProxy // to etcd member i
	kafka   *devDialer
	gate    *devGate
	cancel  context.CancelFunc
	done    chan struct{}
}

// client is an etcd client of dev itself (the progress lines and the
// operator's faults), straight to the members.
func (f *devFleet) client() (*clientv3.Client, error) {
	return devClient(f.members)
}

func devClient(endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client of %s: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

func (f *devFleet) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.running)
}

func (f *devFleet) start(ctx context.Context) error {
	d := &devReplica{kafka: newDevDialer(), gate: &devGate{}, done: make(chan struct{})}
	f.mu.Lock()
	f.next++
	cfg := f.cfg
	cfg.ReplicaID = fmt.Sprintf("dev-%d", f.next)
	var endpoints []string
	for i, m := range f.members {
		p, err := newDevProxy(m)
		if err != nil {
			f.mu.Unlock()
			d.closeProxies()
			return err
		}
		if f.down[i] {
			p.cut(true)
		}
		d.proxies = append(d.proxies, p)
		endpoints = append(endpoints, p.addr())
	}
	f.mu.Unlock()
	cli, err := devClient(endpoints)
	if err != nil {
		d.closeProxies()
		return err
	}
	d.cli = cli
	cfg.Kafka.Dial = d.kafka.dial
	log := f.log
	if f.expect != nil {
		log = f.expect.logger(log, cfg.ReplicaID)
	}
	r, err := replica.New(cfg, cli, &gatedSink{inner: f.sink, gate: d.gate, late: &f.late}, log)
	if err != nil {
		d.close()
		return err
	}
	d.r = r
	rctx, cancel := context.WithCancel(ctx)
	d.cancel = cancel
	go func() {
		defer close(d.done)
		_ = r.Run(rctx)
	}()
	f.mu.Lock()
	f.running = append(f.running, d)
	f.mu.Unlock()
	return nil
}

func (f *devFleet) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, d := range f.running {
		out = append(out, d.r.ID())
	}
	return out
}

// find is the running replica id, or nil.
func (f *devFleet) find(id string) *devReplica {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.running {
		if d.r.ID() == id {
			return d
		}
	}
	return nil
}

func (f *devFleet) take(i int) *devReplica {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.running[i]
	f.running = append(f.running[:i], f.running[i+1:]...)
	return d
}

// crash kills replica i: no block finished, no claim released, the lease
// left to expire.
func (f *devFleet) crash(i int) {
	d := f.take(i)
	d.r.Kill()
	d.gate.resume() // a write held by a pause must not hold Run
	<-d.done
	d.cancel()
	d.close()
}

// stop stops replica i as SIGTERM would.
func (f *devFleet) stop(i int) {
	d := f.take(i)
	d.gate.resume()
	for _, p := range d.proxies {
		p.resume()
	}
	d.cancel()
	<-d.done
	d.close()
}

func (f *devFleet) stopAll() {
	for f.size() > 0 {
		f.stop(0)
	}
}

// memberDown makes etcd member i look crashed to every replica, now and to
// those started later: connections cut, new ones refused.
func (f *devFleet) memberDown(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[i] = true
	for _, d := range f.running {
		d.proxies[i].cut(true)
	}
}

// memberUp undoes memberDown.
func (f *devFleet) memberUp(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.down, i)
	for _, d := range f.running {
		d.proxies[i].restore()
	}
}

// cutEtcd cuts replica d off from every etcd member, or restores it (but
// not to a member the leader fault keeps down); it says how many
// connections it cut.
func (f *devFleet) cutEtcd(d *devReplica, cut bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for i, p := range d.proxies {
		switch {
		case cut:
			n += p.cut(true)
		case !f.down[i]:
			p.restore()
		}
	}
	return n
}

// pause stops replica d as SIGSTOP would, as far as etcd and the sink can
// tell: its etcd bytes and its sink writes are held until resume. The sink
// is held first and etcd once a write is held (or after wait): the zombie
// that fencing exists for is the one stopped in the middle of a block, its
// intent written, its write to come.
func (d *devReplica) pause(wait time.Duration) {
	arrived := d.gate.pause()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-arrived:
	case <-t.C:
	}
	for _, p := range d.proxies {
		p.pause()
	}
}

func (d *devReplica) resume() {
	for _, p := range d.proxies {
		p.resume()
	}
	d.gate.resume()
}

func (d *devReplica) close() {
	if d.cli != nil {
		_ = d.cli.Close()
	}
	d.closeProxies()
}

func (d *devReplica) closeProxies() {
	for _, p := range d.proxies {
		p.close()
	}
}
