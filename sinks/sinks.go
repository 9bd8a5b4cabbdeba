// Package sinks is the contract between a replica and the store it writes
// to. Each store lives in a package of its own below this one and returns a
// concrete type from its New; the caller (the replica's owner) opens the
// sink, hands it to the replica and closes it after the replica's Run has
// returned.
//
// A sink must implement Sink. Everything else is an optional upgrade, found
// by type assertion in the manner of database/sql/driver; a sink that
// implements none of them works, and each upgrade's doc says what the
// replica does without it:
//
//   - BatchWriter: several partitions' blocks in one call. Without it, one
//     Write per block. Looked up on the outermost sink only.
//   - Resumer: the sink stores its own offsets with its rows. Without it, a
//     partition resumes at etcd's offset alone, and the replica writes
//     intents.
//   - IntentKeeper: a Resumer that needs intents all the same. Without it,
//     the replica writes no intents for a Resumer.
//   - RoundInserter: an IntentKeeper that stores a round's blocks as one
//     insert. Without it, blocks carry no round.
//   - RoundPacer: a RoundInserter whose rounds are spaced. Without it,
//     calls are not paced.
//   - Pinger: the store answers a health check. Without it, readiness
//     counts the store reachable.
//   - DeadLetterCounter: records set aside by the sink's own policy. Without
//     it, that count is zero.
//   - DeadLetterer: the sink sets aside records that cannot be decoded.
//     Without it, such a record stops its partition (or is skipped).
//   - IgnoredFieldCounter: decoded fields the sink had no column for.
//     Without it, that count is zero.
//   - DDLCounter: statements that changed the sink's tables' shape.
//     Without it, that count is zero.
//   - Wrapper: the sink wraps another. Without it, the upgrades of a wrapped
//     sink are hidden behind the wrapper.
//
// DestinationClaimer is not the replica's: the caller that opens the sink
// asks it whether another group writes the same destination; the CLI does
// so once the replica has found its topics and its group's sink
// (replica.Config.BeforeJoin), so that a replica refusing to start claims
// nothing.
//
// Two functions serve the callers and the wrappers: As finds a side upgrade
// (Resumer, IntentKeeper, Pinger, DeadLetterCounter) through a chain of Wrappers, and
// WriteBlocks writes blocks through BatchWriter when a sink has it, else
// one Write per block.
package sinks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// ErrFenced is wrapped by a sink that refuses a block because a newer owner
// (a higher epoch) already wrote to the partition. The replica stops the
// partition, exactly as when etcd fences its commit.
var ErrFenced = errors.New("sink refused a block from an older epoch")

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is one Kafka record as delivered to a sink.
//
// Key and Value are what the record stands for: the bytes as they were in
// Kafka, or, when the replica decoded them through a Schema Registry
// (--key-format, --value-format), the JSON they decode to; Decoded then
// has the bytes as they were, and the schemas.
type Record struct {
	Offset  int64
	Key     []byte
	Value   []byte
	Time    time.Time
	Headers []Header
	// Decoded is set for a record whose key or value the replica decoded,
	// or tried to; nil otherwise. See Decoded.
	Decoded *Decoded
}

// Block is the unit a sink writes: the records of one partition from From
// up to, not including, Next. Offsets in [From, Next) without a record
// (transaction markers, aborted or compacted records) are simply absent.
type Block struct {
	Topic      string
	Partition  int
	Epoch      int64 // the claim's epoch: the fencing token
	Generation int64 // bumped by every operator reset of the partition's offsets
	From       int64
	Next       int64
	Records    []Record
	// Truncated says the block's generation began where Kafka truncated
	// the partition's log below what had been read (an unclean leader
	// election): records the sink holds of an older generation at offsets
	// from the generation's first block's From on are not Kafka's any
	// more, and this generation's records at those offsets are new ones.
	// A sink that keys rows by offset keeps the old ones apart rather
	// than drop the new (see the postgres sink's raw mode).
	Truncated bool
	// Round is set by the replica for a RoundInserter: the round the
	// block's intent recorded, a new one for a new block, the recorded
	// one for a block written again (the owner's retry of a failed write,
	// a new owner's replay). Empty for other sinks.
	Round string
	// Again is set with Round when the round is not new: the block's
	// range was written, or tried, before under it (a retry, a replay), so
	// the round's token may be spent by an insert that did not hold this
	// block's records, and the sink must check that they are stored.
	Again bool
	// SetAside is set by a sink's Write: how many of Records it did not
	// store as rows but set aside (dead letters) or skipped by its
	// policy. The replica counts the others as written.
	SetAside int
}

