package main

import (
	"context"
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
	`postgres://USER@HOST/DB[?table=T&mode=raw|columns|upsert] (exactly-once), ` +
	`clickhouse://[USER@]HOST:PORT/DB[?table=T&mode=raw|columns&protocol=native|http] (exactly-once by deduplication tokens; ` +
	`password in $` + clickhouse.PasswordEnv + ` or password_file=), stdout: (JSON lines) or discard: (count only)`

// postgresOpenTimeout bounds connecting to PostgreSQL and creating the
// sink's tables when a command starts; clickhouseOpenTimeout the same for
// ClickHouse.
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
	// log is the sink's logger where it takes one (clickhouse: its setup,
	// dead letters, retries and small-insert warnings); nil for none.
	log *zap.Logger
}

// parseSink checks a sink URL without touching anything.
func parseSink(raw string) (sinkTarget, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return sinkTarget{}, usagef("--sink %q: want %s", shownSink(raw), sinkURLHelp)
	}
	switch u.Scheme {
	case "file":
		// A file URL names an absolute directory: file:///DIR. In
		// file://data/x, "data" is the URL's host, and file:data is opaque:
		// both would be a directory relative to wherever the command runs.
		dir := u.Path
		switch {
		case u.Opaque != "" || (u.Host != "" && u.Host != "localhost") || (dir != "" && !filepath.IsAbs(dir)):
			return sinkTarget{}, usagef("--sink %q: not an absolute directory (a relative one would depend on where the command runs); "+
				"want file:///DIR with three slashes, such as file:///var/lib/offsetkeeper", raw)
		case dir == "":
			return sinkTarget{}, usagef("--sink %q: no directory; want file:///DIR", raw)
		}
		return sinkTarget{scheme: "file", dir: filepath.Clean(dir)}, nil
	case "stdout", "discard":
		return sinkTarget{scheme: u.Scheme}, nil
	case "postgres", "postgresql":
		if err := postgres.ValidateURL(raw, false); err != nil {
			return sinkTarget{}, usagef("--sink: %v", err)
		}
		return sinkTarget{scheme: "postgres", url: raw}, nil
	case "clickhouse":
		if err := clickhouse.ValidateURL(raw, false); err != nil {
			return sinkTarget{}, usagef("--sink: %v", err)
		}
		return sinkTarget{scheme: "clickhouse", url: raw}, nil
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
// clickhouse:// URL may hold a password, even one that does not parse.
func shownSink(raw string) string {
	shown := redactURL(raw)
	if i, j := strings.Index(shown, "://"), strings.LastIndex(shown, "@"); shown == raw && i >= 0 && j > i {
		return raw[:i+3] + "xxxxx" + raw[j:]
	}
	return shown
}

// open creates the sink; out is where stdout: writes. Waiting for a server
// ends with ctx (a SIGTERM), or after the open timeout.
func (t sinkTarget) open(ctx context.Context, out io.Writer) (sinks.Sink, error) {
	switch t.scheme {
	case "file":
		s, err := file.New(t.dir)
		if err != nil {
			return nil, fmt.Errorf("open sink file://%s: %w", t.dir, err)
		}
		return s, nil
	case "stdout":
		return stdout.New(out), nil
	case "postgres":
		ctx, cancel := context.WithTimeout(ctx, postgresOpenTimeout)
		defer cancel()
		var opts []postgres.Option
		if t.group != "" {
			opts = append(opts, postgres.WithGroup(t.group))
		}
		s, err := postgres.New(ctx, t.url, opts...)
		if err != nil {
			return nil, fmt.Errorf("open sink postgres: %w", err)
		}
		return s, nil
	case "clickhouse":
		ctx, cancel := context.WithTimeout(ctx, clickhouseOpenTimeout)
		defer cancel()
		var opts []clickhouse.Option
		if t.group != "" {
			opts = append(opts, clickhouse.WithGroup(t.group))
		}
		if t.log != nil {
			opts = append(opts, clickhouse.WithLogger(t.log))
		}
		s, err := clickhouse.New(ctx, t.url, opts...)
		if err != nil {
			return nil, fmt.Errorf("open sink clickhouse: %w", err)
		}
		return s, nil
	default:
		return discard.New(), nil
	}
}

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
