package replica

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
)

// Defaults of Kafka, applied to its zero fields, named after the Java
// consumer's settings they stand for.
const (
	// DefaultFetchMinBytes is fetch.min.bytes: a fetch returns as soon as
	// there is anything.
	DefaultFetchMinBytes = 1
	// DefaultFetchMaxWait is fetch.max.wait.ms.
	DefaultFetchMaxWait = 500 * time.Millisecond
	// DefaultFetchMaxPartitionBytes is max.partition.fetch.bytes, 1 MiB.
	DefaultFetchMaxPartitionBytes = 1 << 20
	// DefaultFetchMaxBytes is what one fetch of many partitions returns
	// at most (fetch.max.bytes; the Java consumer's is 50 MiB, ours 16
	// MiB): large enough that a broker's round trip carries many
	// partitions' worth, small enough to be decoded while the next one is
	// on its way.
	DefaultFetchMaxBytes = 16 << 20
	// DefaultMaxBufferBytes bounds the bytes of records a replica holds,
	// fetched and not yet committed, all its partitions together: 256 MiB.
	DefaultMaxBufferBytes = 256 << 20
	// DefaultRequestTimeout bounds a request beyond what the broker is
	// asked to wait (request.timeout.ms is 30s; ours is 10s).
	DefaultRequestTimeout = 10 * time.Second
	// DefaultRetryBackoffMin and DefaultRetryBackoffMax bound the wait
	// between retries of a failed request (retry.backoff.ms and
	// retry.backoff.max.ms are 100ms and 1s; ours grows to 5s).
	DefaultRetryBackoffMin = 100 * time.Millisecond
	DefaultRetryBackoffMax = 5 * time.Second
	// DefaultClientID is the client.id the brokers see.
	DefaultClientID = "offsetkeeper"
)

// Kafka says how a replica connects to Kafka and reads its partitions. The
// zero value of every field but Brokers is its default; the doc of each
// names the Java consumer's setting it corresponds to.
//
// A replica reads the partitions it owns with one fetch request per broker
// per round trip, whatever their number, and holds at most MaxBufferBytes of
// records: each partition an equal share of it. It never joins a Kafka
// consumer group (etcd coordinates the replicas), so there is no
// group.id, session.timeout.ms or enable.auto.commit: see Config.LeaseTTL.
type Kafka struct {
	// Brokers are the bootstrap brokers, host:port (bootstrap.servers).
	// Required.
	Brokers []string
	// ClientID is sent with every request (client.id), for the brokers'
	// logs and quotas. Default DefaultClientID.
	ClientID string
	// Rack is the replica's rack or zone (client.rack, KIP-392). A
	// cluster whose replica.selector.class picks the closest replica
	// (RackAwareReplicaSelector) then answers the leader's fetches with a
	// follower in the same rack to fetch from, which the replica follows:
	// no cross-zone traffic. Empty (the default): none is sent; a replica
	// the leader names all the same is followed.
	Rack string

	// TLS, when not nil, connects over TLS with this configuration
	// (security.protocol SSL, or SASL_SSL with SASL). Default nil: plain
	// TCP.
	TLS *tls.Config
	// SASL, when not nil, authenticates with this login
	// (sasl.mechanism, sasl.jaas.config). Default nil: none. Use
	// SASLPlain only with TLS: it sends the password as it is.
	SASL *SASL
	// Dial opens the TCP connections to the brokers; TLS and SASL are
	// layered on what it returns. Default nil: a net.Dialer. Set it to go
	// through a proxy, or in tests to cut connections.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// DialTimeout bounds connecting to a broker, the TLS and SASL
	// handshakes included (socket.connection.setup.timeout.ms). Default
	// 5s.
	DialTimeout time.Duration

	// FetchMinBytes is how many bytes a fetch waits for on the broker, up
	// to FetchMaxWait (fetch.min.bytes). Default DefaultFetchMinBytes, 1:
	// records are returned as soon as there are any. More makes fewer,
	// fuller responses for the latency of waiting for them.
	FetchMinBytes int
	// FetchMaxWait is how long the broker holds a fetch waiting for
	// FetchMinBytes (fetch.max.wait.ms). Default DefaultFetchMaxWait,
	// 500ms. Longer makes an idle replica send fewer requests; a block of
	// a quiet partition may end after an empty poll, so it is also about
	// the delay such a block sees with Config.MaxEmptyPolls above 1.
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
	// MaxBufferBytes bounds the bytes of records the replica holds across
	// its partitions: fetched, decompressed, decoded into JSON (Formats),
	// and not yet committed (no
	// Java setting; think fetch.max.bytes times the requests in flight).
	// Default DefaultMaxBufferBytes, 256 MiB. Each partition may hold an
	// equal share; a block ends at half of it, so a smaller budget means
	// smaller blocks and more etcd writes, a larger one more memory. A
	// single record batch that inflates past a partition's share stops
	// that partition until the budget is raised.
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
	// StartPolicy is where a partition the group has no offset for starts,
	// and where one whose offset is out of range (deleted by retention) is
	// moved to (auto.offset.reset). Default StartEarliest: nothing still
	// in Kafka is skipped.
	StartPolicy StartPolicy

	// RetryBackoffMin and RetryBackoffMax bound the exponential, jittered
	// wait between retries of a failed request (retry.backoff.ms,
	// retry.backoff.max.ms). Defaults DefaultRetryBackoffMin, 100ms, and
	// DefaultRetryBackoffMax, 5s. Requests are retried until the replica
	// stops: a longer maximum is gentler on a broken cluster and slower to
	// notice its recovery.
	RetryBackoffMin time.Duration
	RetryBackoffMax time.Duration
}

