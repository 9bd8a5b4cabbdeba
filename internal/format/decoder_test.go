package format

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const userAvro = `{"type":"record","name":"User","fields":[{"name":"id","type":"long"}]}`

func TestNew(t *testing.T) {
	src := newSource(nil)
	for _, tc := range []struct {
		f    sinks.Format
		opts Options
		want string // "" for no error
	}{
		{sinks.Avro, Options{}, ""},
		{sinks.Protobuf, Options{CacheSize: 1}, ""},
		{sinks.JSONSchema, Options{NotFoundTTL: -1}, ""},
		{sinks.JSON, Options{}, `format: "json" is not a Schema Registry format (want avro, protobuf or json-schema)`},
		{"xml", Options{}, `format: "xml" is not a Schema Registry format`},
		{sinks.Avro, Options{CacheSize: -1}, "format: cache size -1 is negative (0 takes the default, 1000)"},
	} {
		_, err := New(tc.f, src, tc.opts)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("New(%s, %+v): %v", tc.f, tc.opts, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("New(%s, %+v): %v, want %q", tc.f, tc.opts, err, tc.want)
		}
	}
	if _, err := New(sinks.Avro, nil, Options{}); err == nil {
		t.Error("New with no source: no error")
	}
}

// TestRecordErrors holds every error that is the record's fault, and only
// those, to being a RecordError with its reason.
func TestRecordErrors(t *testing.T) {
	src := newSource(map[int]*registry.Schema{
		1: {Type: registry.Avro, Text: userAvro},
		2: {Type: registry.Protobuf, Text: `syntax = "proto3"; message M {}`},
		3: {Type: registry.Avro, Text: `{"type":"record","name":"X","fields":[{"name":"a","type":"nosuch"}]}`},
		4: {Type: registry.Avro, Text: userAvro, References: []registry.Reference{{Name: "a.B", Subject: "b", Version: 1}}},
		5: {Type: registry.Avro, Text: `{"type":"record","name":"Y","fields":[{"name":"b","type":"a.B"}]}`,
			References: []registry.Reference{{Name: "a.B", Subject: "b", Version: 1, Schema: &registry.Schema{Type: registry.JSON, Text: `{}`}}}},
	})
	d := newDecoder(t, sinks.Avro, src)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
		id   int
	}{
		{"empty", []byte{}, "avro: record of 0 bytes is shorter than the wire format's 5-byte header", 0},
		{"too short", []byte{0, 0, 0, 1}, "avro: record of 4 bytes is shorter than the wire format's 5-byte header", 0},
		{"wrong magic byte", []byte(`{"id":1}`), "avro: wrong magic byte 0x7b at byte 0 (the wire format starts with 0x00)", 0},
		{"unknown id", wire(99, zz(1)), "avro: schema id 99 is not in the registry", 99},
		{"another type", wire(2, zz(1)), "avro: schema 2 is of type PROTOBUF, not AVRO", 2},
		{"schema does not parse", wire(3, zz(1)), `avro: schema 3 does not compile: avro: unknown type: nosuch`, 3},
		{"reference without schema", wire(4, zz(1)), `avro: schema 4 does not compile: reference "a.B" has no schema`, 4},
		{"reference of another type", wire(5, zz(1)), `avro: schema 5 does not compile: reference "a.B" is of type JSON, not AVRO`, 5},
		{"bytes that do not match", wire(1, []byte{0x80}), `avro: field "id": unexpected end of data in a long at byte 5`, 1},
		{"trailing bytes", wire(1, zz(1), []byte{1}), "avro: 1 trailing bytes after the value at byte 6", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("kept")
			out, s, err := d.Decode(context.Background(), dst, tc.in)
			var re *RecordError
			if !errors.As(err, &re) || re.Reason != tc.want || re.Error() != tc.want || re.SchemaID != tc.id {
				t.Fatalf("got %v (%#v), want RecordError %q of schema %d", err, re, tc.want, tc.id)
			}
			if string(out) != "kept" || s != nil {
				t.Errorf("on error got %q, %v; want dst as it came, no schema", out, s)
			}
		})
	}
	// An unknown id's error says so to errors.Is.
	_, _, err := d.Decode(context.Background(), nil, wire(99, zz(1)))
	if !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("unknown id: %v does not wrap registry.ErrNotFound", err)
	}
}

