package kafka

import (
	"slices"

	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
)

// Transactions. Under read_committed the records of aborted transactions
// are dropped: the fetch response lists the aborted transactions of the
// partition (producer and first offset), a producer's transaction is
// aborted from its first batch on, and its abort marker, a control record,
// ends it. Control records are never delivered.

// controlAbort is the type of an abort marker, in the key of a control record.
const controlAbort = 0

func (d *decoder) sortAborted() {
	d.aborted = slices.Clone(d.aborted)
	slices.SortFunc(d.aborted, func(a, b fetchapi.ResponseTransaction) int {
		return cmpInt64(a.FirstOffset, b.FirstOffset)
	})
}

// activateAborts marks as aborted the producers of the aborted transactions
// that start at or before offset, the last offset of the current batch, and
// consumes them from the list: each is activated once, then cleared by its
// producer's abort marker.
func (d *decoder) activateAborts(offset int64) {
	for len(d.aborted) > 0 && d.aborted[0].FirstOffset <= offset {
		if d.abortedPIDs == nil {
			d.abortedPIDs = make(map[int64]struct{})
		}
		d.abortedPIDs[d.aborted[0].ProducerID] = struct{}{}
		d.aborted = d.aborted[1:]
	}
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
