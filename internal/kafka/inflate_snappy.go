package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/compress/snappy"
)

// Snappy. kafka-go and the Java client frame snappy blocks as xerial's
// snappy-java does: a 16-byte header (a magic number and two versions), then
// chunks, each a 4-byte big-endian length and a snappy block. Data without
// the header is one snappy block.

var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const xerialHeaderLength = 16

// maxSnappyExpansion bounds the bytes a snappy block of n bytes decodes to,
// by 22n: its densest element, a copy with a 2-byte offset, takes 3 bytes
// for at most 64. (Only S2's extensions, which no Kafka client writes and
// brokers reject, go further.)
const maxSnappyExpansion = 22

// snappyBlockLength returns the length that the snappy block b decodes to.
func snappyBlockLength(b []byte) (int, error) {
	n, err := snappy.DecodedLen(b)
	if err != nil {
		return 0, err
	}
	if n > maxSnappyExpansion*len(b) {
		return 0, fmt.Errorf("snappy block of %d bytes claims %d bytes decoded, more than it can hold", len(b), n)
	}
	return n, nil
}

func inflateSnappy(src []byte, limit int) ([]byte, error) {
	if len(src) < xerialHeaderLength || !bytes.Equal(src[:len(xerialMagic)], xerialMagic) {
		n, err := snappyBlockLength(src)
		if err != nil {
			return nil, err
		}
		if n > limit {
			return nil, &overLimit{size: int64(n)}
		}
		return decodeSnappy(make([]byte, n), src)
	}
	// Check the framing and add up the decoded lengths, then decode each
	// chunk in its place.
	total := 0
	for p := xerialHeaderLength; p < len(src); {
		chunk, next, err := xerialChunk(src, p)
		if err != nil {
			return nil, err
		}
		n, err := snappyBlockLength(chunk)
		if err != nil {
			return nil, fmt.Errorf("xerial chunk at %d: %w", p, err)
		}
		if n > limit-total {
			return nil, &overLimit{size: int64(total) + int64(n)}
		}
		total += n
		p = next
	}
	out := make([]byte, total)
	at := 0
	for p := xerialHeaderLength; p < len(src); {
		chunk, next, _ := xerialChunk(src, p)
		n, _ := snappy.DecodedLen(chunk)
		if _, err := decodeSnappy(out[at:at+n:at+n], chunk); err != nil {
			return nil, fmt.Errorf("xerial chunk at %d: %w", p, err)
		}
		at += n
		p = next
	}
	return out, nil
}

// xerialChunk returns the chunk of src at p and the position after it.
func xerialChunk(src []byte, p int) (chunk []byte, next int, err error) {
	if len(src)-p < 4 {
		return nil, 0, fmt.Errorf("xerial chunk at %d: truncated length", p)
	}
	n := binary.BigEndian.Uint32(src[p:])
	p += 4
	if uint64(n) > uint64(len(src)-p) {
		return nil, 0, fmt.Errorf("xerial chunk at %d: length %d past the %d bytes left", p-4, n, len(src)-p)
	}
	return src[p : p+int(n)], p + int(n), nil
}

// decodeSnappy decodes the snappy block src into dst, of its decoded length.
func decodeSnappy(dst, src []byte) ([]byte, error) {
	out, err := snappy.Decode(dst, src)
	if err != nil {
		return nil, err
	}
	if len(out) != len(dst) || len(out) > 0 && &out[0] != &dst[0] {
		return nil, errors.New("snappy block decoded past its length")
	}
	return dst, nil
}
