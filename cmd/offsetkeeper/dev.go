//go:build !nodev

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
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
	hold       bool
	timeout    time.Duration
	leaseTTL   time.Duration
	seed       uint64

	target sinkTarget
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

It prints the endpoints first, so that a second terminal can point the CLI at
them, then one progress line a second: produced, in sink, committed, lag and
the claims of each replica. With --chaos a random replica is crashed every
--chaos-every (stopped without finishing its block, releasing its claims or
revoking its lease, so its lease must expire) and a fresh one is started.

When every record is committed it reads the sink back and prints, as its last
line, produced=N delivered=N lost=L duplicates=D. The exit status is 0 only
when L is 0 (1 on a timeout). --hold keeps the cluster running afterwards,
until SIGINT or SIGTERM.

Nothing here is used in production: 'run' talks to real etcd and Kafka.`,
		Example: `  offsetkeeper dev
  offsetkeeper dev --chaos --messages 50000
  offsetkeeper dev --sink stdout: --messages 10 --replicas 1
  offsetkeeper dev --rate 2000 --hold    # then, in another terminal, the printed endpoints`,
		Args: noArgs,
		RunE: runE(o),
	}
	fs := cmd.Flags()
	fs.IntVar(&o.replicas, "replicas", 3, "replicas to run")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of the topic")
	fs.IntVar(&o.messages, "messages", 100000, "records to produce")
	fs.IntVar(&o.rate, "rate", 0, "records produced per second (0: as fast as the broker takes them; with --chaos, spread over about 15s)")
	fs.StringVar(&o.topic, "topic", "events", "topic name")
	fs.StringVar(&o.group, "group", "dev", "group name")
	fs.StringVar(&o.sink, "sink", "", "where records go: "+sinkURLHelp+" (default: file:// in a new temporary folder)")
	fs.BoolVar(&o.chaos, "chaos", false, "crash a random replica every --chaos-every and start a fresh one")
	fs.DurationVar(&o.chaosEvery, "chaos-every", 2*time.Second, "time between crashes with --chaos")
	fs.BoolVar(&o.hold, "hold", false, "keep running after the report, until SIGINT or SIGTERM")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up (exit 1) if not everything is committed by then")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 2*time.Second, "replicas' lease TTL: a crashed replica's partitions move after this")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the chaos schedule (0: random; the report prints it)")
	o.logs.register(fs, logWarn, logConsole)
	return cmd
}

// complete parses --sink. A postgres or clickhouse sink with the default
// group gets a group of its own: the sink's tables outlive this run's etcd,
// and an earlier run's epochs would fence this one (postgres), or its
// deduplication tokens drop this run's blocks of the same ranges
// (clickhouse).
func (o *devOptions) complete(*cobra.Command) error {
	var err error
	if o.target, err = parseSinkFlag(o.sink); err != nil {
		return err
	}
	if (o.target.scheme == "postgres" || o.target.scheme == "clickhouse") && o.group == "dev" {
		o.group = fmt.Sprintf("dev-%d", time.Now().UnixNano())
	}
	o.target.group = o.group
	return nil
}

