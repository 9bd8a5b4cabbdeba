package format

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Source gives schemas by id (internal/registry.Client implements it). An
// error that wraps registry.ErrNotFound says the registry does not know the
// id; any other says it could not be asked.
type Source interface {
	SchemaByID(ctx context.Context, id int) (*registry.Schema, error)
}

// Defaults of Options.
const (
	DefaultCacheSize   = 1000
	DefaultNotFoundTTL = 10 * time.Second
)

// Options tune a Decoder; the zero value takes every default.
type Options struct {
	// CacheSize is how many compiled schemas the Decoder keeps, those not
	// used lately dropped first; 0 means DefaultCacheSize. A topic's
	// records name few ids, so the default costs little memory; a cache
	// smaller than the ids in use fetches and compiles schemas again and
	// again.
	CacheSize int
	// NotFoundTTL is how long an id the registry does not know is
	// remembered as unknown, so that a run of such records asks the
	// registry once rather than once each; 0 means DefaultNotFoundTTL,
	// negative not remembered at all. A registry may answer "not found"
	// for an id that a lagging follower has yet to learn: a longer TTL
	// sets more of such records aside.
	NotFoundTTL time.Duration
}

// validate checks o; its messages name the value and the limit.
func (o Options) validate() error {
	if o.CacheSize < 0 {
		return fmt.Errorf("format: cache size %d is negative (0 takes the default, %d)", o.CacheSize, DefaultCacheSize)
	}
	return nil
}

// Stats counts a Decoder's schema look-ups since New.
type Stats struct {
	// CacheHits counts the records whose schema was cached, or being
	// fetched by another Decode at the time.
	CacheHits int64
	// CacheMisses counts the fetches from the Source.
	CacheMisses int64
}

// Decoder turns records in Confluent's wire format into the JSON they
// stand for. It fetches each schema id from its Source once, compiles it
// once, and keeps the compiled schema. It is safe for concurrent use.
type Decoder struct {
	format      sinks.Format
	schemas     schemaFormat
	src         Source
	size        int
	notFoundTTL time.Duration
	now         func() time.Time // time.Now, but for tests

	// entries maps an id to its *entry, kept or still being fetched. Reads
	// take no lock: a hit is a Load and, at most, a store of a bit.
	entries sync.Map
	mu      sync.Mutex // guards kept and hand
	kept    []*entry   // the fetched entries, at most size: a CLOCK ring
	hand    int

	hits, misses atomic.Int64
}

// entry is one schema id's outcome. done is closed once c or err is set;
// they are not written after.
type entry struct {
	id   int
	done chan struct{}
	c    codec
	err  error // a *RecordError, kept like a codec; or a Source error, not kept
	// expires, when not zero, is when a kept RecordError (not found) stops
	// being believed.
	expires time.Time
	used    atomic.Bool // CLOCK's reference bit
}

// schemaFormat is what a Decoder knows of its format's schemas: the type
// the registry gives them, and their compiler.
type schemaFormat struct {
	typ     registry.Type
	compile func(*registry.Schema) (codec, error)
}

// schemaFormats are the formats a Decoder reads.
var schemaFormats = map[sinks.Format]schemaFormat{
	sinks.Avro:       {registry.Avro, compileAvro},
	sinks.Protobuf:   {registry.Protobuf, compileProtobuf},
	sinks.JSONSchema: {registry.JSON, compileJSONSchema},
}

// codec decodes the records of one compiled schema. b is the whole
// record, its 5-byte header included, so that positions in reasons count
// from the record's first byte.
type codec interface {
	decode(dst, b []byte) ([]byte, *sinks.Schema, error)
}

