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
