package guard_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/offsetkeeper/offsetkeeper/guard"
)

type printer struct{}

func (printer) Commit(_ context.Context, next int64) error {
	fmt.Println("commit", next)
	return nil
}

func (printer) Rewind(from int64) { fmt.Println("rewind to", from) }

// writeBlock is how a replica wraps one block: the offset is committed only
// after the sink write, and every other way out rolls back.
func writeBlock(ctx context.Context, from, next int64, write func() error) error {
	g := guard.New(printer{}, printer{}, from, next)
	defer g.Release()
	if err := write(); err != nil {
		return err
	}
	return g.Commit(ctx)
}

func Example() {
	ctx := context.Background()
	_ = writeBlock(ctx, 0, 100, func() error { return nil })
	err := writeBlock(ctx, 100, 200, func() error { return errors.New("sink down") })
	fmt.Println(err)
	// Output:
	// commit 100
	// rewind to 100
	// sink down
}
