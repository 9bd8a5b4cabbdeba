package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
)

// Record sets of message formats v0 and v1 go through kafka-go's decoder.
func TestDecodeLegacyFormat(t *testing.T) {
	now := time.UnixMilli(time.Now().UnixMilli())
	for _, attrs := range []protocol.Attributes{0, protocol.Gzip} {
		t.Run(attrs.String(), func(t *testing.T) {
			var recs []protocol.Record
			for i := range 5 {
				recs = append(recs, protocol.Record{Time: now, Key: protocol.NewBytes([]byte(fmt.Sprint("k", i))), Value: protocol.NewBytes([]byte(fmt.Sprint("v", i)))})
			}
			var buf bytes.Buffer
			rs := protocol.RecordSet{Version: 1, Attributes: attrs, Records: protocol.NewRecordReader(recs...)}
			if _, err := rs.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			raw := buf.Bytes()[4:] // without the size
			if raw[batchMagicOffset] != 1 {
				t.Fatalf("magic %d", raw[batchMagicOffset])
			}
			d := decoder{from: 2, committed: true}
			if err := d.decode(raw); err != nil {
				t.Fatal(err)
			}
			if got := recordValues(d.records); got != "2:v2 3:v3 4:v4" || d.next != 5 || string(d.records[0].Key) != "k2" || !d.records[0].Time.Equal(now) {
				t.Fatalf("decoded %q next %d", got, d.next)
			}
		})
	}
}

// Compressed messages of format v0 and v1, unwrapped here, decode as
// kafka-go decoded them.
func TestDecodeLegacyMatchesKafkaGo(t *testing.T) {
	for _, version := range []int8{0, 1} {
		for _, c := range []compress.Compression{compress.Gzip, compress.Snappy, compress.Lz4} {
			t.Run(fmt.Sprintf("v%d/%s", version, c), func(t *testing.T) {
				var recs []protocol.Record
				for i := range 5 {
					r := protocol.Record{Time: time.UnixMilli(int64(1000 + i)), Value: protocol.NewBytes([]byte(fmt.Sprint("v", i)))}
					if i%2 == 0 {
						r.Key = protocol.NewBytes([]byte(fmt.Sprint("k", i)))
					}
					recs = append(recs, r)
				}
				var buf bytes.Buffer
				rs := protocol.RecordSet{Version: version, Attributes: protocol.Attributes(c), Records: protocol.NewRecordReader(recs...)}
				if _, err := rs.WriteTo(&buf); err != nil {
					t.Fatal(err)
				}
				raw := buf.Bytes()[4:]
				for _, wrapper := range []int64{0, 104} {
					binary.BigEndian.PutUint64(raw, uint64(wrapper)) // outside the checksum
					from := max(wrapper-2, 1)
					rr, err := readLegacy(raw)
					if err != nil {
						t.Fatal(err)
					}
					var want []string
					first := int64(-1)
					for {
						r, err := rr.ReadRecord()
						if errors.Is(err, io.EOF) {
							break
						}
						if err != nil {
							t.Fatal(err)
						}
						k, _ := protocol.ReadAll(r.Key)
						v, _ := protocol.ReadAll(r.Value)
						if first < 0 {
							first = r.Offset
						}
						if r.Offset >= from {
							want = append(want, fmt.Sprintf("%d:%q=%q@%d/%v", r.Offset, k, v, r.Time.UnixMilli(), r.Key == nil))
						}
					}
					d := decoder{from: from}
					if err := d.decode(raw); err != nil {
						t.Fatal(err)
					}
					var got []string
					for _, r := range d.records {
						got = append(got, fmt.Sprintf("%d:%q=%q@%d/%v", r.Offset, r.Key, r.Value, r.Time.UnixMilli(), r.Key == nil))
					}
					if strings.Join(got, " ") != strings.Join(want, " ") || len(got) == 0 {
						t.Fatalf("wrapper at %d: decoded %q\nkafka-go %q", wrapper, got, want)
					}
				}
			})
		}
	}
}

// Compressed messages of format v0 and v1 are held to the limit too.
func TestDecodeLegacyLimit(t *testing.T) {
	for _, c := range codecs {
		t.Run(c.String(), func(t *testing.T) {
			recs := make([]protocol.Record, 10)
			for i := range recs {
				recs[i] = protocol.Record{Time: time.UnixMilli(1), Value: protocol.NewBytes(make([]byte, 100<<10))}
			}
			var buf bytes.Buffer
			rs := protocol.RecordSet{Version: 1, Attributes: protocol.Attributes(c), Records: protocol.NewRecordReader(recs...)}
			if _, err := rs.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			raw := buf.Bytes()[4:]
			d := decoder{maxBytes: 1 << 20}
			err := d.decode(raw)
			if c == compress.Zstd {
				// Brokers refuse zstd before format v2.
				if err == nil || !strings.Contains(err.Error(), "message at 0: zstd compression needs message format v2") {
					t.Fatalf("error %v", err)
				}
				return
			}
			if err != nil || len(d.records) != 10 || d.inflated <= 1000<<10 {
				t.Fatalf("%d records, %d bytes decompressed: %v", len(d.records), d.inflated, err)
			}
			d = decoder{maxBytes: 1000 << 10}
			n := allocated(func() { err = d.decode(raw) })
			var e *BatchTooLargeError
			if !errors.As(err, &e) || e.BaseOffset != 0 || e.Codec != c || e.Limit != 1000<<10 || len(d.records) != 0 {
				t.Fatalf("error %v, %d records", err, len(d.records))
			}
			if n > 2*1000<<10+2<<20 {
				t.Fatalf("decode allocated %d bytes", n)
			}
		})
	}
}
