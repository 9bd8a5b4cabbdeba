package file

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Descriptor is the file sink's entry in a sinks.Table: file:///DIR.
var Descriptor = &sinks.Descriptor{
	Scheme: "file",
	Usage:  "file:///DIR (JSON lines, one file per block; ?route_field=F: a directory per value of F)",
	Params: []sinks.Param{
		{Name: paramRouteField, Default: "—", Meaning: "route each record by this top-level field of its value into `DIR/VALUE/` (the value made a name as topics are made table names: docs/topics.md)"},
		{Name: paramDefaultRoute, Default: "`default`", Meaning: "with `route_field`: the directory under `DIR` of the records without the field"},
	},
	Doc:   "sink-file.md",
	Check: func(raw string) error { _, err := Dir(raw); return err },
	Open: func(_ context.Context, raw string, o sinks.Options) (sinks.Sink, error) {
		dir, err := Dir(raw)
		if err != nil {
			return nil, &sinks.URLError{URL: raw, Err: err}
		}
		var opts []Option
		if o.Log != nil {
			opts = append(opts, WithLogger(o.Log))
		}
		if field, def := route(raw); field != "" {
			return routes(dir, field, def, opts)
		}
		s, err := New(dir, opts...)
		if err != nil {
			return nil, fmt.Errorf("open sink file://%s: %w", dir, err)
		}
		return s, nil
	},
	Identity: func(raw string) string {
		dir, _ := Dir(raw)
		return "file://" + dir
	},
	Keeps: true,
	Audit: func(_ context.Context, raw, _, _ string) (sinks.Reader, error) {
		dir, err := Dir(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", sinks.ErrUnreadable, raw, err)
		}
		if field, _ := route(raw); field != "" {
			return nil, fmt.Errorf("%w: %s: routed by %s, it keeps a part of each partition in each route's directory; audit one with file://%s/ROUTE",
				sinks.ErrUnreadable, raw, field, dir)
		}
		return openReader(dir)
	},
	ReadBack: func(_ context.Context, raw, topic string, partition int) ([]sinks.Record, bool, error) {
		dir, err := Dir(raw)
		if err != nil {
			return nil, false, err
		}
		recs, err := ReadAll(dir, topic, partition)
		return recs, err == nil, err
	},
}

// Dir is the directory of a file sink URL. A file URL names an absolute
// directory: file:///DIR, or RFC 8089's short form file:/DIR, which can
// mean nothing else. In file://data/x, "data" is the URL's host, and
// file:data is opaque: both would be a directory relative to wherever the
// command runs.
func Dir(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("want file:///DIR, such as file:///var/lib/offsetkeeper")
	}
	dir := u.Path
	switch {
	case u.Opaque != "" || (u.Host != "" && u.Host != "localhost") || (dir != "" && !filepath.IsAbs(dir)):
		return "", errors.New("not an absolute directory (a relative one would depend on where the command runs); " +
			"want file:///DIR with three slashes, such as file:///var/lib/offsetkeeper")
	case dir == "":
		return "", errors.New("no directory; want file:///DIR")
	case u.User != nil || u.ForceQuery || u.Fragment != "":
		return "", errors.New("a file sink takes no user or fragment; want file:///DIR")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", fmt.Errorf("query: %w", err)
	}
	for k, v := range q {
		switch {
		case k != paramRouteField && k != paramDefaultRoute:
			return "", fmt.Errorf("unknown parameter %q: a file sink takes %s= and %s= only; want file:///DIR", k, paramRouteField, paramDefaultRoute)
		case len(v) > 1 || v[0] == "":
			return "", fmt.Errorf("%s= given empty or twice", k)
		}
	}
	if q.Has(paramDefaultRoute) && !q.Has(paramRouteField) {
		return "", fmt.Errorf("%s= is for %s=: the directory of the records without the field", paramDefaultRoute, paramRouteField)
	}
	if d := q.Get(paramDefaultRoute); d != "" && sinks.TableName(d) != d {
		return "", fmt.Errorf("%s=%s: want a name of a-z, 0-9 and _, not starting with a digit, such as %s", paramDefaultRoute, d, sinks.TableName(d))
	}
	return filepath.Clean(dir), nil
}

// The file sink's parameters: routing by field into directories.
const (
	paramRouteField   = "route_field"
	paramDefaultRoute = "default_route"
)

// route is a checked URL's route field and default directory; field is
// "" without routing.
func route(raw string) (field, def string) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", ""
	}
	q := u.Query()
	return q.Get(paramRouteField), cmp.Or(q.Get(paramDefaultRoute), "default")
}

// routes is a sinks.Router by field whose routes are file sinks, one
// directory each under dir: a block's part of each route is written there
// as a block with the block's range, replacing what a replay wrote.
func routes(dir, field, def string, opts []Option) (sinks.Sink, error) {
	tm, err := sinks.ParseTemplate(sinks.RoutePlaceholder)
	if err != nil {
		return nil, err
	}
	dt, err := sinks.ParseTemplate(def)
	if err != nil {
		return nil, err
	}
	return sinks.NewRouter(sinks.RouterConfig{Template: tm, Field: field, Default: dt,
		Open: func(_ context.Context, rt sinks.Route) (sinks.Sink, error) {
			name := rt.Table
			s, err := New(filepath.Join(dir, name), opts...)
			if err != nil {
				return nil, fmt.Errorf("open sink file://%s: %w", filepath.Join(dir, name), err)
			}
			return s, nil
		}}), nil
}
