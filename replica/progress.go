package replica

// A line now and then while a replica catches up, so that an operator sees
// it move between "partition started" and caught up.

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// catchUpMin is the lag, in records, from which a replica says it catches
// up: below it, a replica that keeps up with its partitions.
const catchUpMin = 10_000

// reportProgress logs, every ProgressInterval while the replica's
// partitions lag by catchUpMin records or more, how far behind they are,
// how fast records go and when the lag will be gone at the rate it
// shrinks; and once, that they caught up. It returns when ctx ends or the
// replica is killed.
func (r *Replica) reportProgress(ctx context.Context) {
	if r.cfg.ProgressInterval < 0 {
		return
	}
	t := time.NewTicker(r.cfg.ProgressInterval)
	defer t.Stop()
	var (
		behind               bool
		prevAt               = time.Now()
		prevRecords, prevLag = r.stats.records.Load(), int64(-1)
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.killed:
			return
		case now := <-t.C:
			var lag int64
			partitions := 0
			for _, l := range r.Lag() {
				if l.Lag > 0 {
					lag += l.Lag
					partitions++
				}
			}
			records := r.stats.records.Load()
			secs := now.Sub(prevAt).Seconds()
			rate := float64(records-prevRecords) / secs
			switch {
			case lag >= catchUpMin:
				fields := []zap.Field{zap.Int("partitions_behind", partitions), zap.Int64("lag", lag),
					zap.Int64("records_per_second", int64(rate))}
				if shrink := float64(prevLag-lag) / secs; prevLag >= 0 && shrink > 0 {
					fields = append(fields, zap.Duration("eta", (time.Duration(float64(lag)/shrink)*time.Second).Round(time.Second)))
				} else if prevLag >= 0 {
					fields = append(fields, zap.String("eta", "none: the lag does not shrink"))
				}
				r.log.Info("catching up", fields...)
				behind = true
			case behind:
				r.log.Info("caught up", zap.Int64("lag", lag), zap.Int64("records_per_second", int64(rate)))
				behind = false
			}
			prevAt, prevRecords, prevLag = now, records, lag
		}
	}
}