// NoteSetAside sets SetAside to n. It writes the field only when it
// changes it: a test may write one block from two goroutines (a zombie and
// the owner), and a block none of which was set aside is then only read.
func (b *Block) NoteSetAside(n int) {
	if b.SetAside != n {
		b.SetAside = n
	}
}

// Sink stores blocks. Write must be durable when it returns nil: the offset
// after the block is committed next.
//
//   - Records lie in [From, Next) with rising offsets; a block with no
//     records and From < Next must be accepted (its range held only
//     transaction markers or aborted records).
//   - A block may be written again after a crash (same topic, partition,
//     From and Next); sinks that key by that range overwrite instead of
//     duplicating. After an operator reset, offsets already stored may come
//     again in blocks of other bounds; after Kafka truncated the log
//     (Truncated), they come again with other records.
//   - Write is called concurrently for different partitions, never for one
//     partition; it must not keep or change the block's slices once it
//     returns. It may set SetAside (NoteSetAside).
//   - nil and empty differ for keys and values (nil is a tombstone); times
//     need millisecond precision only.
//
// The caller owns the lifecycle and calls Close after the last Write; a
// second Close returns nil.
type Sink interface {
	Write(ctx context.Context, b *Block) error
	Close() error
}

// BatchWriter is implemented by sinks that can store the blocks of several
// partitions in one call, so that the blocks of a round (blocks that ended
// together) cost the store one round trip or one transaction instead of
// one each. If a Sink does not implement BatchWriter, the replica calls
// Write once per block.
//
// Each block is written under Write's rules, as Write would write it alone
// (Check included), and the sink must not keep or change any block's
// slices once WriteBlocks returns. Beyond those:
//
//   - blocks holds at most one block per topic-partition, in no particular
//     order; a sink may refuse a call that breaks this, whole. WriteBlocks
//     is called concurrently with Write and other WriteBlocks, never for a
//     partition that another call is writing.
//   - errs has one entry per block, errs[i] for blocks[i], nil entries
//     included: len(errs) == len(blocks).
//   - Each block is all-or-nothing and independent of the others' outcomes:
//     errs[i] is nil only when all of blocks[i] is durable (its offset is
//     committed next), whatever became of the others. A block refused on
//     its own account, as fenced (an error wrapping ErrFenced) or by Check,
//     does not fail the others; its entry is what Write would have returned
//     for it, and a sink that stores blocks in transactions stores nothing
//     of it.
//   - An error of the whole call (the store unreachable after the sink's
//     own retries, ctx done, the sink closed) is returned for every block,
//     each entry wrapping it; only a block refused by Check keeps its own
//     error. As after a failed Write, the replica writes such a block
//     again, and whatever the failed call left of it gives way to that.
//
// BatchWriter is a write-path upgrade: the replica asks the outermost sink
// for it, never a wrapped one (not with As), so that a wrapper's Write is
// not bypassed. A wrapper keeps its inner sink's batching by implementing
// WriteBlocks with the package function WriteBlocks. Beware embedding: a
// wrapper that embeds a BatchWriter and overrides Write alone has the inner
// WriteBlocks promoted, the replica calls that, and the wrapper's Write is
// never called.
type BatchWriter interface {
	// WriteBlocks stores blocks, at most one per partition; errs has one
	// entry per block, nil when that block is durable, and each block
	// stands or falls on its own.
	WriteBlocks(ctx context.Context, blocks []*Block) (errs []error)
}

// Resumer is implemented by sinks that store their own offsets together with
// the rows. Resume returns the next offset the sink holds for a partition and
// the generation it was written under; ok is false when the sink knows
// nothing of it.
//
// A claimed partition resumes at the larger of etcd's offset and the sink's,
// the sink's counting only when its generation is etcd's (an operator reset
// outranks it). Because such a sink's rows carry their own offsets, the
// replica writes no intents for it. Resume is called concurrently for
// different partitions, and after writes of the partition have returned,
// never during one.
//
// If a Sink does not implement Resumer, a partition resumes at etcd's offset
// alone, and a block replayed after a crash is the range its intent names.
// The replica finds a Resumer with As, through wrappers.
type Resumer interface {
	Resume(ctx context.Context, topic string, partition int) (next, generation int64, ok bool, err error)
}

