package harness

import (
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
