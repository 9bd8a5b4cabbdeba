package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxRefDepth bounds a chain of references (a schema's reference's
// reference ...): deeper than any real schema, and a stop to a cycle
// made by deleting and registering again.
const maxRefDepth = 32

// ErrClosed is returned by the calls of a Client after Close.
var ErrClosed = errors.New("registry client closed")

// Client reads schemas by id from a Confluent-compatible Schema Registry,
// with their references resolved. It is safe for concurrent use.
//
// It does not cache schemas by id (its caller keeps what it compiled from
// them) but does cache referenced schemas, which the registry never
// changes, and sends one request for concurrent calls for the same id.
type Client struct {
	bases              []string
	username, password string
	timeout            time.Duration // per request, to one URL
	hc                 *http.Client
	tr                 *http.Transport
	next               atomic.Int32 // the URL to try first: the last that answered
	refs               *refCache

	// ctx ends at Close; fetches run under it, not under their callers'
	// contexts, as they serve several callers.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the fetches

	mu       sync.Mutex
	closed   bool
	inflight map[int]*call

	nRequests, nErrors, nNotFound atomic.Uint64
}

// call is a fetch of one id, for the callers that wait for it.
type call struct {
	done    chan struct{}
	cancel  context.CancelFunc
	waiters int // under Client.mu; the fetch is cancelled when it falls to 0
	schema  *Schema
	err     error
}

// Stats are a Client's counters since New, for metrics.
type Stats struct {
	// Requests is the HTTP requests sent, to any URL, for references too.
	Requests uint64
	// Errors is the requests that got no answer, or an answer other than
	// a schema or the registry's not-found (a 401, a 5xx, ...): the
	// registry's trouble, not the records'. A request given up because
	// its callers left is none.
	Errors uint64
	// NotFound is the requests the registry answered with not-found: an
	// unknown id is the record's fault.
	NotFound uint64
}

// New validates cfg and returns a client; it sends nothing yet. Its
// errors name the setting at fault and what is accepted.
func New(cfg Config) (*Client, error) {
	bases, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg.TLS.Clone()
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{
		bases:    bases,
		username: cfg.Username,
		password: cfg.Password,
		timeout:  timeout,
		hc:       &http.Client{Transport: tr},
		tr:       tr,
		refs:     newRefCache(refCacheSize),
		ctx:      ctx,
		cancel:   cancel,
		inflight: make(map[int]*call),
	}, nil
}

// SchemaByID returns schema id with its references resolved, each
// reference's schema its own resolved too. The schemas returned are
// shared: do not modify them.
//
// An id the registry does not know, or a reference to a subject or
// version it does not have, is an error wrapping ErrNotFound (and a
// *StatusError). Any other failure (no answer in time, a refused
// connection, a 5xx, refused credentials) is an error that does not wrap
// it: try again later.
//
// Concurrent calls for one id share one fetch. A caller whose ctx ends
// returns at once with ctx's error; the fetch goes on for the others, and
// stops when none is left.
func (c *Client) SchemaByID(ctx context.Context, id int) (*Schema, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("schema %d: %w", id, ErrClosed)
	}
	cl := c.inflight[id]
	if cl == nil {
		fctx, cancel := context.WithCancel(c.ctx)
		cl = &call{done: make(chan struct{}), cancel: cancel}
		c.inflight[id] = cl
		c.wg.Add(1)
		go c.fetch(fctx, id, cl)
	}
	cl.waiters++
	c.mu.Unlock()

	select {
	case <-cl.done:
		return cl.schema, cl.err
	case <-ctx.Done():
		c.mu.Lock()
		cl.waiters--
		if cl.waiters == 0 {
			cl.cancel()
			if c.inflight[id] == cl {
				delete(c.inflight, id)
			}
		}
		c.mu.Unlock()
		return nil, fmt.Errorf("schema %d: %w", id, ctx.Err())
	}
}

