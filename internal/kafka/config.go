package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/offsetkeeper/offsetkeeper/internal/enum"
)

// Defaults applied by Config to its zero fields.
const (
	DefaultFetchMinBytes       = 1
	DefaultFetchMaxBytes       = 1 << 20
	DefaultFetchMaxWait        = 500 * time.Millisecond
	DefaultFetchRequestTimeout = 10 * time.Second
	DefaultFetchBackoffMin     = 100 * time.Millisecond
	DefaultFetchBackoffMax     = 5 * time.Second
	DefaultUnknownTopicTimeout = 30 * time.Second
	// DefaultMaxRequestBytes bounds what one multi-partition fetch returns:
	// large enough that a broker's round trip carries many partitions'
	// worth, small enough to be decoded while the next one is on its way.
	DefaultMaxRequestBytes = 16 << 20
	// DefaultMaxBufferBytes bounds what a Consumer holds: fetched and not
	// yet freed by the readers. It is what a replica's memory follows,
	// whatever the backlog and the record size.
	DefaultMaxBufferBytes = 256 << 20
)

// StartPolicy says where a partition is read from when it has no stored
// offset, and where reading resumes when the stored offset is out of range.
type StartPolicy int

func (p StartPolicy) String() string               { return enum.Name[startPolicies](int(p)) }
func (p StartPolicy) Check() error                 { return enum.Valid[startPolicies](int(p)) }
func (p StartPolicy) MarshalText() ([]byte, error) { return enum.Text[startPolicies](int(p)) }
func (p *StartPolicy) UnmarshalText(b []byte) error {
	return enum.SetInt[startPolicies]((*int)(p), string(b))
}
func (p *StartPolicy) Set(s string) error { return enum.SetInt[startPolicies]((*int)(p), s) }
func (StartPolicy) Type() string          { return enum.Type[startPolicies]() }

const (
	// StartEarliest starts at the log start offset: nothing still in Kafka
	// is skipped. It is the zero value.
	StartEarliest StartPolicy = iota
	// StartLatest starts at the log end: only records produced from then on
	// are read (under read_committed, the last stable offset).
	StartLatest
)

type startPolicies struct{}

func (startPolicies) Enum() (string, []string) { return "start policy", []string{"earliest", "latest"} }

// IsolationLevel says which records of transactional producers are read.
type IsolationLevel int

func (i IsolationLevel) String() string               { return enum.Name[isolationLevels](int(i)) }
func (i IsolationLevel) Check() error                 { return enum.Valid[isolationLevels](int(i)) }
func (i IsolationLevel) MarshalText() ([]byte, error) { return enum.Text[isolationLevels](int(i)) }
func (i *IsolationLevel) UnmarshalText(b []byte) error {
	return enum.SetInt[isolationLevels]((*int)(i), string(b))
}
func (i *IsolationLevel) Set(s string) error { return enum.SetInt[isolationLevels]((*int)(i), s) }
func (IsolationLevel) Type() string          { return enum.Type[isolationLevels]() }

const (
	// ReadCommitted reads only committed records, up to the last stable
	// offset. It is the zero value and the default.
	ReadCommitted IsolationLevel = iota
	// ReadUncommitted reads every record up to the high watermark,
	// including records of open and aborted transactions.
	ReadUncommitted
)

type isolationLevels struct{}

func (isolationLevels) Enum() (string, []string) {
	return "isolation level", []string{"read_committed", "read_uncommitted"}
}

// wireIsolation is l as Fetch and ListOffsets requests carry it.
func wireIsolation(l IsolationLevel) kafkago.IsolationLevel {
	if l == ReadUncommitted {
		return kafkago.ReadUncommitted
	}
	return kafkago.ReadCommitted
}

// Config configures how partitions are read. Zero fields take the
// defaults named after them.
type Config struct {
	// Brokers are the bootstrap addresses, host:port. At least one.
	Brokers []string

	// Dial opens connections to brokers; nil uses a net.Dialer. TLS and
	// SASL are layered on top of what it returns.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// DialTimeout bounds connecting, including the TLS and SASL handshakes
	// (default 5s, kafka-go's).
	DialTimeout time.Duration
	// TLS enables TLS when not nil.
	TLS *tls.Config
	// SASL enables SASL authentication when not nil.
	SASL *SASL
	// ClientID is sent to the brokers with every request.
	ClientID string
	// Rack is the client's rack (client.rack, KIP-392): a leader whose
	// replica.selector.class picks a replica by rack answers a fetch with
	// the replica to fetch from instead, which the consumer follows (it
	// follows one named without a rack too). Empty: none is sent.
	Rack string
	// MetadataTTL bounds how long cached cluster metadata is used (default
	// 6s, kafka-go's). Leader changes reported by a broker refresh it at
	// once regardless.
	MetadataTTL time.Duration

	// MinBytes is how many bytes a fetch waits for, up to MaxWait
	// (default DefaultFetchMinBytes).
	MinBytes int
	// MaxBytes bounds the bytes one fetch returns of one partition
	// (default DefaultFetchMaxBytes). A record batch larger than that is
	// still returned whole when it comes first in a response.
	MaxBytes int
	// MaxRequestBytes bounds the bytes one multi-partition fetch of a
	// Consumer returns (default DefaultMaxRequestBytes).
	MaxRequestBytes int
	// MaxBufferBytes bounds the bytes a Consumer holds across its
	// partitions: fetched, decompressed, and not yet freed (default
	// DefaultMaxBufferBytes). Each partition may hold an equal share; a
	// smaller budget means smaller blocks and more round trips, a larger
	// one more memory.
	MaxBufferBytes int
	// MaxWait is how long a fetch waits on the broker for MinBytes
	// (default DefaultFetchMaxWait).
	MaxWait time.Duration
	// RequestTimeout bounds a request beyond what the broker is asked to
	// wait (default DefaultFetchRequestTimeout): a fetch is given up after
	// MaxWait+RequestTimeout and retried.
	RequestTimeout time.Duration
	// NoFetchSessions turns incremental fetch sessions (KIP-227) off: a
	// Consumer's fetches then list all their partitions.
	NoFetchSessions bool

	// IsolationLevel is ReadCommitted by default.
	IsolationLevel IsolationLevel
	// StartPolicy is where a partition without a stored offset starts and
	// where an out-of-range offset is reset to (default StartEarliest).
	StartPolicy StartPolicy

	// BackoffMin and BackoffMax bound the exponential, jittered backoff
	// between retries of failed requests (default 100ms and 5s).
	BackoffMin time.Duration
	BackoffMax time.Duration
	// UnknownTopicTimeout is how long a fetch keeps retrying while the
	// topic or partition is unknown to the cluster before failing (default
	// DefaultUnknownTopicTimeout). Other retriable errors are retried until
	// the context ends.
	UnknownTopicTimeout time.Duration
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	positiveOr(&c.MinBytes, DefaultFetchMinBytes)
	positiveOr(&c.MaxBytes, DefaultFetchMaxBytes)
	positiveOr(&c.MaxWait, DefaultFetchMaxWait)
	positiveOr(&c.MaxRequestBytes, DefaultMaxRequestBytes)
	positiveOr(&c.MaxBufferBytes, DefaultMaxBufferBytes)
	positiveOr(&c.RequestTimeout, DefaultFetchRequestTimeout)
	positiveOr(&c.BackoffMin, DefaultFetchBackoffMin)
	positiveOr(&c.BackoffMax, DefaultFetchBackoffMax)
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = c.BackoffMin
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
