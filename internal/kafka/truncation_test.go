package kafka

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// A leader's answer judged against the position read: an end of the epoch
// below it is where the logs diverge; at or past it, nothing was lost; an
// epoch the leader does not know tells nothing (retention took it).
func TestEpochEndDiverged(t *testing.T) {
	for _, tt := range []struct {
		name string
		end  epochEnd
		at   int64
		want *Truncation
	}{
		{"the epoch ends below the position", epochEnd{epoch: 3, end: 1000}, 1500, &Truncation{From: 1500, To: 1000, Epoch: 3, Cause: "seek"}},
		{"an older epoch ends below it", epochEnd{epoch: 1, end: 0}, 20, &Truncation{From: 20, To: 0, Epoch: 1, Cause: "seek"}},
		{"the epoch ends at the position", epochEnd{epoch: 3, end: 1500}, 1500, nil},
		{"the epoch goes on past it", epochEnd{epoch: 4, end: 1800}, 1500, nil},
		{"an epoch the leader does not know", epochEnd{epoch: -1, end: -1}, 1500, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.end.diverged(tt.at, "seek")
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Errorf("diverged(%d) = %+v, want %+v", tt.at, got, tt.want)
			}
		})
	}
}

// leaderEpochs makes a topic of one partition whose records 0 to 9 were
// written in leader epoch 0 and 10 to 19 in epoch 1 (the leader moved
// between them), on kfake.
func leaderEpochs(t *testing.T) *harness.Kafka {
	t.Helper()
	k := harness.StartKafka(t, harness.NumBrokers(2))
	k.CreateTopic(t, "epochs", 1)
	values := func(from int) []string {
		vals := make([]string, 10)
		for i := range vals {
			vals[i] = fmt.Sprintf("v%02d", from+i)
		}
		return vals
	}
	k.ProduceValues(t, "epochs", 0, values(0)...)
	leader := k.Cluster().LeaderFor("epochs", 0)
	if err := k.Cluster().MoveTopicPartition("epochs", 0, (leader+1)%2); err != nil {
		t.Fatal(err)
	}
	k.ProduceValues(t, "epochs", 0, values(10)...)
	return k
}

// A position whose record before it the cursor was told is of an epoch
// that ends below it in the leader's log (what a committed offset looks
// like after an unclean election): Fetch reports the truncation, with where
// the logs diverge, before any record, and reads on from there, every
// record of the leader's log once. The epochs of what it then reads come
// with the batches.
func TestCursorReportsTruncation(t *testing.T) {
	k := leaderEpochs(t)
	c := openConsumer(t, testFetchConfig(k))
	cur, err := c.Open("epochs", 0)
	if err != nil {
		t.Fatal(err)
	}
	cur.SeekEpoch(15, 0) // 14 was read in epoch 0, which the leader ended at 10
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := cur.Fetch(ctx)
	for err == nil && b.Truncation == nil && b.Next == b.From {
		b, err = cur.Fetch(ctx) // waiting for the validation
	}
	if err != nil {
		t.Fatal(err)
	}
	want := Truncation{From: 15, To: 10, Epoch: 0, Cause: "seek"}
	if b.Truncation == nil || *b.Truncation != want || b.From != 15 || b.Next != 10 || len(b.Records) != 0 || cur.Offset() != 10 {
		t.Fatalf("first batch [%d, %d) with %d records, truncation %+v, offset then %d; want [15, 10), none, %+v, 10",
			b.From, b.Next, len(b.Records), b.Truncation, cur.Offset(), want)
	}
	got, last := drain(t, cur, 20)
	if len(got) != 10 || string(got[0].Value) != "v10" || string(got[9].Value) != "v19" {
		t.Fatalf("read on: %d records, want v10 to v19", len(got))
	}
	if e, ok := last.LeaderEpoch(); !ok || e != 1 {
		t.Errorf("the last batch's leader epoch %d (%v), want 1", e, ok)
	}
	if n := c.Stats().Validations; n < 1 {
		t.Errorf("%d validations counted, want at least 1", n)
	}
}

// Validations that find nothing: a cursor placed and then moved to a new
// leader (the epoch bumped, with and without records since) asks each time
// and never reports a truncation; every record comes once.
func TestCursorValidationWithoutTruncation(t *testing.T) {
	k := leaderEpochs(t)
	c := openConsumer(t, testFetchConfig(k))
	cur, err := c.Open("epochs", 0)
	if err != nil {
		t.Fatal(err)
	}
	cur.SeekEpoch(10, 0) // 9 was read in epoch 0: the leader's log agrees
	got, _ := drain(t, cur, 20)
	if len(got) != 10 || string(got[0].Value) != "v10" {
		t.Fatalf("%d records from %s, want v10 to v19", len(got), got[0].Value)
	}
	before := c.Stats().Validations
	leader := k.Cluster().LeaderFor("epochs", 0)
	if err := k.Cluster().MoveTopicPartition("epochs", 0, (leader+1)%2); err != nil {
		t.Fatal(err)
	}
	k.ProduceValues(t, "epochs", 0, "v20", "v21")
	got, _ = drain(t, cur, 22)
	if len(got) != 2 || string(got[0].Value) != "v20" {
		t.Fatalf("after the move: %d records, want v20 and v21", len(got))
	}
	harness.Await(t, 10*time.Second, "the position validated after the leader moved", func() bool {
		return c.Stats().Validations > before
	})
}