// fetch reads schema id for cl's callers; it ends when the schema is read,
// the registry has failed for each URL in turn, or ctx ends (Close, or
// all callers left).
func (c *Client) fetch(ctx context.Context, id int, cl *call) {
	defer c.wg.Done()
	s, err := c.schemaByID(ctx, id)
	if err != nil {
		if c.ctx.Err() != nil {
			err = ErrClosed
		}
		s, err = nil, fmt.Errorf("schema %d: %w", id, err)
	}
	c.mu.Lock()
	if c.inflight[id] == cl {
		delete(c.inflight, id)
	}
	c.mu.Unlock()
	cl.schema, cl.err = s, err
	cl.cancel()
	close(cl.done)
}

// wireSchema is a schema as the registry answers GET /schemas/ids/{id}
// and GET /subjects/{subject}/versions/{version}.
type wireSchema struct {
	Schema     string    `json:"schema"`
	SchemaType string    `json:"schemaType"`
	References []wireRef `json:"references"`
}

type wireRef struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

func (c *Client) schemaByID(ctx context.Context, id int) (*Schema, error) {
	w, err := c.getSchema(ctx, "/schemas/ids/"+strconv.Itoa(id))
	if err != nil {
		return nil, err
	}
	s := &Schema{ID: id, Type: schemaType(w.SchemaType), Text: w.Schema}
	if s.References, err = c.resolve(ctx, w.References, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// resolve reads the schemas of refs, and theirs, from the cache or the
// registry. chain is the references followed to get here.
func (c *Client) resolve(ctx context.Context, refs []wireRef, chain []refKey) ([]Reference, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	out := make([]Reference, 0, len(refs))
	for _, r := range refs {
		k := refKey{subject: r.Subject, version: r.Version}
		s, err := c.reference(ctx, k, chain)
		if err != nil {
			return nil, fmt.Errorf("reference %q (subject %q version %d): %w", r.Name, r.Subject, r.Version, err)
		}
		out = append(out, Reference{Name: r.Name, Subject: r.Subject, Version: r.Version, Schema: s})
	}
	return out, nil
}

// reference is the schema of subject version k, resolved.
func (c *Client) reference(ctx context.Context, k refKey, chain []refKey) (*Schema, error) {
	for _, seen := range chain {
		if seen == k {
			return nil, errors.New("a cycle of references")
		}
	}
	if len(chain) >= maxRefDepth {
		return nil, fmt.Errorf("over %d references deep", maxRefDepth)
	}
	// A version below 1 (-1: the latest) is no fixed schema: not cached.
	cacheable := k.version >= 1
	if cacheable {
		if s, ok := c.refs.get(k); ok {
			return s, nil
		}
	}
	w, err := c.getSchema(ctx, "/subjects/"+url.PathEscape(k.subject)+"/versions/"+strconv.Itoa(k.version))
	if err != nil {
		return nil, err
	}
	s := &Schema{Type: schemaType(w.SchemaType), Text: w.Schema}
	if s.References, err = c.resolve(ctx, w.References, append(chain[:len(chain):len(chain)], k)); err != nil {
		return nil, err
	}
	if cacheable {
		c.refs.add(k, s)
	}
	return s, nil
}

// getSchema reads and decodes a schema at path.
func (c *Client) getSchema(ctx context.Context, path string) (*wireSchema, error) {
	body, u, err := c.get(ctx, path)
	if err != nil {
		return nil, err
	}
	var w wireSchema
	if err := json.Unmarshal(body, &w); err != nil {
		c.nErrors.Add(1)
		return nil, fmt.Errorf("get %s: the answer is no schema: %w", u, err)
	}
	if w.Schema == "" {
		c.nErrors.Add(1)
		return nil, fmt.Errorf("get %s: the answer has no schema text", u)
	}
	return &w, nil
}

// schemaType is the type the registry named, Avro when it named none.
func schemaType(s string) Type {
	if s == "" {
		return Avro
	}
	return Type(strings.ToUpper(s))
}

// Stats returns the counters.
func (c *Client) Stats() Stats {
	return Stats{Requests: c.nRequests.Load(), Errors: c.nErrors.Load(), NotFound: c.nNotFound.Load()}
}

// Close ends the fetches under way (their callers get ErrClosed), waits
// for them and closes idle connections. Later calls fail with ErrClosed;
// Close again is a no-op.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.tr.CloseIdleConnections()
	return nil
}
