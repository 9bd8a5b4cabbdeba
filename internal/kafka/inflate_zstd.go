package kafka

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Zstd. Frames are walked here, block header by block header, before the
// decoder sees them: a frame's content size, or else a guess at what its
// blocks hold, sizes the buffer it is decoded into at once, within the
// limit, and the decoder may not go past that buffer. A raw or RLE block
// says its size; a compressed block holds at most 128 KiB, which encoders
// fill but for the last, guessed to hold as much for its length as those
// before it, or four times its length. A frame that needs more room than
// the guess is decoded again in all its blocks can hold; a frame of a few
// blocks is decoded aside in that much, then copied. (Decoding at once, the
// output is the history: no window buffer, whatever window a frame
// declares.)

// zstdDecoder decodes frames at once, into the room of the buffer it is
// given, at most GOMAXPROCS (up to 4) at a time, with state it keeps.
var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecodeAllCapLimit(true))
})

// zstdMaxBlock is the most a zstd block decodes to.
const zstdMaxBlock = 128 << 10

// zstdAsideMax is the most a frame of unknown size decoded aside holds:
// such a frame, of a few blocks, the last of which guesses badly, is
// decoded into a buffer kept for the next (in zstdAside), then copied at
// its size.
const zstdAsideMax = 8 * zstdMaxBlock

var zstdAside = sync.Pool{New: func() any { return new([]byte) }}

func inflateZstd(src []byte, limit int) ([]byte, error) {
	dec, err := zstdDecoder()
	if err != nil {
		return nil, err
	}
	var out []byte
	for p := 0; p < len(src); {
		var h zstd.Header
		if err := h.Decode(src[p:]); err != nil {
			return nil, fmt.Errorf("zstd frame at %d: %w", p, err)
		}
		if h.Skippable {
			if uint64(h.SkippableSize) > uint64(len(src)-p-h.HeaderSize) {
				return nil, fmt.Errorf("zstd skippable frame at %d: length %d past the end", p, h.SkippableSize)
			}
			p += h.HeaderSize + int(h.SkippableSize)
			continue
		}
		n, most, guess, err := zstdFrame(src[p:], &h)
		if err != nil {
			return nil, fmt.Errorf("zstd frame at %d: %w", p, err)
		}
		left := limit - len(out)
		if h.HasFCS {
			if h.FrameContentSize > uint64(left) {
				return nil, &overLimit{size: int64(len(out)) + int64(min(h.FrameContentSize, 1<<62))}
			}
			most, guess = int64(h.FrameContentSize), int64(h.FrameContentSize)
		}
		within := int(min(most, int64(left)))
		if !h.HasFCS && most <= zstdAsideMax {
			aside := zstdAside.Get().(*[]byte)
			*aside = grow((*aside)[:0], within+zstdSlack)
			decoded, err := decodeZstd(dec, src[p:p+n], *aside, within)
			if err == nil {
				out = append(grow(out, len(decoded)), decoded...)
			}
			zstdAside.Put(aside)
			switch {
			case err == nil:
				p += n
				continue
			case int64(within) < most:
				return nil, &overLimit{size: int64(limit) + 1}
			}
			return nil, fmt.Errorf("zstd frame at %d: %w", p, err)
		}
		for room := min(int(guess), within); ; room = within {
			out = grow(out, room+zstdSlack)
			decoded, err := decodeZstd(dec, src[p:p+n], out, room)
			switch {
			case err == nil:
				out = decoded
			case room < within:
				// Perhaps too little room (the decoder does not always
				// say so): try again with all there can be.
				continue
			case int64(within) < most:
				// The frame does not decode within the limit, where it
				// does not fit (or is corrupt, which tells the same).
				return nil, &overLimit{size: int64(limit) + 1}
			default:
				return nil, fmt.Errorf("zstd frame at %d: %w", p, err)
			}
			break
		}
		p += n
	}
	return out, nil
}

// zstdSlack is room past a frame's content that lets the decoder take its
// fast paths, which copy 16 bytes at a time.
const zstdSlack = 16

// decodeZstd appends to dst, which has room for it and zstdSlack more, the
// content of frame, of at most room bytes.
func decodeZstd(dec *zstd.Decoder, frame, dst []byte, room int) ([]byte, error) {
	decoded, err := dec.DecodeAll(frame, dst[:len(dst):len(dst)+room+zstdSlack])
	if err == nil && len(decoded)-len(dst) > room {
		err = zstd.ErrDecoderSizeExceeded
	}
	return decoded, err
}

// zstdFrame returns the length of the frame that b starts with, whose
// header is h, the most it can decode to and a guess at what it does.
func zstdFrame(b []byte, h *zstd.Header) (n int, most, guess int64, err error) {
	blockMax := int64(zstdMaxBlock)
	if !h.SingleSegment {
		blockMax = min(blockMax, int64(h.WindowSize))
	}
	p := h.HeaderSize
	var compressed, in int64 // the compressed blocks before, and their length
	for {
		if len(b)-p < 3 {
			return 0, 0, 0, io.ErrUnexpectedEOF
		}
		bh := int(b[p]) | int(b[p+1])<<8 | int(b[p+2])<<16
		p += 3
		size := bh >> 3
		switch bh >> 1 & 3 {
		case 0: // raw
			p += size
			most += int64(size)
			guess = most
		case 1: // RLE: a byte, repeated size times
			p++
			most += int64(size)
			guess = most
		case 2: // compressed
			p += size
			if in > 0 {
				ratio := min((compressed*blockMax+in-1)/in, blockMax)
				guess = most + min(blockMax, int64(size)*ratio*9/8+64)
			} else {
				guess = most + min(blockMax, 4*int64(size)+64)
			}
			most += blockMax
			compressed++
			in += int64(size)
		default:
			return 0, 0, 0, errors.New("reserved block type")
		}
		if p > len(b) {
			return 0, 0, 0, io.ErrUnexpectedEOF
		}
		if bh&1 != 0 {
			break
		}
	}
	if h.HasCheckSum {
		p += 4
	}
	if p > len(b) {
		return 0, 0, 0, io.ErrUnexpectedEOF
	}
	return p, most, guess, nil
}
