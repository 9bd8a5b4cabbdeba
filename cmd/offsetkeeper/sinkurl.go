package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// sinkTarget is a parsed --sink URL, found in the command's sinks.Table,
// and how the command opens it.
type sinkTarget struct {
	sinks.Target
	// group keys the sink's state of its group (a postgres sink's offsets
	// table, a clickhouse sink's deduplication tokens); the commands set
	// it from --group (a group= in the URL must then agree).
	group string
	// log is the sink's logger where it takes one; nil for none.
	log *zap.Logger
	// claim, when not empty, makes open record group as the writer of
	// these topics in the sink's destination and refuse one that another
	// group writes (a sinks.DestinationClaimer), unless shared
	// (run --allow-shared-sink).
	claim  []string
	shared bool
}

// scheme is the sink's scheme, "" for no sink.
func (t sinkTarget) scheme() string {
	if t.Sink == nil {
		return ""
	}
	return t.Sink.Scheme
}

// setGroup sets the group the sink is opened for, the command's --group;
// a group= in the URL must be the same. An empty group is left to the
// command's check of --group.
func (t *sinkTarget) setGroup(group string) error {
	if t.Group != "" && group != "" && t.Group != group {
		return usagef("--sink %q: group=%s but --group is %s: the sink keeps one group's offsets; drop group= from the URL, or make it %s",
			t.Shown(), t.Group, group, group)
	}
	t.group = group
	return nil
}

// parseSink checks a sink URL without touching anything.
func parseSink(table sinks.Table, raw string) (sinkTarget, error) {
	t, err := table.Parse(raw)
	if err != nil {
		return sinkTarget{}, sinkError(err)
	}
	return sinkTarget{Target: t}, nil
}

// parseSinkFlag is parseSink of a --sink that may be empty (no sink).
func parseSinkFlag(table sinks.Table, raw string) (sinkTarget, error) {
	if raw == "" {
		return sinkTarget{}, nil
	}
	return parseSink(table, raw)
}

// sinkError is err of --sink: a URL refused is bad usage (exit 2).
func sinkError(err error) error {
	var ue *sinks.URLError
	if errors.As(err, &ue) {
		return usage(fmt.Errorf("--sink %w", err))
	}
	return err
}

// open creates the sink, and claims its destination for the group if
// asked (claim); out is where stdout: writes. Waiting for a server ends
// with ctx (a SIGTERM), or after the sink's open timeout.
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
	if t.Sink == nil {
		return nil, usagef("--sink is required")
	}
	s, err := t.Open(ctx, sinks.Options{Group: t.group, Log: t.log, Out: out})
	return s, sinkError(err)
}

// claimDestination records t.group as the writer of t.claim in s's
// destination, where s can tell (sinks.DestinationClaimer). Another
// group's destination is bad usage (exit 2, nothing written), unless
// t.shared: then it is logged and the free topics are claimed.
func (t sinkTarget) claimDestination(ctx context.Context, s sinks.Sink) error {
	c, ok := s.(sinks.DestinationClaimer)
	// A router claims the tables of topics found later as they come, for
	// the group it is told of here.
	_, routes := s.(*sinks.Router)
	if !ok || (len(t.claim) == 0 && !routes) {
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
