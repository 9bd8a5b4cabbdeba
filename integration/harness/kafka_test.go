package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// consumePartition reads topic/partition from offset until n records were
// read, with a plain kgo consumer.
func consumePartition(t *testing.T, k *Kafka, topic string, partition int, from int64, n int, committed bool) []*kgo.Record {
	t.Helper()
	opts := []kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {int32(partition): kgo.NewOffset().At(from)}}),
	}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl := k.newClient(t, opts...)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume %s/%d: got %d of %d records: %v", topic, partition, len(out), n, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("consume %s/%d: %v", topic, partition, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

func TestKafkaProduceAndTopics(t *testing.T) {
	for _, brokers := range []int{1, 3} {
		t.Run(fmt.Sprintf("brokers=%d", brokers), func(t *testing.T) {
			k := StartKafka(t, NumBrokers(brokers), SeedTopics(2, "seeded"))
			if got := len(k.Brokers()); got != brokers {
				t.Fatalf("Brokers() = %d addresses, want %d", got, brokers)
			}
			if got := k.NumPartitions(t, "seeded"); got != 2 {
				t.Fatalf("seeded has %d partitions, want 2", got)
			}
			k.CreateTopic(t, "made", 3)
			k.ProduceValues(t, "made", 0, "x") // the producer knows 3 partitions
			k.AddPartitions(t, "made", 2)
			if got := k.NumPartitions(t, "made"); got != 5 {
				t.Fatalf("made has %d partitions after adding 2, want 5", got)
			}

			offs := k.ProduceValues(t, "made", 4, "a", "b", "c")
			if offs[0] != 0 || offs[2] != 2 {
				t.Fatalf("offsets %v, want 0..2", offs)
			}
			recs := consumePartition(t, k, "made", 4, 0, 3, false)
			for i, want := range []string{"a", "b", "c"} {
				if string(recs[i].Value) != want || recs[i].Offset != int64(i) {
					t.Fatalf("record %d = %q at %d, want %q at %d", i, recs[i].Value, recs[i].Offset, want, i)
				}
			}
		})
	}
}

func TestKafkaTransactionsAndDelete(t *testing.T) {
	k := StartKafka(t, Compression(kgo.ZstdCompression()))
	k.CreateTopic(t, "tx", 1)
	k.Transact(t, false, "tx", 0, &kgo.Record{Value: []byte("aborted")})
	k.Transact(t, true, "tx", 0, &kgo.Record{Value: []byte("committed")})
	recs := consumePartition(t, k, "tx", 0, 0, 1, true)
	if string(recs[0].Value) != "committed" {
		t.Fatalf("read_committed read %q first, want committed", recs[0].Value)
	}

	k.ProduceValues(t, "tx", 0, "x", "y", "z")
	k.DeleteRecords(t, "tx", 0, 5)
	recs = consumePartition(t, k, "tx", 0, 5, 1, false)
	if recs[0].Offset != 5 || string(recs[0].Value) != "y" {
		t.Fatalf("after delete, first record %q at %d, want y at 5", recs[0].Value, recs[0].Offset)
	}
}

func TestKafkaBulkProduce(t *testing.T) {
	k := StartKafka(t)
	k.CreateTopic(t, "bulk", 1)
	const n = 120_000 // more than one flush
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Value: []byte(fmt.Sprintf("v%06d", i))}
	}
	start := time.Now()
	k.Produce(t, "bulk", 0, recs...)
	t.Logf("produced %d records in %v", n, time.Since(start))
	if recs[n-1].Offset != n-1 {
		t.Fatalf("last offset %d, want %d", recs[n-1].Offset, n-1)
	}
}
