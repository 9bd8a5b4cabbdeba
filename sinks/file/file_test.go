package file_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
	"github.com/offsetkeeper/offsetkeeper/sinks/sinktest"
)

func TestConformance(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
		dir := t.TempDir()
		return newSink(t, dir), reader(dir)
	}, sinktest.Options{ReplayExact: true, ReplayOverlap: true, Fences: true})
}

func reader(dir string) sinktest.Reader {
	return sinktest.ReaderFunc(func(t *testing.T, topic string, partition int) []sinks.Record {
		t.Helper()
		recs, err := file.ReadAll(dir, topic, partition)
		if err != nil {
			t.Fatalf("ReadAll: %v", err)
		}
		return recs
	})
}

func newSink(t *testing.T, dir string) *file.Sink {
	t.Helper()
	s, err := file.New(dir)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// block makes a block of records at the given offsets, each value telling
// which write it came from.
func block(topic string, partition int, from, next int64, tag string, offs ...int64) *sinks.Block {
	b := &sinks.Block{Topic: topic, Partition: partition, Epoch: 1, From: from, Next: next}
	for _, o := range offs {
		b.Records = append(b.Records, sinks.Record{
			Offset: o,
			Key:    []byte("k"),
			Value:  []byte(tag),
			Time:   time.UnixMilli(1714564800000 + o).UTC(),
		})
	}
	return b
}

func write(t *testing.T, s *file.Sink, b *sinks.Block) {
	t.Helper()
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

// files lists a partition's directory.
func files(t *testing.T, dir, topic, partition string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, topic, partition))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != ".epoch" { // the fence's, not a block
			names = append(names, e.Name())
		}
	}
	return names
}

// summary reads a partition back as offset:tag pairs.
func summary(t *testing.T, dir, topic string, partition int) string {
	t.Helper()
	recs, err := file.ReadAll(dir, topic, partition)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	var parts []string
	for _, r := range recs {
		parts = append(parts, strconv.FormatInt(r.Offset, 10)+":"+string(r.Value))
	}
	return strings.Join(parts, " ")
}

