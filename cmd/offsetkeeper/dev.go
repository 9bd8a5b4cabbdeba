package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/replica"
)

// devOptions is `offsetkeeper dev`.
type devOptions struct {
	logs       logFlags
	replicas   int
	partitions int
	messages   int
	topic      string
	group      string
	sink       string
	chaos      bool
	timeout    time.Duration
	leaseTTL   time.Duration
	spread     time.Duration
	seed       uint64

	target sinkTarget
}

func newDevCommand() *cobra.Command {
	o := &devOptions{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a whole local cluster in one process and report what was delivered",
		Long: `Start an embedded etcd, an in-process Kafka-protocol broker (kfake) with one
topic, a producer and --replicas replicas of one group, all on loopback; wait
until every produced record is in the sink and every offset is committed, then
print a report: produced, delivered, lost, duplicates.

With --chaos, replicas are crashed (stopped without finishing their block,
releasing claims or revoking their lease) and stopped gracefully at random
while records flow, and new ones are started: the report shows that nothing
was lost. The exit status is 1 if anything was lost or the run timed out.

Nothing here is needed in production: 'run' talks to real etcd and Kafka.`,
		Example: `  offsetkeeper dev
  offsetkeeper dev --chaos --messages 50000
  offsetkeeper dev --sink stdout: --messages 10 --replicas 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindEnv(cmd); err != nil {
				return err
			}
			if err := o.validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return o.run(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.replicas, "replicas", 3, "replicas to run")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of the topic")
	fs.IntVar(&o.messages, "messages", 10000, "records to produce")
	fs.StringVar(&o.topic, "topic", "events", "topic name")
	fs.StringVar(&o.group, "group", "dev", "group name")
	fs.StringVar(&o.sink, "sink", "", "where records go: "+sinkURLHelp+" (default: file:// in a new temporary directory)")
	fs.BoolVar(&o.chaos, "chaos", false, "crash and restart replicas at random while records flow")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up (exit 1) if not everything is delivered by then")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 2*time.Second, "replicas' lease TTL: a crashed replica's partitions move after this")
	fs.DurationVar(&o.spread, "produce-over", 5*time.Second, "spread producing over this long, so replicas work while records arrive")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the chaos schedule (0: random)")
	o.logs.register(fs, "console")
	if f := fs.Lookup("log-level"); f != nil {
		f.DefValue = "warn"
		_ = f.Value.Set("warn")
	}
	return cmd
}

func (o *devOptions) validate() error {
	switch {
	case o.replicas < 1 || o.replicas > 100:
		return usagef("--replicas %d: want 1 to 100", o.replicas)
	case o.partitions < 1 || o.partitions > 10000:
		return usagef("--partitions %d: want 1 to 10000", o.partitions)
	case o.messages < 0:
		return usagef("--messages %d: want 0 or more", o.messages)
	case o.timeout <= 0:
		return usagef("--timeout %s: want a positive duration", o.timeout)
	}
	if err := coordinator.ValidTTL(o.leaseTTL); err != nil {
		return usage(fmt.Errorf("--lease-ttl: %w", err))
	}
	if err := coordinator.ValidGroup(o.group); err != nil {
		return usage(fmt.Errorf("--group: %w", err))
	}
	if o.sink != "" {
		t, err := parseSink(o.sink)
		if err != nil {
			return err
		}
		o.target = t
	}
	if _, err := o.logs.newLogger(io.Discard); err != nil {
		return err
	}
	return nil
}

func (o *devOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	log, _ := o.logs.newLogger(stderr)
	defer func() { _ = log.Sync() }()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
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
	kafka, brokers, err := startDevKafka(o.topic, o.partitions)
	if err != nil {
		return err
	}
	defer kafka.Close()
	sink, err := o.target.open(stdout)
	if err != nil {
		return err
	}
	rec := newRecorder(sink)
	defer rec.Close()
	fmt.Fprintf(stderr, "etcd %s, kafka %v, topic %s (%d partitions), group %s, sink %s\n",
		endpoint, brokers, o.topic, o.partitions, o.group, o.target)

	cfg := replica.Config{
		Group:         o.group,
		Topics:        []string{o.topic},
		Fetch:         replica.FetchConfig{Brokers: brokers, MaxWait: 200 * time.Millisecond},
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

	produced := map[int]int64{}
	var produceErr error
	var producing sync.WaitGroup
	producing.Add(1)
	go func() {
		defer producing.Done()
		produced, produceErr = produceDev(ctx, brokers, o.topic, o.partitions, o.messages, o.spread)
	}()

	seed := o.seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	chaos := time.NewTicker(700 * time.Millisecond)
	defer chaos.Stop()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	prodDone := make(chan struct{})
	go func() { producing.Wait(); close(prodDone) }()
	chaosOn := o.chaos
	var crashes, stops int

	watcher, err := fleet.client()
	if err != nil {
		return err
	}
	defer watcher.Close()
	coord, _ := coordinator.New(watcher, o.group)

	for {
		select {
		case <-ctx.Done():
			producing.Wait()
			delivered, lost, dups := rec.tally(produced)
			fmt.Fprintf(stdout, "produced=%d delivered=%d lost=%d duplicates=%d crashes=%d stops=%d elapsed=%s result=TIMEOUT\n",
				sum(produced), delivered, lost, dups, crashes, stops, time.Since(started).Round(time.Millisecond))
			return fmt.Errorf("not everything delivered and committed within --timeout %s", o.timeout)
		case <-prodDone:
			prodDone = nil
			chaosOn = false // let the group settle
			if produceErr != nil {
				return produceErr
			}
		case <-chaos.C:
			if !chaosOn {
				continue
			}
			switch n := fleet.size(); {
			case n > 1 && rng.IntN(2) == 0:
				fleet.crash(rng.IntN(n))
				crashes++
			case n > 1:
				fleet.stop(rng.IntN(n))
				stops++
			}
			for fleet.size() < o.replicas {
				if err := fleet.start(ctx); err != nil {
					return err
				}
			}
		case <-progress.C:
			if prodDone != nil {
				continue
			}
			delivered, lost, dups := rec.tally(produced)
			committed, err := committedAll(ctx, coord, produced)
			fmt.Fprintf(stderr, "delivered %d/%d, duplicates %d, replicas %d\n", delivered, sum(produced), dups, fleet.size())
			if err == nil && lost == 0 && committed {
				fleet.stopAll()
				fmt.Fprintf(stdout, "produced=%d delivered=%d lost=%d duplicates=%d crashes=%d stops=%d elapsed=%s seed=%d result=OK\n",
					sum(produced), delivered, lost, dups, crashes, stops, time.Since(started).Round(time.Millisecond), seed)
				return nil
			}
		}
	}
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
func committedAll(ctx context.Context, c *coordinator.Coordinator, produced map[int]int64) (bool, error) {
	snap, err := c.Snapshot(ctx)
	if err != nil {
		return false, err
	}
	for p, n := range produced {
		for topicPart, o := range snap.Offsets {
			if topicPart.Partition == p && o.Next < n {
				return false, nil
			}
		}
		if n > 0 {
			found := false
			for topicPart := range snap.Offsets {
				found = found || topicPart.Partition == p
			}
			if !found {
				return false, nil
			}
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
