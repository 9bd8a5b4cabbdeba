package sinks_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

func TestTableName(t *testing.T) {
	for topic, want := range map[string]string{
		"orders":        "orders",
		"Orders.EU-1":   "orders_eu_1",
		"db.public.t_a": "db_public_t_a",
		"2024-events":   "_2024_events",
	} {
		if got := sinks.TableName(topic); got != want {
			t.Errorf("TableName(%q) = %q, want %q", topic, got, want)
		}
	}
}

func TestParseTemplate(t *testing.T) {
	tm, err := sinks.ParseTemplate("raw.{topic}_v1")
	if err != nil {
		t.Fatal(err)
	}
	if !tm.Routed() || tm.Table("Orders.EU") != "raw.orders_eu_v1" || tm.String() != "raw.{topic}_v1" {
		t.Errorf("template: routed %v, table %q, string %q", tm.Routed(), tm.Table("Orders.EU"), tm.String())
	}
	plain, err := sinks.ParseTemplate("events")
	if err != nil || plain.Routed() || plain.Table("x") != "events" {
		t.Errorf("a plain table: %+v, %v", plain, err)
	}
	for _, bad := range []string{"{tenant}", "{topic}_{topic}", "t{", "{topic}}"} {
		if _, err := sinks.ParseTemplate(bad); err == nil || !strings.Contains(err.Error(), "{topic}") {
			t.Errorf("ParseTemplate(%q) = %v, want a refusal naming {topic}", bad, err)
		}
	}
}

// tableSink records the blocks written to one table.
type tableSink struct {
	table  string
	mu     sync.Mutex
	blocks []string
	claims []string
	closed bool
}

func (s *tableSink) Write(_ context.Context, b *sinks.Block) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blocks = append(s.blocks, b.String())
	return nil
}

func (s *tableSink) Close() error { s.closed = true; return nil }

func (s *tableSink) Resume(context.Context, string, int) (int64, int64, bool, error) {
	return 42, 0, true, nil
}

func (s *tableSink) ClaimDestination(_ context.Context, group string, topics []string, _ bool) error {
	if s.table == "taken" {
		return sinks.ErrDestinationClaimed
	}
	s.claims = append(s.claims, group+":"+strings.Join(topics, ","))
	return nil
}

