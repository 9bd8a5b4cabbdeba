package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"go.uber.org/zap"

	retrypolicy "github.com/offsetkeeper/offsetkeeper/internal/backoff"
)

// retrier spaces the retries of one operation.
type retrier struct {
	f            *Fetcher
	attempt      int
	unknownSince time.Time
}

func (f *Fetcher) retrier() *retrier { return &retrier{f: f} }

// wait returns the error to give up with, or nil after sleeping before the
// next attempt. It refreshes the cluster metadata so the next attempt goes
// to the current leader.
func (r *retrier) wait(ctx context.Context, offset int64, err error) error {
	f := r.f
	if !retriable(err) {
		return f.errorf(offset, err)
	}
	if unknownTopic(err) {
		if r.unknownSince.IsZero() {
			r.unknownSince = time.Now()
		} else if time.Since(r.unknownSince) > f.cfg.UnknownTopicTimeout {
			return f.errorf(offset, fmt.Errorf("%w (for %s): %w", kafkago.UnknownTopicOrPartition, f.cfg.UnknownTopicTimeout, err))
		}
	} else {
		r.unknownSince = time.Time{}
	}
	d := f.backoff(r.attempt)
	r.attempt++
	level := zap.WarnLevel
	if r.attempt == 1 && errors.Is(err, kafkago.OffsetOutOfRange) {
		level = zap.InfoLevel
	}
	f.log.Log(level, "kafka request failed, retrying",
		zap.Int64("offset", offset), zap.Int("attempt", r.attempt), zap.Duration("backoff", d), zap.Error(err))
	// Drop the connection pool: the next request reloads the metadata
	// and so finds the current leader, and reconnects.
	f.transport.CloseIdleConnections()
	if err := retrypolicy.Sleep(ctx, d); err != nil {
		return err
	}
	if f.closed.Load() {
		return f.errorf(offset, errClosed)
	}
	return nil
}

// backoff returns the delay before retry number attempt (from 0): it doubles
// from BackoffMin up to BackoffMax, and is drawn uniformly from its upper
// half so that fetchers failing together spread out (the one retry policy,
// internal/backoff).
func (f *Fetcher) backoff(attempt int) time.Duration { return backoff(f.cfg, attempt) }

func backoff(cfg Config, attempt int) time.Duration {
	return retrypolicy.Delay(cfg.BackoffMin, cfg.BackoffMax, attempt)
}

// retriable tells whether a failed request may succeed later: network
// errors, timeouts, leadership moves and the like.
func retriable(err error) bool {
	var ke kafkago.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafkago.OffsetOutOfRange, kafkago.BrokerNotAvailable, kafkago.ReplicaNotAvailable:
			return true
		}
		return ke.Temporary()
	}
	if unknownTopic(err) || errors.Is(err, protocol.ErrNoLeader) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

func unknownTopic(err error) bool {
	return errors.Is(err, kafkago.UnknownTopicOrPartition) ||
		errors.Is(err, protocol.ErrNoTopic) || errors.Is(err, protocol.ErrNoPartition)
}