func (o *devOptions) validate() error {
	switch {
	case o.replicas < 1 || o.replicas > 100:
		return usagef("--replicas %d: want 1 to 100", o.replicas)
	case o.partitions < 1 || o.partitions > 10000:
		return usagef("--partitions %d: want 1 to 10000", o.partitions)
	case o.messages < 0:
		return usagef("--messages %d: want 0 or more", o.messages)
	case o.rate < 0:
		return usagef("--rate %d: want 0 (unlimited) or more", o.rate)
	case o.timeout <= 0:
		return usagef("--timeout %s: want a positive duration", o.timeout)
	case o.chaosEvery < 100*time.Millisecond:
		return usagef("--chaos-every %s: want at least 100ms", o.chaosEvery)
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

func (o *devOptions) run(ctx context.Context, cmd *cobra.Command) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	log := o.logs.newLogger(stderr)
	defer func() { _ = log.Sync() }()
	deadline, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	started := time.Now()

	tmp, err := os.MkdirTemp("", "offsetkeeper-dev-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if o.target.scheme == "" {
		dir, err := os.MkdirTemp("", "offsetkeeper-dev-sink-")
		if err != nil {
			return err
		}
		o.target = sinkTarget{scheme: "file", dir: dir}
	}
	etcd, endpoint, err := startDevEtcd(tmp)
	if err != nil {
		return err
	}
	defer etcd.Close()
	broker, brokers, err := startDevKafka(o.topic, o.partitions)
	if err != nil {
		return err
	}
	defer broker.Close()
	sink, err := o.target.open(stdout)
	if err != nil {
		return err
	}
	rec := newRecorder(sink)
	defer rec.Close()
	fmt.Fprintf(stderr, "etcd:    %s\nkafka:   %s\ntopic:   %s (%d partitions)\ngroup:   %s\nsink:    %s\n",
		endpoint, strings.Join(brokers, ","), o.topic, o.partitions, o.group, o.target)
	fmt.Fprintf(stderr, "try:     offsetkeeper offsets describe --etcd-endpoints %s --brokers %s --group %s\n",
		endpoint, strings.Join(brokers, ","), o.group)

	cfg := replica.Config{
		Group:         o.group,
		Topics:        []string{o.topic},
		Kafka:         replica.Kafka{Brokers: brokers, FetchMaxWait: 200 * time.Millisecond},
		LeaseTTL:      o.leaseTTL,
		FlushInterval: 200 * time.Millisecond,
		Version:       version,
	}
	fleet := &devFleet{cfg: cfg, endpoint: endpoint, sink: rec, log: log}
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

	prod := newDevProducer(brokers, o.topic, o.partitions)
	prodDone := make(chan error, 1)
	rate := o.rate
	if o.chaos && rate == 0 {
		// Crashes need records in flight: spread them over ~15 s.
		rate = max(1000, o.messages/15)
		fmt.Fprintf(stderr, "chaos: producing %d records/s, a crash every %s\n", rate, o.chaosEvery)
	}
	go func() { prodDone <- prod.run(deadline, o.messages, rate) }()
	producing := true

	seed := o.seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	chaos := time.NewTicker(o.chaosEvery)
	defer chaos.Stop()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	crashes := 0

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
		case <-chaos.C:
			// Crash while records are still on their way to the sink.
			if !o.chaos || (!producing && rec.distinct() >= prod.total()) {
				continue
			}
			if n := fleet.size(); n > 0 {
				fleet.crash(rng.IntN(n))
				crashes++
				if err := fleet.start(ctx); err != nil {
					return err
				}
			}
		case <-progress.C:
			line, done := o.progress(ctx, coord, prod, rec, fleet, producing)
			fmt.Fprintln(stderr, line)
			if !done {
				continue
			}
			if !o.hold {
				fleet.stopAll()
			}
			delivered, lost, dups, err := o.readBack(ctx, prod.counts(), rec)
			if err != nil {
				return err
			}
			fmt.Fprintf(stderr, "elapsed=%s crashes=%d seed=%d replays=%d\n",
				time.Since(started).Round(time.Millisecond), crashes, seed, rec.replayed())
			fmt.Fprintf(stdout, "produced=%d delivered=%d lost=%d duplicates=%d\n", prod.total(), delivered, lost, dups)
			if lost > 0 {
				return fmt.Errorf("%d records lost", lost)
			}
			if o.hold {
				fmt.Fprintln(stderr, "holding: etcd, Kafka and the replicas stay up until SIGINT or SIGTERM")
				<-ctx.Done()
			}
			return nil
		}
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

// readBack counts what the sink holds: a file sink or a raw-mode postgres
// sink by reading it (what any reader of it sees), other sinks from what was
// written to them.
func (o *devOptions) readBack(ctx context.Context, produced map[int]int64, rec *recorder) (delivered, lost, duplicates int64, err error) {
	var read func(p int) ([]sinks.Record, error)
	switch {
	case o.target.scheme == "file":
		read = func(p int) ([]sinks.Record, error) { return file.ReadAll(o.target.dir, o.topic, p) }
	case o.target.scheme == "postgres":
		read = func(p int) ([]sinks.Record, error) { return postgres.ReadAll(ctx, o.target.url, o.topic, p) }
	case o.target.scheme == "clickhouse":
		read = func(p int) ([]sinks.Record, error) { return clickhouse.ReadAll(ctx, o.target.url, o.topic, p) }
	default:
		d, l, dups := rec.tally(produced)
		return d, l, dups, nil
	}
	for p, n := range produced {
		records, err := read(p)
		if errors.Is(err, postgres.ErrURL) || errors.Is(err, clickhouse.ErrURL) {
			// A columns-mode table keeps no offsets to read back.
			d, l, dups := rec.tally(produced)
			return d, l, dups, nil
		}
		if err != nil {
			return 0, 0, 0, fmt.Errorf("read the sink back: %w", err)
		}
		seen := make(map[int64]int, len(records))
		for _, r := range records {
			seen[r.Offset]++
		}
		for off := int64(0); off < n; off++ {
			switch c := seen[off]; {
			case c == 0:
				lost++
			default:
				delivered++
				duplicates += int64(c - 1)
			}
		}
	}
	return delivered, lost, duplicates, nil
}

func (t sinkTarget) String() string {
	if t.scheme == "file" {
		return "file://" + t.dir
	}
	return t.scheme + ":"
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
// separate processes would.
type devFleet struct {
	cfg      replica.Config
	endpoint string
	sink     *recorder
	log      *zap.Logger

	mu      sync.Mutex
	next    int
	running []*devReplica
}

type devReplica struct {
	r      *replica.Replica
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func (f *devFleet) client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{f.endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func (f *devFleet) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.running)
}

func (f *devFleet) start(ctx context.Context) error {
	cli, err := f.client()
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.next++
	cfg := f.cfg
	cfg.ReplicaID = fmt.Sprintf("dev-%d", f.next)
	f.mu.Unlock()
	r, err := replica.New(cfg, cli, f.sink, f.log)
	if err != nil {
		cli.Close()
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	d := &devReplica{r: r, cli: cli, cancel: cancel, done: make(chan struct{})}
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
	<-d.done
	d.cancel()
	d.cli.Close()
}

// stop stops replica i as SIGTERM would.
func (f *devFleet) stop(i int) {
	d := f.take(i)
	d.cancel()
	<-d.done
	d.cli.Close()
}

func (f *devFleet) stopAll() {
	for f.size() > 0 {
		f.stop(0)
	}
}
