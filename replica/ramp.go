package replica

// A backlog's blocks are as large as the rules let them be, and a partition
// reads a block whole before it writes any of it: a backlog of one block a
// partition would be read whole, then written whole, Kafka's time and the
// sink's added up. So a partition's blocks ramp up: after it was quiet its
// first block ends at an eighth of MaxBlockRows, and each block that ends
// full may hold twice as many rows as the last, up to MaxBlockRows. The
// sink starts on a backlog while the rest is read (the cursor fetches the
// next block while one is written), and a long backlog still goes in
// blocks of MaxBlockRows.

// rampRows is the fewest rows a ramp starts from: an eighth of
// MaxBlockRows, and never under 1,024, so that small configured blocks
// keep their size.
func rampRows(maxBlockRows int) int {
	return min(max(maxBlockRows/8, 1024), maxBlockRows)
}

// blockRows is how many rows the partition's next block may hold.
func (pt *partition) blockRows() int {
	if pt.ramp == 0 {
		pt.ramp = rampRows(pt.r.cfg.MaxBlockRows)
	}
	return pt.ramp
}

// ramped moves the ramp after a block of rows rows that could hold limit:
// a full one doubles it, one that ended under the ramp's start (the
// partition went quiet) starts it again.
func (pt *partition) ramped(rows, limit int) {
	start := rampRows(pt.r.cfg.MaxBlockRows)
	switch {
	case rows >= limit:
		pt.ramp = min(2*limit, pt.r.cfg.MaxBlockRows)
	case rows < start:
		pt.ramp = start
	}
}
