package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDelayDoublesWithinBounds(t *testing.T) {
	min, max := 100*time.Millisecond, 2*time.Second
	for attempt := range 70 {
		step := max
		if attempt < 5 {
			step = min << attempt
		}
		for range 50 {
			d := Delay(min, max, attempt)
			if d < step/2 || d > step {
				t.Fatalf("attempt %d: delay %s outside [%s, %s]", attempt, d, step/2, step)
			}
		}
	}
}

func TestBackoffResets(t *testing.T) {
	b := Backoff{Min: time.Millisecond, Max: time.Second}
	for range 5 {
		b.Next()
	}
	if b.Attempts() != 5 {
		t.Fatalf("attempts = %d", b.Attempts())
	}
	b.Reset()
	if d := b.Next(); d > time.Millisecond {
		t.Fatalf("after Reset, first delay %s > Min", d)
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep = %v", err)
	}
	if time.Since(start) > time.Second {
		t.Fatal("Sleep did not end with its context")
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
}