// New returns a Decoder of records in format f (sinks.Avro,
// sinks.Protobuf or sinks.JSONSchema) whose schemas src gives.
func New(f sinks.Format, src Source, opts Options) (*Decoder, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if src == nil {
		return nil, errors.New("format: no schema source")
	}
	sf, ok := schemaFormats[f]
	if !ok {
		return nil, fmt.Errorf("format: %q is not a Schema Registry format (want %s, %s or %s)", f, sinks.Avro, sinks.Protobuf, sinks.JSONSchema)
	}
	d := &Decoder{format: f, schemas: sf, src: src, size: opts.CacheSize, notFoundTTL: opts.NotFoundTTL, now: time.Now}
	if d.size == 0 {
		d.size = DefaultCacheSize
	}
	if d.notFoundTTL == 0 {
		d.notFoundTTL = DefaultNotFoundTTL
	}
	return d, nil
}

// headerSize is the wire format's magic byte and 4-byte schema id.
const headerSize = 5

// Decode appends the JSON that b, a record's key or value in Confluent's
// wire format, stands for to dst and returns it, with the schema b was
// written with: one *sinks.Schema for all the records of an id (for
// Protobuf, of an id and message), not to be modified. A null key or value
// (a tombstone) has no JSON to decode to: leave it null rather than call
// Decode.
//
// An error that is a *RecordError is the record's fault; any other is the
// Source's (or ctx's), and the record should be decoded again later. On
// error dst is returned as it came, though bytes past its length may have
// been written.
func (d *Decoder) Decode(ctx context.Context, dst, b []byte) ([]byte, *sinks.Schema, error) {
	if len(b) < headerSize {
		return dst, nil, recordErrorf(0, "%s: record of %d bytes is shorter than the wire format's 5-byte header", d.format, len(b))
	}
	if b[0] != 0 {
		return dst, nil, recordErrorf(0, "%s: wrong magic byte 0x%02x at byte 0 (the wire format starts with 0x00)", d.format, b[0])
	}
	id := int(binary.BigEndian.Uint32(b[1:headerSize]))
	c, err := d.codec(ctx, id)
	if err != nil {
		return dst, nil, err
	}
	out, s, err := c.decode(dst, b)
	if err != nil {
		return dst, nil, err
	}
	return out, s, nil
}

// Stats returns the look-up counts since New.
func (d *Decoder) Stats() Stats {
	return Stats{CacheHits: d.hits.Load(), CacheMisses: d.misses.Load()}
}

// codec returns the compiled schema of id, fetching and compiling it
// unless it is kept or another call is at it (then it waits for that one).
func (d *Decoder) codec(ctx context.Context, id int) (codec, error) {
	for {
		if v, ok := d.entries.Load(id); ok {
			e := v.(*entry)
			select {
			case <-e.done:
			default:
				select {
				case <-e.done:
				case <-ctx.Done():
					return nil, fmt.Errorf("schema %d: %w", id, ctx.Err())
				}
			}
			if e.c == nil && !isRecordError(e.err) {
				// The other call's fetch failed. If only because its ctx
				// ended, fetch with ours; else its error is ours too.
				if ctx.Err() == nil && (errors.Is(e.err, context.Canceled) || errors.Is(e.err, context.DeadlineExceeded)) {
					d.entries.CompareAndDelete(id, e)
					continue
				}
				return nil, e.err
			}
			if !e.expires.IsZero() && d.now().After(e.expires) {
				d.entries.CompareAndDelete(id, e)
				continue
			}
			d.hits.Add(1)
			if !e.used.Load() {
				e.used.Store(true)
			}
			return e.c, e.err
		}
		e := &entry{id: id, done: make(chan struct{})}
		if _, loaded := d.entries.LoadOrStore(id, e); loaded {
			continue
		}
		d.misses.Add(1)
		d.fetch(ctx, e)
		return e.c, e.err
	}
}

