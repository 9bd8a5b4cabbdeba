// Package backoff is the one retry policy of offsetkeeper: waits that
// double from a minimum up to a maximum, each drawn uniformly from the upper
// half of its step so that clients failing together spread out ("equal
// jitter"), and a sleep that ends early with its context.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff counts the attempts of one retry loop. The zero value is not
// usable: set Min and Max (Min > 0, Max >= Min).
type Backoff struct {
	Min, Max time.Duration
	attempt  int
}

// Next returns the wait before the next attempt and counts it.
func (b *Backoff) Next() time.Duration {
	d := Delay(b.Min, b.Max, b.attempt)
	b.attempt++
	return d
}

// Attempts is how many waits Next has handed out since the last Reset.
func (b *Backoff) Attempts() int { return b.attempt }

// Reset starts again from Min, after a success.
func (b *Backoff) Reset() { b.attempt = 0 }

// Wait sleeps Next(); it returns ctx.Err() if ctx ends first.
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next()) }

// Delay is the wait before retry number attempt (from 0): min doubled
// attempt times, capped at max, drawn from [step/2, step].
func Delay(min, max time.Duration, attempt int) time.Duration {
	d := max
	if attempt < 62 {
		if e := min << attempt; e > 0 && e < d {
			d = e
		}
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(d-half)+1))
}

// Sleep waits d, or until ctx ends, whichever is first; it returns
// ctx.Err() in the second case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Poll calls check at once and then every interval until it reports done,
// returns an error, or ctx ends (then it returns ctx.Err()): the
// fixed-interval wait for a condition, where Backoff retries a failure.
func Poll(ctx context.Context, interval time.Duration, check func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		done, err := check()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
