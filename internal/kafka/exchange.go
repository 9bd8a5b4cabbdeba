package kafka

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Requests other than Fetch are encoded and decoded by franz-go's kmsg,
// which knows every version of every API, and sent through kafka-go's
// Transport (its pooled connections, TLS, SASL) by the same RawExchanger
// hook the fetch requests use. kafka-go negotiates versions only up to what
// it implements itself (Metadata v8, no topic ids), so the versions a
// broker serves are asked for here, once per broker address, with an
// ApiVersions request of our own.

// maxResponseSize bounds the size a broker may announce for a response other
// than a fetch: metadata of 100,000 partitions is a few megabytes.
const maxResponseSize = 256 << 20

// versionRange is the versions of one API a broker serves.
type versionRange struct{ min, max int16 }

// apiVersions remembers the API versions of each broker, by address. An
// entry is dropped when an exchange with that broker fails, so that a
// broker upgraded or downgraded in place is asked again.
type apiVersions struct {
	mu     sync.Mutex
	byAddr map[string]map[int16]versionRange
}

func newAPIVersions() *apiVersions {
	return &apiVersions{byAddr: map[string]map[int16]versionRange{}}
}

// UnsupportedVersionError reports a broker that serves no version of an API
// that offsetkeeper can use. Retrying does not help: the broker must be
// upgraded (or offsetkeeper).
type UnsupportedVersionError struct {
	Addr                 string
	API                  string
	Min, Max             int16 // what offsetkeeper can use
	BrokerMin, BrokerMax int16 // what the broker serves; -1 when it serves none
}

func (e *UnsupportedVersionError) Error() string {
	if e.BrokerMax < 0 {
		return fmt.Sprintf("kafka broker at %s does not serve %s, which offsetkeeper needs (v%d to v%d)", e.Addr, e.API, e.Min, e.Max)
	}
	return fmt.Sprintf("kafka broker at %s serves %s v%d to v%d; offsetkeeper needs a version between v%d and v%d",
		e.Addr, e.API, e.BrokerMin, e.BrokerMax, e.Min, e.Max)
}

// remoteAddr is the address of the broker at the other end of rw, as kafka-go
// hands a connection to a RawExchanger.
func remoteAddr(rw io.ReadWriter) string {
	if c, ok := rw.(interface{ RemoteAddr() net.Addr }); ok && c.RemoteAddr() != nil {
		return c.RemoteAddr().String()
	}
	return ""
}

// pick returns the newest version of api that both the broker at the other
// end of rw and offsetkeeper ([lo, hi]) serve, asking the broker for its
// versions first if they are not known yet.
func (v *apiVersions) pick(rw io.ReadWriter, clientID string, api int16, lo, hi int16) (int16, error) {
	addr := remoteAddr(rw)
	v.mu.Lock()
	vers, ok := v.byAddr[addr]
	v.mu.Unlock()
	if !ok {
		var err error
		if vers, err = askVersions(rw, clientID); err != nil {
			return 0, err
		}
		v.mu.Lock()
		v.byAddr[addr] = vers
		v.mu.Unlock()
	}
	r, ok := vers[api]
	name := kmsg.NameForKey(api)
	if !ok {
		return 0, &UnsupportedVersionError{Addr: addr, API: name, Min: lo, Max: hi, BrokerMin: -1, BrokerMax: -1}
	}
	if r.max < lo || r.min > hi {
		return 0, &UnsupportedVersionError{Addr: addr, API: name, Min: lo, Max: hi, BrokerMin: r.min, BrokerMax: r.max}
	}
	return min(r.max, hi), nil
}

// forget drops what is known of the broker at the other end of rw.
func (v *apiVersions) forget(rw io.ReadWriter) {
	v.mu.Lock()
	delete(v.byAddr, remoteAddr(rw))
	v.mu.Unlock()
}

// askVersions sends ApiVersions v0, which every broker serves (and answers
// in v0 even when it would rather have another version).
func askVersions(rw io.ReadWriter, clientID string) (map[int16]versionRange, error) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(0)
	m, err := exchangeKmsg(rw, clientID, req)
	if err != nil {
		return nil, fmt.Errorf("api versions: %w", err)
	}
	res := m.(*kmsg.ApiVersionsResponse)
	if res.ErrorCode != 0 {
		return nil, fmt.Errorf("api versions: %w", kafkago.Error(res.ErrorCode))
	}
	out := make(map[int16]versionRange, len(res.ApiKeys))
	for _, k := range res.ApiKeys {
		out[k.ApiKey] = versionRange{min: k.MinVersion, max: k.MaxVersion}
	}
	return out, nil
}

