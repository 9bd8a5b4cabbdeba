package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/segmentio/kafka-go/compress"
)

// The records of a compressed batch are decompressed here, within a limit:
// no length read from the input sizes a buffer beyond what the input can
// produce or beyond the limit, whichever is less. Sizes that a format
// declares (a snappy block's length, the content size of a zstd or lz4
// frame, the size in a gzip trailer) are checked against both before
// anything is allocated. The framing of snappy (kafka-go's xerial chunks),
// lz4 and zstd is parsed here (inflate_snappy.go, inflate_lz4.go,
// inflate_zstd.go), and their blocks decoded straight into a
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
