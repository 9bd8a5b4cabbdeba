package kafka

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
)

// The fetch requests go through kafka-go's Transport, which picks the
// partition leader, dials (TLS, SASL), negotiates versions and pools the
// connections. kafka-go's own decoding of a fetch response reads the record
// batches byte by byte, though, and dominates the cost of a drain. So the
// request is wrapped in a rawFetchRequest: kafka-go's protocol.RawExchanger
// hook hands it the connection, it writes itself with kafka-go's encoder and
// reads the response as it arrives, each partition's record batches into a
// buffer of their own, which decode.go parses in place.

// maxRawFetchVersion is the newest Fetch version parsed here: v12 and later
// are flexible versions, with another encoding. kafka-go v0.4.51 supports up
// to v11 anyway.
const maxRawFetchVersion = 11

// minRawFetchVersion is the oldest Fetch version used: v4 brings the last
// stable offset and the aborted transactions. Kafka 4 serves v4 and later.
const minRawFetchVersion = 4

// maxFetchResponseSize bounds the size a broker may announce for a fetch
// response: anything larger is a protocol error, not an allocation.
const maxFetchResponseSize = 1 << 30

var rawCorrelationID atomic.Int32

// rawFetchRequest is a fetch request that reads its response itself.
type rawFetchRequest struct {
	fetchapi.Request
	clientID string
	version  int16 // negotiated on the connection, set by Required
	// broker, when direct, is the broker the request goes to: a Consumer
	// routes by its own view of the leaders, so that a request covers all
	// the partitions it has for that broker. Otherwise kafka-go routes by
	// the partitions' leaders in its metadata cache.
	broker int32
	direct bool
	// versions, when set, tells the Fetch versions the broker serves
	// (kafka-go's negotiation stops at its own newest, and takes its
	// oldest, v0, where the broker serves none it knows).
	versions *apiVersions
	// sent, when set, counts the bytes of the request as written.
	sent *atomic.Int64
}

// Broker implements protocol.BrokerMessage.
func (r *rawFetchRequest) Broker(cluster protocol.Cluster) (protocol.Broker, error) {
	if !r.direct {
		return r.Request.Broker(cluster)
	}
	return brokerOf(cluster, r.broker)
}

// brokerOf is the broker id of the cluster, for a request routed by our own
// view of the leaders; one kafka-go's metadata does not know is retried as a
// leader not yet known.
func brokerOf(cluster protocol.Cluster, id int32) (protocol.Broker, error) {
	b, ok := cluster.Brokers[id]
	if !ok {
		return protocol.Broker{ID: -1}, fmt.Errorf("broker %d not in the metadata: %w", id, protocol.ErrNoLeader)
	}
	return b, nil
}

// Required implements protocol.RawExchanger: it always takes over, and
// notes the Fetch version the connection negotiated.
func (r *rawFetchRequest) Required(versions map[protocol.ApiKey]int16) bool {
	r.version = min(versions[protocol.Fetch], maxRawFetchVersion)
	return true
}

// RawExchange implements protocol.RawExchanger. It runs on the connection's
// goroutine; an error makes the Transport drop the connection.
func (r *rawFetchRequest) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	if r.versions != nil {
		// v4 is the first with the last stable offset and the aborted
		// transactions, which read_committed needs.
		v, err := r.versions.pick(rw, r.clientID, int16(protocol.Fetch), minRawFetchVersion, maxRawFetchVersion)
		if err != nil {
			return nil, err
		}
		r.version = v
	}
	res, err := r.exchange(rw)
	if err != nil && r.versions != nil {
		r.versions.forget(rw)
	}
	return res, err
}

