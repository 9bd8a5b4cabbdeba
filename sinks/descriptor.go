package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/redact"
)

// Descriptor is what a sink package tells the commands about its sink: the
// form of its URL and how it is checked, how the sink opens, and how
// `offsetkeeper audit` and `offsetkeeper dev` read it back. Each sink
// package exports one (file.Descriptor, postgres.Descriptor, ...); a Table
// lists those a command knows. Adding a sink is a new package and one entry
// in the Table the command is given.
type Descriptor struct {
	// Scheme is the URL scheme that names the sink; Aliases are other
	// schemes that name it too (postgresql).
	Scheme  string
	Aliases []string
	// Usage is the URL's form and what the sink promises, for help texts:
	// "file:///DIR (JSON lines, one file per block)".
	Usage string
	// Params are the URL's query parameters. Doc is the page of docs/
	// that documents the sink (postgresql.md): its tables of Params are
	// generated there, between <!-- params:SCHEME --> (the sink's own) or
	// <!-- params:SCHEME-conn --> (those passed on) and <!-- /params -->.
	Params []Param
	Doc    string
	// Check validates a URL of the sink without touching anything; its
	// error says what is wrong and what is accepted. Nil accepts any.
	Check func(raw string) error
	// Open opens the sink of a checked URL. A refusal the user mends in the
	// URL or the table it names is a *URLError.
	Open func(ctx context.Context, raw string, o Options) (Sink, error)
	// Identity names where the sink writes, the same for two URLs that
	// write to the same place, without user or secret; nil: the scheme.
	Identity func(raw string) string
	// Keeps tells that the sink keeps its records after the process
	// (a directory, a table): dev then gives a run a topic of its own.
	Keeps bool
	// ByGroup tells that the sink keeps state of the group that writes it
	// (its offsets, its deduplication tokens): dev then gives a run a
	// group of its own, since the state outlives dev's etcd.
	ByGroup bool
	// Audit opens the sink for reading back; nil for a sink that keeps
	// nothing to read. A sink that cannot be read is ErrUnreadable. shown
	// is the URL as messages show it; group keys a sink's own offsets.
	Audit func(ctx context.Context, raw, shown, group string) (Reader, error)
	// ReadBack reads a partition's records as a reader of the sink sees
	// them, for dev's second opinion after a failed audit; ok is false
	// where the URL's mode keeps no whole records. Nil for none.
	ReadBack func(ctx context.Context, raw, topic string, partition int) (recs []Record, ok bool, err error)
	// DeadLetters counts the records of topic the sink set aside, where
	// it keeps them, and names where (a table, and the first reason).
	// Nil: dev counts those the sink reported (DeadLetterCounter).
	DeadLetters func(ctx context.Context, raw, topic string) (n int64, where string, err error)
	// ExactlyOnce: a duplicate in the sink is a failure of dev's run.
	ExactlyOnce bool
}

// Options are what a command gives the sink it opens.
type Options struct {
	// Group is the group the sink is opened for (--group): it keys a
	// sink's own offsets and deduplication tokens.
	Group string
	// Log is the sink's logger; nil for none.
	Log *zap.Logger
	// Out is where a sink that prints writes (stdout:).
	Out io.Writer
}

// Param is one of a sink's URL query parameters, as its documentation
// shows it.
type Param struct {
	// Name is the parameter as written in the URL: dead_letter_table.
	Name string
	// Default is the value when the URL has none, in Markdown: a value
	// (`offsetkeeper_dead_letters`) or words (the primary key).
	Default string
	// Meaning says what the parameter does and, where the sink has
	// modes, which take it, in Markdown.
	Meaning string
	// PassedTo names the library the parameter goes on to (libpq, pgx),
	// for a connection parameter the sink does not read itself; empty for
	// the sink's own.
	PassedTo string
}

// URLError is a sink URL refused: by its form, or by what it names (a
// table of the wrong shape). URL is the URL as messages show it.
type URLError struct {
	URL string
	Err error
}

