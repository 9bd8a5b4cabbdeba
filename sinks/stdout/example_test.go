package stdout_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/stdout"
)

// A JSON value is embedded as it is, text becomes a string, other bytes
// base64, and nil stays null; the same lines are what the file sink stores.
func Example() {
	s := stdout.New(os.Stdout)
	defer s.Close()
	at := time.Date(2024, 5, 1, 12, 0, 0, 123_000_000, time.UTC)
	err := s.Write(context.Background(), &sinks.Block{
		Topic: "orders", Partition: 3, Epoch: 1, From: 120, Next: 124,
		Records: []sinks.Record{
			{Offset: 120, Key: []byte("user-42"), Value: []byte(`{"id":1,"total":9.5}`), Time: at,
				Headers: []sinks.Header{{Key: "trace", Value: []byte("abc")}}},
			{Offset: 121, Key: []byte("user-42"), Value: []byte("plain text"), Time: at},
			{Offset: 123, Key: nil, Value: []byte{0xca, 0xfe}, Time: at},
		},
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"topic":"orders","partition":3,"offset":120,"key_string":"user-42","value":{"id":1,"total":9.5},"timestamp":1714564800123,"headers":[{"key":"trace","value_string":"abc"}]}
	// {"topic":"orders","partition":3,"offset":121,"key_string":"user-42","value_string":"plain text","timestamp":1714564800123,"headers":[]}
	// {"topic":"orders","partition":3,"offset":123,"key":null,"value_base64":"yv4=","timestamp":1714564800123,"headers":[]}
}
