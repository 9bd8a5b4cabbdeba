package kafka

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestSASLNeverPrintsThePassword(t *testing.T) {
	const pass = "s3cr3t-pass"
	s := &SASL{Mechanism: SASLSCRAMSHA512, Username: "alice", Password: pass}
	m, err := kafkaMechanism(*s)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Brokers: []string{"127.0.0.1:1"}, SASL: s}
	var printed []string
	for _, v := range []any{s, *s, cfg, &cfg, m} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
			printed = append(printed, fmt.Sprintf(verb, v))
		}
		if b, err := json.Marshal(v); err == nil {
			printed = append(printed, string(b))
		}
	}
	for _, p := range printed {
		if strings.Contains(p, pass) || strings.Contains(p, fmt.Sprintf("%x", pass)) {
			t.Errorf("printed with the password: %s", p)
		}
	}
	if got := s.String(); got != `SCRAM-SHA-512 as "alice"` {
		t.Errorf("String = %q", got)
	}
}

func TestSASLValidate(t *testing.T) {
	for _, tc := range []struct {
		s    SASL
		want string
	}{
		{SASL{Mechanism: SASLPlain, Username: "a", Password: "p"}, ""},
		{SASL{Mechanism: SASLSCRAMSHA256, Username: "a", Password: "p"}, ""},
		{SASL{Mechanism: 7, Username: "a"}, "sasl mechanism 7"},
		{SASL{Mechanism: SASLPlain}, "no user name"},
		{SASL{Mechanism: SASLSCRAMSHA256, Username: "a", Password: "\u0007"}, "SASLprep"},
	} {
		err := tc.s.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.s, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.s, err, tc.want)
		}
	}
	var m SASLMechanism
	if err := m.Set(" scram-sha-256 "); err != nil || m != SASLSCRAMSHA256 {
		t.Errorf("ParseSASLMechanism = %v, %v", m, err)
	}
}

func TestNewClientValidates(t *testing.T) {
	if _, err := NewClient(Config{}); err == nil || !strings.Contains(err.Error(), "no kafka brokers") {
		t.Fatalf("NewClient without brokers: %v", err)
	}
	c, err := NewClient(Config{Brokers: []string{"127.0.0.1:1"}}, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}