func TestLayout(t *testing.T) {
	dir := t.TempDir()
	s := newSink(t, dir)
	write(t, s, block("orders.v2_eu-west", 3, 120, 180, "a", 120, 121))
	want := []string{"00000000000000000120-00000000000000000180.jsonl"}
	if got := files(t, dir, "orders.v2_eu-west", "3"); !slices.Equal(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	data, err := os.ReadFile(filepath.Join(dir, "orders.v2_eu-west", "3", want[0]))
	if err != nil {
		t.Fatal(err)
	}
	wantData := `{"topic":"orders.v2_eu-west","partition":3,"offset":120,"key_string":"k","value_string":"a","timestamp":1714564800120,"headers":[]}
{"topic":"orders.v2_eu-west","partition":3,"offset":121,"key_string":"k","value_string":"a","timestamp":1714564800121,"headers":[]}
`
	if string(data) != wantData {
		t.Errorf("file holds\n%s\nwant\n%s", data, wantData)
	}
}

func TestEmptyBlockIsEmptyFile(t *testing.T) {
	dir := t.TempDir()
	s := newSink(t, dir)
	write(t, s, block("orders", 0, 0, 5, "a", 0, 1, 2, 3, 4))
	write(t, s, block("orders", 0, 5, 9, "empty"))
	write(t, s, block("orders", 0, 9, 9, "no range")) // From == Next: nothing
	want := []string{
		"00000000000000000000-00000000000000000005.jsonl",
		"00000000000000000005-00000000000000000009.jsonl",
	}
	if got := files(t, dir, "orders", "0"); !slices.Equal(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	fi, err := os.Stat(filepath.Join(dir, "orders", "0", want[1]))
	if err != nil || fi.Size() != 0 {
		t.Errorf("empty block's file: %v, %v", fi, err)
	}
}

func TestReplayReplaces(t *testing.T) {
	dir := t.TempDir()
	s := newSink(t, dir)
	write(t, s, block("orders", 1, 0, 3, "first", 0, 1, 2))
	write(t, s, block("orders", 1, 3, 6, "first", 3, 4, 5))
	write(t, s, block("orders", 1, 3, 6, "replay", 3, 4, 5))
	write(t, s, block("orders", 1, 0, 3, "replay", 0, 1, 2)) // an older block replayed: only it is replaced
	if got, want := summary(t, dir, "orders", 1), "0:replay 1:replay 2:replay 3:replay 4:replay 5:replay"; got != want {
		t.Errorf("read %q, want %q", got, want)
	}
	if got := files(t, dir, "orders", "1"); len(got) != 2 {
		t.Errorf("files %v, want two", got)
	}
}

func TestRedeliverAfterReset(t *testing.T) {
	dir := t.TempDir()
	s := newSink(t, dir)
	write(t, s, block("orders", 2, 0, 10, "old", sinktest.Seq(0, 10)...))
	write(t, s, block("orders", 2, 10, 20, "old", sinktest.Seq(10, 20)...))
	write(t, s, block("orders", 2, 20, 30, "old", sinktest.Seq(20, 30)...))

	// Reset to 5: [5, 12) starts inside [0, 10), which is cut at 5 when
	// read, and covers the start of [10, 20), which goes.
	write(t, s, block("orders", 2, 5, 12, "new", sinktest.Seq(5, 12)...))
	wantFiles := []string{
		"00000000000000000000-00000000000000000010.jsonl",
		"00000000000000000005-00000000000000000012.jsonl",
		"00000000000000000020-00000000000000000030.jsonl",
	}
	if got := files(t, dir, "orders", "2"); !slices.Equal(got, wantFiles) {
		t.Errorf("files %v, want %v", got, wantFiles)
	}
	want := "0:old 1:old 2:old 3:old 4:old 5:new 6:new 7:new 8:new 9:new 10:new 11:new " +
		"20:old 21:old 22:old 23:old 24:old 25:old 26:old 27:old 28:old 29:old"
	if got := summary(t, dir, "orders", 2); got != want {
		t.Errorf("after the first re-delivered block, read\n%s\nwant\n%s", got, want)
	}

	write(t, s, block("orders", 2, 12, 25, "new", sinktest.Seq(12, 25)...))
	write(t, s, block("orders", 2, 25, 31, "new", sinktest.Seq(25, 31)...))
	var parts []string
	for o := range int64(31) {
		tag := "new"
		if o < 5 {
			tag = "old"
		}
		parts = append(parts, strconv.FormatInt(o, 10)+":"+tag)
	}
	if got, want := summary(t, dir, "orders", 2), strings.Join(parts, " "); got != want {
		t.Errorf("after the re-delivery, read\n%s\nwant\n%s", got, want)
	}
}

func TestReaderTieBreak(t *testing.T) {
	// Two files with the same From can only be left by writers racing on
	// one partition; the reader still yields each offset once.
	dir := t.TempDir()
	s := newSink(t, dir)
	write(t, s, block("orders", 0, 0, 4, "a", 0, 1, 2, 3))
	pdir := filepath.Join(dir, "orders", "0")
	data, err := os.ReadFile(filepath.Join(pdir, "00000000000000000000-00000000000000000004.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "00000000000000000000-00000000000000000006.jsonl"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := summary(t, dir, "orders", 0), "0:a 1:a 2:a 3:a"; got != want {
		t.Errorf("read %q, want %q", got, want)
	}
}

func TestLeftoverTempFile(t *testing.T) {
	dir := t.TempDir()
	s := newSink(t, dir)
	write(t, s, block("orders", 0, 0, 2, "a", 0, 1))
	// A crash between creating the temporary file and renaming it leaves a
	// partial file behind.
	tmp := filepath.Join(dir, "orders", "0", ".tmp-crashed")
	if err := os.WriteFile(tmp, []byte(`{"topic":"orders","partition":0,"offset":2,"ke`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := summary(t, dir, "orders", 0), "0:a 1:a"; got != want {
		t.Errorf("read %q, want %q", got, want)
	}
	// A crash may also leave a stray name: ignored, and not ours to remove.
	stray := filepath.Join(dir, "orders", "0", "README")
	if err := os.WriteFile(stray, []byte("notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, s, block("orders", 0, 2, 4, "b", 2, 3))
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover temporary file still there after a write: %v", err)
	}
	if _, err := os.Stat(stray); err != nil {
		t.Errorf("unknown file removed: %v", err)
	}
	if got, want := summary(t, dir, "orders", 0), "0:a 1:a 2:b 3:b"; got != want {
		t.Errorf("read %q, want %q", got, want)
	}
}

func TestIllegalTopic(t *testing.T) {
	dir := t.TempDir()
	s := newSink(t, dir)
	for _, topic := range []string{"", ".", "..", "a/b", "../escape", "a b", "ümlaut", "a\nb", strings.Repeat("x", 250)} {
		err := s.Write(context.Background(), block(topic, 0, 0, 1, "a", 0))
		if !errors.Is(err, file.ErrTopic) {
			t.Errorf("Write to topic %q: %v, want an error wrapping ErrTopic", topic, err)
			continue
		}
		if !strings.Contains(err.Error(), strconv.Quote(topic)) {
			t.Errorf("error %q does not name the topic %q", err, topic)
		}
		if _, err := file.ReadAll(dir, topic, 0); !errors.Is(err, file.ErrTopic) {
			t.Errorf("ReadAll of topic %q: %v, want an error wrapping ErrTopic", topic, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("illegal topics left %v behind", entries)
	}
	if err := s.Write(context.Background(), block(strings.Repeat("x", 249), 0, 0, 1, "a", 0)); err != nil {
		t.Errorf("Write to a topic of 249 characters: %v", err)
	}
}

func TestBadBlocks(t *testing.T) {
	s := newSink(t, t.TempDir())
	for _, tc := range []struct {
		name string
		b    *sinks.Block
		want string
	}{
		{"backwards", block("orders", 3, 180, 120, "a"), "write orders/3 [180, 120): bad range"},
		{"negative", block("orders", 3, -1, 5, "a"), "write orders/3 [-1, 5): bad range"},
		{"partition", block("orders", -3, 0, 5, "a"), "write orders/-3 [0, 5): partition -3 out of range"},
		{"before", block("orders", 3, 120, 180, "a", 119), "write orders/3 [120, 180): record offset 119 outside the block"},
		{"after", block("orders", 3, 120, 180, "a", 180), "write orders/3 [120, 180): record offset 180 outside the block"},
		{"order", block("orders", 3, 120, 180, "a", 121, 120), "write orders/3 [120, 180): record offset 120 after 121"},
		{"twice", block("orders", 3, 120, 180, "a", 121, 121), "write orders/3 [120, 180): record offset 121 after 121"},
	} {
		err := s.Write(context.Background(), tc.b)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q...", tc.name, err, tc.want)
		}
	}
	if err := s.Write(context.Background(), nil); err == nil {
		t.Error("Write(nil) returned nil")
	}
}

func TestCancelledWriteLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	s := newSink(t, dir)
	write(t, s, block("orders", 0, 0, 2, "a", 0, 1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Write(ctx, block("orders", 0, 0, 5, "b", 0, 1, 2, 3, 4)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Write: %v, want context.Canceled", err)
	}
	if got := files(t, dir, "orders", "0"); !slices.Equal(got, []string{"00000000000000000000-00000000000000000002.jsonl"}) {
		t.Errorf("files %v after a cancelled write", got)
	}
}

func TestClosed(t *testing.T) {
	s := newSink(t, t.TempDir())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	err := s.Write(context.Background(), block("orders", 3, 120, 180, "a", 120))
	if !errors.Is(err, file.ErrClosed) || !strings.HasPrefix(err.Error(), "write orders/3 [120, 180): ") {
		t.Errorf("Write after Close: %v", err)
	}
}

func TestNew(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "made", "here")
	s, err := file.New(dir)
	if err != nil {
		t.Fatalf("New on a missing directory: %v", err)
	}
	s.Close()
	if s.Dir() != dir {
		t.Errorf("Dir %q, want %q", s.Dir(), dir)
	}
	f := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := file.New(f); err == nil {
		t.Error("New on a file returned nil")
	}
	if _, err := file.New(""); err == nil {
		t.Error(`New("") returned nil`)
	}
}

func TestReadAllRefusesMisplacedLines(t *testing.T) {
	dir := t.TempDir()
	s := newSink(t, dir)
	write(t, s, block("orders", 0, 0, 2, "a", 0, 1))
	src := filepath.Join(dir, "orders", "0", "00000000000000000000-00000000000000000002.jsonl")
	if err := os.MkdirAll(filepath.Join(dir, "orders", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(src, filepath.Join(dir, "orders", "1", filepath.Base(src))); err != nil {
		t.Fatal(err)
	}
	_, err := file.ReadAll(dir, "orders", 1)
	if err == nil || !strings.Contains(err.Error(), "read orders/1 [0, 2): ") || !strings.Contains(err.Error(), "orders/0") {
		t.Errorf("ReadAll of a moved file: %v", err)
	}
	if recs, err := file.ReadAll(dir, "orders", 7); err != nil || recs != nil {
		t.Errorf("ReadAll of a partition never written: %v, %v", recs, err)
	}
}

// TestZombieLateWriteIsFenced: a write held by a replica that lost its
// claim (paused past its lease) lands after the new owner wrote a larger
// block from the same offset. Superseding it would delete the new block and
// lose its records; the sink refuses the older epoch instead.
func TestZombieLateWriteIsFenced(t *testing.T) {
	dir := t.TempDir()
	s, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	fresh := &sinks.Block{Topic: "events", Partition: 3, Epoch: 137, From: 13, Next: 66}
	for off := int64(13); off < 66; off++ {
		fresh.Records = append(fresh.Records, sinks.Record{Offset: off, Value: []byte("new")})
	}
	if err := s.Write(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	late := &sinks.Block{Topic: "events", Partition: 3, Epoch: 6, From: 13, Next: 19}
	for off := int64(13); off < 19; off++ {
		late.Records = append(late.Records, sinks.Record{Offset: off, Value: []byte("old")})
	}
	if err := s.Write(ctx, late); !errors.Is(err, sinks.ErrFenced) {
		t.Fatalf("the zombie's write: %v, want an error wrapping sinks.ErrFenced", err)
	}
	recs, err := file.ReadAll(dir, "events", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 53 || recs[0].Offset != 13 || recs[52].Offset != 65 || string(recs[0].Value) != "new" {
		t.Fatalf("after the zombie's write the partition holds %d records (first %+v), want the new owner's 53", len(recs), recs[0])
	}
}
