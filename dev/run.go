package dev

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// ErrFailed is matched (errors.Is) by the error of a run whose verdict
// fails it: a record lost, a record in the sink that is not Kafka's, a
// record set aside as a dead letter or, with a postgres sink, a duplicate.
// Report.Failure says which, and the first.
var ErrFailed = errors.New("dev: the run failed")

// failedError is a failed run's error: the first violation and the seed.
type failedError struct{ msg string }

func (e *failedError) Error() string        { return e.msg }
func (e *failedError) Is(target error) bool { return target == ErrFailed }

// TimeoutError is Run's error when not everything was committed within
// Config.Timeout.
type TimeoutError struct {
	Timeout time.Duration
	// Status is the last progress line: produced, in sink, committed,
	// lag and claims.
	Status string
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("not everything committed within %s (%s)", e.Timeout, e.Status)
}

// Report is what a run did and found.
type Report struct {
	Endpoints Endpoints
	// Seed is the chaos deck's seed: Config.Seed repeats the faults' order.
	Seed    uint64
	Elapsed time.Duration
	// Produced is how many records the producer wrote.
	Produced int64
	// Replays counts the record writes that repeated an earlier write of
	// the same record: blocks replayed after a crash or a lost claim,
	// records delivered again after a reset; not duplicates in the sink.
	Replays int64
	Verdict Verdict
	// Failure is the first violation that fails the run, "" if it passed.
	Failure string
	// Faults counts each kind of fault dealt (with Chaos), Skipped the
	// slots where none could run, History the faults in order as printed.
	Faults  map[string]int
	Skipped int
	History []string
	// Zombies are the late writes of paused replicas (FaultZombie).
	Zombies LateWrites
	// Logs count the replicas' warnings and errors (with Chaos).
	Logs LogCounts
}

// Line is the report's last line: produced=N delivered=N lost=L
// duplicates=D mismatched=M dead_letters=X.
func (r *Report) Line() string { return r.Verdict.line(r.Produced) }

// Run starts the cluster, produces Messages records (dealing faults with
// Chaos), waits until everything is committed, takes the verdict and
// stops the cluster; with Hold, after Hold returns. The report is returned
// whenever a verdict was taken. Its error matches ErrFailed (errors.Is)
// when the verdict fails the run; it is a *TimeoutError past Timeout,
// ctx.Err() itself when ctx ends first, or else what kept the cluster
// from running.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg}
	return r.run(ctx)
}

// run is one Run's state.
type run struct {
	cfg   Config
	fleet *fleet
	coord *coordinator.Coordinator
	prod  *producer
	rec   *recorder
}