func TestDecodeAppends(t *testing.T) {
	d := newDecoder(t, sinks.Avro, newSource(map[int]*registry.Schema{1: {Text: userAvro}}))
	out, _, err := d.Decode(context.Background(), []byte(`[`), wire(1, zz(-2)))
	if err != nil || string(out) != `[{"id":-2}` {
		t.Errorf("got %q, %v", out, err)
	}
}

// A Source that fails is not the record's fault: not a RecordError, not
// remembered, asked again on the next call.
func TestSourceErrorRetried(t *testing.T) {
	src := newSource(map[int]*registry.Schema{1: {Text: userAvro}})
	d := newDecoder(t, sinks.Avro, src)
	down := errors.New("registry unreachable")
	src.setFail(down)
	for i := range 2 {
		_, _, err := d.Decode(context.Background(), nil, wire(1, zz(1)))
		var re *RecordError
		if errors.As(err, &re) || !errors.Is(err, down) {
			t.Fatalf("call %d: got %v, want the source's error, not a RecordError", i, err)
		}
		if n := src.callsOf(1); n != i+1 {
			t.Fatalf("call %d: the source was asked %d times", i, n)
		}
	}
	src.setFail(nil)
	if got, _ := decodeOK(t, d, wire(1, zz(1))); got != `{"id":1}` {
		t.Errorf("got %s", got)
	}
	if st := d.Stats(); st.CacheMisses != 3 || st.CacheHits != 0 {
		t.Errorf("stats %+v", st)
	}
	decodeOK(t, d, wire(1, zz(1)))
	if st := d.Stats(); st.CacheMisses != 3 || st.CacheHits != 1 || src.callsOf(1) != 3 {
		t.Errorf("stats %+v, calls %d", st, src.callsOf(1))
	}
}

// An id the registry does not know is believed for NotFoundTTL.
func TestNotFoundTTL(t *testing.T) {
	src := newSource(map[int]*registry.Schema{})
	d, err := New(sinks.Avro, src, Options{NotFoundTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1e9, 0)
	d.now = func() time.Time { return now }
	decodeReason(t, d, wire(1, zz(1)))
	decodeReason(t, d, wire(1, zz(1)))
	if n := src.callsOf(1); n != 1 {
		t.Fatalf("asked %d times within the TTL", n)
	}
	now = now.Add(time.Minute + 1)
	src.mu.Lock()
	src.schemas[1] = &registry.Schema{Text: userAvro}
	src.mu.Unlock()
	if got, _ := decodeOK(t, d, wire(1, zz(1))); got != `{"id":1}` || src.callsOf(1) != 2 {
		t.Errorf("after the TTL: %s, asked %d times", got, src.callsOf(1))
	}

	// A negative TTL: not remembered at all.
	src2 := newSource(map[int]*registry.Schema{})
	d2, _ := New(sinks.Avro, src2, Options{NotFoundTTL: -1})
	decodeReason(t, d2, wire(1, zz(1)))
	decodeReason(t, d2, wire(1, zz(1)))
	if n := src2.callsOf(1); n != 2 {
		t.Errorf("asked %d times with no TTL", n)
	}
}

// The first records of an id, decoded at once, fetch and compile it once.
func TestConcurrentFirstFetch(t *testing.T) {
	src := newSource(map[int]*registry.Schema{1: {Text: userAvro}})
	src.gate = make(chan struct{})
	d := newDecoder(t, sinks.Avro, src)
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			out, _, err := d.Decode(context.Background(), nil, wire(1, zz(3)))
			if err == nil && string(out) != `{"id":3}` {
				err = errors.New("got " + string(out))
			}
			errs <- err
		})
	}
	close(src.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if c := src.callsOf(1); c != 1 {
		t.Errorf("the source was asked %d times", c)
	}
	if st := d.Stats(); st.CacheMisses != 1 || st.CacheHits != n-1 {
		t.Errorf("stats %+v", st)
	}
}

