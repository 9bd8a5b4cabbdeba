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

// Routed is the template of raw's table= when it names a table per topic
// ({topic}); ok is false otherwise, and for a URL that does not parse.
func Routed(raw string) (t sinks.Template, ok bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return sinks.Template{}, false
	}
	t, err = sinks.ParseTemplate(u.Query().Get("table"))
	return t, err == nil && t.Routed()
}

// WithTable is raw with table= set to table: the URL of one route of a
// table template.
func WithTable(raw, table string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set("table", table)
	u.RawQuery = q.Encode()
	return u.String()
}