func (e *URLError) Error() string { return strconv.Quote(e.URL) + ": " + e.Err.Error() }

func (e *URLError) Unwrap() error { return e.Err }

// Redact is a sink URL fit for a message: its password masked, and the
// values of parameters named like secrets; the user name is kept, since
// which role connects is what a reader of the message needs.
func Redact(raw string) string { return redact.Sink(raw) }

// Table is the sinks a command knows, in the order its help lists them.
type Table []*Descriptor

// Lookup is the sink of a scheme, or one of its aliases; nil for none.
func (t Table) Lookup(scheme string) *Descriptor {
	for _, d := range t {
		if d.Scheme == scheme {
			return d
		}
		for _, a := range d.Aliases {
			if a == scheme {
				return d
			}
		}
	}
	return nil
}

// With is t and more sinks, which win over t's of the same scheme.
func (t Table) With(ds ...*Descriptor) Table {
	out := make(Table, 0, len(t)+len(ds))
	for _, d := range t {
		if !slicesHas(ds, d.Scheme) {
			out = append(out, d)
		}
	}
	return append(out, ds...)
}

func slicesHas(ds []*Descriptor, scheme string) bool {
	for _, d := range ds {
		if d.Scheme == scheme {
			return true
		}
	}
	return false
}

// Usage lists the URLs t accepts, for help texts and refusals.
func (t Table) Usage() string {
	var b strings.Builder
	for i, d := range t {
		switch {
		case i == 0:
		case i == len(t)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(d.Usage)
	}
	return b.String()
}

// Target is a checked sink URL: the sink it names, and the URL.
type Target struct {
	Sink *Descriptor
	// URL is the URL as given; it may hold a password.
	URL string
	// Group is the URL's group= parameter, "" for none.
	Group string
}

// Parse checks a sink URL without touching anything. A URL of no sink of
// t, or one its sink refuses, is a *URLError.
func (t Table) Parse(raw string) (Target, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		// A database URL whose password holds @ or #: its sink says how
		// to write it.
		scheme, _, _ := strings.Cut(raw, "://")
		if d := t.Lookup(scheme); d != nil && d.Check != nil {
			if err := d.Check(raw); err != nil {
				return Target{}, &URLError{URL: Redact(raw), Err: err}
			}
		}
		return Target{}, &URLError{URL: Redact(raw), Err: errors.New("want " + t.Usage())}
	}
	d := t.Lookup(u.Scheme)
	if d == nil {
		return Target{}, &URLError{URL: Redact(raw), Err: fmt.Errorf("unknown scheme %q; want %s", u.Scheme, t.Usage())}
	}
	if d.Check != nil {
		if err := d.Check(raw); err != nil {
			return Target{}, &URLError{URL: Redact(raw), Err: err}
		}
	}
	return Target{Sink: d, URL: raw, Group: u.Query().Get("group")}, nil
}

// Shown is the URL as messages show it.
func (t Target) Shown() string {
	if t.Sink == nil {
		return ""
	}
	return Redact(t.URL)
}

// Identity names where the sink writes (see Descriptor.Identity).
func (t Target) Identity() string {
	if t.Sink == nil {
		return ""
	}
	if t.Sink.Identity == nil {
		return t.Sink.Scheme + ":"
	}
	return t.Sink.Identity(t.URL)
}

// Open opens the sink.
func (t Target) Open(ctx context.Context, o Options) (Sink, error) {
	return t.Sink.Open(ctx, t.URL, o)
}

// Bare is the Check of a sink whose URL is its scheme alone: it refuses anything after the scheme's colon: stdout:foo or
// discard:?x=1 is a mistake, not an option to drop.
func Bare(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Opaque != "" || u.Host != "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return errors.New(u.Scheme + ": takes nothing after the colon; want " + u.Scheme + ":")
	}
	return nil
}