// A call whose ctx ends while it fetches fails with ctx's error; a call
// that waited on it fetches with its own ctx.
func TestFetchCanceled(t *testing.T) {
	src := newSource(map[int]*registry.Schema{1: {Text: userAvro}})
	src.gate, src.entered = make(chan struct{}), make(chan struct{}, 2)
	d := newDecoder(t, sinks.Avro, src)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, _, err := d.Decode(ctx, nil, wire(1, zz(1)))
		first <- err
	}()
	// Once the first call is in the source, start a second one.
	<-src.entered
	second := make(chan error, 1)
	go func() {
		_, _, err := d.Decode(context.Background(), nil, wire(1, zz(1)))
		second <- err
	}()
	cancel()
	err := <-first
	var re *RecordError
	if !errors.Is(err, context.Canceled) || errors.As(err, &re) {
		t.Errorf("first: %v, want ctx's error", err)
	}
	close(src.gate)
	if err := <-second; err != nil {
		t.Errorf("second: %v", err)
	}
}

// The cache keeps CacheSize schemas, dropping one not used lately.
func TestCacheEviction(t *testing.T) {
	schemas := map[int]*registry.Schema{}
	for id := 1; id <= 4; id++ {
		schemas[id] = &registry.Schema{Text: userAvro}
	}
	src := newSource(schemas)
	d, err := New(sinks.Avro, src, Options{CacheSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	dec := func(id int) { decodeOK(t, d, wire(id, zz(1))) }
	dec(1)
	dec(2)
	dec(1) // 1 is used since it was kept
	dec(3) // the ring is full: 2, unused, goes
	dec(1)
	if c := src.callsOf(1); c != 1 {
		t.Errorf("1 was fetched %d times: evicted though used", c)
	}
	dec(2)
	if c := src.callsOf(2); c != 2 {
		t.Errorf("2 was fetched %d times: not evicted", c)
	}
	// No more than CacheSize schemas stay.
	dec(4)
	kept := 0
	d.entries.Range(func(any, any) bool { kept++; return true })
	if kept > 2 {
		t.Errorf("%d schemas kept, want at most 2", kept)
	}
}

// TestConcurrentDecode decodes records of every format from several
// goroutines at once, for the race detector.
func TestConcurrentDecode(t *testing.T) {
	fd := pbFile(t, orderSchema())
	cases := []struct {
		f    sinks.Format
		src  Source
		rec  []byte
		want string
	}{
		{sinks.Avro, newSource(map[int]*registry.Schema{1: {Text: benchAvro}}), benchAvroRecord(), ""},
		{sinks.Protobuf, newSource(map[int]*registry.Schema{5: orderSchema()}),
			wire(5, []byte{0}, pbEncode(t, fd, "Order", `{"id":"1","tags":["a"],"counts":{"k":"2"},"created":"2024-05-01T12:00:00Z","card":"c"}`)), ""},
		{sinks.JSONSchema, orderJSONSchemaSource(), wire(7, []byte(`{"id":1,"customer":{"name":"n"}}`)), `{"id":1,"customer":{"name":"n"}}`},
	}
	for _, tc := range cases {
		d := newDecoder(t, tc.f, tc.src)
		want, _ := decodeOK(t, d, tc.rec)
		if tc.want != "" && want != tc.want {
			t.Fatalf("%s: got %s", tc.f, want)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				var dst []byte
				for range 100 {
					out, _, err := d.Decode(context.Background(), dst[:0], tc.rec)
					if err == nil && string(out) != want {
						err = errors.New("got " + string(out))
					}
					if err != nil {
						errs <- err
						return
					}
					dst = out
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("%s: %v", tc.f, err)
		}
	}
}
