package replica

import "sync/atomic"

// Stats counts what a replica did. Metrics read it; tests assert on it.
type Stats struct {
	Records        atomic.Int64 // records written to the sink
	Blocks         atomic.Int64 // blocks committed
	Commits        atomic.Int64 // successful offset commits
	Rollbacks      atomic.Int64 // blocks rolled back (guard released uncommitted)
	Fenced         atomic.Int64 // partitions stopped because the claim was lost
	OffsetsChanged atomic.Int64 // commits refused by an operator's reset
	OffsetResets   atomic.Int64 // out-of-range offsets reset by the start policy
	CommitFailures atomic.Int64 // blocks in the sink whose offset could not be committed
	SinkErrors     atomic.Int64 // failed sink writes
	SinkCalls      atomic.Int64 // calls to the sink: Write, or WriteBlocks for several blocks
	// OversizedBatches counts fetches of a record batch that would
	// decompress past the memory budget: its partition cannot go on.
	OversizedBatches atomic.Int64
	Claims           atomic.Int64 // partitions held now
	Rebalances       atomic.Int64 // plans that claimed or released something
	Sessions         atomic.Int64 // sessions joined (more than one: rejoined after a loss)
}
