package sqlsink

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
)

// Setup is how a sink's New retries its setup (connect, check and create
// the tables) while the server cannot be reached or is starting or
// stopping: a replica (re)started during a failover waits for the
// database, as its writes would, instead of exiting and crash-looping.
// What no retry mends (a refused login or certificate, a database or
// table that does not exist, a table of the wrong shape) fails at once,
// and so does a cancelled ctx (a stop).
type Setup struct {
	// Sink names the sink in the log: "postgres unreachable at start;
	// retrying".
	Sink string
	// Timeout is retry_timeout: no attempt starts after it has passed
	// since the first. 0 tries once.
	Timeout time.Duration
	// Min and Max bound the waits between attempts (internal/backoff's
	// policy).
	Min, Max time.Duration
	// Unreachable tells the errors a wait may mend.
	Unreachable func(error) bool
	// Log gets a warning per retry.
	Log *zap.Logger
	// Retried, when not nil, is called before each retry (a counter).
	Retried func()
}

// Run calls setup until it succeeds, fails with an error that is not
// Unreachable, ctx ends, or the next attempt would start after Timeout.
func (r Setup) Run(ctx context.Context, setup func(context.Context) error) error {
	giveUp := time.Now().Add(r.Timeout)
	wait := backoff.Backoff{Min: r.Min, Max: r.Max}
	for attempt := 1; ; attempt++ {
		err := setup(ctx)
		if err == nil || ctx.Err() != nil || !r.Unreachable(err) {
			return err
		}
		d := wait.Next()
		if time.Now().Add(d).After(giveUp) {
			return fmt.Errorf("still unreachable after retry_timeout=%s (%d attempts): %w", r.Timeout, attempt, err)
		}
		if r.Retried != nil {
			r.Retried()
		}
		r.Log.Warn(r.Sink+" unreachable at start; retrying", zap.Int("attempt", attempt),
			zap.Duration("gives_up_in", time.Until(giveUp).Round(time.Second)), zap.Error(err))
		if err := backoff.Sleep(ctx, d); err != nil {
			return err
		}
	}
}
