package dev

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// The faults of Chaos, in the order the report counts them.
const (
	// FaultKill crashes a replica (no block finished, nothing released,
	// the lease left to expire) and starts a fresh one.
	FaultKill = "kill"
	// FaultZombie pauses a replica in the middle of a block (its sink
	// write held, then its etcd traffic) for twice the lease TTL, then
	// resumes it: it must find itself fenced, its late write refused or
	// harmless.
	FaultZombie = "zombie"
	// FaultLeader crashes the etcd leader (of three members) and restarts
	// it a lease TTL later.
	FaultLeader = "leader"
	// FaultEtcdCut cuts a replica off from etcd for 1.5 times the TTL.
	FaultEtcdCut = "etcd-cut"
	// FaultKafkaCut cuts a replica off from Kafka for a TTL.
	FaultKafkaCut = "kafka-cut"
	// FaultReset resets a partition's offset live to an earlier one, as
	// `offsets reset` does: records delivered again.
	FaultReset = "reset"
	// FaultRelease releases a claimed partition, as `claims release` does.
	FaultRelease = "release"
	// FaultDrain drains a replica, as `replicas drain` does, undone a TTL
	// later.
	FaultDrain = "drain"
)

var allFaults = []string{FaultKill, FaultZombie, FaultLeader, FaultEtcdCut, FaultKafkaCut, FaultReset, FaultRelease, FaultDrain}

// Faults are the kinds of fault, in the order the report counts them.
func Faults() []string { return slices.Clone(allFaults) }

// ParseFaults parses a list of faults: "all" or a comma list of Faults,
// in any order, returned once each in Faults' order (so that the deck, and
// so a seed, do not depend on how the list was written).
func ParseFaults(s string) ([]string, error) {
	on := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "all":
			for _, a := range allFaults {
				on[a] = true
			}
		case slices.Contains(allFaults, f):
			on[f] = true
		default:
			return nil, fmt.Errorf("unknown fault %q; want all or a comma list of %s", f, strings.Join(allFaults, ", "))
		}
	}
	var out []string
	for _, f := range allFaults {
		if on[f] {
			out = append(out, f)
		}
	}
	return out, nil
}

// chaos injects dev's faults. Faults are dealt from a deck: a seeded
// shuffle of the enabled kinds, dealt one per tick and shuffled again when
// empty, so that every kind comes up in every round and the seed repeats the
// order. A fault that cannot run now (a second etcd leader down, every
// replica held) waits in the deck for a later tick; a tick where none can
// is a skipped slot, printed and counted. Faults that last (zombie, leader,
// etcd-cut, kafka-cut, drain) are undone by a goroutine of their own, which
// finish ends early and waits for. A lasting fault holds one replica, and a
// replica one lasting fault at a time, so that faults of different
// replicas overlap: one replica at a time would leave slots with nothing
// to deal while a zombie's pause (twice the TTL) runs.
type chaos struct {
	faults []string
	rng    *rand.Rand
	fleet  *fleet
	etcd   *etcdCluster
	coord  *coordinator.Coordinator
	kafka  *admin.Kafka // the log bounds a reset plans with
	topic  string
	ttl    time.Duration
	out    io.Writer
	start  time.Time
	// expect is told which replicas each fault touches, so that their
	// warnings read as the fault's (nil: not told).
	expect *expect

	deck   []string
	stop   chan struct{} // closed by finish: undo every fault now
	undone sync.WaitGroup

	mu         sync.Mutex
	history    []string        // faults in order, as printed
	counts     map[string]int  // faults done, by kind
	skipped    int             // ticks where no fault could run
	held       map[string]bool // replicas under a lasting fault
	leaderDown bool
}

func newChaos(faults []string, seed uint64, fleet *fleet, etcd *etcdCluster, coord *coordinator.Coordinator, topic string, ttl time.Duration, out io.Writer) *chaos {
	return &chaos{
		faults: faults,
		rng:    rand.New(rand.NewPCG(seed, seed)),
		fleet:  fleet, etcd: etcd, coord: coord, topic: topic, ttl: ttl, out: out,
		start:  time.Now(),
		stop:   make(chan struct{}),
		counts: map[string]int{},
		held:   map[string]bool{},
	}
}

// tick deals the next fault that can run now and runs it.
func (c *chaos) tick(ctx context.Context) error {
	if len(c.deck) == 0 {
		c.deck = slices.Clone(c.faults)
		c.rng.Shuffle(len(c.deck), func(i, j int) { c.deck[i], c.deck[j] = c.deck[j], c.deck[i] })
	}
	for i, f := range c.deck {
		target, ok, err := c.inject(ctx, f)
		if err != nil {
			return fmt.Errorf("fault %s: %w", f, err)
		}
		if !ok {
			continue
		}
		c.deck = slices.Delete(c.deck, i, i+1)
		c.mu.Lock()
		line := fmt.Sprintf("%6.1fs %-9s %s", time.Since(c.start).Seconds(), f, target)
		c.history = append(c.history, strings.TrimSpace(line))
		c.counts[f]++
		c.mu.Unlock()
		fmt.Fprintln(c.out, "fault "+line)
		return nil
	}
	c.mu.Lock()
	c.skipped++
	c.mu.Unlock()
	fmt.Fprintf(c.out, "fault %6.1fs skipped: none of %s can run now\n", time.Since(c.start).Seconds(), strings.Join(c.deck, ", "))
	return nil
}