// exchangeKmsg writes req, whose version is set, on rw and reads its
// response.
func exchangeKmsg(rw io.ReadWriter, clientID string, req kmsg.Request) (kmsg.Response, error) {
	id := rawCorrelationID.Add(1)
	msg := kmsg.NewRequestFormatter(kmsg.FormatterClientID(clientID)).AppendRequest(nil, req, id)
	if _, err := rw.Write(msg); err != nil {
		return nil, err
	}
	body, err := readResponse(rw, id)
	if err != nil {
		return nil, fmt.Errorf("%s response: %w", kmsg.NameForKey(req.Key()), err)
	}
	res := req.ResponseKind()
	res.SetVersion(req.GetVersion())
	// A flexible response's header ends with tagged fields, but for
	// ApiVersions, whose header is never flexible.
	if res.IsFlexible() && req.Key() != kmsg.ApiVersions.Int16() {
		if body, err = skipTags(body); err != nil {
			return nil, fmt.Errorf("%s response header: %w", kmsg.NameForKey(req.Key()), err)
		}
	}
	if err := res.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("%s response v%d: %w", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return res, nil
}

// readResponse reads a response's size and correlation id, checks the id,
// and returns the rest.
func readResponse(r io.Reader, id int32) ([]byte, error) {
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, unexpectedEOF(err)
	}
	size := int32(binary.BigEndian.Uint32(head[:4]))
	if size < 4 || size > maxResponseSize {
		return nil, fmt.Errorf("invalid size %d", size)
	}
	if got := int32(binary.BigEndian.Uint32(head[4:])); got != id {
		return nil, fmt.Errorf("correlation id mismatch (expected=%d, found=%d)", id, got)
	}
	body := make([]byte, size-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, unexpectedEOF(err)
	}
	return body, nil
}

// skipTags skips a tagged-field section at the start of b.
func skipTags(b []byte) ([]byte, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return nil, errShortResponse
	}
	b = b[w:]
	for range n {
		if _, w = binary.Uvarint(b); w <= 0 {
			return nil, errShortResponse
		}
		b = b[w:]
		size, w := binary.Uvarint(b)
		if w <= 0 || size > uint64(len(b)-w) {
			return nil, errShortResponse
		}
		b = b[w+int(size):]
	}
	return b, nil
}

// kmsgRequest is a request that kafka-go's Transport sends on a connection of
// the broker it names and that writes and reads itself with kmsg.
type kmsgRequest struct {
	req      kmsg.Request
	broker   int32 // -1: any broker (the transport's connection to the bootstrap brokers)
	clientID string
	versions *apiVersions
	minVer   int16 // the oldest version offsetkeeper can use
	maxVer   int16 // the newest, at most kmsg's
}

// kmsgResponse is a kmsg response as kafka-go's Transport returns it.
type kmsgResponse struct{ kmsg.Response }

// ApiKey implements protocol.Message.
func (r kmsgResponse) ApiKey() protocol.ApiKey { return protocol.ApiKey(r.Key()) }

// ApiKey implements protocol.Message.
func (r *kmsgRequest) ApiKey() protocol.ApiKey { return protocol.ApiKey(r.req.Key()) }

// Broker implements protocol.BrokerMessage: the broker named, or, for -1,
// none (kafka-go then uses its connection to the bootstrap brokers).
func (r *kmsgRequest) Broker(cluster protocol.Cluster) (protocol.Broker, error) {
	if r.broker < 0 {
		return protocol.Broker{ID: -1}, nil
	}
	return brokerOf(cluster, r.broker)
}

// Required implements protocol.RawExchanger: it always takes over.
func (r *kmsgRequest) Required(map[protocol.ApiKey]int16) bool { return true }

// RawExchange implements protocol.RawExchanger. It runs on the connection's
// goroutine; an error makes the Transport drop the connection.
func (r *kmsgRequest) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	hi := r.req.MaxVersion()
	if r.maxVer > 0 {
		hi = min(hi, r.maxVer)
	}
	v, err := r.versions.pick(rw, r.clientID, r.req.Key(), r.minVer, hi)
	if err != nil {
		return nil, err
	}
	r.req.SetVersion(v)
	res, err := exchangeKmsg(rw, r.clientID, r.req)
	if err != nil {
		r.versions.forget(rw)
		return nil, err
	}
	return kmsgResponse{res}, nil
}
