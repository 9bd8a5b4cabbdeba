package audit_test

import (
	"context"
	"fmt"

	"github.com/offsetkeeper/offsetkeeper/audit"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Kafka delivered 0 to 9 but 5 and 6 (an aborted transaction's record and
// its marker); the group committed 10. The sink lost 2, holds 7 twice,
// holds the aborted 5, and 10 and 11 of the block being written.
func ExampleMerge() {
	held := sinks.Offsets(0, 1, 3, 4, 5, 7, 7, 8, 9, 10, 11)
	delivered := sinks.Offsets(0, 1, 2, 3, 4, 7, 8, 9)
	b := audit.Bounds{Committed: 10, InFlight: audit.Range{From: 10, Next: 12}, CheckMissing: true}
	p, err := audit.Merge(context.Background(), "orders", 0, b, held, delivered, 0, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("missing", p.Missing.Ranges, "duplicated", p.Duplicated.Ranges, "aborted", p.Aborted.Ranges, "in flight", p.InFlight.Ranges)
	fmt.Println("clean:", p.Clean())
	// Output:
	// missing [2] duplicated [7] aborted [5] in flight [[10, 12)]
	// clean: false
}
