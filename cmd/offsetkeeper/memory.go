package main

import (
	"os"
	"runtime/debug"

	"go.uber.org/zap"
)

// gcHeadroom is what the Go runtime may use beyond the memory budget before
// it collects hard: goroutines, connections, the sink's buffers, the
// registry's schemas, and garbage waiting for the next cycle.
const gcHeadroom = 192 << 20

// gcPercent is the collector's GOGC when the environment gives none: the
// replica's live heap is mostly the records of its blocks, which the budget
// bounds, so the heap may grow well past it between cycles (fewer cycles,
// less CPU per record) while the memory limit keeps the total in bounds.
const gcPercent = 400

// tuneMemory sets the Go runtime's soft memory limit to the budget plus
// gcHeadroom and its GOGC to gcPercent, each unless GOMEMLIMIT or GOGC
// says otherwise (a container's limit, an operator's choice).
func tuneMemory(log *zap.Logger, budget int64) {
	var fields []zap.Field
	if os.Getenv("GOMEMLIMIT") == "" {
		limit := budget + gcHeadroom
		debug.SetMemoryLimit(limit)
		fields = append(fields, zap.Int64("memory_limit", limit))
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
		fields = append(fields, zap.Int("gc_percent", gcPercent))
	}
	if len(fields) > 0 {
		log.Debug("Go runtime tuned to the memory budget (set GOMEMLIMIT or GOGC to choose)", fields...)
	}
}
