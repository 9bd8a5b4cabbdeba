package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
	"github.com/offsetkeeper/offsetkeeper/sinks/stdout"
)

const sinkURLHelp = `file:///DIR (JSON lines, one file per block), ` +
	`postgres://USER@HOST[:PORT]/DB[?table=T&mode=raw|columns|upsert] (exactly-once), ` +
	`clickhouse://[USER@]HOST[:PORT]/DB[?table=T&mode=raw|columns&protocol=native|http] (exactly-once by deduplication tokens; ` +
	`port 9000 by default; password in $` + clickhouse.PasswordEnv + ` or password_file=), stdout: (JSON lines) or discard: (count only)`

// postgresOpenTimeout bounds creating the PostgreSQL sink's tables when a
// command starts, clickhouseOpenTimeout the same for ClickHouse; waiting
// for a server that cannot be reached comes on top, bounded by the sink's
// own retry_timeout (see openTimeout).
const (
	postgresOpenTimeout   = 30 * time.Second
	clickhouseOpenTimeout = 30 * time.Second
)

// sinkTarget is a parsed --sink URL; open makes the sink.
type sinkTarget struct {
	scheme string
	dir    string
	url    string // postgres, clickhouse: the whole URL, which may hold a password
	// group keys the postgres sink's offsets table and is part of the
	// clickhouse sink's deduplication tokens; the commands set it from
	// --group (a group= in the URL must then agree).
	group string
	// urlGroup is the URL's group= (postgres, clickhouse), which the
	// command's --group must equal (setGroup).
	urlGroup string
	// log is the sink's logger where it takes one (clickhouse: its setup,
	// dead letters, retries and small-insert warnings; postgres: waits,
	// retries and dead letters; file: directories made again); nil for
	// none.
	log *zap.Logger
	// claim, when not empty, makes open record group as the writer of
	// these topics in the sink's destination and refuse one that another
	// group writes (a sinks.DestinationClaimer), unless shared
	// (run --allow-shared-sink).
	claim  []string
	shared bool
}

// setGroup sets the group the sink is opened for, the command's --group;
// a group= in the URL must be the same. An empty group is left to the
// command's check of --group.
func (t *sinkTarget) setGroup(group string) error {
	if t.urlGroup != "" && group != "" && t.urlGroup != group {
		return usagef("--sink %q: group=%s but --group is %s: the sink keeps one group's offsets; drop group= from the URL, or make it %s",
			shownSink(t.url), t.urlGroup, group, group)
	}
	t.group = group
	return nil
}

// parseSink checks a sink URL without touching anything.
func parseSink(raw string) (sinkTarget, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		// A database URL whose password holds @ or #: its sink says how
		// to write it.
		switch scheme, _, _ := strings.Cut(raw, "://"); scheme {
		case "postgres", "postgresql":
			if err := postgres.ValidateURL(raw, false); err != nil {
				return sinkTarget{}, usagef("--sink %q: %v", shownSink(raw), err)
			}
		case "clickhouse":
			if err := clickhouse.ValidateURL(raw, false); err != nil {
				return sinkTarget{}, usagef("--sink %q: %v", shownSink(raw), err)
			}
		}
		return sinkTarget{}, usagef("--sink %q: want %s", shownSink(raw), sinkURLHelp)
	}
	switch u.Scheme {
	case "file":
		// A file URL names an absolute directory: file:///DIR, or RFC
		// 8089's short form file:/DIR, which can mean nothing else. In
		// file://data/x, "data" is the URL's host, and file:data is opaque:
		// both would be a directory relative to wherever the command runs.
		dir := u.Path
		switch {
		case u.Opaque != "" || (u.Host != "" && u.Host != "localhost") || (dir != "" && !filepath.IsAbs(dir)):
			return sinkTarget{}, usagef("--sink %q: not an absolute directory (a relative one would depend on where the command runs); "+
				"want file:///DIR with three slashes, such as file:///var/lib/offsetkeeper", raw)
		case dir == "":
			return sinkTarget{}, usagef("--sink %q: no directory; want file:///DIR", raw)
		case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
			return sinkTarget{}, usagef("--sink %q: a file sink takes no user, parameters or fragment; want file:///DIR", raw)
		}
		return sinkTarget{scheme: "file", dir: filepath.Clean(dir)}, nil
	case "stdout", "discard":
		// Nothing follows the scheme: stdout:foo or discard:?x=1 is a
		// mistake, not an option to drop.
		if u.Opaque != "" || u.Host != "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
			return sinkTarget{}, usagef("--sink %q: %s: takes nothing after the colon; want %s:", shownSink(raw), u.Scheme, u.Scheme)
		}
		return sinkTarget{scheme: u.Scheme}, nil
	case "postgres", "postgresql":
		if err := postgres.ValidateURL(raw, false); err != nil {
			return sinkTarget{}, usagef("--sink %q: %v", shownSink(raw), err)
		}
		return sinkTarget{scheme: "postgres", url: raw, urlGroup: u.Query().Get("group")}, nil
	case "clickhouse":
		if err := clickhouse.ValidateURL(raw, false); err != nil {
			return sinkTarget{}, usagef("--sink %q: %v", shownSink(raw), err)
		}
		return sinkTarget{scheme: "clickhouse", url: raw, urlGroup: u.Query().Get("group")}, nil
	default:
		return sinkTarget{}, usagef("--sink %q: unknown scheme %q; want %s", shownSink(raw), u.Scheme, sinkURLHelp)
	}
}

