package kafkaconf

import (
	"fmt"
	"strings"
	"testing"
)

// WithDefaults fills every zero field from the one table of defaults and
// keeps what is set.
func TestWithDefaults(t *testing.T) {
	c := Config{Brokers: []string{"b:9092"}, FetchMaxPartitionBytes: 10, FetchMaxWait: 30, RetryBackoffMin: 10e9}.WithDefaults()
	if c.FetchMaxPartitionBytes != 10 || c.FetchMaxWait != 30 || c.FetchMaxBytes != DefaultFetchMaxBytes || c.FetchMinBytes != DefaultFetchMinBytes ||
		c.ClientID != DefaultClientID || c.MaxBufferBytes != DefaultMaxBufferBytes || c.RequestTimeout != DefaultRequestTimeout ||
		c.UnknownTopicTimeout != DefaultUnknownTopicTimeout {
		t.Errorf("WithDefaults = %+v", c)
	}
	if c.RetryBackoffMax != c.RetryBackoffMin {
		t.Errorf("a minimum backoff above the default maximum: max %s, want the minimum %s", c.RetryBackoffMax, c.RetryBackoffMin)
	}
	if DefaultFetchMaxPartitionBytes >= DefaultFetchMaxBytes {
		t.Errorf("the per-partition bound %d is not below the per-request bound %d", DefaultFetchMaxPartitionBytes, DefaultFetchMaxBytes)
	}
}

// Validate names the value it refuses.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{}, "no kafka brokers"},
		{Config{Brokers: []string{"b"}}, `kafka broker "b"`},
		{Config{Brokers: []string{"b:9092"}, StartPolicy: 5}, "start policy 5"},
		{Config{Brokers: []string{"b:9092"}, IsolationLevel: 7}, "isolation level 7"},
		{Config{Brokers: []string{"b:9092"}, MaxBufferBytes: -1}, "max buffer bytes -1"},
		{Config{Brokers: []string{"b:9092"}, SASL: &SASL{Mechanism: SASLSCRAMSHA256}}, "no user name"},
		{Config{Brokers: []string{"b:9092"}, SASL: &SASL{Mechanism: SASLSCRAMSHA256, Username: "u", Password: "p\u0007"}}, "refused by SASLprep"},
	} {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.c, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "\u0007") {
			t.Errorf("%q shows the password", err)
		}
	}
	if err := (Config{Brokers: []string{"b:9092"}, SASL: &SASL{Mechanism: SASLPlain, Username: "u", Password: "p"}}).Validate(); err != nil {
		t.Errorf("a valid configuration: %v", err)
	}
}

// A login prints its mechanism and user, never its password, whatever the
// verb; the enumerations parse their names case-folded.
func TestSASLAndEnumerations(t *testing.T) {
	s := SASL{Mechanism: SASLSCRAMSHA512, Username: "alice", Password: "s3cret"}
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%+v", s), fmt.Sprintf("%#v", &s), fmt.Sprintf("%q", s)} {
		if strings.Contains(out, "s3cret") || !strings.Contains(out, "alice") {
			t.Errorf("%q", out)
		}
	}
	var m SASLMechanism
	if err := m.Set(" scram-sha-256 "); err != nil || m != SASLSCRAMSHA256 {
		t.Errorf("Set(scram-sha-256) = %v, %v", m, err)
	}
	var p StartPolicy
	if err := p.Set("Latest"); err != nil || p != StartLatest || p.String() != "latest" || p.Type() != "earliest|latest" {
		t.Errorf("StartPolicy %v, %v", p, err)
	}
	var l IsolationLevel
	if err := l.Set("serializable"); err == nil || !strings.Contains(err.Error(), "read_committed, read_uncommitted") {
		t.Errorf("IsolationLevel.Set(serializable) = %v", err)
	}
}
