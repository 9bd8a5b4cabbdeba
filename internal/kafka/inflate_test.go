package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/segmentio/kafka-go/compress"
	kafkasnappy "github.com/segmentio/kafka-go/compress/snappy"
)

// codecRead decompresses src with kafka-go's reader for c, as the decoder
// did before inflate.
func codecRead(c compress.Compression, src []byte) ([]byte, error) {
	r := c.Codec().NewReader(bytes.NewReader(src))
	defer r.Close()
	return io.ReadAll(r)
}

// inflateCases compresses sets of data every way the codecs can, with
// kafka-go's writers and with others', concatenated frames and all; only
// the small sets when small.
func inflateCases(t testing.TB, small bool) map[string]struct {
	codec compress.Compression
	src   []byte
} {
	rng := rand.New(rand.NewPCG(3, 4))
	random := make([]byte, 300<<10)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	var text []byte
	for len(text) < 5<<20 {
		text = fmt.Appendf(text, "record %d of topic orders, partition %d; ", rng.IntN(1000), rng.IntN(8))
	}
	data := map[string][]byte{"empty": {}, "byte": {7}, "random": random, "text": text[:200<<10], "5MiB": text}
	if small {
		data = map[string][]byte{"empty": {}, "byte": {7}, "text": text[:200<<10]}
	}
	cases := map[string]struct {
		codec compress.Compression
		src   []byte
	}{}
	add := func(name string, c compress.Compression, src []byte) {
		cases[name] = struct {
			codec compress.Compression
			src   []byte
		}{c, src}
	}
	write := func(w io.WriteCloser, buf *bytes.Buffer, b []byte) []byte {
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return slices.Clone(buf.Bytes())
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	skippable := []byte{0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 1, 2, 3}
	for name, b := range data {
		for _, c := range codecs {
			var buf bytes.Buffer
			add(name+"/kafka-go "+c.String(), c, write(c.Codec().NewWriter(&buf), &buf, b))
		}
		var buf bytes.Buffer
		add(name+"/snappy unframed", compress.Snappy, write((&kafkasnappy.Codec{Framing: kafkasnappy.Unframed}).NewWriter(&buf), &buf, b))
		for _, opts := range [][]lz4.Option{
			{lz4.BlockSizeOption(lz4.Block64Kb)},
			{lz4.BlockSizeOption(lz4.Block256Kb), lz4.BlockChecksumOption(true), lz4.ChecksumOption(false)},
			{lz4.BlockSizeOption(lz4.Block1Mb), lz4.SizeOption(uint64(len(b))), lz4.CompressionLevelOption(lz4.Level5)},
		} {
			buf.Reset()
			w := lz4.NewWriter(&buf)
			if err := w.Apply(opts...); err != nil {
				t.Fatal(err)
			}
			add(fmt.Sprintf("%s/lz4 %v", name, opts), compress.Lz4, write(w, &buf, b))
		}
		one := cases[name+"/kafka-go lz4"].src
		add(name+"/lz4 frames", compress.Lz4, slices.Concat(one, skippable, one))
		add(name+"/zstd at once", compress.Zstd, enc.EncodeAll(b, nil))
		add(name+"/zstd frames", compress.Zstd, slices.Concat(enc.EncodeAll(b, nil), skippable, cases[name+"/kafka-go zstd"].src))
		buf.Reset()
		zw, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<17))
		if err != nil {
			t.Fatal(err)
		}
		add(name+"/zstd small window", compress.Zstd, write(zw, &buf, b))
		if len(b) < 1<<20 {
			gz := cases[name+"/kafka-go gzip"].src
			add(name+"/gzip members", compress.Gzip, slices.Concat(gz, gz))
		}
	}
	// Linked lz4 blocks, which no writer here makes: the second copies
	// from the first, a raw block.
	desc := []byte{0x40, 0x40} // version 1, dependent blocks; 64 KiB
	linked := binary.LittleEndian.AppendUint32(nil, lz4Magic)
	linked = append(append(linked, desc...), byte(xxh32(desc)>>8))
	linked = binary.LittleEndian.AppendUint32(linked, 1<<31|16)
	linked = append(linked, "abcdefghijklmnop"...)
	block := []byte{0x0e, 16, 0, 0x50, 'v', 'w', 'x', 'y', 'z'} // 18 bytes from 16 back, then 5 literals
	linked = binary.LittleEndian.AppendUint32(linked, uint32(len(block)))
	linked = binary.LittleEndian.AppendUint32(append(linked, block...), 0)
	add("lz4 linked blocks", compress.Lz4, linked)
	return cases
}

// inflate decompresses as kafka-go's readers do, within its limit.
func TestInflateMatchesCodecs(t *testing.T) {
	for name, tc := range inflateCases(t, false) {
		t.Run(name, func(t *testing.T) {
			want, err := codecRead(tc.codec, tc.src)
			if err != nil {
				t.Fatalf("kafka-go: %v", err)
			}
			got, err := inflate(tc.codec, tc.src, len(want))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%d bytes, %v; want %d", len(got), err, len(want))
			}
			if len(want) == 0 {
				return
			}
			var o *overLimit
			if _, err := inflate(tc.codec, tc.src, len(want)-1); !errors.As(err, &o) || o.size < int64(len(want)) && o.size != int64(len(want)) {
				t.Fatalf("a byte short of the limit: %v", err)
			}
			// Allocations stay near the output, whatever the limit.
			if n := allocated(func() { inflate(tc.codec, tc.src, 1<<30) }); n > uint64(2*len(want)+1<<20) {
				t.Errorf("inflating %d bytes to %d allocated %d bytes", len(tc.src), len(want), n)
			}
		})
	}
}

