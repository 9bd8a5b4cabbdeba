package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestRouteFieldWritesPartsInOneTransaction: routed by a field, a block's
// records go to a table per value and the partition's one offsets row
// moves once, in raw mode and in columns mode (whose parts are staged one
// table after the other in one transaction: each table gets its own rows
// and no other's). The block written again is skipped whole; in raw mode,
// after an operator's reset, it comes again through the staging of every
// table, still each table its own rows once; Resume reads the shared row;
// a zombie's block is refused with none of its parts written; the
// server's durability is logged once, not once a table.
func TestRouteFieldWritesPartsInOneTransaction(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := db(t, pg)
	for _, mode := range []string{"raw", "columns"} {
		t.Run(mode, func(t *testing.T) {
			n := tables.Add(1)
			url := fmt.Sprintf("%s&group=g&mode=%s&table=t%d_{route}&route_field=tenant&offsets_table=offsets_%d&dead_letter_table=dead_%d",
				pg.URL(), mode, n, n, n)
			if mode == "columns" {
				for _, v := range []string{"a", "b", "default"} {
					pg.Exec(t, fmt.Sprintf(`CREATE TABLE t%d_%s (kafka_offset bigint, tenant text, i int)`, n, v))
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			core, logs := observer.New(zap.InfoLevel)
			s, err := postgres.Descriptor.Open(ctx, url, sinks.Options{Group: "g", Log: zap.New(core)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if _, ok := s.(sinks.IntentKeeper); ok && s.(sinks.IntentKeeper).NeedsIntents() {
				t.Error("a router by field into PostgreSQL asks for intents; its offsets row is one per partition")
			}
			block := func(gen int64) *sinks.Block {
				b := &sinks.Block{Topic: "ev", Partition: 0, Epoch: 1, Generation: gen, From: 0, Next: 6}
				for i, tenant := range []string{"a", "b", "a", "", "b", "a"} {
					v := fmt.Sprintf(`{"i":%d,"tenant":%q}`, i, tenant)
					if tenant == "" {
						v = fmt.Sprintf(`{"i":%d}`, i)
					}
					b.Records = append(b.Records, sinks.Record{Offset: int64(i), Value: []byte(v), Time: time.UnixMilli(1)})
				}
				return b
			}
			check := func(when string) {
				t.Helper()
				for tenant, want := range map[string]string{"a": "0,2,5", "b": "1,4", "default": "3"} {
					off := `"offset"`
					if mode == "columns" {
						off = "kafka_offset"
					}
					var got string
					if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT string_agg(%s::text, ',' ORDER BY %s) FROM t%d_%s`, off, off, n, tenant)).Scan(&got); err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Errorf("%s: table %s holds offsets %s, want %s", when, tenant, got, want)
					}
				}
			}
			if err := s.Write(ctx, block(0)); err != nil {
				t.Fatal(err)
			}
			check("first write")
			if err := s.Write(ctx, block(0)); err != nil {
				t.Fatal(err)
			}
			check("the block again")
			gen := int64(0)
			if mode == "raw" { // a columns table has no key: a reset writes its rows again, as with one table
				gen = 1
				if err := s.Write(ctx, block(gen)); err != nil {
					t.Fatal(err)
				}
				check("after a reset")
			}
			next, g, ok, err := s.(sinks.Resumer).Resume(ctx, "ev", 0)
			if err != nil || !ok || next != 6 || g != gen {
				t.Errorf("Resume = %d, %d, %v, %v; want 6 of generation %d from the one offsets row", next, g, ok, err, gen)
			}
			var rows int
			if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM offsets_%d`, n)).Scan(&rows); err != nil || rows != 1 {
				t.Errorf("offsets_%d has %d rows (%v), want the partition's one", n, rows, err)
			}
			// A zombie's block (an older epoch) is refused whole: none of
			// its parts is written, the offsets row stays.
			zombie := block(gen)
			zombie.Epoch, zombie.From, zombie.Next = 0, 6, 8
			zombie.Records = []sinks.Record{{Offset: 6, Value: []byte(`{"tenant":"a"}`), Time: time.UnixMilli(1)},
				{Offset: 7, Value: []byte(`{"tenant":"b"}`), Time: time.UnixMilli(1)}}
			if err := s.Write(ctx, zombie); !errors.Is(err, sinks.ErrFenced) {
				t.Errorf("a block of an older epoch: %v, want ErrFenced", err)
			}
			check("after a zombie's block")
			if next, _, _, _ := s.(sinks.Resumer).Resume(ctx, "ev", 0); next != 6 {
				t.Errorf("after a zombie's block Resume says %d, want 6", next)
			}
			// The server's durability is said once for the router, not
			// once a table (the test server runs with fsync = off).
			if got := logs.FilterMessageSnippet("fsync = off").Len(); got != 1 {
				t.Errorf("the fsync line logged %d times for three tables, want once", got)
			}
		})
	}
}