// A broker behind the others answers metadata with a partition's older
// leader and epoch, while the cursor has no leader (its leader moved and
// refused it): the cursor keeps the epoch it knows and waits for an answer
// as new, sending nothing to the old leader; when the metadata converges
// it reads on from the new one.
func TestStaleMetadataDoesNotSendACursorBack(t *testing.T) {
	k := leaderEpochs(t) // epoch 1 on its second broker
	c := openConsumer(t, testFetchConfig(k))
	cur := openCursor(t, c, "epochs", 0, 0)
	drain(t, cur, 20)
	cl := k.Cluster()
	old := cl.LeaderFor("epochs", 0) // leads in epoch 1
	addrs := cl.ListenAddrs()
	var stale atomic.Bool
	var fetchesToOld atomic.Int64 // fetches and validations
	// While stale, every metadata answer is the one of epoch 0, when the
	// other broker led.
	cl.ControlKey(kmsg.Metadata.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cl.KeepControl()
		if !stale.Load() {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		for i, a := range addrs {
			host, port, _ := strings.Cut(a, ":")
			p, _ := strconv.Atoi(port)
			b := kmsg.NewMetadataResponseBroker()
			b.NodeID, b.Host, b.Port = int32(i), host, int32(p)
			resp.Brokers = append(resp.Brokers, b)
		}
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = kmsg.StringPtr("epochs")
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.Leader, mp.LeaderEpoch = 0, (old+1)%2, 0
		mp.Replicas, mp.ISR = []int32{0, 1}, []int32{0, 1}
		mt.Partitions = append(mt.Partitions, mp)
		resp.Topics = append(resp.Topics, mt)
		return resp, nil, true
	})
	for _, key := range []int16{kmsg.Fetch.Int16(), kmsg.OffsetForLeaderEpoch.Int16()} {
		cl.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
			cl.KeepControl()
			if stale.Load() && cl.CurrentNode() == (old+1)%2 {
				fetchesToOld.Add(1)
			}
			return nil, nil, false
		})
	}
	stale.Store(true)
	// The leader moves back to the first broker, epoch 2: the cursor's
	// broker refuses it, and the lookups answer with epoch 0.
	if err := cl.MoveTopicPartition("epochs", 0, (old+1)%2); err != nil {
		t.Fatal(err)
	}
	if err := cl.MoveTopicPartition("epochs", 0, old); err != nil {
		t.Fatal(err)
	}
	k.ProduceValues(t, "epochs", 0, "v20")
	before := c.Stats().Lookups
	harness.Await(t, 10*time.Second, "lookups answered with the stale metadata", func() bool { return c.Stats().Lookups >= before+3 })
	c.mu.Lock()
	leader, epoch := cur.leader, cur.epoch
	c.mu.Unlock()
	if epoch < 1 || leader == (old+1)%2 {
		t.Errorf("the cursor went back to broker %d in epoch %d on metadata older than what it knew", leader, epoch)
	}
	if n := fetchesToOld.Load(); n != 0 {
		t.Errorf("%d requests sent to broker %d on metadata older than the cursor's epoch", n, (old+1)%2)
	}
	stale.Store(false)
	got, _ := drain(t, cur, 21)
	if len(got) != 1 || string(got[0].Value) != "v20" {
		t.Fatalf("after the metadata converged: %d records, want v20", len(got))
	}
}

// A 3-node Apache Kafka whose brokers send every consumer to a follower
// (replica.selector.class: the harness's FollowerSelector, KIP-392): the
// leader answers each fetch with no records and the replica to fetch from.
// The cursors follow it, with the leader's epoch, and read every record,
// in order, once; records produced while they follow arrive too.
func TestApacheFollowsThePreferredReadReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster of its own")
	}
	harness.RequireApacheKafka(t)
	k := harness.StartApacheKafka(t, harness.Nodes(3), harness.HarnessPrograms(),
		harness.BrokerProperties("replica.selector.class", "FollowerSelector"))
	const parts = 3
	k.CreateTopic(t, "followed", parts)
	values := func(round int) []string {
		vals := make([]string, 100)
		for i := range vals {
			vals[i] = fmt.Sprintf("r%d-%03d", round, i)
		}
		return vals
	}
	for p := range parts {
		k.ProduceValues(t, "followed", p, values(0)...)
	}
	cfg, _ := apacheConfig(k)
	cfg.Rack = "zone-a"
	c := openConsumer(t, cfg)
	curs := make([]*Cursor, parts)
	for p := range parts {
		curs[p] = openCursor(t, c, "followed", p, 0)
	}
	for round := range 2 {
		if round > 0 {
			for p := range parts {
				k.ProduceValues(t, "followed", p, values(round)...)
			}
		}
		for p, cur := range curs {
			got, _ := drain(t, cur, int64(100*(round+1)))
			if want := values(round); len(got) != 100 || string(got[0].Value) != want[0] || string(got[99].Value) != want[99] {
				t.Fatalf("round %d partition %d: %d records from %q", round, p, len(got), got[0].Value)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, cur := range curs {
		if !cur.following() || cur.loop.id == cur.leader {
			t.Errorf("partition %d: fetched from broker %d, its leader %d: want a follower", p, cur.loop.id, cur.leader)
		}
	}
}