// Truncated input fails or decompresses as kafka-go's readers do; damaged
// input does not get past the limit.
func TestInflateCorrupt(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for name, tc := range inflateCases(t, true) {
		if len(tc.src) > 4<<10 || len(tc.src) == 0 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			for n := range len(tc.src) {
				want, wantErr := codecRead(tc.codec, tc.src[:n])
				got, err := inflate(tc.codec, tc.src[:n], 1<<30)
				if tc.codec == compress.Snappy && err != nil && wantErr == nil {
					// kafka-go takes a xerial header cut short, or a
					// chunk cut after its length, for the end.
					continue
				}
				if (err == nil) != (wantErr == nil) || err == nil && !bytes.Equal(got, want) {
					t.Errorf("truncated to %d bytes: %d bytes, %v; kafka-go %d bytes, %v", n, len(got), err, len(want), wantErr)
				}
			}
			for range 500 {
				b := slices.Clone(tc.src)
				for range 1 + rng.IntN(3) {
					b[rng.IntN(len(b))] = byte(rng.Uint32())
				}
				const limit = 256 << 10
				var out []byte
				var err error
				if n := allocated(func() { out, err = inflate(tc.codec, b, limit) }); n > 3*limit+1<<20 || len(out) > limit {
					t.Fatalf("damaged input: %d bytes out, %d allocated: %v", len(out), n, err)
				}
			}
		})
	}
}

// FuzzInflate decompresses input of each codec within 1 MiB, allocating
// within a bound of its size and the limit, and as kafka-go's readers do
// whenever inflate succeeds (but for zstd frames whose window kafka-go's
// streaming reader would allocate past 8 MiB).
func FuzzInflate(f *testing.F) {
	for _, tc := range inflateCases(f, true) {
		if len(tc.src) < 4<<10 {
			f.Add(byte(tc.codec), tc.src)
		}
	}
	f.Fuzz(func(t *testing.T, codec byte, src []byte) {
		c := codecs[int(codec)%len(codecs)]
		const limit = 1 << 20
		before := heapAllocs()
		out, err := inflate(c, src, limit)
		if n, bound := heapAllocs()-before, 3*uint64(limit)+2<<20; n > bound {
			t.Fatalf("inflating %d bytes of %s allocated %d bytes, over %d: %v", len(src), c, n, bound, err)
		}
		if len(out) > limit {
			t.Fatalf("%d bytes out, over the limit", len(out))
		}
		if err != nil {
			return
		}
		if c == compress.Zstd {
			for p := 0; p < len(src); {
				var h zstd.Header
				if h.Decode(src[p:]) != nil || h.WindowSize > 8<<20 {
					return
				}
				n := h.HeaderSize + int(h.SkippableSize)
				if !h.Skippable {
					n, _, _, _ = zstdFrame(src[p:], &h)
				}
				p += n
			}
		}
		want, err := codecRead(c, src)
		if err != nil || !bytes.Equal(out, want) {
			t.Fatalf("%d bytes of %s inflated to %d bytes; kafka-go %d bytes, %v", len(src), c, len(out), len(want), err)
		}
	})
}

func TestXXH32(t *testing.T) {
	for in, want := range map[string]uint32{"": 0x02cc5d05, "abc": 0x32d153ff, "Nobody inspects the spammish repetition": 0xe2293b2f} {
		if got := xxh32([]byte(in)); got != want {
			t.Errorf("xxh32(%q) = %#x, want %#x", in, got, want)
		}
	}
}

// BenchmarkInflate decompresses the records of a batch of 16 KiB and of
// 1 MiB with inflate and, for comparison, as the decoder did before, with
// kafka-go's readers into a buffer of four times the input at first.
func BenchmarkInflate(b *testing.B) {
	for _, size := range []int{16 << 10, 1 << 20} {
		var recs []byte
		for i := 0; len(recs) < size; i++ {
			recs = appendTestRecord(recs, testRecord{offsetDelta: int64(i), key: []byte(fmt.Sprintf("key-%07d", i)),
				value: []byte(fmt.Sprintf("value-%07d-%s", i, strings.Repeat("v", 76)))})
		}
		for _, c := range codecs {
			var buf bytes.Buffer
			w := c.Codec().NewWriter(&buf)
			if _, err := w.Write(recs); err != nil {
				b.Fatal(err)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			src := buf.Bytes()
			b.Run(fmt.Sprintf("%dKiB/%s/inflate", size>>10, c), func(b *testing.B) {
				b.SetBytes(int64(len(recs)))
				b.ReportAllocs()
				for b.Loop() {
					if out, err := inflate(c, src, 64<<20); err != nil || len(out) != len(recs) {
						b.Fatal(len(out), err)
					}
				}
			})
			b.Run(fmt.Sprintf("%dKiB/%s/kafka-go", size>>10, c), func(b *testing.B) {
				b.SetBytes(int64(len(recs)))
				b.ReportAllocs()
				for b.Loop() {
					r := c.Codec().NewReader(bytes.NewReader(src))
					out := make([]byte, 0, 4*len(src))
					for {
						n, err := r.Read(out[len(out):cap(out)])
						out = out[:len(out)+n]
						if errors.Is(err, io.EOF) {
							break
						}
						if err != nil {
							b.Fatal(err)
						}
						if len(out) == cap(out) {
							out = slices.Grow(out, cap(out))
						}
					}
					r.Close()
					if len(out) != len(recs) {
						b.Fatal(len(out))
					}
				}
			})
		}
	}
}