// IntentKeeper is implemented by a Resumer whose rows say where it stands
// but that cannot refuse a lower epoch, and deduplicates a block written
// again only when it comes with the same range: a store that drops a
// repeated insert by a token made of the range (ClickHouse's
// insert_deduplication_token). For it the intent is what makes a new owner
// write the previous owner's block again with exactly its range, so that a
// zombie's late write of that block and the new owner's are one.
//
// If NeedsIntents returns true, the replica writes an intent before every
// block of the sink although it is a Resumer, and a new owner resumes at
// the larger of etcd's offset and the sink's as for any Resumer, replaying
// the intent's range when it starts there. If a Sink does not implement
// IntentKeeper, or NeedsIntents returns false, a Resumer gets no intents.
// The replica finds an IntentKeeper with As, through wrappers.
type IntentKeeper interface {
	NeedsIntents() bool
}

// RoundInserter is implemented by an IntentKeeper that is a BatchWriter
// and stores the blocks of one WriteBlocks call that share a Round
// together, as one insert whose deduplication token is made of the round
// (so one part of a ClickHouse table, however many partitions the round
// holds), rather than one insert per block.
//
// If InsertsRounds returns true, the replica gives each block of a call a
// Round and records it with the block's intent before the call: a block
// new to the sink gets the round of the call's new blocks, a block written
// again (a retry of a failed write, a new owner's replay of an intent)
// the round its intent recorded, which a call may hold with other rounds.
// The sink must then store a block written again so that the round's
// first insert, wherever and whenever it lands, and the new one keep each
// record once (ClickHouse's sink: the same token, then a check of which
// of the block's offsets the table holds). Without it, or false, blocks
// carry no Round. The replica finds it with As, through wrappers; the
// outermost sink must be a BatchWriter.
type RoundInserter interface {
	InsertsRounds() bool
}

// RoundPacer is implemented by a RoundInserter whose store wants few
// inserts (ClickHouse: each is a part). The replica then begins a call of
// fewer than PacedRows rows no sooner than RoundInterval after the last
// call began, and hands it every block queued by then: the blocks of a
// quiet topic's many partitions go in one call per interval, and a
// backlog's rounds go at once. Without it, or 0, calls are not paced. The
// replica finds it with As, through wrappers.
type RoundPacer interface {
	RoundInterval() time.Duration
}

// PacedRows is the size of a round a RoundPacer's interval does not hold
// back: a backlog's, whose inserts are large anyway.
const PacedRows = 32768

// Pinger is implemented by sinks that can tell whether their store answers.
// A replica's readiness check calls Ping with a short deadline (one second by
// default) and reports not ready while it fails. Ping is called
// concurrently with writes, and must not wait for them.
//
// If a Sink does not implement Pinger, readiness counts its store reachable.
// The replica finds a Pinger with As, through wrappers.
type Pinger interface {
	Ping(ctx context.Context) error
}

// DeadLetterCounter is implemented by sinks that set aside or skip the
// records they cannot take (by their own policy) instead of failing the
// block. DeadLetters counts those records since the sink was opened, never
// falls, and is safe to call concurrently with writes; the replica's
// metrics export it as offsetkeeper_dead_letters_total.
//
// If a Sink does not implement DeadLetterCounter, that count is zero. The
// replica finds a DeadLetterCounter with As, through wrappers.
type DeadLetterCounter interface {
	DeadLetters() int64
}

// ErrDestinationClaimed is wrapped by ClaimDestination's error when another
// group is recorded as the writer of the destination.
var ErrDestinationClaimed = errors.New("the destination is written by another group")

// DestinationClaimer is implemented by sinks that record which group
// writes each of their destinations (a directory's topic, a table's topic),
// so that two groups delivering one topic to one place, each once, which a
// plain reader sees as every record twice, is found when the second one
// opens instead of in the data. The caller (offsetkeeper run) asks it once,
// after opening the sink and before the replica writes anything.
//
// ClaimDestination records group as the writer of each of topics where no
// group is recorded yet; the first group recorded stays recorded. Where
// another group is recorded and shared is false, it records nothing and
// returns an error wrapping ErrDestinationClaimed that names the
// destination, both groups and how to forget the recorded one; with shared
// true it records what is free and returns nil, for groups that share a
// destination on purpose (a reader that deduplicates).
//
// A sink without it cannot tell: two groups may write one destination
// unnoticed.
type DestinationClaimer interface {
	ClaimDestination(ctx context.Context, group string, topics []string, shared bool) error
}

