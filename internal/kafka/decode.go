package kafka

import (
	"errors"
	"fmt"
	"slices"

	"github.com/segmentio/kafka-go/compress"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Record batches (message format v2, "magic 2") are parsed here straight
// from the bytes of the fetch response: keys, values and header values of
// the records returned sub-slice that buffer (or, for a compressed batch, the
// batch's decompressed buffer), which is never written again. Messages in
// the older formats, magic 0 and 1, are handed to kafka-go's decoder, but
// for compressed ones, which are unwrapped here.
//
// Nothing the input declares, a length or a count, sizes an allocation
// beyond what the bytes at hand can hold: records are counted against the
// bytes they take at least, and compressed records are decompressed within
// the decoder's limit (inflate.go).
//
// The layout of a v2 batch, offsets from its start:
//
//	 0 base offset      int64
//	 8 batch length     int32   (bytes after this field)
//	12 leader epoch     int32
//	16 magic            int8    (2)
//	17 crc              uint32  (CRC-32C of bytes 21 to the end)
//	21 attributes       int16
//	23 last offset delta int32
//	27 first timestamp  int64
//	35 max timestamp    int64
//	43 producer id      int64
//	51 producer epoch   int16
//	53 base sequence    int32
//	57 record count     int32
//	61 records
const (
	batchLengthEnd    = 12 // the base offset and the batch length
	batchMagicOffset  = 16
	batchCRCOffset    = 17
	batchAttrOffset   = 21
	batchHeaderLength = 61
)

// Batch attribute bits.
const (
	attrCompression   = 0x07
	attrTransactional = 0x10
	attrControl       = 0x20
)

// minRecordLength is the fewest bytes a record takes: its length, its
// attributes, its timestamp and offset deltas and its key and value lengths,
// a byte each.
const minRecordLength = 6

// minHeaderLength is the fewest bytes a record header takes: its key and
// value lengths.
const minHeaderLength = 2

// decoder turns the record batches of one fetch response into records,
// dropping records before from, control records and, under read_committed,
// aborted records; next ends up past every offset it saw.
//
// The records of compressed batches, which the records returned alias, are
// decompressed within maxBytes: decode fails with a *BatchTooLargeError
// (matching ErrBatchTooLarge) at the first batch that would go past it,
// with records and next holding what the batches before it gave (next at
// most that batch's base offset). inflated tells what the decode
// decompressed, to count against the caller's memory budget.
type decoder struct {
	from      int64
	committed bool
	aborted   []fetchapi.ResponseTransaction
	// maxBytes bounds the bytes one decode decompresses, all batches
	// together: when 0, defaultMaxDecompressed (64 MiB); when negative,
	// nothing (a compressed batch with any content fails). Uncompressed
	// batches, which the records alias in the input, do not count.
	maxBytes int

	// inflated is the number of bytes the last decode decompressed, which
	// its records hold on to (a gzip stream whose trailer does not tell
	// its size, of several members, is read into a buffer that may have
	// up to twice that capacity).
	inflated int
	// largest is the size of the largest whole batch, and truncated that
	// of the batch the response ends in the middle of (0: none): a
	// partition that gets nothing but the start of a batch needs a limit
	// of at least that, or to come first in a response (KIP-74).
	largest, truncated int
	// partial is the bytes of that batch the response held: fetched, and
	// to be fetched again.
	partial int
	// aliasRaw: records may alias the input (an uncompressed batch), which
	// is then theirs until they are done with; else it can go at once.
	aliasRaw bool

	records []sinks.Record
	next    int64
	// lazy: the records of v2 batches are not decoded here but listed in
	// parts, in order with the records of older formats (decoded here),
	// for the reader to decode into its own storage (PolledBatch.AppendRecords).
	// count is how many records the parts hold at most.
	lazy  bool
	parts []lazyPart
	count int
	// epoch is the leader epoch of the last v2 batch decoded (its header's
	// partition leader epoch), -1 when none was: the epoch a reader stores
	// with the offset after it, to tell later whether Kafka's log still
	// holds what it read (Cursor validation, KIP-320).
	epoch int32
	// abortedPIDs are producers whose current transaction is aborted.
	abortedPIDs map[int64]struct{}
	// headerKeys interns header keys, which repeat from record to record.
	headerKeys map[string]string
	// arena holds the keys and values copied out of kafka-go's buffers by
	// the legacy path.
	arena []byte
}

// decode decodes the record sets of one partition, as the fetch response
// holds them.
func (d *decoder) decode(raw []byte) error {
	d.next = d.from
	d.epoch = -1
	d.inflated, d.largest, d.truncated, d.partial = 0, 0, 0, 0
	if len(raw) == 0 {
		return nil
	}
	if d.committed && len(d.aborted) > 0 {
		d.sortAborted()
	}
	if n := scanBatches(raw); n > 0 && !d.lazy {
		d.records = getRecords(n)
	}
	for {
		if n := legacyEntry(raw); n > 0 {
			start := len(d.records)
			if err := d.decodeLegacy(raw[:n]); err != nil {
				return err
			}
			if end := len(d.records); d.lazy && end > start {
				d.parts = append(d.parts, lazyPart{recs: d.records[start:end:end]})
				d.count += end - start
			}
			raw = raw[n:]
			continue
		}
		b, rest, ok, err := nextBatch(raw)
		if err != nil {
			return err
		}
		if !ok {
			d.truncated, d.partial = truncatedSize(raw), len(raw)
			return nil
		}
		d.largest = max(d.largest, len(raw)-len(rest))
		raw = rest
		d.epoch = b.leaderEpoch
		d.batchStart(b.baseOffset)
		if d.committed && b.hasProducerID() {
			// As Kafka's own consumer does: the aborted transactions
			// listed up to this batch's end are those of producers whose
			// batches from here on are aborted until their marker. For
			// every batch of a producer, markers too: a response may
			// start at an abort marker whose transaction the list names.
			d.activateAborts(b.lastOffset())
		}
		data, err := d.payload(&b)
		if err != nil {
			return err
		}
		if b.attributes&attrControl != 0 {
			err = d.readRecords(&b, data, false)
		} else {
			deliver := true
			if d.committed && b.attributes&attrTransactional != 0 {
				_, isAborted := d.abortedPIDs[b.producerID]
				deliver = !isAborted
			}
			switch {
			case !d.lazy:
				err = d.readRecords(&b, data, deliver)
			case deliver:
				d.parts = append(d.parts, lazyPart{batch: b, data: data, skip: d.next})
				d.count += int(b.numRecords)
			}
		}
		if err != nil {
			return err
		}
		// The batch ends at its last offset whatever records compaction
		// left in it.
		d.next = max(d.next, b.lastOffset()+1)
	}
}

// batchStart accounts for a batch beginning at base. Batches are contiguous
// and the broker returns them from the one holding from onward, so offsets
// between from and a later batch's base are absent from the log.
func (d *decoder) batchStart(base int64) {
	if base > d.next {
		d.next = base
	}
}

// payload returns the encoded records of b, decompressed within the
// decoder's limit, which the bytes decompressed count against.
func (d *decoder) payload(b *recordBatch) ([]byte, error) {
	c := b.compression()
	if c == compress.None {
		d.aliasRaw = true
		return b.records, nil
	}
	if c.Codec() == nil {
		return nil, fmt.Errorf("record batch at %d: unsupported compression codec %d", b.baseOffset, c)
	}
	out, err := d.inflate(b.baseOffset, c, b.records)
	if err != nil {
		return nil, err
	}
	if b.attributes&attrControl == 0 && !d.lazy {
		// The records this batch can hold, now that its bytes are known
		// (scanBatches counted at most a byte each).
		d.records = slices.Grow(d.records, min(int(b.numRecords), len(out)/minRecordLength))
	}
	return out, nil
}

// inflate decompresses the records of the batch or message at offset,
// within what is left of the decoder's limit, and counts what it produced.
func (d *decoder) inflate(offset int64, c compress.Compression, src []byte) ([]byte, error) {
	left := d.limit() - d.inflated
	out, err := inflate(c, src, left)
	if err != nil {
		return nil, d.inflateError(offset, c, src, left, err)
	}
	d.inflated += len(out)
	return out, nil
}

func (d *decoder) inflateError(offset int64, c compress.Compression, src []byte, left int, err error) error {
	if o := (*overLimit)(nil); errors.As(err, &o) {
		return &BatchTooLargeError{BaseOffset: offset, Codec: c, Compressed: len(src), Size: o.size, Limit: left}
	}
	return fmt.Errorf("record batch at %d: decompress %s: %w", offset, c, err)
}

// limit returns how many bytes decode may decompress: maxBytes, or
// defaultMaxDecompressed when it is zero.
func (d *decoder) limit() int {
	switch {
	case d.maxBytes == 0:
		return defaultMaxDecompressed
	case d.maxBytes < 0:
		return 0
	}
	return d.maxBytes
}
