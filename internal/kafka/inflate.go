package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/segmentio/kafka-go/compress"
)

// The records of a compressed batch are decompressed here, within a limit:
// no length read from the input sizes a buffer beyond what the input can
// produce or beyond the limit, whichever is less. Sizes that a format
// declares (a snappy block's length, the content size of a zstd or lz4
// frame, the size in a gzip trailer) are checked against both before
// anything is allocated. The framing of snappy (kafka-go's xerial chunks),
// lz4 and zstd is parsed here, and their blocks decoded straight into a
// buffer sized to what they hold (zstd's, whose compressed blocks do not
// tell, to what they can hold); gzip, which only tells in its trailer, is
// streamed through kafka-go's pooled reader into a buffer that grows, at
// most doubling, as output arrives, and reading stops at the limit.

// defaultMaxDecompressed is the limit of a decoder whose maxBytes is zero:
// 64 MiB, a fetch of DefaultFetchMaxBytes (1 MiB) that inflates 64-fold,
// far more than records do (Kafka's own batches rarely compress 10-fold),
// and little enough for a replica to hold a few at once.
const defaultMaxDecompressed = 64 << 20

// ErrBatchTooLarge is the error, matched with errors.Is, of a record batch
// whose records decompress to more bytes than the decoder may still
// produce. The error is a *BatchTooLargeError.
var ErrBatchTooLarge = errors.New("record batch too large to decompress")

// BatchTooLargeError reports a compressed record batch that needs more
// bytes than the decoder's limit left. The decoder stops at that batch: the
// records before it are decoded. (A zstd frame that does not tell its size
// and fails to decode within the limit is reported so, even when it is
// corrupt rather than large: the decoder cannot tell which.)
type BatchTooLargeError struct {
	// BaseOffset is the base offset of the batch, or the offset of the
	// message of format v0 or v1.
	BaseOffset int64
	// Codec is the compression codec of the batch.
	Codec compress.Compression
	// Compressed is the size of the compressed records.
	Compressed int
	// Size is what the batch needs at least: its decompressed size, when
	// the batch declares it, else a byte more than Limit.
	Size int64
	// Limit is what the decoder could still decompress.
	Limit int
}

func (e *BatchTooLargeError) Error() string {
	return fmt.Sprintf("record batch at %d: %s records of %d bytes need at least %d bytes decompressed, over the limit of %d",
		e.BaseOffset, e.Codec, e.Compressed, e.Size, e.Limit)
}

// Unwrap returns ErrBatchTooLarge.
func (e *BatchTooLargeError) Unwrap() error { return ErrBatchTooLarge }

// overLimit is the error of inflate for input that needs more than its
// limit: at least size bytes.
type overLimit struct{ size int64 }

func (e *overLimit) Error() string { return fmt.Sprintf("needs at least %d bytes", e.size) }

// inflate decompresses src, compressed with c, to at most limit bytes. Past
// the limit it fails with an *overLimit.
func inflate(c compress.Compression, src []byte, limit int) ([]byte, error) {
	limit = max(limit, 0)
	if len(src) == 0 {
		// What kafka-go's readers make of no input, whatever the codec.
		return nil, nil
	}
	switch c {
	case compress.Gzip:
		return inflateGzip(src, limit)
	case compress.Snappy:
		return inflateSnappy(src, limit)
	case compress.Lz4:
		return inflateLZ4(src, limit)
	case compress.Zstd:
		return inflateZstd(src, limit)
	}
	return nil, fmt.Errorf("unsupported compression codec %d", c)
}

