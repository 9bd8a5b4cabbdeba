package sqlsink

import (
	"strings"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

func TestParseRouting(t *testing.T) {
	for _, c := range []struct {
		table, field, def, dead string
		refused                 string
	}{
		{table: "{topic}"},
		{table: "{topic}", dead: "{topic}_dead"},
		{table: "events_{route}", field: "tenant", dead: "dead_{route}"},
		{table: "events_{route}", refused: "give route_field=FIELD"},
		{table: "events", field: "tenant", refused: "the table must name {route}"},
		{table: "events", def: "other", refused: "default_table=other is for route_field="},
		{table: "events_{route}", field: "tenant", def: "x_{route}", refused: "cannot name {route}"},
		{table: "events_{route}", field: "tenant", dead: "dead_{topic}", refused: "names what table"},
		{table: "{topic}", dead: "dead_{route}", refused: "names what table"},
	} {
		_, err := ParseRouting(c.table, c.field, c.def, c.dead)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%+v: %v", c, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%+v: %v, want a refusal saying %q", c, err, c.refused)
		}
	}
	r, err := ParseRouting("events_{route}", "tenant", "", "dead_{route}")
	if err != nil {
		t.Fatal(err)
	}
	got := r.ForRoute("postgres://db/x?sslmode=disable&table=events_{route}&route_field=tenant&dead_letter_table=dead_{route}",
		sinks.Route{Table: "events_eu", Topic: "t", Value: "EU"})
	if got != "postgres://db/x?sslmode=disable&table=events_eu&dead_letter_table=dead_eu" {
		t.Errorf("ForRoute = %s", got)
	}
	if d := r.Default.Table("t"); d != "events_default" {
		t.Errorf("the default table %q, want events_default", d)
	}
}