// Wrapper is implemented by a sink that wraps another (to count, time,
// record, gate or filter its writes). Unwrap returns the wrapped sink, so
// that the side upgrades of the inner sink (Resumer, Pinger,
// DeadLetterCounter) stay visible through the wrapper: see As. Unwrap may
// return nil, for a wrapper that holds no sink (yet); As stops there.
//
// A wrapper that intercepts writes also implements BatchWriter, with the
// package function WriteBlocks for its inner sink, so that wrapping costs
// the inner sink neither its batching nor its parallel writes. A wrapper
// that implements an upgrade itself (its own Ping, say) is found first and
// hides the inner sink's.
//
// If a sink that wraps another does not implement Wrapper, As stops at it:
// the inner sink's side upgrades are hidden, and the replica runs as for a
// sink without them (for a Resumer: its offsets are ignored and intents are
// written).
type Wrapper interface {
	Unwrap() Sink
}

// As finds the first sink in s's chain of wrappers (s, then s.Unwrap(), and
// so on, while each is a Wrapper) that implements T, and returns it as a T;
// ok is false, and t the zero T, when none does or s is nil. T is meant to
// be an interface type (an upgrade). It works the way errors.As walks
// wrapped errors, with a bound: a chain longer than 64 sinks (a cycle) is
// given up at the 64th.
//
// The replica looks up Resumer, Pinger and DeadLetterCounter with As; it
// looks up BatchWriter on s alone (see BatchWriter).
func As[T any](s Sink) (t T, ok bool) {
	for depth := 0; s != nil && depth < 64; depth++ {
		if found, is := s.(T); is {
			return found, true
		}
		w, is := s.(Wrapper)
		if !is {
			break
		}
		s = w.Unwrap()
	}
	return t, false
}

// WriteBlocks writes blocks to s in one WriteBlocks call if s is a
// BatchWriter (s itself: WriteBlocks does not unwrap), else with one Write
// per block, all at once on goroutines of their own (the blocks are of
// different partitions, which Write takes concurrently), returning when
// every Write has. Either way errs has one entry per block, errs[i] for
// blocks[i], as BatchWriter's.
//
// A wrapper's own WriteBlocks calls it for its inner sink, never for the
// wrapper itself (that would call the wrapper again), so that wrapping
// never costs the inner sink its batching, nor a sink without batching its
// parallel writes.
func WriteBlocks(ctx context.Context, s Sink, blocks []*Block) (errs []error) {
	if bw, ok := s.(BatchWriter); ok {
		return bw.WriteBlocks(ctx, blocks)
	}
	errs = make([]error, len(blocks))
	var wg sync.WaitGroup
	for i, b := range blocks {
		wg.Go(func() { errs[i] = s.Write(ctx, b) })
	}
	wg.Wait()
	return errs
}

// String is the one name of a block, in errors and logs, the house way:
// orders/3 [120, 180). A topic that is not a legal Kafka topic name (empty,
// or with bytes other than ASCII letters, digits, '.', '_' and '-') is
// quoted, so that odd bytes in it cannot garble the message.
func (b *Block) String() string {
	return fmt.Sprintf("%s/%d [%d, %d)", topicName(b.Topic), b.Partition, b.From, b.Next)
}

// topicName is topic, quoted unless it is made of the bytes of a legal
// Kafka topic name.
func topicName(topic string) string {
	if topic == "" {
		return `""`
	}
	for _, c := range []byte(topic) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return strconv.Quote(topic)
		}
	}
	return topic
}

// Check refuses a block that breaks the contract: a negative partition, a
// range that runs backwards, records outside the range or out of order.
// Sinks call it before storing anything.
func (b *Block) Check() error {
	if b.Partition < 0 || b.Partition > 1<<31-1 {
		return fmt.Errorf("partition %d out of range", b.Partition)
	}
	if b.From < 0 || b.Next < b.From {
		return fmt.Errorf("bad range [%d, %d)", b.From, b.Next)
	}
	prev := int64(-1)
	for _, r := range b.Records {
		if r.Offset < b.From || r.Offset >= b.Next {
			return fmt.Errorf("record offset %d outside the block", r.Offset)
		}
		if r.Offset <= prev {
			return fmt.Errorf("record offset %d after %d: offsets must rise", r.Offset, prev)
		}
		prev = r.Offset
	}
	return nil
}
