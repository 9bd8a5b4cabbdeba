package file

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("file sink is closed")

// ErrTopic is wrapped by errors about a topic name Kafka would not allow.
var ErrTopic = errors.New("illegal topic name")

// Sink writes blocks under a directory. It is safe for concurrent use;
// writes to different partitions run in parallel.
type Sink struct {
	dir string
	log *zap.Logger

	recreated atomic.Int64

	// life is held shared by Write and exclusively by Close, so that Close
	// waits for the writes in flight and no write starts after it.
	life   sync.RWMutex
	closed bool

	mu    sync.Mutex
	parts map[partKey]*partState
}

type partKey struct {
	topic     string
	partition int
}

// partState serializes the writes of one partition: listing, deleting and
// renaming must not interleave.
type partState struct {
	mu    sync.Mutex
	ready bool  // its directories were made (they may have gone since)
	epoch int64 // the epoch of its last write, for a directory made again
}

var _ sinks.DestinationClaimer = (*Sink)(nil)

// Option changes a Sink made by New.
type Option func(*Sink)

// WithLogger makes the sink log what it repairs: a partition's directory
// created again after it went (default: no logs).
func WithLogger(log *zap.Logger) Option { return func(s *Sink) { s.log = log } }

// New returns a sink writing under dir, which it creates if missing.
func New(dir string, opts ...Option) (*Sink, error) {
	if dir == "" {
		return nil, errors.New("file sink: empty directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("file sink %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("file sink %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("file sink %s: not a directory", dir)
	}
	s := &Sink{dir: dir, parts: make(map[partKey]*partState), log: zap.NewNop()}
	for _, o := range opts {
		o(s)
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	return s, nil
}

// Dir is the directory the sink writes under, as given to New.
func (s *Sink) Dir() string { return s.dir }

// Recreated counts the partition directories the sink created again after
// they went while it ran (see the package documentation).
func (s *Sink) Recreated() int64 { return s.recreated.Load() }

// Write stores b durably; see the package documentation for where and how.
// A block with From == Next holds no range and is a no-op. A cancelled ctx
// is honoured up to the point where the new file replaces the old ones.
func (s *Sink) Write(ctx context.Context, b *sinks.Block) error {
	if b == nil {
		return errors.New("write: nil block")
	}
	if err := checkBlock(b); err != nil {
		return fmt.Errorf("write %s: %w", b, err)
	}
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return fmt.Errorf("write %s: %w", b, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("write %s: %w", b, err)
	}
	if b.From == b.Next {
		return nil
	}
	if err := s.write(ctx, b); err != nil {
		return fmt.Errorf("write %s: %w", b, err)
	}
	return nil
}

func (s *Sink) write(ctx context.Context, b *sinks.Block) error {
	p := s.state(b.Topic, b.Partition)
	p.mu.Lock()
	defer p.mu.Unlock()

	dir := filepath.Join(s.dir, b.Topic, strconv.Itoa(b.Partition))
	if !p.ready {
		if err := makeDirs(s.dir, b.Topic, strconv.Itoa(b.Partition)); err != nil {
			return err
		}
		p.ready = true
	}

	// The epoch fence, held to the end of the write: a block of an older
	// claim than one already written here is a zombie's late write, and
	// its deletions would take the newer owner's blocks with them.
	unlock, err := fence(dir, b.Epoch)
	if errors.Is(err, fs.ErrNotExist) {
		// The directory went since it was made (moved away, removed):
		// stalling until a restart would help no one.
		if err := s.recreate(b.Topic, b.Partition, p); err != nil {
			return err
		}
		unlock, err = fence(dir, b.Epoch)
	}
	if err != nil {
		return err
	}
	defer unlock()
	p.epoch = b.Epoch

	// A handle on the directory, for the final fsync: if the directory is
	// moved away after the rename, the block is in it, and the handle
	// still makes it durable there (a sync by path would fail, and the
	// replica would write the block a second time elsewhere).
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()

	// Leftovers of a crashed write are removed here, under the partition's
	// lock: only this partition's writer could still be using them.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	name := fileName(b.From, b.Next)
	var superseded []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove leftover: %w", err)
			}
			continue
		}
		from, _, ok := parseFileName(e.Name())
		if ok && e.Name() != name && from >= b.From && from < b.Next {
			superseded = append(superseded, e.Name())
		}
	}

	tmp, err := writeTemp(dir, b)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		os.Remove(tmp)
		return err
	}
	for _, old := range superseded {
		if err := os.Remove(filepath.Join(dir, old)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			os.Remove(tmp)
			return fmt.Errorf("remove superseded block: %w", err)
		}
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// recreate makes a partition's directory again, under the partition's
// lock, with an .epoch holding the epoch of its last write here, so that
// the fence stays where it was. The base directory is not made again: its
// absence (an unmounted volume) is an error.
func (s *Sink) recreate(topic string, partition int, p *partState) error {
	if _, err := os.Stat(s.dir); err != nil {
		return fmt.Errorf("the sink's directory %s: %w", s.dir, err)
	}
	part := strconv.Itoa(partition)
	if err := makeDirs(s.dir, topic, part); err != nil {
		return err
	}
	dir := filepath.Join(s.dir, topic, part)
	if p.epoch > 0 {
		if err := writeEpoch(dir, p.epoch); err != nil {
			return err
		}
	}
	s.recreated.Add(1)
	s.log.Warn("file sink: a partition's directory was gone (moved away or removed); created it again",
		zap.String("path", dir), zap.String("topic", topic), zap.Int("partition", partition), zap.Int64("epoch", p.epoch))
	return nil
}

// writeEpoch creates dir's .epoch holding epoch, if dir has none.
func writeEpoch(dir string, epoch int64) error {
	f, err := os.OpenFile(filepath.Join(dir, epochFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil // another writer's, which fence reads
	}
	if err != nil {
		return err
	}
	if _, err := f.WriteString(strconv.FormatInt(epoch, 10) + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

const tmpPrefix = ".tmp-"

// epochFile is where a partition's directory keeps the highest epoch
// written to it (decimal), for fence; readers ignore it.
const epochFile = ".epoch"

// fence locks the partition's epoch file (flock: writers of other
// processes sharing the directory wait too) and refuses, with an error
// wrapping sinks.ErrFenced, an epoch below the one it holds; else it
// records the epoch. The returned func unlocks.
func fence(dir string, epoch int64) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, epochFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", epochFile, err)
	}
	release := func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	raw, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	var held int64
	if s := strings.TrimSpace(string(raw)); s != "" {
		if held, err = strconv.ParseInt(s, 10, 64); err != nil {
			return nil, fmt.Errorf("%s holds %q: %w", epochFile, s, err)
		}
	}
	switch {
	case epoch < held:
		return nil, fmt.Errorf("epoch %d is below epoch %d written here: %w", epoch, held, sinks.ErrFenced)
	case epoch > held:
		if err := f.Truncate(0); err != nil {
			return nil, err
		}
		if _, err := f.WriteAt([]byte(strconv.FormatInt(epoch, 10)+"\n"), 0); err != nil {
			return nil, err
		}
		if err := f.Sync(); err != nil {
			return nil, err
		}
	}
	return release, nil
}

// writeTemp writes the block's lines to a new temporary file in dir, fsyncs
// and closes it, and returns its path. On error nothing is left behind.
func writeTemp(dir string, b *sinks.Block) (path string, err error) {
	var f *os.File
	for range 10 {
		path = filepath.Join(dir, tmpPrefix+strconv.FormatUint(rand.Uint64(), 36))
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(path)
		}
	}()
	w := bufio.NewWriterSize(f, 64<<10)
	var line []byte
	for i := range b.Records {
		line = AppendLine(line[:0], b.Topic, b.Partition, &b.Records[i])
		if _, err := w.Write(line); err != nil {
			return "", err
		}
	}
	if err := w.Flush(); err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return path, nil
}

// makeDirs creates root/topic/part as needed and fsyncs the parent of every
// directory it creates, so that the new names survive a crash too.
func makeDirs(root, topic, part string) error {
	parent := root
	for _, name := range []string{topic, part} {
		dir := filepath.Join(parent, name)
		err := os.Mkdir(dir, 0o755)
		switch {
		case err == nil:
			if err := syncDir(parent); err != nil {
				return err
			}
		case !errors.Is(err, fs.ErrExist):
			return err
		}
		parent = dir
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return d.Close()
}

func (s *Sink) state(topic string, partition int) *partState {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := partKey{topic, partition}
	p := s.parts[k]
	if p == nil {
		p = &partState{}
		s.parts[k] = p
	}
	return p
}

// Close makes later writes fail with ErrClosed, after waiting for the writes
// in flight. Every write is durable already, so there is nothing to flush.
// Close is idempotent and always returns nil.
func (s *Sink) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	s.closed = true
	return nil
}

// checkBlock refuses what the layout cannot hold or would misfile: a bad
// topic, or a block that breaks the contract (the reader relies on offsets
// rising within a file).
func checkBlock(b *sinks.Block) error {
	if err := checkTopic(b.Topic); err != nil {
		return err
	}
	return b.Check()
}

// checkTopic accepts Kafka's legal topic names, which are also safe as
// directory names.
func checkTopic(topic string) error {
	if topic == "" || len(topic) > 249 || topic == "." || topic == ".." {
		return fmt.Errorf("%w %q: want 1 to 249 characters, not . or ..", ErrTopic, topic)
	}
	for _, c := range []byte(topic) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w %q: only ASCII letters, digits, '.', '_' and '-' are allowed", ErrTopic, topic)
		}
	}
	return nil
}

// partName is topic/partition, with the topic quoted when it is not a legal
// name, so that odd bytes in it cannot garble the message.
func partName(topic string, partition int) string {
	if checkTopic(topic) != nil {
		return fmt.Sprintf("%q/%d", topic, partition)
	}
	return topic + "/" + strconv.Itoa(partition)
}

func fileName(from, next int64) string {
	return fmt.Sprintf("%020d-%020d.jsonl", from, next)
}

// parseFileName reads a block's range back from its file name; ok is false
// for any other name.
func parseFileName(name string) (from, next int64, ok bool) {
	const digits = 20
	if len(name) != 2*digits+1+len(".jsonl") || name[digits] != '-' || !strings.HasSuffix(name, ".jsonl") {
		return 0, 0, false
	}
	for _, c := range []byte(name[:digits] + name[digits+1:2*digits+1]) {
		if c < '0' || c > '9' {
			return 0, 0, false
		}
	}
	from, err1 := strconv.ParseInt(name[:digits], 10, 64)
	next, err2 := strconv.ParseInt(name[digits+1:2*digits+1], 10, 64)
	if err1 != nil || err2 != nil || next < from {
		return 0, 0, false
	}
	return from, next, true
}
