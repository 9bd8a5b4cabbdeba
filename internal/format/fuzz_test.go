package format

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// decodeAny decodes b, which must give valid JSON or a RecordError.
func decodeAny(t *testing.T, d *Decoder, b []byte) (out []byte, re *RecordError) {
	out, _, err := d.Decode(context.Background(), nil, b)
	if err != nil {
		if !errors.As(err, &re) {
			t.Fatalf("decode % x: %v is not a RecordError", b, err)
		}
		return nil, re
	}
	if !json.Valid(out) {
		t.Fatalf("decode % x: invalid JSON %q", b, out)
	}
	return out, nil
}

// FuzzAvro: any bytes give valid JSON or a RecordError, never a panic.
func FuzzAvro(f *testing.F) {
	for _, s := range avroSeeds(20) {
		f.Add(s)
		f.Add(s[:len(s)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	d := newDecoder(f, sinks.Avro, newSource(map[int]*registry.Schema{1: {Text: richAvro}}))
	f.Fuzz(func(t *testing.T, payload []byte) {
		decodeAny(t, d, wire(1, payload))
	})
}

// FuzzProtobuf: any bytes give valid JSON or a RecordError, never a panic;
// and after the index [0] they are refused when, and only when, protobuf's
// own runtime refuses them (but for the range of Timestamp and Duration,
// and nesting, where we are stricter).
func FuzzProtobuf(f *testing.F) {
	fd := pbFile(f, orderSchema())
	for _, js := range []string{
		`{}`,
		`{"id":"1","name":"x","tags":["a"],"nums":[1,2],"counts":{"a":"1"},"lines_by_no":{"1":{"sku":"s"}},"lines":[{"qty":2}],"card":"c"}`,
		`{"created":"2024-05-01T12:00:00Z","ttl":"2s","maybe_id":"3","extra":{"a":[1,{"b":null}]},"any_value":"s","list":[true],"nothing":{},"price":{"units":"5"}}`,
	} {
		b := pbEncode(f, fd, "Order", js)
		f.Add(append([]byte{0}, b...))
		f.Add(append([]byte{1, 0}, b...))
		f.Add(append([]byte{0}, b[:len(b)/2]...))
	}
	f.Add([]byte{1, 4, 2, 0, 8, 1})
	d := newDecoder(f, sinks.Protobuf, newSource(map[int]*registry.Schema{5: orderSchema()}))
	order := fd.Messages().ByName("Order")
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		// The first byte picks: the index [0] then the message's bytes, or
		// bytes from the index on.
		if data[0]&1 != 0 {
			decodeAny(t, d, wire(5, data[1:]))
			return
		}
		payload := data[1:]
		_, re := decodeAny(t, d, wire(5, []byte{0}, payload))
		refErr, panicked := refUnmarshal(payload, order)
		switch {
		case panicked:
			// dynamicpb panics on some bytes (a map key of the wrong wire
			// type): no verdict to compare with.
		case re == nil && refErr != nil:
			t.Fatalf("% x: decoded, but protobuf refuses it: %v", payload, refErr)
		case re != nil && refErr == nil && !stricter(re.Reason):
			t.Fatalf("% x: %s, but protobuf takes it", payload, re.Reason)
		}
	})
}

// refUnmarshal is protobuf's own verdict on payload.
func refUnmarshal(payload []byte, md protoreflect.MessageDescriptor) (err error, panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	return proto.UnmarshalOptions{AllowPartial: true}.Unmarshal(payload, dynamicpb.NewMessage(md)), false
}

// stricter reports a reason for bytes that protobuf's runtime takes but
// that have no JSON in our conventions (or protojson's).
func stricter(reason string) bool {
	for _, s := range []string{"timestamp", "duration", "nested more than"} {
		if strings.Contains(reason, s) {
			return true
		}
	}
	return false
}
