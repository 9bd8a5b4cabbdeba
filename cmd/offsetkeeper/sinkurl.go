package main

import (
	"fmt"
	"io"
	"net/url"
	"path/filepath"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
	"github.com/offsetkeeper/offsetkeeper/sinks/stdout"
)

const sinkURLHelp = `file:///DIR (JSON lines, one file per block), stdout: (JSON lines) or discard: (count only)`

// sinkTarget is a parsed --sink URL; open makes the sink.
type sinkTarget struct {
	scheme string
	dir    string
}

// parseSink checks a sink URL without touching anything.
func parseSink(raw string) (sinkTarget, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return sinkTarget{}, usagef("--sink %q: want %s", raw, sinkURLHelp)
	}
	switch u.Scheme {
	case "file":
		dir := u.Host + u.Path
		if u.Opaque != "" {
			dir = u.Opaque
		}
		if dir == "" {
			return sinkTarget{}, usagef("--sink %q: no directory; want file:///DIR", raw)
		}
		return sinkTarget{scheme: "file", dir: filepath.Clean(dir)}, nil
	case "stdout", "discard":
		return sinkTarget{scheme: u.Scheme}, nil
	default:
		return sinkTarget{}, usagef("--sink %q: unknown scheme %q; want %s", raw, u.Scheme, sinkURLHelp)
	}
}

// open creates the sink; out is where stdout: writes.
func (t sinkTarget) open(out io.Writer) (sinks.Sink, error) {
	switch t.scheme {
	case "file":
		s, err := file.New(t.dir)
		if err != nil {
			return nil, fmt.Errorf("open sink file://%s: %w", t.dir, err)
		}
		return s, nil
	case "stdout":
		return stdout.New(out), nil
	default:
		return discard.New(), nil
	}
}
