package clickhouse

// Several shards: each partition's rows on one shard, by a stable rule.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// shardList reads shards=: the host lists of the shards after the URL's
// own (shard 0).
func (c *config) shardList() ([][]string, error) {
	if c.shardsRaw == "" {
		if c.pinRaw != "" {
			return nil, fmt.Errorf("%w: %s= pins partitions to shards: it needs %s=", ErrURL, paramPin, paramShards)
		}
		return nil, nil
	}
	var out [][]string
	for i, shard := range strings.Split(c.shardsRaw, "|") {
		var hosts []string
		for _, h := range strings.Split(shard, ",") {
			if strings.TrimSpace(h) == "" {
				return nil, fmt.Errorf("%w: %s=%q: shard %d names no host; want HOST[:PORT][,HOST[:PORT]...] for each shard, "+
					"shards separated by |", ErrURL, paramShards, c.shardsRaw, i+1)
			}
			addr, err := c.hostPort(strings.TrimSpace(h))
			if err != nil {
				return nil, err
			}
			hosts = append(hosts, addr)
		}
		out = append(out, hosts)
	}
	if _, err := c.pins(len(out) + 1); err != nil {
		return nil, err
	}
	return out, nil
}

// pins reads shard_of=: partitions pinned to a shard of n.
func (c *config) pins(n int) (map[int]int, error) {
	out := map[int]int{}
	if c.pinRaw == "" {
		return out, nil
	}
	for _, pair := range strings.Split(c.pinRaw, ",") {
		p, sh, ok := strings.Cut(strings.TrimSpace(pair), ":")
		part, perr := strconv.Atoi(p)
		shard, serr := strconv.Atoi(sh)
		if !ok || perr != nil || serr != nil || part < 0 || shard < 0 || shard >= n {
			return nil, fmt.Errorf("%w: %s=%q: %q is not PARTITION:SHARD with a shard from 0 to %d; want pairs such as 3:0,7:1",
				ErrURL, paramPin, c.pinRaw, pair, n-1)
		}
		if _, dup := out[part]; dup {
			return nil, fmt.Errorf("%w: %s=%q: partition %d pinned twice", ErrURL, paramPin, c.pinRaw, part)
		}
		out[part] = shard
	}
	return out, nil
}

// Sharded writes each partition's blocks to one of several shards, each a
// Sink of its own (its own servers, table, deduplication and checks):
// shard partition mod N, unless shard_of= pins the partition elsewhere.
// A partition's writes, retries, landed checks and resume all go to its
// shard, so each shard's table holds whole partitions and a Distributed
// table over the shards reads the whole. The rule is the partition number
// alone, the same for every topic, so that it is stable and can be told
// at a glance; changing the shards moves partitions (see docs).
type Sharded struct {
	shards []*Sink
	hosts  []string
	pins   map[int]int
}

var (
	_ sinks.Sink               = (*Sharded)(nil)
	_ sinks.BatchWriter        = (*Sharded)(nil)
	_ sinks.Resumer            = (*Sharded)(nil)
	_ sinks.IntentKeeper       = (*Sharded)(nil)
	_ sinks.RoundInserter      = (*Sharded)(nil)
	_ sinks.RoundPacer         = (*Sharded)(nil)
	_ sinks.Pinger             = (*Sharded)(nil)
	_ sinks.DeadLetterCounter  = (*Sharded)(nil)
	_ sinks.DestinationClaimer = (*Sharded)(nil)
)

// IsSharded reports whether url names more than one shard (shards=).
func IsSharded(raw string) bool {
	c, err := parseURL(raw)
	return err == nil && c.shardsRaw != ""
}

// NewSharded opens a sink per shard of url (shards=), each as New opens
// one (its tables checked, made and claimed on that shard), and closes
// those it opened if one fails.
func NewSharded(ctx context.Context, raw string, opts ...Option) (*Sharded, error) {
	c, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	others, err := c.shardList()
	if err != nil {
		return nil, err
	}
	pins, err := c.pins(len(others) + 1)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrURL, err)
	}
	q := u.Query()
	q.Del(paramShards)
	q.Del(paramPin)
	u.RawQuery = q.Encode()
	s := &Sharded{pins: pins}
	for i, hosts := range append([][]string{c.addrs}, others...) {
		su := *u
		su.Host = strings.Join(hosts, ",")
		one, err := New(ctx, su.String(), opts...)
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("shard %d (%s): %w", i, su.Host, err)
		}
		s.shards = append(s.shards, one)
		s.hosts = append(s.hosts, su.Host)
	}
	log := s.shards[0].cfg.log
	log.Info("clickhouse shards: each partition's rows on shard PARTITION mod shards, unless pinned (shard_of=)",
		zap.Int("shards", len(s.shards)), zap.Strings("hosts", s.hosts), zap.Any("pinned", pins))
	return s, nil
}

