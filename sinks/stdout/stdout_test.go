package stdout_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
	"github.com/offsetkeeper/offsetkeeper/sinks/sinktest"
	"github.com/offsetkeeper/offsetkeeper/sinks/stdout"
)

// lockedBuffer lets the reader look at what the sink wrote while goroutines
// of the suite may still hold the sink.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
		var out lockedBuffer
		return stdout.New(&out), sinktest.ReaderFunc(func(t *testing.T, topic string, partition int) []sinks.Record {
			t.Helper()
			lines, err := file.ReadLines(bytes.NewReader(out.bytes()))
			if err != nil {
				t.Fatalf("ReadLines: %v", err)
			}
			var recs []sinks.Record
			for _, l := range lines {
				if l.Topic == topic && l.Partition == partition {
					recs = append(recs, l.Record)
				}
			}
			// The sink appends: a replayed block comes again later. Offset
			// order puts the copies together, as the Reader contract asks.
			slices.SortStableFunc(recs, func(a, b sinks.Record) int { return cmp.Compare(a.Offset, b.Offset) })
			return recs
		})
	}, sinktest.Options{})
}

func TestFlushes(t *testing.T) {
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	s := stdout.New(w)
	b := &sinks.Block{Topic: "orders", Partition: 3, From: 120, Next: 121,
		Records: []sinks.Record{{Offset: 120, Value: []byte("v"), Time: time.UnixMilli(0)}}}
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if out.Len() == 0 {
		t.Error("Write returned before flushing its writer")
	}
}

type failingWriter struct{ n int }

func (f failingWriter) Write(p []byte) (int, error) {
	if f.n >= 0 {
		return min(f.n, len(p)), nil
	}
	return 0, errors.New("disk on fire")
}

func TestWriteErrors(t *testing.T) {
	b := &sinks.Block{Topic: "orders", Partition: 3, From: 120, Next: 180,
		Records: []sinks.Record{{Offset: 120, Value: []byte("v")}}}
	err := stdout.New(failingWriter{n: -1}).Write(context.Background(), b)
	if err == nil || err.Error() != "write orders/3 [120, 180): disk on fire" {
		t.Errorf("failing writer: %v", err)
	}
	err = stdout.New(failingWriter{n: 3}).Write(context.Background(), b)
	if !errors.Is(err, io.ErrShortWrite) {
		t.Errorf("short writer: %v", err)
	}
	s := stdout.New(failingWriter{})
	s.Close()
	if err := s.Write(context.Background(), b); !errors.Is(err, stdout.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestBlocksDoNotInterleave(t *testing.T) {
	var out lockedBuffer
	s := stdout.New(&out)
	var wg sync.WaitGroup
	for p := range 8 {
		wg.Go(func() {
			b := &sinks.Block{Topic: "orders", Partition: p, From: 0, Next: 50}
			for o := range int64(50) {
				b.Records = append(b.Records, sinks.Record{Offset: o, Value: bytes.Repeat([]byte{'a' + byte(p)}, 1000)})
			}
			if err := s.Write(context.Background(), b); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	lines, err := file.ReadLines(bytes.NewReader(out.bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 8*50 {
		t.Fatalf("%d lines, want %d", len(lines), 8*50)
	}
	for i := 0; i < len(lines); i += 50 {
		for j := i; j < i+50; j++ {
			if lines[j].Partition != lines[i].Partition || lines[j].Record.Offset != int64(j-i) {
				t.Fatalf("line %d is %d/%d: blocks interleaved", j, lines[j].Partition, lines[j].Record.Offset)
			}
		}
	}
}
