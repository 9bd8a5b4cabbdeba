// Package kafkaconf is how offsetkeeper connects to Kafka and reads its
// partitions: one Config, with one table of defaults named after the Java
// consumer's settings, one validation, and the enumerations and the SASL
// login it holds. The replica, the audit, the operator commands and dev
// all take it.
package kafkaconf

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// Defaults, applied by WithDefaults to the zero fields of a Config, named
// after the Java consumer's settings they stand for.
const (
	// DefaultClientID is the client.id the brokers see.
	DefaultClientID = "offsetkeeper"
	// DefaultFetchMinBytes is fetch.min.bytes: a fetch returns as soon as
	// there is anything.
	DefaultFetchMinBytes = 1
	// DefaultFetchMaxWait is fetch.max.wait.ms.
	DefaultFetchMaxWait = 500 * time.Millisecond
	// DefaultFetchMaxPartitionBytes is max.partition.fetch.bytes: what one
	// fetch returns of one partition, 1 MiB.
	DefaultFetchMaxPartitionBytes = 1 << 20
	// DefaultFetchMaxBytes is fetch.max.bytes: what one fetch of many
	// partitions returns at most (the Java consumer's is 50 MiB, ours 16
	// MiB): large enough that a broker's round trip carries many
	// partitions' worth, small enough to be decoded while the next one is
	// on its way.
	DefaultFetchMaxBytes = 16 << 20
	// DefaultMaxBufferBytes bounds the bytes of records a consumer holds,
	// fetched and not yet freed, all its partitions together: 256 MiB. It
	// is what a replica's memory follows, whatever the backlog and the
	// record size.
	DefaultMaxBufferBytes = 256 << 20
	// DefaultRequestTimeout bounds a request beyond what the broker is
	// asked to wait (request.timeout.ms is 30s; ours is 10s).
	DefaultRequestTimeout = 10 * time.Second
	// DefaultRetryBackoffMin and DefaultRetryBackoffMax bound the wait
	// between retries of a failed request (retry.backoff.ms and
	// retry.backoff.max.ms are 100ms and 1s; ours grows to 5s).
	DefaultRetryBackoffMin = 100 * time.Millisecond
	DefaultRetryBackoffMax = 5 * time.Second
	// DefaultUnknownTopicTimeout is how long a fetch retries while its
	// topic or partition is unknown to the cluster.
	DefaultUnknownTopicTimeout = 30 * time.Second
)

