package replica

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is an exponential, jittered wait between retries.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(min, max time.Duration) *backoff { return &backoff{min: min, max: max, cur: min} }

func (b *backoff) reset() { b.cur = b.min }

// wait sleeps the current step (±20%) and doubles it; it returns ctx.Err()
// if ctx ends first.
func (b *backoff) wait(ctx context.Context) error {
	d := b.cur
	d += time.Duration((rand.Float64()*0.4 - 0.2) * float64(d))
	b.cur = min(b.cur*2, b.max)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