// fetch fills e from the Source and keeps it, or drops it when the Source
// failed, so that the next call asks again.
func (d *Decoder) fetch(ctx context.Context, e *entry) {
	defer close(e.done)
	s, err := d.src.SchemaByID(ctx, e.id)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		e.err = &RecordError{Reason: fmt.Sprintf("%s: schema id %d is not in the registry", d.format, e.id), SchemaID: e.id, err: err}
		if d.notFoundTTL < 0 {
			d.entries.CompareAndDelete(e.id, e)
			return
		}
		e.expires = d.now().Add(d.notFoundTTL)
	case err != nil:
		e.err = fmt.Errorf("schema %d: %w", e.id, err)
		d.entries.CompareAndDelete(e.id, e)
		return
	case s == nil:
		e.err = fmt.Errorf("schema %d: the source returned no schema and no error", e.id)
		d.entries.CompareAndDelete(e.id, e)
		return
	default:
		e.c, e.err = d.compileSchema(e.id, s)
	}
	d.keep(e)
}

// compileSchema checks that s is of the decoder's format and compiles it;
// its errors are RecordErrors, since every record of the id would fail
// alike.
func (d *Decoder) compileSchema(id int, s *registry.Schema) (c codec, err error) {
	if t := schemaType(s); t != d.schemas.typ {
		return nil, recordErrorf(id, "%s: schema %d is of type %s, not %s", d.format, id, t, d.schemas.typ)
	}
	defer func() {
		// A parser's panic on odd schema text must not take the replica down.
		if r := recover(); r != nil {
			c, err = nil, recordErrorf(id, "%s: schema %d does not compile: panic: %v", d.format, id, r)
		}
	}()
	s2 := *s
	s2.ID = id // the codecs name the id in their reasons
	c, err = d.schemas.compile(&s2)
	if err != nil {
		return nil, recordErrorf(id, "%s: schema %d does not compile: %v", d.format, id, err)
	}
	return c, nil
}

// keep adds e to the ring of kept entries, dropping the first one not used
// since the hand last passed it when the ring is full.
func (d *Decoder) keep(e *entry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.kept) < d.size {
		d.kept = append(d.kept, e)
		return
	}
	// Two turns at most: the first clears every bit that stands in the way.
	for range 2 * len(d.kept) {
		if !d.kept[d.hand].used.Load() {
			break
		}
		d.kept[d.hand].used.Store(false)
		d.hand = (d.hand + 1) % len(d.kept)
	}
	old := d.kept[d.hand]
	d.entries.CompareAndDelete(old.id, old)
	d.kept[d.hand] = e
	d.hand = (d.hand + 1) % len(d.kept)
}

func isRecordError(err error) bool {
	_, ok := err.(*RecordError)
	return ok
}

// maxReferenceDepth bounds a chain of references, which the registry
// resolves for us but might serve with a cycle.
const maxReferenceDepth = 100

// walkReferences calls visit on the references of s and of theirs, depth
// first: each after its own references (the order in which they must be
// parsed), and a schema reached twice once. A reference without a schema
// or of another type than want, and a chain deeper than maxReferenceDepth,
// are errors.
func walkReferences(s *registry.Schema, want registry.Type, visit func(registry.Reference) error) error {
	return walkReferencesFrom(s, want, visit, map[*registry.Schema]bool{}, 0)
}

func walkReferencesFrom(s *registry.Schema, want registry.Type, visit func(registry.Reference) error, seen map[*registry.Schema]bool, depth int) error {
	if depth > maxReferenceDepth {
		return errors.New("references nested more than 100 deep")
	}
	for _, ref := range s.References {
		if ref.Schema == nil {
			return fmt.Errorf("reference %q has no schema", ref.Name)
		}
		if seen[ref.Schema] {
			continue
		}
		seen[ref.Schema] = true
		if t := schemaType(ref.Schema); t != want {
			return fmt.Errorf("reference %q is of type %s, not %s", ref.Name, t, want)
		}
		if err := walkReferencesFrom(ref.Schema, want, visit, seen, depth+1); err != nil {
			return err
		}
		if err := visit(ref); err != nil {
			return err
		}
	}
	return nil
}

// schemaType is s's type; the registry serves Avro schemas without one.
func schemaType(s *registry.Schema) registry.Type {
	if s.Type == "" {
		return registry.Avro
	}
	return s.Type
}