// Config says how to connect to Kafka and read its partitions. The zero
// value of every field but Brokers is its default; the doc of each names
// the Java consumer's setting it corresponds to.
//
// A replica reads the partitions it owns with one fetch request per broker
// per round trip, whatever their number, and holds at most MaxBufferBytes of
// records: each partition an equal share of it. It never joins a Kafka
// consumer group (etcd coordinates the replicas), so there is no group.id,
// session.timeout.ms or enable.auto.commit.
type Config struct {
	// Brokers are the bootstrap brokers, host:port (bootstrap.servers).
	// Required.
	Brokers []string
	// ClientID is sent with every request (client.id), for the brokers'
	// logs and quotas. Default DefaultClientID.
	ClientID string
	// Rack is the client's rack or zone (client.rack, KIP-392). A cluster
	// whose replica.selector.class picks the closest replica
	// (RackAwareReplicaSelector) then answers the leader's fetches with a
	// follower in the same rack to fetch from, which the consumer follows:
	// no cross-zone traffic. Empty (the default): none is sent; a replica
	// the leader names all the same is followed.
	Rack string

	// TLS, when not nil, connects over TLS with this configuration
	// (security.protocol SSL, or SASL_SSL with SASL). Default nil: plain
	// TCP.
	TLS *tls.Config
	// SASL, when not nil, authenticates with this login (sasl.mechanism,
	// sasl.jaas.config). Default nil: none. Use SASLPlain only with TLS:
	// it sends the password as it is.
	SASL *SASL
	// Dial opens the TCP connections to the brokers; TLS and SASL are
	// layered on what it returns. Default nil: a net.Dialer. Set it to go
	// through a proxy, or in tests to cut connections.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// DialTimeout bounds connecting to a broker, the TLS and SASL
	// handshakes included (socket.connection.setup.timeout.ms). Default
	// 5s, kafka-go's.
	DialTimeout time.Duration
	// MetadataTTL bounds how long cached cluster metadata is used
	// (metadata.max.age.ms). Default 6s, kafka-go's. Leader changes a
	// broker reports refresh it at once regardless.
	MetadataTTL time.Duration

	// FetchMinBytes is how many bytes a fetch waits for on the broker, up
	// to FetchMaxWait (fetch.min.bytes). Default DefaultFetchMinBytes, 1:
	// records are returned as soon as there are any. More makes fewer,
	// fuller responses for the latency of waiting for them.
	FetchMinBytes int
	// FetchMaxWait is how long the broker holds a fetch waiting for
	// FetchMinBytes (fetch.max.wait.ms). Default DefaultFetchMaxWait,
	// 500ms. Longer makes an idle replica send fewer requests; a block of
	// a quiet partition may end after an empty poll, so it is also about
	// the delay such a block sees with more than one empty poll per block.
	FetchMaxWait time.Duration
	// FetchMaxPartitionBytes bounds the bytes one fetch returns of one
	// partition (max.partition.fetch.bytes). Default
	// DefaultFetchMaxPartitionBytes, 1 MiB. A record batch larger than it
	// still comes whole when it is first in a response, so it never stops
	// a partition; smaller gives each partition a smaller part of a
	// response.
	FetchMaxPartitionBytes int
	// FetchMaxBytes bounds the bytes one fetch of many partitions returns
	// (fetch.max.bytes). Default DefaultFetchMaxBytes, 16 MiB. Larger
	// carries more partitions per round trip at the cost of memory per
	// request in flight (two per broker).
	FetchMaxBytes int
	// MaxBufferBytes bounds the bytes of records a consumer holds across
	// its partitions: fetched, decompressed, decoded into JSON, and not
	// yet committed (no Java setting; think fetch.max.bytes times the
	// requests in flight). Default DefaultMaxBufferBytes, 256 MiB. Each
	// partition may hold an equal share; a block ends at half of it, so a
	// smaller budget means smaller blocks and more etcd writes, a larger
	// one more memory. A single record batch that inflates past a
	// partition's share stops that partition until the budget is raised.
	MaxBufferBytes int
	// RequestTimeout bounds a request beyond the time the broker is asked
	// to wait (request.timeout.ms): a fetch is given up and retried after
	// FetchMaxWait+RequestTimeout. Default DefaultRequestTimeout, 10s.
	RequestTimeout time.Duration
	// NoFetchSessions turns incremental fetch sessions (KIP-227) off: every
	// fetch then lists all its partitions, as before Kafka 1.1. Default
	// false: a broker that keeps sessions is sent only the partitions
	// whose fetch changed, so an idle partition costs nothing per request.
	// No Java setting: its consumer always asks for sessions.
	NoFetchSessions bool

	// IsolationLevel says which records of transactional producers are
	// read (isolation.level). Default ReadCommitted.
	IsolationLevel IsolationLevel
	// StartPolicy is where a partition without a stored offset starts, and
	// where one whose offset is out of range (deleted by retention) is
	// moved to (auto.offset.reset). Default StartEarliest: nothing still
	// in Kafka is skipped.
	StartPolicy StartPolicy

	// RetryBackoffMin and RetryBackoffMax bound the exponential, jittered
	// wait between retries of a failed request (retry.backoff.ms,
	// retry.backoff.max.ms). Defaults DefaultRetryBackoffMin, 100ms, and
	// DefaultRetryBackoffMax, 5s. Requests are retried until the consumer
	// stops: a longer maximum is gentler on a broken cluster and slower to
	// notice its recovery.
	RetryBackoffMin time.Duration
	RetryBackoffMax time.Duration
	// UnknownTopicTimeout is how long a fetch keeps retrying while its
	// topic or partition is unknown to the cluster before failing (default
	// DefaultUnknownTopicTimeout). Other retriable errors are retried until
	// the caller gives up.
	UnknownTopicTimeout time.Duration
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	positiveOr(&c.FetchMinBytes, DefaultFetchMinBytes)
	positiveOr(&c.FetchMaxPartitionBytes, DefaultFetchMaxPartitionBytes)
	positiveOr(&c.FetchMaxWait, DefaultFetchMaxWait)
	positiveOr(&c.FetchMaxBytes, DefaultFetchMaxBytes)
	positiveOr(&c.MaxBufferBytes, DefaultMaxBufferBytes)
	positiveOr(&c.RequestTimeout, DefaultRequestTimeout)
	positiveOr(&c.RetryBackoffMin, DefaultRetryBackoffMin)
	positiveOr(&c.RetryBackoffMax, DefaultRetryBackoffMax)
	if c.RetryBackoffMax < c.RetryBackoffMin {
		c.RetryBackoffMax = c.RetryBackoffMin
	}
	positiveOr(&c.UnknownTopicTimeout, DefaultUnknownTopicTimeout)
	return c
}

// positiveOr sets *v to def when it is not positive.
func positiveOr[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Validate checks the configuration; each message names the value.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("no kafka brokers configured")
	}
	for _, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return fmt.Errorf("kafka broker %q: %w", b, err)
		}
	}
	if c.MaxBufferBytes < 0 {
		return fmt.Errorf("max buffer bytes %d: want at least 1 (0 takes the default, %d)", c.MaxBufferBytes, DefaultMaxBufferBytes)
	}
	if err := c.IsolationLevel.Check(); err != nil {
		return err
	}
	if err := c.StartPolicy.Check(); err != nil {
		return err
	}
	if c.SASL != nil {
		if err := c.SASL.Validate(); err != nil {
			return err
		}
	}
	return nil
}
