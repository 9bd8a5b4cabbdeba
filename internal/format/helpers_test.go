package format

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// memSource is a Source of schemas the test sets, counting its calls. While
// fail is set, every call returns it.
type memSource struct {
	mu      sync.Mutex
	schemas map[int]*registry.Schema
	fail    error
	calls   map[int]int
	// gate, when set, is waited on by every call, so that a test can hold
	// fetches in flight; entered, when set, gets a value as each call
	// starts waiting.
	gate, entered chan struct{}
}

func newSource(schemas map[int]*registry.Schema) *memSource {
	return &memSource{schemas: schemas, calls: map[int]int{}}
}

func (s *memSource) SchemaByID(ctx context.Context, id int) (*registry.Schema, error) {
	s.mu.Lock()
	s.calls[id]++
	gate, entered, fail, sch := s.gate, s.entered, s.fail, s.schemas[id]
	s.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		return nil, fail
	}
	if sch == nil {
		return nil, fmt.Errorf("get schema %d: %w", id, registry.ErrNotFound)
	}
	return sch, nil
}

func (s *memSource) callsOf(id int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[id]
}

func (s *memSource) setFail(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

// wire frames payload in Confluent's wire format under id.
func wire(id int, payload ...[]byte) []byte {
	b := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	for _, p := range payload {
		b = append(b, p...)
	}
	return b
}

func newDecoder(t testing.TB, f sinks.Format, src Source) *Decoder {
	t.Helper()
	d, err := New(f, src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// decodeOK decodes b, failing the test on error.
func decodeOK(t testing.TB, d *Decoder, b []byte) (string, *sinks.Schema) {
	t.Helper()
	out, s, err := d.Decode(context.Background(), nil, b)
	if err != nil {
		t.Fatalf("decode % x: %v", b, err)
	}
	return string(out), s
}

// decodeReason decodes b, which must fail with a RecordError, and returns
// its reason.
func decodeReason(t testing.TB, d *Decoder, b []byte) string {
	t.Helper()
	out, _, err := d.Decode(context.Background(), nil, b)
	var re *RecordError
	if !errors.As(err, &re) {
		t.Fatalf("decode % x: got %q, %v; want a RecordError", b, out, err)
	}
	return re.Reason
}

// zz is the zigzag varint of v, Avro's int and long.
func zz(v int64) []byte {
	return binary.AppendUvarint(nil, uint64(v<<1^(v>>63)))
}

// avroStr is an Avro string or bytes: its length and itself.
func avroStr(s string) []byte { return append(zz(int64(len(s))), s...) }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// Protobuf's wire format, field by field.
func pbTag(n protowire.Number, t protowire.Type) []byte { return protowire.AppendTag(nil, n, t) }

func pbVarint(n protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(pbTag(n, protowire.VarintType), v)
}

func pbBytes(n protowire.Number, b []byte) []byte {
	return protowire.AppendBytes(pbTag(n, protowire.BytesType), b)
}

func pbFixed32(n protowire.Number, v uint32) []byte {
	return protowire.AppendFixed32(pbTag(n, protowire.Fixed32Type), v)
}
