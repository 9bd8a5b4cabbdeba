package file

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// fileSink reads the records of a file:// sink's directory as
// ReadAll reads them: block files in From order, each only up
// to the From of the next (a later block supersedes the offsets from its
// From onward), temporary files ignored. An offset on two lines that this
// reading keeps (a line copied within a block's file) is held twice.
type fileSink struct{ dir string }

func openReader(dir string) (sinks.Reader, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: file://%s: %w", sinks.ErrUnreadable, dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%w: file://%s: not a directory", sinks.ErrUnreadable, dir)
	}
	return &fileSink{dir: dir}, nil
}

func (s *fileSink) Describe() string { return "file://" + s.dir }

func (s *fileSink) Capabilities() sinks.Capabilities {
	return sinks.Capabilities{Missing: true, Duplicates: true, Records: true,
		RecordsNote: "records decoded through a Schema Registry are not compared: their lines hold the decoded JSON, not Kafka's bytes"}
}

// SinkNext: the file sink records no offsets of its own (etcd's intents
// say what is in flight).
func (s *fileSink) SinkNext(context.Context, string, int) (int64, bool, error) { return 0, false, nil }

func (s *fileSink) CheckScope([]sinks.Partition) error { return nil }

func (s *fileSink) Close() error { return nil }

func (s *fileSink) Offsets(_ context.Context, topic string, partition int) (sinks.Stream, error) {
	pdir := filepath.Join(s.dir, topic, strconv.Itoa(partition))
	entries, err := os.ReadDir(pdir)
	if errors.Is(err, fs.ErrNotExist) {
		return sinks.Offsets(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", pdir, err)
	}
	var files []blockFile
	for _, e := range entries {
		if from, next, ok := parseBlockName(e.Name()); ok && e.Type().IsRegular() {
			files = append(files, blockFile{filepath.Join(pdir, e.Name()), from, next})
		}
	}
	slices.SortFunc(files, func(a, b blockFile) int {
		return cmp.Or(cmp.Compare(a.from, b.from), cmp.Compare(a.next, b.next))
	})
	return &fileStream{topic: topic, partition: partition, files: files}, nil
}

type blockFile struct {
	path       string
	from, next int64
}

// parseBlockName reads FROM-NEXT.jsonl, 20 digits each (sinks/file's
// names).
func parseBlockName(name string) (from, next int64, ok bool) {
	base, found := strings.CutSuffix(name, ".jsonl")
	a, b, dash := strings.Cut(base, "-")
	if !found || !dash || len(a) != 20 || len(b) != 20 {
		return 0, 0, false
	}
	f, err1 := strconv.ParseInt(a, 10, 64)
	n, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || n < f {
		return 0, 0, false
	}
	return f, n, true
}

// fileStream yields the offsets of one partition's files, each record
// summed. It holds one file's entries at a time, sorted: a block's, at most
// the replica's --max-block-rows.
type fileStream struct {
	topic     string
	partition int
	files     []blockFile
	fi        int
	lines     []fileLine
	i         int
}

// fileLine is what the audit keeps of a line: its offset and its record's
// sum, unless the record was decoded through a Schema Registry (the line
// then holds its JSON, not Kafka's bytes).
type fileLine struct {
	off    int64
	sum    sinks.Sum
	summed bool
}

func (s *fileStream) Next(ctx context.Context) (sinks.Entry, bool, error) {
	for s.i >= len(s.lines) {
		if s.fi >= len(s.files) {
			return sinks.Entry{}, false, nil
		}
		if err := ctx.Err(); err != nil {
			return sinks.Entry{}, false, err
		}
		f := s.files[s.fi]
		s.fi++
		limit := f.next
		if s.fi < len(s.files) && s.files[s.fi].from < limit {
			limit = s.files[s.fi].from
		}
		if limit <= f.from {
			continue // superseded by a block with the same From
		}
		lines, err := s.readFile(f, limit)
		if err != nil {
			return sinks.Entry{}, false, err
		}
		s.lines, s.i = lines, 0
	}
	first := s.lines[s.i]
	e := sinks.Entry{Offset: first.off, Sum: first.sum, Summed: true}
	for s.i < len(s.lines) && s.lines[s.i].off == first.off {
		l := s.lines[s.i]
		e.Copies++
		e.Summed = e.Summed && l.summed
		e.Mixed = e.Mixed || l.sum != first.sum
		s.i++
	}
	return e, true, nil
}

// readFile returns the lines of f below limit, sorted by offset (in file
// order within an offset).
func (s *fileStream) readFile(f blockFile, limit int64) ([]fileLine, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.path, err)
	}
	defer fh.Close()
	lines := s.lines[:0]
	br := bufio.NewReader(fh)
	for n := 1; ; n++ {
		line, rerr := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			l, err := ParseLine(line)
			if err != nil {
				return nil, fmt.Errorf("read %s line %d: not a record's line: %w", f.path, n, err)
			}
			off := l.Record.Offset
			switch {
			case l.Topic != s.topic || l.Partition != s.partition:
				return nil, fmt.Errorf("read %s line %d: a line of %s/%d in the wrong place", f.path, n, l.Topic, l.Partition)
			case off < f.from || off >= f.next:
				return nil, fmt.Errorf("read %s line %d: offset %d outside the block [%d, %d)", f.path, n, off, f.from, f.next)
			}
			if off < limit {
				fl := fileLine{off: off}
				if l.Record.Decoded == nil {
					fl.sum, fl.summed = l.Record.Sum(), true
				}
				lines = append(lines, fl)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, fmt.Errorf("read %s: %w", f.path, rerr)
		}
	}
	slices.SortStableFunc(lines, func(a, b fileLine) int { return cmp.Compare(a.off, b.off) })
	return lines, nil
}

func (s *fileStream) Close() error { return nil }
