package clickhouse

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// A field's directFn gives what the converter gives, where it takes a
// value, whether or not scanFlat read it.
func TestDirectFieldIsTheConverters(t *testing.T) {
	raws := []string{`"x"`, `""`, `"a b"`, `"é"`, `"\n"`, `0`, `-0`, `7`, `-7`, `123456789012345678`, `-123456789012345678`,
		`1234567890123456789`, `2147483647`, `2147483648`, `-2147483648`, `-2147483649`, `4294967295`, `4294967296`,
		`1.0`, `1e3`, `"12"`, `true`, `null`}
	for _, typ := range []string{"String", "Nullable(String)", "LowCardinality(String)", "Int64", "Int32", "UInt64", "UInt32"} {
		conv := columnConverter(typ)
		for _, raw := range raws {
			for _, flat := range []bool{false, true} {
				if flat && raw[0] == '"' && !plain([]byte(raw)) {
					continue // scanFlat reads no such string
				}
				direct, _ := newBuilder(typ, 1)
				fn := fieldDirect(direct)
				if fn == nil || !fn(nil, nil, []byte(raw), flat) {
					continue
				}
				f, err := decodeField([]byte(raw))
				if err != nil {
					t.Fatal(err)
				}
				v, err := conv(f)
				if err != nil {
					t.Errorf("%s %s (flat %v): direct takes it, the converter refuses it: %v", typ, raw, flat, err)
					continue
				}
				want, _ := newBuilder(typ, 1)
				want.add(v)
				if !reflect.DeepEqual(direct, want) {
					t.Errorf("%s %s (flat %v): direct %v, converter %v", typ, raw, flat, direct, want)
				}
			}
		}
	}
}

// benchBlock is a block of n records like the integration benchmark's.
func benchBlock(n int) *sinks.Block {
	b := &sinks.Block{Topic: "bench", Partition: 3, Epoch: 1, From: 0, Next: int64(n)}
	at := time.Now().UTC()
	for i := range n {
		b.Records = append(b.Records, sinks.Record{Offset: int64(i), Key: fmt.Appendf(nil, "key-%07d", i), Time: at,
			Value: fmt.Appendf(nil, `{"id":%d,"name":"customer-%07d","amount":%d}`, i, i, i%1000)})
	}
	return b
}

func BenchmarkColumnRows(b *testing.B) {
	s := &Sink{}
	for _, c := range []struct{ name, typ string }{{"id", "UInt64"}, {"name", "String"}, {"amount", "Int64"},
		{"kafka_topic", "String"}, {"kafka_partition", "Int32"}, {"kafka_offset", "Int64"}} {
		s.cols = append(s.cols, tableColumn{name: c.name, typ: c.typ, conv: columnConverter(c.typ)})
	}
	blk := benchBlock(8192)
	b.ReportAllocs()
	for b.Loop() {
		if rows, dead := s.columnRows(blk); rows.n != len(blk.Records) || len(dead) > 0 {
			b.Fatalf("%d rows, %d dead letters", rows.n, len(dead))
		}
	}
	b.ReportMetric(float64(b.N*len(blk.Records))/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkRawRows(b *testing.B) {
	blk := benchBlock(8192)
	b.ReportAllocs()
	for b.Loop() {
		rawRows(blk)
	}
	b.ReportMetric(float64(b.N*len(blk.Records))/b.Elapsed().Seconds(), "rows/s")
}
