package replica

import (
	"testing"

	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
)

// The defaults documented here are the ones the internal package applies.
func TestKafkaDefaultsAreTheInternalOnes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ours, its any
	}{
		{"fetch min bytes", DefaultFetchMinBytes, kafka.DefaultFetchMinBytes},
		{"fetch max wait", DefaultFetchMaxWait, kafka.DefaultFetchMaxWait},
		{"fetch max partition bytes", DefaultFetchMaxPartitionBytes, kafka.DefaultFetchMaxBytes},
		{"fetch max bytes", DefaultFetchMaxBytes, kafka.DefaultMaxRequestBytes},
		{"max buffer bytes", DefaultMaxBufferBytes, kafka.DefaultMaxBufferBytes},
		{"request timeout", DefaultRequestTimeout, kafka.DefaultFetchRequestTimeout},
		{"retry backoff min", DefaultRetryBackoffMin, kafka.DefaultFetchBackoffMin},
		{"retry backoff max", DefaultRetryBackoffMax, kafka.DefaultFetchBackoffMax},
	} {
		if tc.ours != tc.its {
			t.Errorf("%s: documented %v, applied %v", tc.name, tc.ours, tc.its)
		}
	}
}

func TestKafkaConfig(t *testing.T) {
	k := Kafka{
		Brokers:                []string{"b:9092"},
		FetchMaxPartitionBytes: 10,
		FetchMaxBytes:          20,
		FetchMaxWait:           30,
		SASL:                   &SASL{Mechanism: SASLSCRAMSHA256, Username: "u", Password: "p"},
		StartPolicy:            StartLatest,
	}
	c := k.config()
	if c.MaxBytes != 10 || c.MaxRequestBytes != 20 || c.MaxWait != 30 || c.StartPolicy != kafka.StartLatest ||
		c.ClientID != DefaultClientID || c.MaxBufferBytes != DefaultMaxBufferBytes {
		t.Errorf("config %+v", c)
	}
	if c.SASL == nil || c.SASL.Mechanism != kafka.SASLSCRAMSHA256 || c.SASL.Username != "u" || c.SASL.Password != "p" {
		t.Errorf("sasl %v", c.SASL)
	}
	if err := (Kafka{Brokers: []string{"b:9092"}, StartPolicy: 5}).validate(); err == nil {
		t.Error("start policy 5 accepted")
	}
}
