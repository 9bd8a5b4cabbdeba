package kafka

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/segmentio/kafka-go/compress"
)

// The framing of v2 record batches (the layout is in decode.go): splitting
// a batch off the response, checking it, and counting the records a
// response claims.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordBatch is the header of one v2 batch and its records, still encoded
// and possibly compressed.
type recordBatch struct {
	baseOffset      int64
	attributes      int16
	lastOffsetDelta int32
	leaderEpoch     int32
	firstTimestamp  int64
	producerID      int64
	numRecords      int32
	records         []byte
}

// nextBatch splits the first batch off raw. ok is false when raw does not
// hold a whole batch: a broker may end a response with a truncated one,
// which is ignored (it is fetched again). The batch must be of format v2.
func nextBatch(raw []byte) (b recordBatch, rest []byte, ok bool, err error) {
	if len(raw) < batchLengthEnd {
		return b, nil, false, nil
	}
	length := int32(binary.BigEndian.Uint32(raw[8:]))
	if length < 0 || int64(len(raw)-batchLengthEnd) < int64(length) {
		return b, nil, false, nil
	}
	end := batchLengthEnd + int(length)
	b.baseOffset = int64(binary.BigEndian.Uint64(raw))
	if end < batchHeaderLength {
		return b, nil, false, fmt.Errorf("record batch at %d: length %d shorter than its header", b.baseOffset, length)
	}
	if magic := raw[batchMagicOffset]; magic != 2 {
		return b, nil, false, fmt.Errorf("record batch at %d: unexpected message format v%d", b.baseOffset, magic)
	}
	want := binary.BigEndian.Uint32(raw[batchCRCOffset:])
	if got := crc32.Checksum(raw[batchAttrOffset:end], castagnoli); got != want {
		return b, nil, false, fmt.Errorf("record batch at %d: crc32c checksum mismatch (computed %08x, stored %08x)", b.baseOffset, got, want)
	}
	b.leaderEpoch = int32(binary.BigEndian.Uint32(raw[batchLengthEnd:]))
	b.attributes = int16(binary.BigEndian.Uint16(raw[21:]))
	b.lastOffsetDelta = int32(binary.BigEndian.Uint32(raw[23:]))
	if b.lastOffsetDelta < 0 || b.baseOffset < 0 || b.baseOffset > math.MaxInt64-1-int64(b.lastOffsetDelta) {
		return b, nil, false, fmt.Errorf("record batch at %d: last offset delta %d out of range", b.baseOffset, b.lastOffsetDelta)
	}
	b.firstTimestamp = int64(binary.BigEndian.Uint64(raw[27:]))
	b.producerID = int64(binary.BigEndian.Uint64(raw[43:]))
	b.numRecords = int32(binary.BigEndian.Uint32(raw[57:]))
	if b.numRecords < 0 {
		return b, nil, false, fmt.Errorf("record batch at %d: negative record count %d", b.baseOffset, b.numRecords)
	}
	b.records = raw[batchHeaderLength:end:end]
	return b, raw[end:], true, nil
}

// truncatedSize is the size a batch cut short at the end of a response
// declares, 0 when too little of it is there to tell.
func truncatedSize(raw []byte) int {
	if len(raw) < batchLengthEnd {
		return 0
	}
	length := int32(binary.BigEndian.Uint32(raw[8:]))
	if length < 0 {
		return 0
	}
	return batchLengthEnd + int(length)
}

// scanBatches walks the whole batches of raw without checking them and
// returns the number of records they claim, to size the records slice: at
// most what the bytes of an uncompressed batch can hold, and one a byte of a
// compressed batch, more than any but the most repetitive records compress
// to (a batch that claims more, and holds them, grows the slice once
// decompressed).
func scanBatches(raw []byte) (records int) {
	for len(raw) >= batchLengthEnd {
		length := int32(binary.BigEndian.Uint32(raw[8:]))
		if length < 0 || int64(len(raw)-batchLengthEnd) < int64(length) {
			break
		}
		end := batchLengthEnd + int(length)
		if end >= batchHeaderLength && raw[batchMagicOffset] == 2 {
			if n := int32(binary.BigEndian.Uint32(raw[57:])); n > 0 {
				room := end - batchHeaderLength
				if raw[batchAttrOffset+1]&attrCompression == 0 {
					room /= minRecordLength
				}
				records += min(int(n), room)
			}
		}
		raw = raw[end:]
	}
	return records
}

// lastOffset is the offset of the batch's last record as the producer wrote
// it: compaction keeps it in the header even when it removes that record
// (KAFKA-5443), so the batch after this one starts past it.
func (b *recordBatch) lastOffset() int64 { return b.baseOffset + int64(b.lastOffsetDelta) }

// hasProducerID tells a batch of an idempotent or transactional producer.
func (b *recordBatch) hasProducerID() bool { return b.producerID >= 0 }

func (b *recordBatch) compression() compress.Compression {
	return compress.Compression(b.attributes & attrCompression)
}