// inject starts fault f; ok is false when it cannot run now. An error is
// one dev cannot go on after (a replica that does not start).
func (c *chaos) inject(ctx context.Context, f string) (target string, ok bool, err error) {
	switch f {
	case FaultKill:
		i, d := c.pick()
		if d == nil {
			return "", false, nil
		}
		id := d.r.ID()
		end := c.expect.begin(id, "kill "+id)
		c.fleet.crash(i)
		end()
		if err := c.fleet.start(ctx); err != nil {
			return "", false, err
		}
		return id, true, nil
	case FaultZombie:
		return c.hold(f, 2*c.ttl, func(d *node) (func(), string) {
			d.pause(c.ttl)
			return d.resume, "paused"
		})
	case FaultEtcdCut:
		// Past the lease, so that the replica loses it; shorter than a
		// zombie's pause, to leave the other faults time.
		return c.hold(f, c.ttl*3/2, func(d *node) (func(), string) {
			n := c.fleet.cutEtcd(d, true)
			return func() { c.fleet.cutEtcd(d, false) }, fmt.Sprintf("%d connections cut", n)
		})
	case FaultKafkaCut:
		return c.hold(f, c.ttl, func(d *node) (func(), string) {
			n := d.kafka.Cut()
			return d.kafka.Restore, fmt.Sprintf("%d connections cut", n)
		})
	case FaultDrain:
		return c.hold(f, c.ttl, func(d *node) (func(), string) {
			id := d.r.ID()
			// As `replicas drain --force`: the deck may drain the last
			// replica that reads.
			if err := c.admin(func(ctx context.Context) error { return admin.Drain(ctx, c.coord, id, false, true) }); err != nil {
				return nil, ""
			}
			return func() {
				// Gone (killed) or rejoined (a lost session) is undrained.
				_ = c.admin(func(ctx context.Context) error { return admin.Drain(ctx, c.coord, id, true, true) })
			}, "draining"
		})
	case FaultLeader:
		return c.stopLeader()
	case FaultReset:
		return c.reset()
	case FaultRelease:
		return c.release()
	}
	return "", false, fmt.Errorf("unknown fault %q", f)
}

// pick is a random running replica not under a lasting fault.
func (c *chaos) pick() (int, *node) {
	c.mu.Lock()
	held := maps.Clone(c.held)
	c.mu.Unlock()
	c.fleet.mu.Lock()
	defer c.fleet.mu.Unlock()
	var free []int
	for i, d := range c.fleet.running {
		if !held[d.r.ID()] {
			free = append(free, i)
		}
	}
	if len(free) == 0 {
		return 0, nil
	}
	i := free[c.rng.IntN(len(free))]
	return i, c.fleet.running[i]
}

// hold runs lasting fault f on a replica under no other: do starts it
// and returns its undo (nil: it did not start), run after d or at finish,
// and a note for the fault's line.
func (c *chaos) hold(f string, d time.Duration, do func(*node) (func(), string)) (string, bool, error) {
	_, r := c.pick()
	if r == nil {
		return "", false, nil
	}
	id := r.r.ID()
	end := c.expect.begin(id, f+" "+id)
	undo, note := do(r)
	if undo == nil {
		end()
		return "", false, nil
	}
	c.mu.Lock()
	c.held[id] = true
	c.mu.Unlock()
	c.later(d, func() {
		undo()
		end()
		c.mu.Lock()
		delete(c.held, id)
		c.mu.Unlock()
	})
	return fmt.Sprintf("%s for %s (%s)", id, d, note), true, nil
}

// later runs undo after d, or at once when finish is called.
func (c *chaos) later(d time.Duration, undo func()) {
	c.undone.Add(1)
	go func() {
		defer c.undone.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.stop:
		}
		undo()
	}()
}