// parseSinkFlag is parseSink of a --sink that may be empty (no sink).
func parseSinkFlag(raw string) (sinkTarget, error) {
	if raw == "" {
		return sinkTarget{}, nil
	}
	return parseSink(raw)
}

// shownSink is a --sink value fit for a message: a postgres:// or
// clickhouse:// URL may hold a password, even one that does not parse. The
// password is masked, and parameters named like secrets; the user name is
// shown, since which role connects is what a reader of the message needs.
func shownSink(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || strings.Contains(raw, "#") {
		// Unparsed, or parsed at a '#' of a password: mask up to the last
		// '@', which ends the user-info as the writer meant it.
		i, j := strings.Index(raw, "://"), strings.LastIndex(raw, "@")
		if i < 0 || j < i {
			return redactURL(raw)
		}
		if user, _, hasPassword := strings.Cut(raw[i+3:j], ":"); hasPassword {
			return raw[:i+3] + user + ":xxxxx" + raw[j:]
		}
		return raw
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	redactQuery(u)
	return u.String()
}

// openTimeout bounds opening a database sink: setup for creating its
// tables, and on top the time the sink waits for a server it cannot reach,
// its URL's retry_timeout (def when not given), so that the sink's own
// "still unreachable after retry_timeout=..." is the error rather than a
// deadline.
func (t sinkTarget) openTimeout(setup, def time.Duration) time.Duration {
	wait := def
	if u, err := url.Parse(t.url); err == nil {
		if d, err := time.ParseDuration(u.Query().Get("retry_timeout")); err == nil && d >= 0 {
			wait = d
		}
	}
	return setup + wait
}

// open creates the sink, and claims its destination for the group if
// asked (claim); out is where stdout: writes. Waiting for a server ends
// with ctx (a SIGTERM), or after the open timeout.
func (t sinkTarget) open(ctx context.Context, out io.Writer) (sinks.Sink, error) {
	s, err := t.openSink(ctx, out)
	if err != nil {
		return nil, err
	}
	if err := t.claimDestination(ctx, s); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func (t sinkTarget) openSink(ctx context.Context, out io.Writer) (sinks.Sink, error) {
	switch t.scheme {
	case "file":
		var opts []file.Option
		if t.log != nil {
			opts = append(opts, file.WithLogger(t.log))
		}
		s, err := file.New(t.dir, opts...)
		if err != nil {
			return nil, fmt.Errorf("open sink file://%s: %w", t.dir, err)
		}
		return s, nil
	case "stdout":
		return stdout.New(out), nil
	case "postgres":
		ctx, cancel := context.WithTimeout(ctx, t.openTimeout(postgresOpenTimeout, postgres.DefaultRetryTimeout))
		defer cancel()
		s, err := postgres.New(ctx, t.url, sqlSinkOptions(t, postgres.WithGroup, postgres.WithLogger)...)
		if errors.Is(err, postgres.ErrURL) || errors.Is(err, postgres.ErrTableShape) {
			// A table the mode cannot use is the URL's mistake too: table=
			// or mode= names the wrong one, and no retry mends it.
			return nil, usage(fmt.Errorf("--sink %q: %w", shownSink(t.url), err))
		}
		if err != nil {
			return nil, fmt.Errorf("open sink postgres: %w", err)
		}
		return s, nil
	case "clickhouse":
		ctx, cancel := context.WithTimeout(ctx, t.openTimeout(clickhouseOpenTimeout, clickhouse.DefaultRetryTimeout))
		defer cancel()
		s, err := clickhouse.New(ctx, t.url, sqlSinkOptions(t, clickhouse.WithGroup, clickhouse.WithLogger)...)
		if errors.Is(err, clickhouse.ErrURL) || errors.Is(err, clickhouse.ErrTableShape) || errors.Is(err, clickhouse.ErrNoDeduplication) {
			return nil, usage(fmt.Errorf("--sink %q: %w", shownSink(t.url), err))
		}
		if err != nil {
			return nil, fmt.Errorf("open sink clickhouse: %w", err)
		}
		return s, nil
	default:
		return discard.New(), nil
	}
}

// sqlSinkOptions are the options of a SQL sink's New that t sets: its group
// and its logger, each where t has one.
func sqlSinkOptions[O any](t sinkTarget, withGroup func(string) O, withLogger func(*zap.Logger) O) []O {
	var opts []O
	if t.group != "" {
		opts = append(opts, withGroup(t.group))
	}
	if t.log != nil {
		opts = append(opts, withLogger(t.log))
	}
	return opts
}

// claimDestination records t.group as the writer of t.claim in s's
// destination, where s can tell (sinks.DestinationClaimer). Another
// group's destination is bad usage (exit 2, nothing written), unless
// t.shared: then it is logged and the free topics are claimed.
func (t sinkTarget) claimDestination(ctx context.Context, s sinks.Sink) error {
	c, ok := s.(sinks.DestinationClaimer)
	if !ok || len(t.claim) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	err := c.ClaimDestination(ctx, t.group, t.claim, false)
	if errors.Is(err, sinks.ErrDestinationClaimed) {
		if !t.shared {
			return usagef("--sink: %w; to have both groups write it anyway (for a reader that deduplicates), give --allow-shared-sink", err)
		}
		if t.log != nil {
			t.log.Warn("the sink's destination is written by another group too; going on (--allow-shared-sink)", zap.Error(err))
		}
		err = c.ClaimDestination(ctx, t.group, t.claim, true)
	}
	if err != nil {
		return fmt.Errorf("claim the sink's destination for group %s: %w", t.group, err)
	}
	return nil
}

// claimTimeout bounds claiming the sink's destination: the server answered
// a moment ago, when the sink opened.
const claimTimeout = 30 * time.Second

// identity names the sink to the group, as every member advertises it
// (replica.Config.Sink): its scheme and where it writes, never a user or
// a secret. Two URLs that write to the same place have the same identity.
func (t sinkTarget) identity() string {
	switch t.scheme {
	case "file":
		return "file://" + t.dir
	case "postgres", "clickhouse":
		u, err := url.Parse(t.url)
		if err != nil {
			return t.scheme + ":"
		}
		host, port := u.Hostname(), u.Port()
		if host == "" {
			host = "localhost"
		}
		if port == "" && t.scheme == "postgres" {
			port = "5432"
		}
		table := u.Query().Get("table")
		if table == "" {
			table = postgres.DefaultTable
			if t.scheme == "clickhouse" {
				table = clickhouse.DefaultTable
			}
		}
		loc := host
		if port != "" && t.scheme == "postgres" {
			// A ClickHouse server answers the native protocol and HTTP on
			// two ports: the table is the same.
			loc += ":" + port
		}
		return t.scheme + "://" + loc + "/" + strings.Trim(u.Path, "/") + "?table=" + table
	default:
		return t.scheme + ":"
	}
}
