package sqlsink

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// SetupTimeout bounds creating a SQL sink's tables when a command opens
// it; waiting for a server that cannot be reached comes on top, bounded by
// the sink's own retry_timeout (Open).
const SetupTimeout = 30 * time.Second

// Open opens a SQL sink for a Descriptor: within SetupTimeout plus the
// URL's retry_timeout (def when not given), so that the sink's own "still
// unreachable after retry_timeout=..." is the error rather than a
// deadline. An error of one of refused, the URL's mistakes (a table the
// mode cannot use: table= or mode= names the wrong one, and no retry mends
// it), is a *sinks.URLError.
func Open[S sinks.Sink](ctx context.Context, scheme, raw string, def time.Duration, open func(ctx context.Context) (S, error), refused ...error) (sinks.Sink, error) {
	wait := def
	if u, err := url.Parse(raw); err == nil {
		if d, err := time.ParseDuration(u.Query().Get("retry_timeout")); err == nil && d >= 0 {
			wait = d
		}
	}
	ctx, cancel := context.WithTimeout(ctx, SetupTimeout+wait)
	defer cancel()
	s, err := open(ctx)
	for _, r := range refused {
		if errors.Is(err, r) {
			return nil, &sinks.URLError{URL: sinks.Redact(raw), Err: err}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open sink %s: %w", scheme, err)
	}
	return s, nil
}

// Options are the options of a SQL sink's New that o sets: its group and
// its logger, each where o has one.
func Options[O any](o sinks.Options, withGroup func(string) O, withLogger func(*zap.Logger) O) []O {
	var opts []O
	if o.Group != "" {
		opts = append(opts, withGroup(o.Group))
	}
	if o.Log != nil {
		opts = append(opts, withLogger(o.Log))
	}
	return opts
}

// Identity is a SQL sink's identity (sinks.Descriptor.Identity): its
// scheme, host, port (unless defaultPort is "", for a server whose ports
// all reach the same tables), database and table.
func Identity(scheme, raw, defaultTable, defaultPort string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return scheme + ":"
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "localhost"
	}
	if port == "" || defaultPort == "" {
		port = defaultPort
	}
	table := u.Query().Get("table")
	if table == "" {
		table = defaultTable
	}
	loc := host
	if port != "" {
		loc += ":" + port
	}
	return scheme + "://" + loc + "/" + strings.Trim(u.Path, "/") + "?table=" + table
}

// Reader is r as a sinks.Reader: nil when r is.
func Reader[R sinks.Reader](r R, err error) (sinks.Reader, error) {
	if err != nil {
		return nil, err
	}
	return r, nil
}

// The routing parameters both SQL sinks take.
const (
	ParamRouteField   = "route_field"
	ParamDefaultTable = "default_table"
)

// Routing is what a sink URL says of routing: the table template, and the
// route field and the table of the records without it.
type Routing struct {
	Template sinks.Template
	Field    string
	Default  sinks.Template
	// Dead is dead_letter_table= when it names a table per route ({topic},
	// {route}); not Routed (one table for all) otherwise.
	Dead sinks.Template
}

// DeadTable is the dead-letter table of rt: Dead's, or "" for the URL's
// one table.
func (r Routing) DeadTable(rt sinks.Route) string {
	if !r.Dead.Routed() && !r.Dead.ByRoute() {
		return ""
	}
	return r.Dead.Expand(rt.Topic, rt.Value)
}

// ParseRouting checks table=, route_field=, default_table= and
// dead_letter_table= together: {route} needs a route field, a route field
// needs {route}, the default table may name the topic but not a route,
// and the dead-letter table may name what the table names, so that the
// records of one table have one dead-letter table.
func ParseRouting(table, field, def, dead string) (Routing, error) {
	t, err := sinks.ParseTemplate(table)
	if err != nil {
		return Routing{}, err
	}
	r := Routing{Template: t, Field: field}
	if r.Dead, err = sinks.ParseTemplate(dead); err != nil {
		return Routing{}, fmt.Errorf("dead_letter_table: %w", err)
	}
	switch {
	case r.Dead.Routed() && !t.Routed(), r.Dead.ByRoute() && !t.ByRoute():
		return Routing{}, fmt.Errorf("dead_letter_table %q names what table %q does not: a table's records would have several dead-letter tables; "+
			"name in it only the placeholders of table", dead, table)
	case t.ByRoute() && field == "":
		return Routing{}, fmt.Errorf("table %q names {route}: give %s=FIELD, the top-level field of the record's value whose value names the table", table, ParamRouteField)
	case field != "" && !t.ByRoute():
		return Routing{}, fmt.Errorf("%s=%s: the table must name {route}, where the field's value goes (table=events_{route})", ParamRouteField, field)
	case def != "" && field == "":
		return Routing{}, fmt.Errorf("%s=%s is for %s=: the table of the records without the field", ParamDefaultTable, def, ParamRouteField)
	}
	if field == "" {
		return r, nil
	}
	if def == "" {
		def = strings.ReplaceAll(table, sinks.RoutePlaceholder, "default")
	}
	if r.Default, err = sinks.ParseTemplate(def); err != nil {
		return Routing{}, err
	}
	if r.Default.ByRoute() {
		return Routing{}, fmt.Errorf("%s=%s: the default table cannot name {route}: its records have none", ParamDefaultTable, def)
	}
	return r, nil
}

// RoutingOf is the routing of raw; ok is false when its table= names one
// table (or raw does not parse: Check says why).
func RoutingOf(raw string) (r Routing, ok bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return Routing{}, false
	}
	q := u.Query()
	r, err = ParseRouting(q.Get("table"), q.Get(ParamRouteField), q.Get(ParamDefaultTable), q.Get("dead_letter_table"))
	return r, err == nil && (r.Template.Routed() || r.Field != "")
}

// ForRoute is raw for one route's table: table= set to it, the routing
// parameters left out, and dead_letter_table= set to the route's when it
// names one per route. The other parameters stay as written.
func (r Routing) ForRoute(raw string, rt sinks.Route) string {
	return withTables(raw, rt.Table, r.DeadTable(rt))
}

// withTables is raw with table= set to table, dead_letter_table= to dead
// unless it is "", and the routing parameters left out.
func withTables(raw, table, dead string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	var keep []string
	for _, kv := range strings.Split(u.RawQuery, "&") {
		k, _, _ := strings.Cut(kv, "=")
		if k == "table" || k == ParamRouteField || k == ParamDefaultTable || kv == "" || (k == "dead_letter_table" && dead != "") {
			continue
		}
		keep = append(keep, kv)
	}
	keep = append(keep, "table="+url.QueryEscape(table))
	if dead != "" {
		keep = append(keep, "dead_letter_table="+url.QueryEscape(dead))
	}
	u.RawQuery = strings.Join(keep, "&")
	return u.String()
}

// Sample is raw for a table of its template, to check the URL's other
// parameters with: a route of topic "topic" and value "route".
func (r Routing) Sample(raw string) string {
	return r.ForRoute(raw, sinks.Route{Table: r.Template.Expand("topic", "route"), Topic: "topic", Value: "route"})
}
