package kafka

import "github.com/offsetkeeper/offsetkeeper/sinks"

// Decoding on read. The records of an answer are values of 112 bytes; made
// where the answer comes in, each is written there and, in a block of
// several answers, copied into the block and cleared twice (the answer's
// slice given back, the block's finished): a fifth of a replica's CPU at 8
// partitions. A reader can ask for the records undecoded instead: the
// answer is still checked (CRC), decompressed, filtered (aborted
// transactions, control batches) and counted against the budget where it
// comes in, and only the records themselves are written, once, where the
// reader keeps them.

// lazyPart is a run of an answer's records, in offset order: a v2 batch to
// decode (data, its payload, decompressed; records below skip were already
// read), or records already decoded (recs, of the older formats).
type lazyPart struct {
	batch recordBatch
	data  []byte
	skip  int64
	recs  []sinks.Record
}

// DecodeOnRead makes the cursor leave the records of the batches it
// fetches from now on to its reader (on), their Records nil and
// AppendRecords decoding them, or decode them where they come in (off, as
// at first). Batches already fetched stay as they are.
//
// Decoded where they come in, the records are written while the answer's
// bytes are still in the cache, into a slice of the answer's size: best
// when a block is one answer. Decoded on read, they are written once, into
// the block, where a block of several answers would copy each: best for a
// backlog's large blocks.
func (cur *Cursor) DecodeOnRead(on bool) { cur.f.decodeOnRead.Store(on) }

// Len is how many records the batch holds; for a batch its reader decodes
// (DecodeOnRead), at most how many, those AppendRecords will skip included.
func (b PolledBatch) Len() int {
	if b.parts != nil {
		return b.count
	}
	return len(b.Records)
}

// Undecoded reports whether the batch's records are left to its reader
// (DecodeOnRead): Records is nil, and AppendRecords decodes them.
func (b PolledBatch) Undecoded() bool { return b.parts != nil }

// AppendRecords appends the batch's records to dst, decoding them when the
// reader decodes them (DecodeOnRead). They alias the batch's buffer, as
// Records do. On error (a record the broker sent corrupt), dst is returned
// as it was, and the batch must be fetched again or given up on.
func (b PolledBatch) AppendRecords(dst []sinks.Record) ([]sinks.Record, error) {
	if b.parts == nil {
		return append(dst, b.Records...), nil
	}
	start := len(dst)
	d := decoder{records: dst}
	for i := range b.parts {
		p := &b.parts[i]
		if p.recs != nil {
			d.records = append(d.records, p.recs...)
			continue
		}
		d.next = p.skip
		if err := d.readRecords(&p.batch, p.data, true); err != nil {
			clear(d.records[start:])
			return d.records[:start], err
		}
	}
	return d.records, nil
}