func (r *run) run(ctx context.Context) (*Report, error) {
	cfg := &r.cfg
	stderr := cfg.Err
	deadline, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	started := time.Now()

	dir, kept := cfg.Dir, ""
	if dir == "" {
		tmp, err := os.MkdirTemp("", "offsetkeeper-dev-")
		if err != nil {
			return nil, fmt.Errorf("dev: temporary folder: %w", err)
		}
		defer func() {
			if kept != "" {
				_ = os.RemoveAll(filepath.Join(tmp, "etcd"))
				fmt.Fprintf(stderr, "kept:    %s (--keep)\n", kept)
				return
			}
			_ = os.RemoveAll(tmp)
		}()
		dir = tmp
	}
	etcdDir := filepath.Join(dir, "etcd")
	if err := os.Mkdir(etcdDir, 0o700); err != nil {
		return nil, fmt.Errorf("dev: etcd folder: %w", err)
	}
	if cfg.Sink.Open == nil {
		sinkDir := filepath.Join(dir, "sink")
		if err := os.Mkdir(sinkDir, 0o755); err != nil {
			return nil, fmt.Errorf("dev: sink folder: %w", err)
		}
		if cfg.Keep {
			kept = "file://" + sinkDir
		}
		cfg.Sink = Sink{URL: "file://" + sinkDir, Open: func(context.Context) (sinks.Sink, error) {
			s, err := file.New(sinkDir)
			if err != nil {
				return nil, fmt.Errorf("open sink file://%s: %w", sinkDir, err)
			}
			return s, nil
		}}
	}
	etcd, endpoints, closeEtcd, err := r.etcd(etcdDir)
	if err != nil {
		return nil, err
	}
	defer closeEtcd()
	brokers, closeKafka, err := r.kafka(deadline)
	if err != nil {
		return nil, err
	}
	defer closeKafka()
	rep := &Report{Endpoints: Endpoints{Etcd: endpoints, Brokers: brokers, Sink: cfg.Sink.shown()}}
	enc, err := newEncoder(cfg.ValueFormat)
	if err != nil {
		return nil, err
	}
	var formats replica.Formats
	if cfg.ValueFormat.Registered() {
		reg, err := startRegistry(cfg.Topic, cfg.ValueFormat)
		if err != nil {
			return nil, err
		}
		defer reg.Close()
		rep.Endpoints.Registry = reg.url
		formats = replica.Formats{Value: cfg.ValueFormat, Registry: replica.SchemaRegistry{URL: reg.url}}
	}
	topicNote := ""
	if cfg.OwnTopic {
		topicNote = "; this run's own: the sink outlives it"
	}
	// The endpoints first: opening the sink may wait for its server.
	fmt.Fprintf(stderr, "etcd:    %s\nkafka:   %s\n", strings.Join(endpoints, ","), strings.Join(brokers, ","))
	if reg := rep.Endpoints.Registry; reg != "" {
		fmt.Fprintf(stderr, "registry: %s (values in %s, schema id %d, subject %s-value)\n", reg, cfg.ValueFormat, SchemaID, cfg.Topic)
	}
	fmt.Fprintf(stderr, "topic:   %s (%d partitions%s)\ngroup:   %s\nsink:    %s\n",
		cfg.Topic, cfg.Partitions, topicNote, cfg.Group, cfg.Sink.shown())
	sink, err := cfg.Sink.Open(ctx)
	if err != nil {
		return nil, err
	}
	r.rec = newRecorder(sink)
	defer r.rec.Close()
	if cfg.Ready != nil {
		cfg.Ready(rep.Endpoints)
	}

	expect := newExpect(3 * cfg.LeaseTTL)
	rcfg := replica.Config{
		Group:         cfg.Group,
		Topics:        []string{cfg.Topic},
		Kafka:         kafkaconf.Config{Brokers: brokers, FetchMaxWait: 200 * time.Millisecond},
		LeaseTTL:      cfg.LeaseTTL,
		FlushInterval: 200 * time.Millisecond,
		Version:       cfg.Version,
		Formats:       formats,
	}
	r.fleet = &fleet{cfg: rcfg, members: endpoints, sink: r.rec, log: cfg.Logger, down: map[int]bool{}}
	if cfg.Chaos != nil {
		r.fleet.expect = expect
	}
	defer r.fleet.stopAll()
	for range cfg.Replicas {
		if err := r.fleet.start(ctx); err != nil {
			return nil, err
		}
	}
	watcher, err := r.fleet.client()
	if err != nil {
		return nil, err
	}
	defer watcher.Close()
	if r.coord, err = coordinator.New(watcher, cfg.Group); err != nil {
		return nil, err
	}

	rep.Seed = cfg.Seed
	if rep.Seed == 0 {
		rep.Seed = rand.Uint64()
	}
	var ch *chaos
	every := DefaultChaosEvery
	if cfg.Chaos != nil {
		every = cfg.Chaos.Every
		ch = newChaos(cfg.Chaos.Faults, rep.Seed, r.fleet, etcd, r.coord, cfg.Topic, cfg.LeaseTTL, stderr)
		ch.expect = expect
		// The operator's faults go through the library the CLI calls.
		ch.kafka = admin.NewKafka(kafkaconf.Config{Brokers: brokers, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second}, cfg.Topic)
		defer ch.kafka.Close()
		defer ch.finish()
	}

	r.prod = newProducer(brokers, cfg.Topic, cfg.Partitions, enc)
	prodDone := make(chan error, 1)
	rate := cfg.Rate
	if rate == 0 && cfg.Duration > 0 {
		// Faults need records in flight: spread them over the duration.
		rate = max(1, int((int64(cfg.Messages)*int64(time.Second)+int64(cfg.Duration)-1)/int64(cfg.Duration)))
	}
	if ch != nil {
		fmt.Fprintf(stderr, "chaos:   seed %d, faults %s, one every %s for %s, producing %d records/s\n",
			rep.Seed, strings.Join(cfg.Chaos.Faults, ","), every, cfg.Duration, rate)
	}
	go func() { prodDone <- r.prod.run(deadline, cfg.Messages, rate) }()
	producing := true

	ticker := time.NewTicker(every)
	defer ticker.Stop()
	// The slots are the ticks before the duration ends, counted: a tick
	// that comes with its end, by the clock, would deal a fault undone at
	// once, or not, as the timers race.
	slots := int((cfg.Duration - 1) / every)
	faultsOver := time.After(cfg.Duration)
	faulting := ch != nil
	progress := time.NewTicker(time.Second)
	defer progress.Stop()

	for {
		select {
		case <-deadline.Done():
			if ctx.Err() != nil {
				return nil, ctx.Err() // interrupted
			}
			return nil, &TimeoutError{Timeout: cfg.Timeout, Status: r.status(ctx)}
		case err := <-prodDone:
			producing = false
			if err != nil {
				return nil, err
			}
		case <-faultsOver:
			if faulting {
				faulting = false
				ch.finish()
				fmt.Fprintf(stderr, "chaos:   faults over after %s; waiting for everything committed\n", cfg.Duration)
			}
		case <-ticker.C:
			if !faulting || slots == 0 {
				continue
			}
			slots--
			if err := ch.tick(ctx); err != nil {
				return nil, err
			}
		case <-progress.C:
			line, done := r.progress(ctx, producing || faulting)
			fmt.Fprintln(stderr, line)
			if !done {
				continue
			}
			if cfg.Hold == nil {
				r.fleet.stopAll()
			}
			return r.report(ctx, rep, watcher, brokers, ch, expect, started)
		}
	}
}

