package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// BenchmarkRound writes rounds of small blocks, one per partition, three
// ways: one WriteBlocks per round, one Write per block in turn, and one
// Write per block all at once (a goroutine per partition, as replicas
// without rounds write). rows/s is the figure to compare.
//
//	go test -run '^$' -bench Round -benchtime 20x ./sinks/postgres/
func BenchmarkRound(b *testing.B) {
	pg := harness.StartPostgres(b)
	const rows = 10                                             // per block
	value := `{"pad":"` + strings.Repeat("x", 90) + `","n":%d}` // about 100 bytes
	for _, mode := range []string{"raw", "columns"} {
		for _, parts := range []int{8, 64} {
			for _, how := range []string{"WriteBlocks", "Write", "WriteParallel"} {
				b.Run(fmt.Sprintf("%s/blocks=%d/%s", mode, parts, how), func(b *testing.B) {
					url, n := sinkURL(pg, "mode="+mode)
					if mode == "columns" {
						pg.Exec(b, fmt.Sprintf(`CREATE TABLE rows_%d (pad text, n integer, kafka_topic text, kafka_partition integer, kafka_offset bigint)`, n))
					}
					s := open(b, url)
					ctx := context.Background()
					round := func(i int) []*sinks.Block {
						blocks := make([]*sinks.Block, parts)
						for p := range blocks {
							from := int64(i * rows)
							blk := &sinks.Block{Topic: "bench", Partition: p, Epoch: 1, From: from, Next: from + rows}
							for o := from; o < from+rows; o++ {
								blk.Records = append(blk.Records, sinks.Record{Offset: o, Key: fmt.Appendf(nil, "k%d", o), Value: fmt.Appendf(nil, value, o), Time: time.UnixMilli(o)})
							}
							blocks[p] = blk
						}
						return blocks
					}
					b.ResetTimer()
					for i := range b.N {
						b.StopTimer()
						blocks := round(i)
						b.StartTimer()
						switch how {
						case "WriteBlocks":
							for _, err := range s.WriteBlocks(ctx, blocks) {
								if err != nil {
									b.Fatal(err)
								}
							}
						case "Write":
							for _, blk := range blocks {
								if err := s.Write(ctx, blk); err != nil {
									b.Fatal(err)
								}
							}
						case "WriteParallel":
							var wg sync.WaitGroup
							errs := make([]error, len(blocks))
							for p, blk := range blocks {
								wg.Go(func() { errs[p] = s.Write(ctx, blk) })
							}
							wg.Wait()
							for _, err := range errs {
								if err != nil {
									b.Fatal(err)
								}
							}
						}
					}
					b.ReportMetric(float64(b.N*parts*rows)/b.Elapsed().Seconds(), "rows/s")
				})
			}
		}
	}
}

// BenchmarkUpsert writes blocks of updates over a fixed set of keys in
// upsert mode, one Write per block (one partition), against a plain
// INSERT ... ON CONFLICT DO UPDATE of the same rows from one connection,
// one statement per block (unnest of arrays). A block holds distinct keys,
// so that the plain statement, which cannot take a key twice, is given
// the same work. rows/s is the figure to compare.
//
//	go test -run '^$' -bench Upsert -benchtime 20x ./sinks/postgres/
func BenchmarkUpsert(b *testing.B) {
	pg := harness.StartPostgres(b)
	const rows, keys = 5000, 20000
	pad := strings.Repeat("x", 80)
	ids := func(i int) []int64 { // the block's keys: distinct, moving over the key space
		out := make([]int64, rows)
		for j := range out {
			out[j] = int64((i*rows*7 + j*13) % keys)
		}
		return out
	}
	b.Run("Sink", func(b *testing.B) {
		url, n := sinkURL(pg, "mode=upsert")
		pg.Exec(b, fmt.Sprintf(`CREATE TABLE rows_%d (id bigint PRIMARY KEY, v text, n bigint)`, n))
		s := open(b, url)
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			b.StopTimer()
			from := int64(i * rows)
			blk := &sinks.Block{Topic: "bench", Partition: 0, Epoch: 1, From: from, Next: from + rows}
			for j, id := range ids(i) {
				o := from + int64(j)
				blk.Records = append(blk.Records, sinks.Record{Offset: o, Key: fmt.Appendf(nil, `{"id":%d}`, id),
					Value: fmt.Appendf(nil, `{"v":"%s","n":%d}`, pad, o), Time: time.UnixMilli(o)})
			}
			b.StartTimer()
			if err := s.Write(ctx, blk); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*rows)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("Plain", func(b *testing.B) {
		_, n := sinkURL(pg, "")
		pg.Exec(b, fmt.Sprintf(`CREATE TABLE rows_%d (id bigint PRIMARY KEY, v text, n bigint)`, n))
		conn := db(b, pg)
		ctx := context.Background()
		q := fmt.Sprintf(`INSERT INTO rows_%d (id, v, n) SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])
ON CONFLICT (id) DO UPDATE SET v = excluded.v, n = excluded.n`, n)
		b.ResetTimer()
		for i := range b.N {
			b.StopTimer()
			vs, ns := make([]string, rows), make([]int64, rows)
			for j := range vs {
				vs[j], ns[j] = pad, int64(i*rows+j)
			}
			b.StartTimer()
			if _, err := conn.Exec(ctx, q, ids(i), vs, ns); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*rows)/b.Elapsed().Seconds(), "rows/s")
	})
}
