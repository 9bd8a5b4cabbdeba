package file

import (
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
	Usage:  "file:///DIR (JSON lines, one file per block)",
	Check:  func(raw string) error { _, err := Dir(raw); return err },
	Open: func(_ context.Context, raw string, o sinks.Options) (sinks.Sink, error) {
		dir, err := Dir(raw)
		if err != nil {
			return nil, &sinks.URLError{URL: raw, Err: err}
		}
		var opts []Option
		if o.Log != nil {
			opts = append(opts, WithLogger(o.Log))
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
	case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", errors.New("a file sink takes no user, parameters or fragment; want file:///DIR")
	}
	return filepath.Clean(dir), nil
}
