package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	kafkago "github.com/segmentio/kafka-go"
)

// Client is the one way offsetkeeper talks to Kafka: a kafka-go Transport
// (leader routing, TLS, SASL, version negotiation, a connection pool and a
// metadata cache) built from a Config, and a kafka-go Client on it. The
// transport's background goroutines end with Close.
//
// A Consumer shares its Client with every Cursor it opens, so a replica
// keeps one pool and one metadata cache however many partitions it owns.
// A Client is safe for concurrent use.
type Client struct {
	cfg       Config // defaults applied
	addr      net.Addr
	dialer    *dialer
	versions  *apiVersions
	transport *kafkago.Transport
	client    *kafkago.Client
	stop      context.CancelFunc
	closeOnce sync.Once

	metaMu      sync.Mutex
	metaBrokers []int32 // the brokers of the last metadata answer
	metaGood    int32   // the broker that gave it
}

// NewClient checks cfg and returns a client of its brokers. topics are the
// topics whose metadata the transport keeps (all, if none). It connects
// lazily, on the first request; Close ends it.
func NewClient(cfg Config, topics ...string) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	versions := newAPIVersions()
	addr := newBootstrapAddr(cfg.Brokers)
	d := &dialer{dial: cfg.Dial, tls: cfg.TLS, clientID: cfg.ClientID, versions: versions,
		boot: newBootstrap(cfg.Brokers), bootName: addr.String()}
	if cfg.SASL != nil {
		m, err := kafkaMechanism(*cfg.SASL)
		if err != nil {
			return nil, err
		}
		d.mech = m
	}
	// TLS and SASL are the dialer's: see dial.go.
	t := &kafkago.Transport{
		Dial:           d.DialContext,
		DialTimeout:    cfg.DialTimeout,
		ClientID:       cfg.ClientID,
		MetadataTTL:    cfg.MetadataTTL,
		MetadataTopics: topics,
	}
	bg, stop := context.WithCancel(context.Background())
	t.Context = bg // ends the transport's goroutines
	return &Client{
		cfg:       cfg,
		addr:      addr,
		dialer:    d,
		versions:  versions,
		transport: t,
		client:    &kafkago.Client{Addr: addr, Transport: t, Timeout: cfg.RequestTimeout},
		stop:      stop,
		metaGood:  -1,
	}, nil
}

// Addr is the bootstrap brokers, as kafka-go requests take them: one name
// that the client's dialer resolves to the first of them that answers.
func (c *Client) Addr() net.Addr { return c.addr }

// Kafka is the kafka-go Client on the transport, for the requests this
// package has no function of its own for (OffsetCommit, OffsetFetch).
// Its Timeout is Config.RequestTimeout.
func (c *Client) Kafka() *kafkago.Client { return c.client }

// Close ends the transport's goroutines and its connections. It is
// idempotent; requests fail afterwards.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.stop()
		c.transport.CloseIdleConnections()
	})
	return nil
}

// CheckAccess asks for the metadata of topics, which needs a connection
// (TLS, the SASL login) and the right to describe them, and returns the
// error of the first broker that answers (or of the last one tried). A
// missing topic is not an error here, and is never created. refused tells
// the errors that end the search (a refusal, see Refused); after any other
// the next broker is tried.
func (c *Client) CheckAccess(ctx context.Context, refused func(error) bool, topics ...string) error {
	m, err := c.metadata(ctx, topics)
	if err != nil {
		return err
	}
	for _, name := range topics {
		if t := m.topics[name]; t != nil && t.err != nil && refused(t.err) {
			return fmt.Errorf("topic %q: %w", name, t.err)
		}
	}
	return nil
}

// Refused tells an error of Kafka refusing the client's credentials or
// rights (SASL, authorization) from others. TLS refusals are not among
// them: tell those with crypto/tls's and crypto/x509's error types.
func Refused(err error) bool {
	for _, e := range []kafkago.Error{kafkago.SASLAuthenticationFailed, kafkago.UnsupportedSASLMechanism, kafkago.IllegalSASLState,
		kafkago.TopicAuthorizationFailed, kafkago.ClusterAuthorizationFailed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