func (r *rawFetchRequest) exchange(rw io.ReadWriter) (protocol.Message, error) {
	id := rawCorrelationID.Add(1)
	w := io.Writer(rw)
	if r.sent != nil {
		w = countingWriter{rw, r.sent}
	}
	if err := protocol.WriteRequest(w, r.version, id, r.clientID, &r.Request); err != nil {
		return nil, err
	}
	var head [8]byte
	if _, err := io.ReadFull(rw, head[:]); err != nil {
		return nil, unexpectedEOF(err)
	}
	size := int32(binary.BigEndian.Uint32(head[:4]))
	if size < 4 || size > maxFetchResponseSize {
		return nil, fmt.Errorf("fetch response of invalid size %d", size)
	}
	if got := int32(binary.BigEndian.Uint32(head[4:])); got != id {
		return nil, fmt.Errorf("fetch response: correlation id mismatch (expected=%d, found=%d)", id, got)
	}
	// The body is parsed as it arrives: each partition's records are read
	// into a buffer of their own, so that what one partition holds keeps
	// no other's bytes alive, and no buffer the size of the whole
	// response is needed.
	body := io.LimitReader(rw, int64(size-4))
	res, err := readFetchResponse(bufio.NewReaderSize(body, 16<<10), int(size-4), r.version)
	if err != nil {
		return nil, err
	}
	// Fields of a version parsed here that it does not know would be left
	// on the connection: skip them.
	if _, err := io.Copy(io.Discard, body); err != nil {
		return nil, unexpectedEOF(err)
	}
	return res, nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// rawFetchResponse is a fetch response whose record sets are left encoded:
// each partition's Records sub-slices the response buffer.
type rawFetchResponse struct {
	ThrottleMs int32 // the broker mutes the connection this long after the response (KIP-219)
	ErrorCode  int16
	SessionID  int32 // the fetch session's id (KIP-227, v7 and later); 0: none
	Topics     []rawFetchTopic
}

// ApiKey implements protocol.Message.
func (*rawFetchResponse) ApiKey() protocol.ApiKey { return protocol.Fetch }

type rawFetchTopic struct {
	Topic      string
	Partitions []rawFetchPartition
}

type rawFetchPartition struct {
	Partition           int32
	ErrorCode           int16
	HighWatermark       int64
	LastStableOffset    int64 // -1 before v4
	AbortedTransactions []fetchapi.ResponseTransaction
	// PreferredReadReplica is the broker a leader sends the fetch to
	// instead (v11, KIP-392), -1 for none.
	PreferredReadReplica int32
	// Records holds the partition's record batches as the broker sent
	// them, the last one possibly truncated; nil when there are none.
	Records []byte
}

// readFetchResponse reads a fetch response body of n bytes from br.
func readFetchResponse(br *bufio.Reader, n int, version int16) (*rawFetchResponse, error) {
	r := wireReader{r: br, left: n}
	res := &rawFetchResponse{}
	if version >= 1 {
		res.ThrottleMs = r.int32()
	}
	if version >= 7 {
		res.ErrorCode = r.int16()
		res.SessionID = r.int32()
	}
	res.Topics = readArray(&r, func(t *rawFetchTopic) {
		t.Topic = r.string()
		t.Partitions = readArray(&r, func(p *rawFetchPartition) {
			p.Partition = r.int32()
			p.ErrorCode = r.int16()
			p.HighWatermark = r.int64()
			p.LastStableOffset = -1
			if version >= 4 {
				p.LastStableOffset = r.int64()
			}
			if version >= 5 {
				r.int64() // log start offset
			}
			if version >= 4 {
				p.AbortedTransactions = readArray(&r, func(a *fetchapi.ResponseTransaction) {
					*a = fetchapi.ResponseTransaction{ProducerID: r.int64(), FirstOffset: r.int64()}
				})
			}
			p.PreferredReadReplica = -1
			if version >= 11 {
				p.PreferredReadReplica = r.int32()
			}
			p.Records = r.bytes()
		})
	})
	if r.err != nil {
		return nil, fmt.Errorf("fetch response v%d: %w", version, r.err)
	}
	return res, nil
}

var errShortResponse = errors.New("truncated")

// wireReader reads the big-endian fields of a non-flexible Kafka message
// from a stream of left bytes. After an error every read returns zero.
type wireReader struct {
	r    *bufio.Reader
	left int
	err  error
}

// take returns the next n bytes, valid until the next read.
func (r *wireReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > r.left {
		r.err = errShortResponse
		return nil
	}
	b, err := r.r.Peek(n)
	if err != nil {
		r.err = unexpectedEOF(err)
		return nil
	}
	_, _ = r.r.Discard(n)
	r.left -= n
	return b
}

func (r *wireReader) int16() int16 {
	if s := r.take(2); s != nil {
		return int16(binary.BigEndian.Uint16(s))
	}
	return 0
}

func (r *wireReader) int32() int32 {
	if s := r.take(4); s != nil {
		return int32(binary.BigEndian.Uint32(s))
	}
	return 0
}

func (r *wireReader) int64() int64 {
	if s := r.take(8); s != nil {
		return int64(binary.BigEndian.Uint64(s))
	}
	return 0
}

func (r *wireReader) string() string {
	n := r.int16()
	if n < 0 {
		return ""
	}
	return string(r.take(int(n)))
}

// bytes returns nullable bytes in a buffer of their own: nil for null (and
// after an error). A length beyond what is left of the message is an
// error, so it is never allocated.
func (r *wireReader) bytes() []byte {
	n := int(r.int32())
	if n < 0 || r.err != nil {
		return nil
	}
	if n > r.left {
		r.err = errShortResponse
		return nil
	}
	b := getBytes(n) // given back once its records are done with (pool.go)
	if _, err := io.ReadFull(r.r, b); err != nil {
		r.err = unexpectedEOF(err)
		return nil
	}
	r.left -= n
	return b
}

// readArray reads an array into a new slice, each element with read: nil
// when the array is empty or null, and its elements after an error zero.
func readArray[T any](r *wireReader, read func(*T)) []T {
	n := r.arrayLen()
	if n == 0 {
		return nil
	}
	s := make([]T, n)
	for i := 0; i < n && r.err == nil; i++ {
		read(&s[i])
	}
	return s
}

// arrayLen returns the length of a nullable array, 0 for null. A length
// that the remaining bytes cannot hold is an error (each element takes at
// least one byte), so that it is never allocated.
func (r *wireReader) arrayLen() int {
	n := r.int32()
	if n < 0 || r.err != nil {
		return 0
	}
	if int(n) > r.left {
		r.err = errShortResponse
		return 0
	}
	return int(n)
}