// TestRouterWritesEachTopicToItsTable: a partition's blocks go to its
// topic's table and no other, each table's sink is opened once, a second
// topic of one table is refused, claims follow topics found later, and
// Close closes every table's sink and then the shared resource.
func TestRouterWritesEachTopicToItsTable(t *testing.T) {
	tm, err := sinks.ParseTemplate("{topic}")
	if err != nil {
		t.Fatal(err)
	}
	opened := map[string]*tableSink{}
	var mu sync.Mutex
	shared := false
	r := sinks.NewRouter(sinks.RouterConfig{Template: tm,
		Open: func(_ context.Context, rt sinks.Route) (sinks.Sink, error) {
			table := rt.Table
			mu.Lock()
			defer mu.Unlock()
			if opened[table] != nil {
				t.Errorf("table %s opened twice", table)
			}
			s := &tableSink{table: table}
			opened[table] = s
			return s, nil
		},
		Close: func() error { shared = true; return nil }})
	ctx := context.Background()
	if err := r.ClaimDestination(ctx, "g", []string{"orders.eu"}, false); err != nil {
		t.Fatal(err)
	}
	blocks := []*sinks.Block{
		{Topic: "orders.eu", Partition: 0, From: 0, Next: 3},
		{Topic: "orders.us", Partition: 0, From: 0, Next: 2},
		{Topic: "orders.eu", Partition: 1, From: 5, Next: 6},
		{Topic: "orders_eu", Partition: 0, From: 0, Next: 1},
	}
	errs := r.WriteBlocks(ctx, blocks)
	for i := range 3 {
		if errs[i] != nil {
			t.Errorf("block %v: %v", blocks[i], errs[i])
		}
	}
	if errs[3] == nil || !strings.Contains(errs[3].Error(), `"orders.eu" and "orders_eu" both map to table "orders_eu"`) {
		t.Errorf("a second topic of table orders_eu: %v, want a refusal naming both", errs[3])
	}
	if got := opened["orders_eu"].blocks; len(got) != 2 {
		t.Errorf("table orders_eu got %v, want the two blocks of orders.eu", got)
	}
	if got := opened["orders_us"].blocks; len(got) != 1 {
		t.Errorf("table orders_us got %v, want the block of orders.us", got)
	}
	if got := opened["orders_us"].claims; len(got) != 1 || got[0] != "g:orders.us" {
		t.Errorf("orders_us claimed %v, want g:orders.us at its first block", got)
	}
	if next, _, ok, err := r.Resume(ctx, "orders.us", 0); next != 42 || !ok || err != nil {
		t.Errorf("Resume = %d, %v, %v; want the table's sink's 42", next, ok, err)
	}
	if got := r.Tables(); strings.Join(got, ",") != "orders_eu,orders_us" {
		t.Errorf("Tables() = %v", got)
	}
	_, _, _, err = r.Resume(ctx, "taken", 0)
	if !errors.Is(err, sinks.ErrDestinationClaimed) {
		t.Errorf("a table another group writes: %v, want ErrDestinationClaimed", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for table, s := range opened {
		if !s.closed {
			t.Errorf("table %s's sink not closed", table)
		}
	}
	if !shared {
		t.Error("RouterConfig.Close not called")
	}
	if err := r.Write(ctx, blocks[0]); !errors.Is(err, sinks.ErrRouterClosed) {
		t.Errorf("Write after Close: %v, want ErrRouterClosed", err)
	}
}

// TestRouterWriteParts: routed by a field with WriteParts, a block's
// records are cut in parts by the field's value (a record without it, or
// not a JSON object, to the default table), every part of a call reaches
// WriteParts at once with its table's sink and the block's range, the
// parts' set-aside counts add up on the block, and Resume asks the
// default table's sink.
func TestRouterWriteParts(t *testing.T) {
	tm, _ := sinks.ParseTemplate("ev_{route}")
	def, _ := sinks.ParseTemplate("ev_default")
	opened := map[string]*tableSink{}
	var got [][]sinks.Part
	r := sinks.NewRouter(sinks.RouterConfig{Template: tm, Field: "tenant", Default: def,
		Open: func(_ context.Context, rt sinks.Route) (sinks.Sink, error) {
			s := &tableSink{table: rt.Table}
			opened[rt.Table] = s
			return s, nil
		},
		WriteParts: func(_ context.Context, blocks []*sinks.Block, parts [][]sinks.Part) []error {
			got = parts
			for _, ps := range parts {
				for _, p := range ps {
					p.Block.NoteSetAside(1)
				}
			}
			return make([]error, len(blocks))
		}})
	b := &sinks.Block{Topic: "t", Partition: 0, From: 10, Next: 20, Records: []sinks.Record{
		{Offset: 10, Value: []byte(`{"tenant":"EU","i":1}`)},
		{Offset: 12, Value: []byte(`{"i":2}`)},
		{Offset: 15, Value: []byte(`{"tenant":"us"}`)},
		{Offset: 17, Value: []byte(`not json`)},
		{Offset: 19, Value: []byte(`{"tenant":"eu"}`)},
	}}
	if errs := r.WriteBlocks(context.Background(), []*sinks.Block{b}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if len(got) != 1 || len(got[0]) != 3 {
		t.Fatalf("parts %v, want one block of three parts", got)
	}
	want := map[string][]int64{"ev_default": {12, 17}, "ev_eu": {10, 19}, "ev_us": {15}}
	for _, p := range got[0] {
		ts := p.Sink.(*tableSink)
		var offs []int64
		for _, rec := range p.Block.Records {
			offs = append(offs, rec.Offset)
		}
		if fmt.Sprint(offs) != fmt.Sprint(want[ts.table]) || p.Block.From != 10 || p.Block.Next != 20 {
			t.Errorf("part of %s: offsets %v in [%d, %d), want %v in [10, 20)", ts.table, offs, p.Block.From, p.Block.Next, want[ts.table])
		}
	}
	if b.SetAside != 3 {
		t.Errorf("the block's set aside %d, want the parts' 3", b.SetAside)
	}
	if _, _, _, err := r.Resume(context.Background(), "t", 0); err != nil || opened["ev_default"] == nil {
		t.Errorf("Resume: %v; want it asked of the default table's sink", err)
	}
	if r.NeedsIntents() {
		t.Error("a router with WriteParts asks for intents")
	}
}
