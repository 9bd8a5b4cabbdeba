package replica

// The decode step: a block's keys and values read by their formats before
// the block's intent and write, so that a record the sink cannot have is
// found before anything of its block is stored.

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/format"
	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// decoder turns a key or value into the JSON it stands for
// (format.Decoder).
type decoder interface {
	Decode(ctx context.Context, dst, b []byte) ([]byte, *sinks.Schema, error)
}

// codec decodes the records of every partition of a replica by its
// Formats; nil when both formats pass the bytes through (json).
type codec struct {
	key, value decoder // nil: not decoded
	// opaqueKey, opaqueValue: the bytes format, marked for the sinks.
	opaqueKey, opaqueValue bool
	policy                 DecodeErrorPolicy
	// deadLetters: the sink takes undecodable records (sinks.DeadLetterer).
	deadLetters bool

	registry *registry.Client
	decoders []*format.Decoder // for their cache counts
}

// opaque is the schema the bytes format marks a key or value with.
var opaque = &sinks.Schema{Format: sinks.Bytes}

// newCodec builds the decoders f asks for; nil, nil when there is nothing
// to decode.
func newCodec(f Formats, sink sinks.Sink) (*codec, error) {
	if f.Key == sinks.JSON && f.Value == sinks.JSON {
		return nil, nil
	}
	c := &codec{opaqueKey: f.Key == sinks.Bytes, opaqueValue: f.Value == sinks.Bytes, policy: f.OnDecodeError}
	if dl, ok := sinks.As[sinks.DeadLetterer](sink); ok && dl.TakesUndecodable() {
		c.deadLetters = true
	}
	if f.Key.Registered() || f.Value.Registered() {
		reg, err := registry.New(f.Registry.client())
		if err != nil {
			return nil, err
		}
		c.registry = reg
	}
	// One decoder per format, shared by key and value when they agree.
	made := map[sinks.Format]*format.Decoder{}
	get := func(ff sinks.Format) (decoder, error) {
		if !ff.Registered() {
			return nil, nil
		}
		if d := made[ff]; d != nil {
			return d, nil
		}
		d, err := format.New(ff, c.registry, format.Options{CacheSize: f.Registry.CacheSize})
		if err != nil {
			return nil, err
		}
		made[ff] = d
		c.decoders = append(c.decoders, d)
		return d, nil
	}
	var err error
	if c.key, err = get(f.Key); err != nil {
		return nil, err
	}
	if c.value, err = get(f.Value); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeStop is the error of a record that cannot be decoded under the
// Stop policy (or DeadLetter with a sink without dead letters): the
// partition goes no further until it can.
type decodeStop struct {
	p      string
	offset int64
	cause  error
}

func (e *decodeStop) Error() string {
	return fmt.Sprintf("%s offset %d cannot be decoded, so the partition stops there: %v", e.p, e.offset, e.cause)
}

func (e *decodeStop) Unwrap() error { return e.cause }

// keptDecodeBuf is the largest decode buffer a partition keeps from one
// block to the next; a larger one is dropped when its block is finished.
const keptDecodeBuf = 1 << 20

// decode reads the keys and values of b's records by the formats, in
// place. A record that stops the partition ends the block before it (the
// cursor sought there), or, first in its block, fails it with a
// *decodeStop. Any other error is the registry's (unreachable, refusing):
// the block rolls back and is read again, so nothing is lost or set aside
// for it.
//
// The JSON counts against the memory budget: held with the block until it
// is finished, in place of the room the cursor set aside for it. A block
// whose JSON outgrows that room and what is left of the partition's share
// ends before the record that would pass them (the first record is decoded
// whatever its size), and the next block starts there.
func (pt *partition) decode(ctx context.Context, b *block) error {
	c := pt.r.codec
	if c == nil || len(b.records) == 0 {
		return nil
	}
	buf := pt.decodeBuf[:0]
	total := len(b.records)
	// A replay (raw 0) is read whole, off the budget.
	budgeted := b.raw > 0
	if budgeted {
		room := pt.f.TakeRoom()
		b.reserved += room
		b.bytes += room
	}
	allowed := b.reserved
	if want := b.reserved + b.reserved/8; cap(buf) < want && budgeted {
		// Once, to the size expected (the room set aside, all of it
		// when the size is not known yet), rather than doubling from
		// nothing: every doubling leaves garbage the size of the JSON.
		buf = make([]byte, 0, min(want, allowed))
	}
	defer func() {
		pt.decodeBuf = buf
		pt.settle(b, total, len(buf))
	}()
	if cap(pt.decodedSpare) < len(b.records) {
		pt.decodedSpare = make([]sinks.Decoded, len(b.records))
	}
	ds := pt.decodedSpare[:len(b.records)]
	clear(ds)
	kept := b.records[:0]
	end := 0 // where the JSON of the records kept ends in buf
	for i := range b.records {
		r := b.records[i]
		d := &ds[i]
		var err error
		buf, err = c.record(ctx, buf, &r, d)
		if err == nil && budgeted && len(buf) > allowed && len(kept) > 0 {
			buf = buf[:end] // the record left for the next block
			pt.stats.decodeBudgetStops.Add(1)
			pt.log.Debug("block ends early: its decoded records fill the partition's share of the memory budget",
				zap.Int64("next", r.Offset), zap.Int("decoded_bytes", len(buf)))
			pt.cut(b, kept, r.Offset)
			return nil
		}
		if err != nil {
			var re *format.RecordError
			if !errors.As(err, &re) {
				pt.stats.registryWaits.Add(1)
				return fmt.Errorf("decode %s offset %d: %w", pt.p, r.Offset, err)
			}
			pt.stats.decodeErrors.Add(1)
			r = b.records[i] // the bytes as they were in Kafka
			switch {
			case c.policy == Skip:
				pt.stats.decodeSkipped.Add(1)
				pt.log.Warn("record skipped: it cannot be decoded (--on-decode-error skip)", zap.Int64("offset", r.Offset), zap.Error(err))
				continue
			case c.policy == DeadLetter && c.deadLetters:
				*d = sinks.Decoded{Err: err.Error()}
				r.Decoded = d
			default:
				stop := &decodeStop{p: pt.p.String(), offset: r.Offset, cause: err}
				if r.Offset == b.from {
					return stop
				}
				// Deliver what comes before it: the block ends there, and
				// the next one starts at it (and stops).
				pt.log.Error("partition stops at a record that cannot be decoded; delivering the records before it (see --on-decode-error)", zap.Error(stop))
				pt.cut(b, kept, r.Offset)
				return nil
			}
		}
		kept = append(kept, r)
		end = len(buf)
	}
	// Records left out leave no stale copies behind the kept ones.
	clear(b.records[len(kept):])
	b.records = kept
	return nil
}

// cut ends b before offset next, with the records kept so far, and makes
// the next block start there.
func (pt *partition) cut(b *block, kept []sinks.Record, next int64) {
	clear(b.records[len(kept):])
	b.records, b.next = kept, next
	pt.f.SeekTo(next)
}

// settle counts the JSON b's records were decoded into in b's bytes, in
// place of the room set aside for it, and tells the cursor how large the
// JSON was for the fetched bytes it came from (of a block cut short, the
// share of its records decoded), which sizes the room set aside next.
func (pt *partition) settle(b *block, total, decoded int) {
	if b.raw == 0 {
		return // a replay, read off the budget
	}
	raw := b.raw
	if n := len(b.records); n < total {
		raw = b.raw * max(n, 1) / total
	}
	pt.f.Decoded(raw, b.reserved, decoded)
	b.bytes += decoded - b.reserved
	b.reserved = decoded
}

// record decodes r's key and value into buf, setting r.Key and r.Value to
// their JSON and r.Decoded to d; r is unchanged when it fails.
func (c *codec) record(ctx context.Context, buf []byte, r *sinks.Record, d *sinks.Decoded) ([]byte, error) {
	key, value := r.Key, r.Value
	var err error
	if c.key != nil && r.Key != nil {
		if buf, key, d.KeySchema, err = decodeInto(ctx, c.key, buf, r.Key); err != nil {
			return buf, fmt.Errorf("key: %w", err)
		}
		d.KeyBytes = r.Key
	}
	if c.value != nil && r.Value != nil {
		if buf, value, d.ValueSchema, err = decodeInto(ctx, c.value, buf, r.Value); err != nil {
			return buf, fmt.Errorf("value: %w", err)
		}
		d.ValueBytes = r.Value
	}
	if c.opaqueKey && r.Key != nil {
		d.KeySchema = opaque
	}
	if c.opaqueValue && r.Value != nil {
		d.ValueSchema = opaque
	}
	if d.KeySchema != nil || d.ValueSchema != nil {
		r.Key, r.Value, r.Decoded = key, value, d
	}
	return buf, nil
}

// decodeInto appends the JSON of b to buf and returns it, and the JSON
// alone, capped so that a sink appending to it cannot reach the next.
func decodeInto(ctx context.Context, d decoder, buf, b []byte) ([]byte, []byte, *sinks.Schema, error) {
	start := len(buf)
	out, s, err := d.Decode(ctx, buf, b)
	if err != nil {
		return buf[:start], nil, nil, err
	}
	return out, out[start:len(out):len(out)], s, nil
}
