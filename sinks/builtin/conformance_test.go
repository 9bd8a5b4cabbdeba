package builtin_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/builtin"
	"github.com/offsetkeeper/offsetkeeper/sinks/sinktest"
)

// fixture is how the conformance suite reaches one sink of the table:
// setup starts what the sink needs (a server), for the test t, and returns
// a new URL of an empty destination for each sink the suite opens; opts
// says what the sink promises beyond the contract.
type fixture struct {
	setup func(t *testing.T) (url func(t *testing.T) string)
	opts  sinktest.Options
}

var tables atomic.Int64

// fixtures are the sinks of the built-in table, by scheme. A sink added to
// the table needs one here: TestEverySinkOfTheTableConforms fails without.
func fixtures() map[string]fixture {
	return map[string]fixture{
		"file": {setup: fixed(func(t *testing.T) string { return "file://" + t.TempDir() }),
			opts: sinktest.Options{ReplayExact: true, ReplayOverlap: true, Fences: true}},
		"stdout":  {setup: fixed(func(*testing.T) string { return "stdout:" })},
		"discard": {setup: fixed(func(*testing.T) string { return "discard:" })},
		"postgres": {setup: func(t *testing.T) func(*testing.T) string {
			pg := harness.StartPostgres(t)
			return func(*testing.T) string {
				n := tables.Add(1)
				return fmt.Sprintf("%s&table=rows_%d&offsets_table=offsets_%d&dead_letter_table=dead_%d", pg.URL(), n, n, n)
			}
		}, opts: sinktest.Options{ReplayExact: true, ReplayOverlap: true, Fences: true}},
		"clickhouse": {setup: func(t *testing.T) func(*testing.T) string {
			chs := harness.StartClickHouse(t)
			return func(*testing.T) string {
				n := tables.Add(1)
				return fmt.Sprintf("%s?table=rows_%d&dead_letter_table=dead_%d", chs.DSN(), n, n)
			}
		}, opts: sinktest.Options{ReplayExact: true}},
	}
}

// fixed is a setup that needs nothing started.
func fixed(url func(t *testing.T) string) func(*testing.T) func(*testing.T) string {
	return func(*testing.T) func(*testing.T) string { return url }
}

// TestEverySinkOfTheTableConforms runs the conformance suite on every sink
// of the built-in table, each opened as the commands open it (its
// Descriptor's Open) and read back as dev reads it (ReadBack).
func TestEverySinkOfTheTableConforms(t *testing.T) {
	fx := fixtures()
	for _, d := range builtin.Sinks() {
		t.Run(d.Scheme, func(t *testing.T) {
			f, ok := fx[d.Scheme]
			if !ok {
				t.Fatalf("sink %s has no fixture: add one to fixtures", d.Scheme)
			}
			newURL := f.setup(t)
			sinktest.Run(t, func(t *testing.T) (sinks.Sink, sinktest.Reader) {
				url := newURL(t)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var out bytes.Buffer
				s, err := d.Open(ctx, url, sinks.Options{Group: "g", Out: &out})
				if err != nil {
					t.Fatalf("open %s: %v", sinks.Redact(url), err)
				}
				t.Cleanup(func() { _ = s.Close() })
				if d.ReadBack == nil {
					return s, nil
				}
				return s, sinktest.ReaderFunc(func(t *testing.T, topic string, partition int) []sinks.Record {
					recs, ok, err := d.ReadBack(context.Background(), url, topic, partition)
					if err != nil || !ok {
						t.Fatalf("read back %s/%d: %v (ok %v)", topic, partition, err, ok)
					}
					return recs
				})
			}, f.opts)
		})
	}
}