// stopLeader crashes the etcd leader, and restarts it after a TTL. The
// replicas' proxies to it are cut too: an embedded member drains its
// streams for seconds when closed, where a crashed one would not.
func (c *chaos) stopLeader() (string, bool, error) {
	c.mu.Lock()
	down := c.leaderDown
	c.mu.Unlock()
	if down || c.etcd.Members() < 3 {
		return "", false, nil
	}
	l := c.etcd.Leader()
	if l < 0 {
		return "", false, nil // electing: try later
	}
	c.mu.Lock()
	c.leaderDown = true
	c.mu.Unlock()
	// Every replica talks to the leader: each may see its requests fail.
	end := c.expect.begin(everyReplica, fmt.Sprintf("leader (etcd member %d)", l))
	c.fleet.memberDown(l)
	c.etcd.stop(l)
	c.later(c.ttl, func() {
		defer end()
		ctx, cancel := context.WithTimeout(context.Background(), etcdReadyTimeout)
		defer cancel()
		if err := c.etcd.restart(ctx, l); err != nil {
			fmt.Fprintf(c.out, "fault leader: restart etcd member %d: %v\n", l, err)
		}
		c.fleet.memberUp(l)
		c.mu.Lock()
		c.leaderDown = false
		c.mu.Unlock()
	})
	return fmt.Sprintf("etcd member %d for %s", l, c.ttl), true, nil
}

// reset is the operator's live `offsets reset --to-offset` of a random
// partition to an offset up to 200 records before its committed one,
// planned and applied by the library the CLI calls (admin.Reset).
func (c *chaos) reset() (string, bool, error) {
	snap, err := c.snapshot()
	if err != nil {
		return "", false, nil
	}
	var parts []sinks.Partition
	for p, o := range snap.Offsets {
		if p.Topic == c.topic && o.Next > 0 {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return "", false, nil
	}
	sortPartitions(parts)
	p := parts[c.rng.IntN(len(parts))]
	seen := snap.Offsets[p]
	to := max(0, seen.Next-1-c.rng.Int64N(200))
	r := admin.Reset{Target: admin.Target{Kind: admin.ToOffset, Offset: to},
		Topics: []admin.TopicScope{{Topic: p.Topic, Partitions: []int{p.Partition}}}}
	if err := c.admin(func(ctx context.Context) error {
		plan, err := r.Plan(ctx, c.coord.Group(), snap, c.kafka, func(string) {})
		if err != nil {
			return err
		}
		return plan.Apply(ctx, c.coord, 5*time.Second, func(err error) error { return err })
	}); err != nil {
		return "", false, nil // a conflict or etcd or Kafka away: another tick
	}
	return fmt.Sprintf("%s from %d to %d", p, seen.Next, to), true, nil
}

// release is the operator's `claims release` of a random claimed partition;
// the request is cleared once served (or at finish), as the CLI's --wait
// does.
func (c *chaos) release() (string, bool, error) {
	snap, err := c.snapshot()
	if err != nil {
		return "", false, nil
	}
	var parts []sinks.Partition
	for p := range snap.Claims {
		if p.Topic == c.topic {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return "", false, nil
	}
	sortPartitions(parts)
	p := parts[c.rng.IntN(len(parts))]
	var h admin.Handover
	if err := c.admin(func(ctx context.Context) error {
		var err error
		h, err = admin.Release(ctx, c.coord, snap, p)
		return err
	}); err != nil {
		return "", false, nil
	}
	c.undone.Add(1)
	go func() {
		defer c.undone.Done()
		// As `claims release --wait`: until handed over, or finish.
		ctx, cancel := context.WithTimeout(context.Background(), 10*c.ttl)
		defer cancel()
		go func() {
			select {
			case <-c.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		_ = h.Await(ctx, c.coord, 5*time.Second)
	}()
	return fmt.Sprintf("%s (%s, epoch %d)", p, h.From, h.FromEpoch), true, nil
}

func (c *chaos) snapshot() (*coordinator.Snapshot, error) {
	var snap *coordinator.Snapshot
	err := c.admin(func(ctx context.Context) error {
		var err error
		snap, err = c.coord.Snapshot(ctx)
		return err
	})
	return snap, err
}

// admin runs one operator call, bounded as the CLI's --etcd-timeout would.
func (c *chaos) admin(call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return call(ctx)
}

// finish undoes every lasting fault and waits until they are undone.
func (c *chaos) finish() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.undone.Wait()
}

// summary is the count of each enabled fault, and of the slots skipped:
// "kill=2 zombie=1 ... skipped=0".
func (c *chaos) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, f := range allFaults {
		if slices.Contains(c.faults, f) {
			parts = append(parts, fmt.Sprintf("%s=%d", f, c.counts[f]))
		}
	}
	parts = append(parts, fmt.Sprintf("skipped=%d", c.skipped))
	return strings.Join(parts, " ")
}

// counted are the faults dealt so far by kind, the slots skipped and the
// faults in order, one a line.
func (c *chaos) counted() (map[string]int, int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts), c.skipped, slices.Clone(c.history)
}

// sortPartitions sorts ps by topic and partition, so that a seed picks the
// same partition from one run to the next.
func sortPartitions(ps []sinks.Partition) {
	slices.SortFunc(ps, sinks.Partition.Compare)
}