// ShardOf is the shard index of a partition number.
func (s *Sharded) ShardOf(partition int) int {
	if i, ok := s.pins[partition]; ok {
		return i
	}
	return partition % len(s.shards)
}

func (s *Sharded) of(partition int) *Sink { return s.shards[s.ShardOf(partition)] }

// Write writes b to its partition's shard.
func (s *Sharded) Write(ctx context.Context, b *sinks.Block) error {
	if b == nil {
		return errors.New("write: nil block")
	}
	return s.of(b.Partition).Write(ctx, b)
}

// WriteBlocks writes each shard's blocks in one call of its sink, the
// shards side by side.
func (s *Sharded) WriteBlocks(ctx context.Context, blocks []*sinks.Block) []error {
	errs := make([]error, len(blocks))
	byShard := map[int][]int{}
	for i, b := range blocks {
		if b == nil {
			errs[i] = errors.New("write: nil block")
			continue
		}
		sh := s.ShardOf(b.Partition)
		byShard[sh] = append(byShard[sh], i)
	}
	var wg sync.WaitGroup
	for sh, idx := range byShard {
		wg.Go(func() {
			bs := make([]*sinks.Block, len(idx))
			for j, i := range idx {
				bs[j] = blocks[i]
			}
			for j, err := range s.shards[sh].WriteBlocks(ctx, bs) {
				if err != nil {
					err = fmt.Errorf("shard %d (%s): %w", sh, s.hosts[sh], err)
				}
				errs[idx[j]] = err
			}
		})
	}
	wg.Wait()
	return errs
}

// Resume reads the partition's shard.
func (s *Sharded) Resume(ctx context.Context, topic string, partition int) (int64, int64, bool, error) {
	return s.of(partition).Resume(ctx, topic, partition)
}

// NeedsIntents is true, as for one shard.
func (s *Sharded) NeedsIntents() bool { return true }

// InsertsRounds is true when every shard inserts rounds.
func (s *Sharded) InsertsRounds() bool {
	for _, sh := range s.shards {
		if !sh.InsertsRounds() {
			return false
		}
	}
	return true
}

// RoundInterval is the shards' insert_interval (one URL's, so the same).
func (s *Sharded) RoundInterval() time.Duration { return s.shards[0].RoundInterval() }

// TakesUndecodable reports true: each shard keeps dead letters.
func (s *Sharded) TakesUndecodable() bool { return true }

// Ping pings every shard.
func (s *Sharded) Ping(ctx context.Context) error {
	for i, sh := range s.shards {
		if err := sh.Ping(ctx); err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
	}
	return nil
}

// DeadLetters sums the shards'.
func (s *Sharded) DeadLetters() int64 { return s.sum((*Sink).DeadLetters) }

// DDL sums the shards'.
func (s *Sharded) DDL() int64 { return s.sum((*Sink).DDL) }

func (s *Sharded) sum(f func(*Sink) int64) int64 {
	var n int64
	for _, sh := range s.shards {
		n += f(sh)
	}
	return n
}

// ClaimDestination claims the table for group on every shard: each keeps
// its own record of who writes it.
func (s *Sharded) ClaimDestination(ctx context.Context, group string, topics []string, shared bool) error {
	for i, sh := range s.shards {
		if err := sh.ClaimDestination(ctx, group, topics, shared); err != nil {
			return fmt.Errorf("shard %d (%s): %w", i, s.hosts[i], err)
		}
	}
	return nil
}

// Close closes every shard's sink.
func (s *Sharded) Close() error {
	var errs []error
	for _, sh := range s.shards {
		errs = append(errs, sh.Close())
	}
	return errors.Join(errs...)
}
