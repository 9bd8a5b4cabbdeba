package kafka

// The direct fetch path: a Fetcher of its own client, fetching one
// partition per request. Only the tests read a partition so; a replica's
// partitions are read by the broker loops of a Consumer (Cursor).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
	"go.uber.org/zap"

	retrypolicy "github.com/offsetkeeper/offsetkeeper/internal/backoff"
)

// NewFetcher returns a Fetcher of topic/partition. It connects lazily, on
// the first request. Until SeekTo is called it starts where cfg.StartPolicy
// says.
func NewFetcher(cfg Config, topic string, partition int, log *zap.Logger) (*Fetcher, error) {
	kc, err := NewClient(cfg, topic)
	if err != nil {
		return nil, fmt.Errorf("fetch %s/%d: %w", topic, partition, err)
	}
	return newFetcher(kc, true, topic, partition, log)
}

// Fetch returns the next records, waiting up to MaxWait for some. It
// retries broker and network errors with backoff until ctx ends, resets an
// out-of-range offset by the start policy, and returns ctx.Err() as soon as
// ctx ends.
func (f *Fetcher) Fetch(ctx context.Context) (PolledBatch, error) {
	return f.fetch(ctx, f.cfg.FetchMaxWait)
}

// FetchNow is Fetch without waiting on the broker: an empty answer comes at
// once. A caller that knows it reached the log end uses it to learn that
// nothing more came, without spending MaxWait on it.
func (f *Fetcher) FetchNow(ctx context.Context) (PolledBatch, error) {
	return f.fetch(ctx, 0)
}

func (f *Fetcher) fetch(ctx context.Context, maxWait time.Duration) (PolledBatch, error) {
	start, err := f.ready(ctx)
	if err != nil {
		return PolledBatch{}, err
	}
	if start != unset {
		f.offset = start
	}
	r := f.retrier()
	streak := 0
	for {
		from := f.offset
		b, err := f.fetchOnce(ctx, from, maxWait)
		if err == nil {
			f.offset = b.Next
			return b, nil
		}
		if ctx.Err() != nil {
			return PolledBatch{}, ctx.Err()
		}
		if f.closed.Load() {
			return PolledBatch{}, f.errorf(from, errClosed)
		}
		if errors.Is(err, kafkago.OffsetOutOfRange) {
			streak++
			b, ok, rerr := f.reset(ctx, from, streak)
			if rerr == nil && ok {
				f.offset = b.Next
				return b, nil
			}
			if rerr != nil {
				err = rerr
			}
		}
		if werr := r.wait(ctx, from, err); werr != nil {
			return PolledBatch{}, werr
		}
	}
}

// fetchOnce sends one fetch request and decodes its answer.
func (f *Fetcher) fetchOnce(ctx context.Context, from int64, maxWait time.Duration) (PolledBatch, error) {
	p, err := f.request(ctx, from, maxWait, f.cfg.FetchMinBytes, f.cfg.FetchMaxPartitionBytes)
	if err != nil {
		return PolledBatch{}, err
	}
	return f.decodePartition(from, p)
}

// request sends one fetch of the partition at offset to its leader, with
// the leader's epoch so that a broker that no longer leads refuses it, and
// returns its part of the response, turning error codes into errors.
func (f *Fetcher) request(ctx context.Context, offset int64, maxWait time.Duration, minBytes, maxBytes int) (*rawFetchPartition, error) {
	if f.leader < 0 {
		if err := f.locate(ctx); err != nil {
			return nil, err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, maxWait+f.cfg.RequestTimeout)
	defer cancel()
	m, err := f.transport.RoundTrip(rctx, f.addr, &rawFetchRequest{clientID: f.cfg.ClientID, broker: f.leader, direct: true,
		versions: f.kc.versions, Request: fetchapi.Request{
			ReplicaID:      -1,
			MaxWaitTime:    int32(maxWait / time.Millisecond),
			MinBytes:       int32(minBytes),
			MaxBytes:       int32(maxBytes),
			IsolationLevel: int8(wireIsolation(f.cfg.IsolationLevel)),
			SessionID:      -1,
			SessionEpoch:   -1,
			Topics: []fetchapi.RequestTopic{{
				Topic: f.topic,
				Partitions: []fetchapi.RequestPartition{{
					Partition:          int32(f.partition),
					CurrentLeaderEpoch: f.epoch,
					FetchOffset:        offset,
					LogStartOffset:     -1,
					PartitionMaxBytes:  int32(maxBytes),
				}},
			}},
		}})
	if err != nil {
		return nil, err
	}
	res, ok := m.(*rawFetchResponse)
	if !ok {
		return nil, fmt.Errorf("unexpected response %T", m)
	}
	if res.ThrottleMs > 0 {
		// The broker reads nothing more from the connection until the
		// throttle ends (KIP-219).
		if err := retrypolicy.Sleep(ctx, time.Duration(res.ThrottleMs)*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if res.ErrorCode != 0 {
		return nil, kafkago.Error(res.ErrorCode)
	}
	for i := range res.Topics {
		t := &res.Topics[i]
		if t.Topic != f.topic {
			continue
		}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if int(p.Partition) != f.partition {
				continue
			}
			if p.ErrorCode != 0 {
				return nil, kafkago.Error(p.ErrorCode)
			}
			return p, nil
		}
	}
	return nil, fmt.Errorf("response without the partition: %w", protocol.ErrNoPartition)
}

// parseFetchResponse parses the body of a fetch response (after the
// correlation id) of a non-flexible version, v0 to v11.
func parseFetchResponse(b []byte, version int16) (*rawFetchResponse, error) {
	return readFetchResponse(bufio.NewReader(bytes.NewReader(b)), len(b), version)
}
