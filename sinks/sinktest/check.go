package sinktest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// write writes b and stops the subtest on error.
func write(t *testing.T, s sinks.Sink, b *sinks.Block) {
	t.Helper()
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatalf("Write %s: %v", b, err)
	}
}

// check compares what r reads for a partition with want, which is ordered by
// offset. With exact, each record must be there once; without, a record may
// repeat, but the offsets still come in order, each copy must be right and
// no other record may be there.
func check(t *testing.T, r Reader, topic string, partition int, want []sinks.Record, exact bool) {
	t.Helper()
	got := r.Records(t, topic, partition)
	where := fmt.Sprintf("%s/%d", topic, partition)
	if exact {
		if len(got) != len(want) {
			t.Errorf("%s: read %d records, want %d; offsets read %v, want %v", where, len(got), len(want), offsets(got), offsets(want))
			return
		}
		for i := range want {
			if d := diffRecords(&got[i], &want[i]); d != "" {
				t.Errorf("%s: record %d: %s", where, i, d)
			}
		}
		return
	}
	byOffset := make(map[int64]*sinks.Record, len(want))
	for i := range want {
		byOffset[want[i].Offset] = &want[i]
	}
	seen := make(map[int64]bool, len(want))
	for i := range got {
		if i > 0 && got[i].Offset < got[i-1].Offset {
			t.Errorf("%s: offset %d read after %d: want offset order", where, got[i].Offset, got[i-1].Offset)
		}
		w, ok := byOffset[got[i].Offset]
		if !ok {
			t.Errorf("%s: read offset %d, which was never written", where, got[i].Offset)
			continue
		}
		if d := diffRecords(&got[i], w); d != "" {
			t.Errorf("%s: record %d: %s", where, i, d)
		}
		seen[got[i].Offset] = true
	}
	for _, w := range want {
		if !seen[w.Offset] {
			t.Errorf("%s: offset %d missing", where, w.Offset)
		}
	}
}

// diffRecords describes how got differs from want, or returns "".
func diffRecords(got, want *sinks.Record) string {
	var d []string
	if got.Offset != want.Offset {
		d = append(d, fmt.Sprintf("offset %d, want %d", got.Offset, want.Offset))
	}
	if s := diffBytes("key", got.Key, want.Key); s != "" {
		d = append(d, s)
	}
	if s := diffBytes("value", got.Value, want.Value); s != "" {
		d = append(d, s)
	}
	if !got.Time.Equal(want.Time) {
		d = append(d, fmt.Sprintf("time %s, want %s", got.Time.UTC().Format(time.RFC3339Nano), want.Time.UTC().Format(time.RFC3339Nano)))
	}
	if len(got.Headers) != len(want.Headers) {
		d = append(d, fmt.Sprintf("%d headers, want %d", len(got.Headers), len(want.Headers)))
	} else {
		for i := range want.Headers {
			g, w := got.Headers[i], want.Headers[i]
			if g.Key != w.Key {
				d = append(d, fmt.Sprintf("header %d key %q, want %q", i, g.Key, w.Key))
			}
			if s := diffBytes(fmt.Sprintf("header %d value", i), g.Value, w.Value); s != "" {
				d = append(d, s)
			}
		}
	}
	if len(d) > 0 {
		return fmt.Sprintf("offset %d: %s", want.Offset, strings.Join(d, "; "))
	}
	return ""
}

func diffBytes(what string, got, want []byte) string {
	switch {
	case got == nil && want != nil:
		return fmt.Sprintf("%s nil, want %s", what, show(want))
	case got != nil && want == nil:
		return fmt.Sprintf("%s %s, want nil", what, show(got))
	case !bytes.Equal(got, want):
		return fmt.Sprintf("%s %s, want %s", what, show(got), show(want))
	}
	return ""
}

// show prints bytes for a failure message, cut short when long.
func show(b []byte) string {
	if len(b) > 64 {
		return fmt.Sprintf("%q... (%d bytes)", b[:64], len(b))
	}
	return fmt.Sprintf("%q", b)
}

func diffBlocks(got, want *sinks.Block) string {
	if got.Topic != want.Topic || got.Partition != want.Partition || got.Epoch != want.Epoch ||
		got.Generation != want.Generation || got.From != want.From || got.Next != want.Next {
		return fmt.Sprintf("block %s, want %s", got, want)
	}
	if len(got.Records) != len(want.Records) {
		return fmt.Sprintf("%d records, want %d", len(got.Records), len(want.Records))
	}
	for i := range want.Records {
		if d := diffRecords(&got.Records[i], &want.Records[i]); d != "" {
			return d
		}
	}
	return ""
}

func offsets(recs []sinks.Record) []int64 {
	o := make([]int64, len(recs))
	for i, r := range recs {
		o[i] = r.Offset
	}
	return o
}