// readBounded appends to dst what r produces, at most limit bytes, in a
// buffer of hint bytes at first (if dst has no room), growing as output
// arrives. When r has more, it fails with an *overLimit.
func readBounded(r io.Reader, dst []byte, hint, limit int) ([]byte, error) {
	start := len(dst)
	if cap(dst)-len(dst) < hint {
		dst = grow(dst, min(hint, limit))
	}
	// probe reads past a full buffer, so that a buffer sized exactly to
	// the output needs no growing to see its end.
	var probe [512]byte
	empty := 0
	for {
		var n int
		var err error
		if room := min(cap(dst), start+limit) - len(dst); room > 0 {
			n, err = r.Read(dst[len(dst) : len(dst)+room])
			dst = dst[:len(dst)+n]
		} else {
			n, err = r.Read(probe[:])
			if n > 0 {
				got := len(dst) - start
				if n > limit-got {
					return nil, &overLimit{size: int64(limit) + 1}
				}
				dst = grow(dst, min(max(got, n), limit-got))
				dst = append(dst, probe[:n]...)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return dst, nil
			}
			return nil, err
		}
		if n > 0 {
			empty = 0
		} else if empty++; empty > 100 {
			return nil, io.ErrNoProgress
		}
	}
}

// grow returns b with room for n more bytes, exactly, in a new buffer if
// b has less. (Unlike slices.Grow, which may take more, and twice as much
// in builds with the race detector.)
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	g := make([]byte, len(b), len(b)+n)
	copy(g, b)
	return g
}

// maxDeflateExpansion bounds the bytes a deflate stream of n bytes inflates
// to: its densest code, a 258-byte match, takes at least a bit, hence
// 258*8/2 plus a little, as zlib's documentation puts it.
const maxDeflateExpansion = 1032

func inflateGzip(src []byte, limit int) ([]byte, error) {
	// A gzip member ends with its size modulo 4 GiB: a hint good for the
	// single member producers write.
	hint := 4 * len(src)
	if len(src) >= 18 {
		hint = int(binary.LittleEndian.Uint32(src[len(src)-4:]))
	}
	hint = min(hint, maxDeflateExpansion*len(src))
	r := compress.Gzip.Codec().NewReader(bytes.NewReader(src))
	defer r.Close()
	return readBounded(r, nil, hint, limit)
}

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

// LZ4, in its frame format, which Kafka clients write (the legacy format
// they do not). A frame is a magic number, a descriptor, blocks, each a
// 4-byte little-endian length (its top bit for an uncompressed block) and
// data, an end mark and an optional checksum of the content. What a block
// decodes to is added up from the lengths of its sequences, without
// decoding it: the frames are checked and measured first, then decoded
// straight into a buffer of their size.

const (
	lz4Magic         = 0x184D2204
	lz4SkippableMask = 0xFFFFFFF0
	lz4Skippable     = 0x184D2A50

	lz4FlagDictID          = 1 << 0
	lz4FlagReserved        = 1 << 1
	lz4FlagContentChecksum = 1 << 2
	lz4FlagContentSize     = 1 << 3
	lz4FlagBlockChecksum   = 1 << 4
	lz4FlagIndependent     = 1 << 5
)

var (
	errLZ4Truncated = errors.New("lz4: truncated frame")
	errLZ4Block     = errors.New("lz4: corrupt block")
)

