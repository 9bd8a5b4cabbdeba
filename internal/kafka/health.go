package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"slices"
	"syscall"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/offsetkeeper/offsetkeeper/internal/secure"
)

// What a consumer knows of its path to each broker, for a replica to tell
// whether it can read (and to give its partitions away when it cannot),
// for metrics and for operators.

// Causes of errors of talking to Kafka, as Cause names them: the label of
// offsetkeeper_kafka_fetch_errors_total.
const (
	CauseTLS         = "tls"          // a TLS handshake failed
	CauseAuth        = "auth"         // a login or a right refused
	CauseRefused     = "refused"      // nothing listens at the address
	CauseTimeout     = "timeout"      // no answer in time
	CauseClosed      = "closed"       // the connection closed under a request
	CauseLeader      = "leader_moved" // the partition's leader moved
	CauseUnknown     = "unknown_topic"
	CauseUnsupported = "unsupported" // no protocol version in common
	CauseOther       = "other"
)

// Cause names the kind of err, one of the Cause constants.
func Cause(err error) string {
	var (
		uv *UnsupportedVersionError
		ke kafkago.Error
		ne net.Error
	)
	switch {
	case errors.As(err, &uv):
		return CauseUnsupported
	case secure.HandshakeFailed(err):
		return CauseTLS
	case Refused(err):
		return CauseAuth
	case errors.Is(err, syscall.ECONNREFUSED):
		return CauseRefused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return CauseTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, net.ErrClosed):
		return CauseClosed
	case errors.Is(err, protocol.ErrNoLeader), errors.As(err, &ke) && leaderMoved(ke):
		return CauseLeader
	case unknownTopic(err):
		return CauseUnknown
	}
	return CauseOther
}

// Explain says in a few words what an error of talking to Kafka means.
func Explain(err error) string { return explain(err) }

// BrokerHealth is what a consumer's fetches found of one broker.
type BrokerHealth struct {
	ID int32
	// Partitions is how many partitions are fetched from it now.
	Partitions int
	// LastOK is when a fetch of it was last answered; zero if never.
	LastOK time.Time
	// FailingSince is when its fetches began to fail, since the last one
	// answered; zero when the last one was answered. LastFailure is the
	// latest failure, Err its error.
	FailingSince, LastFailure time.Time
	Err                       error
}

// Failing reports whether the broker's fetches have failed for at least
// d, the latest within d: a broker nobody fetched from since does not
// count.
func (h BrokerHealth) Failing(now time.Time, d time.Duration) bool {
	return !h.FailingSince.IsZero() && now.Sub(h.FailingSince) >= d && now.Sub(h.LastFailure) < d
}

// brokerHealth is a loop's record of its requests' outcomes; guarded by
// c.mu.
type brokerHealth struct {
	okAt, failingSince, failedAt time.Time
	err                          error
}

func (h *brokerHealth) answered(now time.Time) {
	h.okAt, h.failingSince, h.err = now, time.Time{}, nil
}

func (h *brokerHealth) failed(now time.Time, err error) {
	if h.failingSince.IsZero() {
		h.failingSince = now
	}
	h.failedAt, h.err = now, err
}

// Brokers reports every broker the consumer fetched from, by ID.
func (c *Consumer) Brokers() []BrokerHealth {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]BrokerHealth, 0, len(c.brokers))
	for id, b := range c.brokers {
		out = append(out, BrokerHealth{ID: id, Partitions: len(b.cursors), LastOK: b.health.okAt,
			FailingSince: b.health.failingSince, LastFailure: b.health.failedAt, Err: b.health.err})
	}
	slices.SortFunc(out, func(a, b BrokerHealth) int { return int(a.ID) - int(b.ID) })
	return out
}

// FetchErrors counts the errors of fetches by Cause: of whole requests
// (the connection, the login) and of single partitions in answers.
func (c *Consumer) FetchErrors() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.fetchErrors))
	for k, v := range c.fetchErrors {
		out[k] = v
	}
	return out
}

// countError counts a fetch error by its cause. c.mu is held.
func (c *Consumer) countError(err error) {
	if c.fetchErrors == nil {
		c.fetchErrors = map[string]int64{}
	}
	c.fetchErrors[Cause(err)]++
}

// Probe asks each broker whose fetches failed, and that nothing fetches
// from now, for metadata: an answer clears its failure. A replica that
// gave its partitions away because a broker was out of reach learns so
// that it is back, although it fetches nothing from it.
func (c *Consumer) Probe(ctx context.Context, timeout time.Duration) {
	c.mu.Lock()
	var ids []int32
	for id, b := range c.brokers {
		if !b.health.failingSince.IsZero() && len(b.cursors) == 0 {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	for _, id := range ids {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		_, err := c.kc.metadataFrom(pctx, id, c.kc.transport.MetadataTopics)
		cancel()
		now := time.Now()
		c.mu.Lock()
		if b := c.brokers[id]; b != nil {
			if err == nil {
				b.health.answered(now)
			} else {
				b.health.failed(now, err)
			}
		}
		c.mu.Unlock()
	}
}

// SpeaksOtherwise reports whether the broker at addr answers a client of
// the other kind: a plain metadata request when tlsOn (the client speaks
// TLS), a TLS handshake when not (certificates unchecked: only whether it
// speaks TLS matters). A broker closes a connection of the wrong kind at
// once, which looks like a broker that stopped; this tells them apart.
func SpeaksOtherwise(ctx context.Context, addr string, tlsOn bool, timeout time.Duration) bool {
	if !tlsOn {
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // only whether it speaks TLS
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	}
	c, err := NewClient(Config{Brokers: []string{addr}, DialTimeout: timeout})
	if err != nil {
		return false
	}
	defer c.Close()
	return c.CheckAccess(ctx, func(error) bool { return true }) == nil
}
