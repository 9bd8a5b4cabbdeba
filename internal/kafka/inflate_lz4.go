package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/pierrec/lz4/v4"
)

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
			var ok bool
			if literals, p, ok = lz4MoreLength(b, p, literals); !ok {
				return 0, errLZ4Block
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
			var ok bool
			if match, p, ok = lz4MoreLength(b, p, match); !ok {
				return 0, errLZ4Block
			}
		}
		n += match
	}
	return n, nil
}

// lz4MoreLength adds to n the bytes at b[p:] that continue a length of 15
// in a token: each byte adds its value, and one of 255 is continued by the
// next. It returns the length and the position after it; ok is false when b
// ends first.
func lz4MoreLength(b []byte, p, n int) (length, next int, ok bool) {
	for p < len(b) {
		c := b[p]
		p++
		n += int(c)
		if c != 255 {
			return n, p, true
		}
	}
	return n, p, false
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
