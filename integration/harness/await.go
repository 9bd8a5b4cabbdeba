package harness

import (
	"context"
	"testing"
	"time"
)

// Await polls cond every few milliseconds until it holds, and fails the
// test after d: tests wait for a condition, never for a fixed time.
func Await(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Context is a context that ends after d, and is cancelled with the test:
// what bounds a test's calls.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
