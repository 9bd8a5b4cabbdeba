package replica

import (
	"context"
	"os"
	"runtime/debug"
	"time"

	"go.uber.org/zap"
)

// gcHeadroom is what the Go runtime may use beyond the memory budget before
// it collects hard: goroutines, connections, the sink's buffers, the
// registry's schemas, and garbage waiting for the next cycle.
const gcHeadroom = 192 << 20

// perPartitionHeap is what a claimed partition may cost the heap besides
// its records: its cursor, claim, block state and metrics, about 17 KiB
// measured at 10,000 partitions, doubled. Without it the limit sat under
// the live heap of 10,000 partitions and the collector ran without end
// (0.71 M records/s against 1.99 M with the limit off).
const perPartitionHeap = 32 << 10

// memoryLimit is the soft memory limit of a replica of budget bytes that
// holds partitions.
func memoryLimit(budget, partitions int64) int64 {
	return budget + gcHeadroom + partitions*perPartitionHeap
}

// TuneMemory sets the Go runtime's soft memory limit to the budget plus
// gcHeadroom, unless GOMEMLIMIT is set (a container's limit, an operator's
// choice), and its GOGC, unless GOGC is set: off under that limit of its
// own, GCPercent under GOMEMLIMIT. follow raises or lowers the limit with
// the partitions the replica holds (a no-op under GOMEMLIMIT).
//
// Off, the collector runs as the process nears the limit the budget sets,
// not each time the live heap grows fivefold: at the start of a backlog,
// while the live heap grew from 14 to 100 MB, GOGC 400 collected twice as
// it went, and a fifth of an 8-partition replica's CPU went to the
// collector (0.19 → 0.15 CPU-seconds per million records off). Under
// GOMEMLIMIT, 400 stays: a container's limit is where the kernel kills, and
// collecting only there would leave nothing for what the Go runtime does
// not count.
func TuneMemory(log *zap.Logger, budget int64) (follow func(partitions int64)) {
	var fields []zap.Field
	follow = func(int64) {}
	ownLimit := os.Getenv("GOMEMLIMIT") == ""
	if ownLimit {
		limit := memoryLimit(budget, 0)
		debug.SetMemoryLimit(limit)
		fields = append(fields, zap.Int64("memory_limit", limit))
		var last int64
		follow = func(partitions int64) {
			if partitions != last {
				last = partitions
				debug.SetMemoryLimit(memoryLimit(budget, partitions))
			}
		}
	}
	if os.Getenv("GOGC") == "" {
		pct := GCPercent
		if ownLimit {
			pct = -1 // off: the limit alone starts a cycle
		}
		debug.SetGCPercent(pct)
		fields = append(fields, zap.Int("gc_percent", pct))
	}
	if len(fields) > 0 {
		log.Debug("Go runtime tuned to the memory budget (set GOMEMLIMIT or GOGC to choose)", fields...)
	}
	return follow
}

// FollowPartitions keeps the memory limit in step with the partitions r
// holds until ctx ends.
func FollowPartitions(ctx context.Context, r *Replica, follow func(int64)) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		follow(r.Stats().Claims)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
