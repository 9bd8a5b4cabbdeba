package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
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
	transport *kafkago.Transport
	client    *kafkago.Client
	stop      context.CancelFunc
	closeOnce sync.Once
}

// NewClient checks cfg and returns a client of its brokers. topics are the
// topics whose metadata the transport keeps (all, if none). It connects
// lazily, on the first request; Close ends it.
func NewClient(cfg Config, topics ...string) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	t := &kafkago.Transport{
		Dial:           cfg.Dial,
		DialTimeout:    cfg.DialTimeout,
		TLS:            cfg.TLS,
		ClientID:       cfg.ClientID,
		MetadataTTL:    cfg.MetadataTTL,
		MetadataTopics: topics,
	}
	if cfg.SASL != nil {
		m, err := cfg.SASL.kafkaMechanism()
		if err != nil {
			return nil, err
		}
		t.SASL = m
	}
	bg, stop := context.WithCancel(context.Background())
	t.Context = bg // ends the transport's goroutines
	addr := kafkago.TCP(cfg.Brokers...)
	return &Client{
		cfg:       cfg,
		addr:      addr,
		transport: t,
		client:    &kafkago.Client{Addr: addr, Transport: t, Timeout: cfg.RequestTimeout},
		stop:      stop,
	}, nil
}

// Addr is the bootstrap brokers, as kafka-go requests take them.
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

// Partitions returns the partition ids of each topic, sorted, and the
// topics the cluster does not know.
func (c *Client) Partitions(ctx context.Context, topics ...string) (found map[string][]int, missing []string, err error) {
	found = make(map[string][]int, len(topics))
	if len(topics) == 0 {
		return found, nil, nil
	}
	res, err := c.client.Metadata(ctx, &kafkago.MetadataRequest{Addr: c.addr, Topics: topics})
	if err != nil {
		return nil, nil, fmt.Errorf("list partitions of %s: %w", strings.Join(topics, ", "), err)
	}
	for _, t := range res.Topics {
		if !slices.Contains(topics, t.Name) {
			continue
		}
		if t.Error != nil {
			if errors.Is(t.Error, kafkago.UnknownTopicOrPartition) {
				continue
			}
			return nil, nil, fmt.Errorf("list partitions of topic %q: %w", t.Name, t.Error)
		}
		ids := make([]int, len(t.Partitions))
		for i, p := range t.Partitions {
			ids[i] = p.ID
		}
		slices.Sort(ids)
		found[t.Name] = ids
	}
	for _, t := range topics {
		if _, ok := found[t]; !ok {
			missing = append(missing, t)
		}
	}
	return found, missing, nil
}

// AllPartitions is Partitions where a topic the cluster does not know is an
// error naming it.
func (c *Client) AllPartitions(ctx context.Context, topics ...string) (map[string][]int, error) {
	found, missing, err := c.Partitions(ctx, topics...)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("list partitions of topic %q: %w", missing[0], kafkago.UnknownTopicOrPartition)
	}
	return found, nil
}

// ListOffsets is the package function ListOffsets on the client's
// transport, brokers and client ID.
func (c *Client) ListOffsets(ctx context.Context, level IsolationLevel, ts int64, tps []TopicPartition) (map[TopicPartition]int64, map[TopicPartition]error, error) {
	return ListOffsets(ctx, c.transport, c.cfg.Brokers, c.cfg.ClientID, level, ts, tps)
}

// CheckAccess asks the first broker that answers for the metadata of
// topics over a connection of its own, with the client's dial, TLS and SASL
// settings, and returns its error. Unlike the transport, which sees only an
// unexpected EOF when a broker closes the connection during the SASL
// exchange (the way brokers reject a login), kafka-go's Dialer used here
// reports that as SASLAuthenticationFailed. refused tells the errors that
// end the search (a refusal, see Refused); after any other the next broker
// is tried.
func (c *Client) CheckAccess(ctx context.Context, refused func(error) bool, topics ...string) error {
	d := &kafkago.Dialer{ClientID: c.cfg.ClientID, Timeout: c.cfg.DialTimeout, TLS: c.cfg.TLS, SASLMechanism: c.transport.SASL}
	if c.cfg.Dial != nil {
		d.DialFunc = c.cfg.Dial
	}
	var err error
	for _, b := range c.cfg.Brokers {
		var conn *kafkago.Conn
		if conn, err = d.DialContext(ctx, "tcp", b); err == nil {
			_, err = conn.ReadPartitions(topics...)
			_ = conn.Close()
		}
		if err == nil || refused(err) {
			break
		}
	}
	return err
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
