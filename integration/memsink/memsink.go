// Package memsink is a sink kept in the process's memory, mem://NAME, for
// tests that add a sink to a sinks.Table from outside sinks/: two opens of
// one NAME share the records, so that `run`, `audit` and `dev` in one test
// process see each other's writes. A record is kept by its offset, so a
// replayed block overwrites itself (exactly-once).
package memsink

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Descriptor is the sink's entry in a sinks.Table.
var Descriptor = &sinks.Descriptor{
	Scheme: "mem",
	Usage:  "mem://NAME (kept in memory, for tests)",
	Check: func(raw string) error {
		_, err := name(raw)
		return err
	},
	Open: func(_ context.Context, raw string, _ sinks.Options) (sinks.Sink, error) {
		n, err := name(raw)
		if err != nil {
			return nil, &sinks.URLError{URL: raw, Err: err}
		}
		return &sink{s: Store(n)}, nil
	},
	Identity: func(raw string) string { return raw },
	Keeps:    true,
	Audit: func(_ context.Context, raw, shown, _ string) (sinks.Reader, error) {
		n, err := name(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", sinks.ErrUnreadable, shown, err)
		}
		return &reader{s: Store(n), shown: shown}, nil
	},
	ReadBack: func(_ context.Context, raw, topic string, partition int) ([]sinks.Record, bool, error) {
		n, err := name(raw)
		if err != nil {
			return nil, false, err
		}
		return Store(n).Records(topic, partition), true, nil
	},
	ExactlyOnce: true,
}

func name(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		return "", errors.New("want mem://NAME")
	}
	return u.Host, nil
}

var (
	mu     sync.Mutex
	stores = map[string]*Records{}
)

// Store is the records of mem://name.
func Store(name string) *Records {
	mu.Lock()
	defer mu.Unlock()
	s, ok := stores[name]
	if !ok {
		s = &Records{parts: map[sinks.Partition]map[int64]sinks.Record{}}
		stores[name] = s
	}
	return s
}

// Records are what a mem:// sink holds.
type Records struct {
	mu    sync.Mutex
	parts map[sinks.Partition]map[int64]sinks.Record
}

// Len counts the offsets held.
func (s *Records) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.parts {
		n += len(p)
	}
	return n
}

// Records are a partition's records, by offset.
func (s *Records) Records(topic string, partition int) []sinks.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.parts[sinks.Partition{Topic: topic, Partition: partition}]
	offs := make([]int64, 0, len(p))
	for o := range p {
		offs = append(offs, o)
	}
	slices.Sort(offs)
	recs := make([]sinks.Record, len(offs))
	for i, o := range offs {
		recs[i] = p[o]
	}
	return recs
}

type sink struct{ s *Records }

func (k *sink) Write(_ context.Context, b *sinks.Block) error {
	if err := b.Check(); err != nil {
		return err
	}
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	tp := sinks.Partition{Topic: b.Topic, Partition: b.Partition}
	p := k.s.parts[tp]
	if p == nil {
		p = map[int64]sinks.Record{}
		k.s.parts[tp] = p
	}
	for _, r := range b.Records {
		r.Key, r.Value = slices.Clone(r.Key), slices.Clone(r.Value)
		p[r.Offset] = r
	}
	return nil
}

func (k *sink) Close() error { return nil }

type reader struct {
	s     *Records
	shown string
}

func (r *reader) Describe() string { return r.shown }

func (r *reader) Capabilities() sinks.Capabilities {
	return sinks.Capabilities{Missing: true, Records: true}
}

func (r *reader) CheckScope([]sinks.Partition) error { return nil }

func (r *reader) Offsets(_ context.Context, topic string, partition int) (sinks.Stream, error) {
	return sinks.Records(r.s.Records(topic, partition)...), nil
}

func (r *reader) SinkNext(context.Context, string, int) (int64, bool, error) { return 0, false, nil }

func (r *reader) Close() error { return nil }