// config converts k to the package's own configuration.
func (k Kafka) config() kafka.Config {
	c := kafka.Config{
		Brokers:         k.Brokers,
		ClientID:        k.ClientID,
		Rack:            k.Rack,
		TLS:             k.TLS,
		Dial:            k.Dial,
		DialTimeout:     k.DialTimeout,
		MinBytes:        k.FetchMinBytes,
		MaxWait:         k.FetchMaxWait,
		MaxBytes:        k.FetchMaxPartitionBytes,
		MaxRequestBytes: k.FetchMaxBytes,
		MaxBufferBytes:  k.MaxBufferBytes,
		RequestTimeout:  k.RequestTimeout,
		NoFetchSessions: k.NoFetchSessions,
		IsolationLevel:  k.IsolationLevel,
		StartPolicy:     k.StartPolicy,
		BackoffMin:      k.RetryBackoffMin,
		BackoffMax:      k.RetryBackoffMax,
	}
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if k.SASL != nil {
		login := *k.SASL
		c.SASL = &login
	}
	return c.WithDefaults()
}

// validate checks k; each message names the value.
func (k Kafka) validate() error {
	if k.MaxBufferBytes < 0 {
		return fmt.Errorf("max buffer bytes %d: want at least 1 (0 takes the default, %d)", k.MaxBufferBytes, DefaultMaxBufferBytes)
	}
	return k.config().Validate() // the enumerations and the SASL login too
}

// The enumerations and the SASL login of Kafka's options are the Kafka
// client's own, named here (as os.FileMode names io/fs.FileMode) so that an
// embedder needs no other package. Each has String, MarshalText,
// UnmarshalText and a Parse function that trims space and folds case.
type (
	// StartPolicy says where a partition is read from when the group has no
	// offset for it, and where reading resumes when its offset is out of
	// range (auto.offset.reset): StartEarliest (the zero value and the
	// default) or StartLatest.
	StartPolicy = kafka.StartPolicy
	// IsolationLevel says which records of transactional producers are read
	// (isolation.level): ReadCommitted (the zero value and the default) or
	// ReadUncommitted.
	IsolationLevel = kafka.IsolationLevel
	// SASLMechanism names a SASL mechanism (sasl.mechanism): SASLPlain (the
	// zero value; only with TLS), SASLSCRAMSHA256 or SASLSCRAMSHA512.
	SASLMechanism = kafka.SASLMechanism
	// SASL is a SASL login to Kafka: Mechanism, Username and Password.
	// However it is printed (every fmt verb, JSON, zap), it shows the
	// mechanism and the user, never the password.
	SASL = kafka.SASL
)

const (
	// StartEarliest starts at the log start: nothing still in Kafka is
	// skipped.
	StartEarliest = kafka.StartEarliest
	// StartLatest starts at the log end: only records produced from then
	// on are read (under ReadCommitted, from the last stable offset).
	StartLatest = kafka.StartLatest

	// ReadCommitted reads only committed records, up to the last stable
	// offset: an open transaction holds back the records after it.
	ReadCommitted = kafka.ReadCommitted
	// ReadUncommitted reads every record up to the high watermark,
	// records of open and aborted transactions included.
	ReadUncommitted = kafka.ReadUncommitted

	// SASLPlain is PLAIN: the password crosses the wire as it is.
	SASLPlain = kafka.SASLPlain
	// SASLSCRAMSHA256 is SCRAM-SHA-256: the password never crosses the
	// wire.
	SASLSCRAMSHA256 = kafka.SASLSCRAMSHA256
	// SASLSCRAMSHA512 is SCRAM-SHA-512.
	SASLSCRAMSHA512 = kafka.SASLSCRAMSHA512
)

// ParseStartPolicy parses "earliest" or "latest".
func ParseStartPolicy(s string) (v StartPolicy, err error) { err = v.Set(s); return v, err }

// ParseIsolationLevel parses "read_committed" or "read_uncommitted".
func ParseIsolationLevel(s string) (v IsolationLevel, err error) { err = v.Set(s); return v, err }

// ParseSASLMechanism parses PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
func ParseSASLMechanism(s string) (v SASLMechanism, err error) { err = v.Set(s); return v, err }
