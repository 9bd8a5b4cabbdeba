package file

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// writeFile writes a block file [from, next) of t/0 with the lines of offs,
// in that order.
func writeFile(t *testing.T, dir string, from, next int64, offs ...int64) {
	t.Helper()
	pdir := filepath.Join(dir, "t", "0")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, o := range offs {
		b = AppendLine(b, "t", 0, &sinks.Record{Offset: o, Value: []byte(`{}`), Time: time.Unix(0, 0)})
	}
	if err := os.WriteFile(filepath.Join(pdir, fmt.Sprintf("%020d-%020d.jsonl", from, next)), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// held reads back what the file reader holds: offset, copies.
func held(t *testing.T, dir string) [][2]int64 {
	t.Helper()
	s, err := openReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Offsets(context.Background(), "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]int64
	for {
		e, ok, err := st.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		if !e.Summed {
			t.Fatalf("offset %d not summed", e.Offset)
		}
		out = append(out, [2]int64{e.Offset, e.Copies})
	}
}

func TestFileSinkReadsAsReadAll(t *testing.T) {
	dir := t.TempDir()
	// [0, 5) then a re-delivery from 3 (after a reset): 3 and 4 of the
	// first file are superseded, not held twice. A repeated line in
	// [5, 8) is held twice; a block of the same From as a later one is
	// superseded whole.
	writeFile(t, dir, 0, 5, 0, 1, 2, 3, 4)
	writeFile(t, dir, 3, 6, 3, 4, 5)
	writeFile(t, dir, 6, 8, 7, 6, 7) // out of order within the file: sorted
	writeFile(t, dir, 8, 9, 8)
	writeFile(t, dir, 8, 10, 8, 9)
	if err := os.WriteFile(filepath.Join(dir, "t", "0", ".tmp-123"), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := held(t, dir)
	want := [][2]int64{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}, {7, 2}, {8, 1}, {9, 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("held %v, want %v", got, want)
	}
	recs, err := ReadAll(dir, "t", 0)
	if err == nil {
		t.Fatalf("ReadAll read %d records of a file whose offsets do not rise", len(recs))
	}
}

func TestFileSinkRefusesLinesOutOfPlace(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, 0, 2, 0, 1, 2) // 2 is outside [0, 2)
	s, _ := openReader(dir)
	st, err := s.Offsets(context.Background(), "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Next(context.Background()); err == nil {
		t.Fatal("a line outside its block's range: no error")
	}
}

// TestFileSinkSumsRecords: each line's record is summed as Kafka's would
// be (key, value, timestamp); two lines of one offset that differ are
// mixed; a line decoded through a Schema Registry is not summed.
func TestFileSinkSumsRecords(t *testing.T) {
	dir := t.TempDir()
	pdir := filepath.Join(dir, "t", "0")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	recs := []sinks.Record{
		{Offset: 0, Key: []byte("k0"), Value: []byte(`{"a": 1}`), Time: time.UnixMilli(1000)},
		{Offset: 1, Key: nil, Value: nil, Time: time.UnixMilli(2000)},
		{Offset: 2, Key: []byte{}, Value: []byte{0xff, 0}, Time: time.UnixMilli(3000)},
		{Offset: 2, Key: []byte{}, Value: []byte("other"), Time: time.UnixMilli(3000)},
		{Offset: 3, Value: []byte(`{"decoded":true}`), Time: time.UnixMilli(4000),
			Decoded: &sinks.Decoded{ValueSchema: &sinks.Schema{ID: 7}}},
	}
	var b []byte
	for i := range recs {
		b = AppendLine(b, "t", 0, &recs[i])
	}
	if err := os.WriteFile(filepath.Join(pdir, fmt.Sprintf("%020d-%020d.jsonl", 0, 4)), b, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := openReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Offsets(context.Background(), "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []sinks.Entry
	for {
		e, ok, err := st.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, e)
	}
	want := []sinks.Entry{
		{Offset: 0, Copies: 1, Sum: recs[0].Sum(), Summed: true},
		{Offset: 1, Copies: 1, Sum: recs[1].Sum(), Summed: true},
		{Offset: 2, Copies: 2, Sum: recs[2].Sum(), Summed: true, Mixed: true},
		{Offset: 3, Copies: 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("entries:\n%+v\nwant:\n%+v", got, want)
	}
}
