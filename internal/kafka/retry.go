package kafka

import (
	"context"
	"errors"
	"fmt"
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
		zap.Int64("offset", offset), zap.Int("attempt", r.attempt), zap.Duration("backoff", d), zap.String("why", explain(err)), zap.Error(err))
	// The next request looks the leader up again. The connection that
	// failed is dropped by the transport; the others stay.
	f.forgetLeader()
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
	return retrypolicy.Delay(cfg.RetryBackoffMin, cfg.RetryBackoffMax, attempt)
}

// retriable tells whether a failed request may succeed later: network
// errors, timeouts, leadership moves and the like. A broker that serves no
// protocol version offsetkeeper can use, and a re-created topic, are not.
func retriable(err error) bool {
	var (
		uv *UnsupportedVersionError
		tr *TopicRecreatedError
	)
	if errors.As(err, &uv) || errors.As(err, &tr) {
		return false
	}
	var ke kafkago.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafkago.OffsetOutOfRange, kafkago.BrokerNotAvailable, kafkago.ReplicaNotAvailable:
			return true
		}
		return ke.Temporary()
	}
	return unknownTopic(err) || errors.Is(err, protocol.ErrNoLeader) ||
		errors.Is(err, context.DeadlineExceeded) || retrypolicy.ConnectionLost(err)
}

func unknownTopic(err error) bool {
	return errors.Is(err, kafkago.UnknownTopicOrPartition) ||
		errors.Is(err, protocol.ErrNoTopic) || errors.Is(err, protocol.ErrNoPartition)
}

// explain says in a few words what an error of talking to Kafka means, for
// the logs of what is retried: an operator reads there why a replica does
// not move.
func explain(err error) string {
	switch Cause(err) {
	case CauseUnsupported:
		return "the broker serves no protocol version offsetkeeper can use: upgrade the broker"
	case CauseTLS:
		return "TLS with the broker failed: check the CA that signs its certificate, the client certificate and key, and the broker's listener"
	case CauseAuth:
		return "the broker refused the login or the rights: check the SASL user, its password and its ACLs"
	case CauseRefused:
		return "nothing listens at the broker's address: the broker is down"
	case CauseTimeout:
		return "the broker did not answer in time: paused, overloaded or cut off"
	case CauseClosed:
		return "the broker closed the connection: it stopped, or refused a request it does not serve"
	case CauseLeader:
		return "the partition's leader moved"
	case CauseUnknown:
		return "the topic or partition is unknown to the broker"
	}
	return "the broker answered with an error that passes"
}