// report takes the verdict, prints the report and fails the run on a
// violation; with Hold, a passing run holds the cluster until Hold
// returns.
func (r *run) report(ctx context.Context, rep *Report, cli *clientv3.Client, brokers []string, ch *chaos, expect *expect, started time.Time) (*Report, error) {
	cfg, stderr := r.cfg, r.cfg.Err
	c := newChecker(cfg.Sinks, cfg.Sink, cfg.Group, cfg.Topic)
	v, err := c.verdict(ctx, cli, brokers, r.prod.counts(), r.rec)
	if err != nil {
		return nil, err
	}
	rep.Verdict, rep.Produced, rep.Replays = v, r.prod.total(), r.rec.replayed()
	rep.Elapsed = time.Since(started)
	rep.Zombies = r.fleet.late.counts()
	fmt.Fprintf(stderr, "elapsed=%s seed=%d replays=%d (record writes that repeated an earlier one: blocks replayed after faults, records re-delivered after resets)\n",
		rep.Elapsed.Round(time.Millisecond), rep.Seed, rep.Replays)
	if ch != nil {
		rep.Faults, rep.Skipped, rep.History = ch.counted()
		rep.Logs = expect.counts()
		fmt.Fprintf(stderr, "faults:  %s\n", ch.summary())
		if slices.Contains(cfg.Chaos.Faults, FaultZombie) {
			fmt.Fprintf(stderr, "zombies: %s (writes a paused replica resumed after losing its claim)\n", rep.Zombies)
		}
		fmt.Fprintf(stderr, "logs:    %s\n", rep.Logs)
	}
	fmt.Fprintf(stderr, "verdict: %s\n", v.By)
	fmt.Fprintln(cfg.Out, rep.Line())
	if rep.Failure = v.failure(c.exactlyOnce()); rep.Failure != "" {
		reportFailure(stderr, rep.Failure, rep.Seed, rep.History)
		return rep, &failedError{msg: fmt.Sprintf("%s (seed %d)", rep.Failure, rep.Seed)}
	}
	if cfg.Hold != nil {
		cfg.Hold(ctx, rep)
	}
	return rep, nil
}

// progress is one progress line; done is true when everything produced is
// committed.
func (r *run) progress(ctx context.Context, producing bool) (string, bool) {
	line := r.status(ctx)
	if producing {
		return line, false
	}
	committed, err := committedAll(ctx, r.coord, r.cfg.Topic, r.prod.counts())
	return line, err == nil && committed
}

// status is the progress line: produced, in sink, committed, lag and
// each replica's claims.
func (r *run) status(ctx context.Context) string {
	var committed int64
	claims := map[string]int{}
	if snap, err := r.coord.Snapshot(ctx); err == nil {
		for _, off := range snap.Offsets {
			committed += off.Next
		}
		for _, c := range snap.Claims {
			claims[c.Replica]++
		}
	}
	var per []string
	for _, id := range r.fleet.ids() {
		per = append(per, fmt.Sprintf("%s:%d", id, claims[id]))
	}
	produced := r.prod.total()
	return fmt.Sprintf("produced=%d in_sink=%d committed=%d lag=%d claims=%s",
		produced, r.rec.distinct(), committed, produced-committed, strings.Join(per, ","))
}

// committedAll reports whether every partition's committed offset reached
// what was produced to it.
func committedAll(ctx context.Context, c *coordinator.Coordinator, topic string, produced map[int]int64) (bool, error) {
	snap, err := c.Snapshot(ctx)
	if err != nil {
		return false, err
	}
	for p, n := range produced {
		if n > 0 && snap.Offsets[sinks.Partition{Topic: topic, Partition: p}].Next < n {
			return false, nil
		}
	}
	return true, nil
}
