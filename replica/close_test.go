package replica_test

import (
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// TestCloseReleasesTheRegistryConnections: a replica decoding Avro values
// keeps a connection to the Schema Registry open while it runs (idle,
// between schema fetches); Close, after Run, closes it. Without Close the
// connection would stay open as long as the process lives.
func TestCloseReleasesTheRegistryConnections(t *testing.T) {
	var open atomic.Int64
	reg := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/schemas/ids/1" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		_, _ = w.Write([]byte(`{"schema":"\"long\""}`))
	}))
	reg.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	reg.Start()
	defer reg.Close()

	cli, brokers, stop := startEtcdAndKafka("avro", 0)
	defer stop()
	const n = 50
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("avro"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	for i := range n {
		// Confluent's wire format: magic 0, schema id 1, an Avro long.
		v := binary.AppendVarint([]byte{0, 0, 0, 0, 1}, int64(i))
		if err := producer.ProduceSync(context.Background(), &kgo.Record{Partition: int32(i % 2), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	sink := &sumSink{want: n, done: make(chan struct{})}
	r, err := replica.New(replica.Config{
		Group:          "avro-sum",
		Topics:         []string{"avro"},
		Kafka:          kafkaconf.Config{Brokers: brokers, FetchMaxWait: 100 * time.Millisecond},
		Formats:        replica.Formats{Value: sinks.Avro, Registry: replica.SchemaRegistry{URL: reg.URL}},
		LeaseTTL:       2 * time.Second,
		RebalanceDelay: 10 * time.Millisecond,
	}, cli, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()
	select {
	case <-sink.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the sink got %d of %d records", sink.records, n)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if sink.sum != n*(n-1)/2 {
		t.Fatalf("sum %d, want %d: the values were not decoded", sink.sum, n*(n-1)/2)
	}
	if open.Load() == 0 {
		t.Fatal("no connection to the registry open after Run: nothing for Close to release, the test shows nothing")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for open.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to the registry still open after Close", open.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
}