func inflateLZ4(src []byte, limit int) ([]byte, error) {
	var one [1]lz4Frame // the frame Kafka clients write
	frames := one[:0]
	total := 0
	for p := 0; p < len(src); {
		if len(src)-p < 4 {
			return nil, errLZ4Truncated
		}
		magic := binary.LittleEndian.Uint32(src[p:])
		if magic&lz4SkippableMask == lz4Skippable {
			if len(src)-p < 8 {
				return nil, errLZ4Truncated
			}
			n := binary.LittleEndian.Uint32(src[p+4:])
			if uint64(n) > uint64(len(src)-p-8) {
				return nil, errLZ4Truncated
			}
			p += 8 + int(n)
			continue
		}
		if magic != lz4Magic {
			return nil, fmt.Errorf("lz4: frame at %d: magic number %#x", p, magic)
		}
		frames = append(frames, lz4Frame{})
		f := &frames[len(frames)-1]
		if err := f.read(src, p+4); err != nil {
			return nil, err
		}
		if f.size > limit-total {
			return nil, &overLimit{size: int64(total) + int64(f.size)}
		}
		total += f.size
		p = f.end
	}
	out := make([]byte, 0, total)
	for i := range frames {
		var err error
		if out, err = frames[i].inflate(src, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// lz4Frame is the descriptor of an lz4 frame and where its blocks are.
type lz4Frame struct {
	flags    byte
	blockMax int
	blocks   int // where the first block is
	end      int // where the frame ends
	size     int // what its blocks decode to
	// lengths are what its compressed blocks decode to, in order.
	lengths []int
	few     [4]int // the first lengths
}

// read checks the descriptor at src[p:] and the blocks after it, and adds
// up what they decode to.
func (f *lz4Frame) read(src []byte, p int) error {
	if len(src)-p < 3 {
		return errLZ4Truncated
	}
	f.flags = src[p]
	bd := src[p+1]
	desc := 2
	if f.flags&lz4FlagContentSize != 0 {
		desc += 8
	}
	if f.flags&lz4FlagDictID != 0 {
		desc += 4
	}
	if len(src)-p < desc+1 {
		return errLZ4Truncated
	}
	if sum := byte(xxh32(src[p:p+desc]) >> 8); sum != src[p+desc] {
		return fmt.Errorf("lz4: descriptor checksum %#x, computed %#x", src[p+desc], sum)
	}
	switch {
	case f.flags>>6 != 1:
		return fmt.Errorf("lz4: frame version %d", f.flags>>6)
	case f.flags&lz4FlagReserved != 0 || bd&0x8F != 0:
		return errors.New("lz4: reserved descriptor bits set")
	case f.flags&lz4FlagDictID != 0:
		return errors.New("lz4: dictionaries are not supported")
	case bd>>4 < 4:
		return fmt.Errorf("lz4: block size index %d", bd>>4)
	}
	f.blockMax = 1 << (8 + 2*(bd>>4)) // 64 KiB to 4 MiB
	f.blocks = p + desc + 1
	f.lengths = f.few[:0]
	err := f.eachBlock(src, false, func(block []byte, raw bool) error {
		n := len(block)
		if !raw {
			var err error
			if n, err = lz4BlockLength(block); err != nil {
				return err
			}
			f.lengths = append(f.lengths, n)
		}
		if n > f.blockMax {
			return fmt.Errorf("lz4: block of %d bytes decoded, over the frame's %d", n, f.blockMax)
		}
		f.size += n
		return nil
	})
	if err != nil {
		return err
	}
	if f.flags&lz4FlagContentSize != 0 {
		if size := binary.LittleEndian.Uint64(src[p+2:]); size != uint64(f.size) {
			return fmt.Errorf("lz4: content of %d bytes, declared %d", f.size, size)
		}
	}
	return nil
}

// eachBlock calls fn with the data of each block of f, in order, checking
// the block checksums if asked to; it sets where the frame ends.
func (f *lz4Frame) eachBlock(src []byte, checksums bool, fn func(block []byte, raw bool) error) error {
	p := f.blocks
	for {
		if len(src)-p < 4 {
			return errLZ4Truncated
		}
		size := binary.LittleEndian.Uint32(src[p:])
		p += 4
		if size == 0 {
			break // the end mark
		}
		n := int(size &^ (1 << 31))
		if n > f.blockMax {
			return fmt.Errorf("lz4: block of %d bytes, over the frame's %d", n, f.blockMax)
		}
		if n > len(src)-p {
			return errLZ4Truncated
		}
		block := src[p : p+n]
		p += n
		if f.flags&lz4FlagBlockChecksum != 0 {
			if len(src)-p < 4 {
				return errLZ4Truncated
			}
			if want, got := binary.LittleEndian.Uint32(src[p:]), xxh32(block); checksums && got != want {
				return fmt.Errorf("lz4: block checksum %#x, computed %#x", want, got)
			}
			p += 4
		}
		if err := fn(block, size>>31 != 0); err != nil {
			return err
		}
	}
	if f.flags&lz4FlagContentChecksum != 0 {
		if len(src)-p < 4 {
			return errLZ4Truncated
		}
		p += 4
	}
	f.end = p
	return nil
}

// inflate appends to out, which has room for it, the content of f.
func (f *lz4Frame) inflate(src, out []byte) ([]byte, error) {
	start := len(out)
	lengths := f.lengths
	err := f.eachBlock(src, true, func(block []byte, raw bool) error {
		if raw {
			out = append(out, block...)
			return nil
		}
		var dict []byte
		if f.flags&lz4FlagIndependent == 0 {
			dict = out[max(start, len(out)-64<<10):len(out):len(out)]
		}
		n := lengths[0]
		lengths = lengths[1:]
		at := len(out)
		if got, err := lz4.UncompressBlockWithDict(block, out[at:at+n:at+n], dict); err != nil || got != n {
			return errLZ4Block
		}
		out = out[:at+n]
		return nil
	})
	if err != nil {
		return nil, err
	}
	if f.flags&lz4FlagContentChecksum != 0 {
		if want, got := binary.LittleEndian.Uint32(src[f.end-4:]), xxh32(out[start:]); got != want {
			return nil, fmt.Errorf("lz4: content checksum %#x, computed %#x", want, got)
		}
	}
	return out, nil
}

// lz4BlockLength returns what the lz4 block b decodes to, adding up the
// lengths of its sequences, without decoding it. A sequence is a token, its
// high nibble the literals' length, its low nibble the match's length less
// 4, either continued in the bytes after it when 15 (each 255 continuing
// further); the literals; then, but for the last sequence, the match's
// 2-byte offset and the rest of its length. (Each byte of a match's length
// adds at most 255 bytes: a block decodes to at most 255 times its
// length.)
func lz4BlockLength(b []byte) (int, error) {
	n := 0
	for p := 0; p < len(b); {
		token := int(b[p])
		p++
		literals := token >> 4
		if literals == 15 {
			for {
				if p == len(b) {
					return 0, errLZ4Block
				}
				c := b[p]
				p++
				literals += int(c)
				if c != 255 {
					break
				}
			}
		}
		if literals > len(b)-p {
			return 0, errLZ4Block
		}
		p += literals
		n += literals
		if p == len(b) {
			if token&15 != 0 {
				return 0, errLZ4Block // a match with no offset
			}
			break
		}
		if len(b)-p < 2 {
			return 0, errLZ4Block
		}
		p += 2
		match := token&15 + 4
		if token&15 == 15 {
			for {
				if p == len(b) {
					return 0, errLZ4Block
				}
				c := b[p]
				p++
				match += int(c)
				if c != 255 {
					break
				}
			}
		}
		n += match
	}
	return n, nil
}

// xxh32 is the 32-bit xxHash of b with seed 0, the checksum of lz4 frames.
func xxh32(b []byte) uint32 {
	const (
		prime1 uint32 = 2654435761
		prime2 uint32 = 2246822519
		prime3 uint32 = 3266489917
		prime4 uint32 = 668265263
		prime5 uint32 = 374761393
	)
	h := uint32(len(b))
	if len(b) >= 16 {
		v1, v2, v3, v4 := prime1, prime2, uint32(0), uint32(0)
		v1 += prime2 // seed + prime1 + prime2, modulo 2^32
		v4 -= prime1
		for ; len(b) >= 16; b = b[16:] {
			v1 = bits.RotateLeft32(v1+binary.LittleEndian.Uint32(b)*prime2, 13) * prime1
			v2 = bits.RotateLeft32(v2+binary.LittleEndian.Uint32(b[4:])*prime2, 13) * prime1
			v3 = bits.RotateLeft32(v3+binary.LittleEndian.Uint32(b[8:])*prime2, 13) * prime1
			v4 = bits.RotateLeft32(v4+binary.LittleEndian.Uint32(b[12:])*prime2, 13) * prime1
		}
		h += bits.RotateLeft32(v1, 1) + bits.RotateLeft32(v2, 7) + bits.RotateLeft32(v3, 12) + bits.RotateLeft32(v4, 18)
	} else {
		h += prime5
	}
	for ; len(b) >= 4; b = b[4:] {
		h = bits.RotateLeft32(h+binary.LittleEndian.Uint32(b)*prime3, 17) * prime4
	}
	for _, c := range b {
		h = bits.RotateLeft32(h+uint32(c)*prime5, 11) * prime1
	}
	h ^= h >> 15
	h *= prime2
	h ^= h >> 13
	h *= prime3
	h ^= h >> 16
	return h
}
