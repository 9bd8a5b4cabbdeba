package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// produceAt10k produces n records, rec(i) the i-th, with cl at about
// 10,000 records/s (1,000 every 100 ms), in a goroutine. The channel it
// returns gets the first error of a produce (each given 30 s), or nil once
// all are produced.
func produceAt10k(cl *kgo.Client, n int, rec func(i int) *kgo.Record) <-chan error {
	prodErr := make(chan error, 1)
	go func() {
		const chunk = 1000
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < n; i += chunk {
			<-tick.C
			rs := make([]*kgo.Record, min(chunk, n-i))
			for j := range rs {
				rs[j] = rec(i + j)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := cl.ProduceSync(ctx, rs...).FirstErr()
			cancel()
			if err != nil {
				prodErr <- err
				return
			}
		}
		prodErr <- nil
	}()
	return prodErr
}

// roundRobin is the i-th of records {"i":i} spread round-robin over the
// parts partitions of topic, for produceAt10k.
func roundRobin(topic string, parts int) func(i int) *kgo.Record {
	return func(i int) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: int32(i % parts), Value: fmt.Appendf(nil, `{"i":%d}`, i)}
	}
}

// chaosPause waits 0.5 to 1.5 s before a replica is signalled again. While
// records flow (*producing), it returns false as soon as the producer is
// done (failing the test on its error), *producing then false, and the
// caller checks again whether to go on; else, once waited, it injects the
// broker fault (once) if records still flow and returns true.
func chaosPause(t *testing.T, rng *rand.Rand, prodErr <-chan error, producing *bool, fault *faultOnce) bool {
	t.Helper()
	wait := time.After(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
	if *producing {
		select {
		case err := <-prodErr:
			if err != nil {
				t.Fatalf("produce: %v", err)
			}
			*producing = false
			return false
		case <-wait:
		}
	} else {
		<-wait
	}
	if *producing {
		fault.inject(true)
	}
	return true
}
