package kafkaconf

import (
	"fmt"
	"io"

	"github.com/segmentio/kafka-go/sasl/scram"
)

// SASL is a SASL login: a mechanism, a user and its password. However it
// is printed (fmt verbs, JSON, zap), it shows the mechanism and the user,
// never the password.
type SASL struct {
	Mechanism SASLMechanism
	Username  string
	Password  string
}

// String returns the mechanism and the user: SCRAM-SHA-256 as "alice".
func (s SASL) String() string { return fmt.Sprintf("%s as %q", s.Mechanism, s.Username) }

// GoString is String, so that %#v does not print the password.
func (s SASL) GoString() string { return s.String() }

// Format prints String with every verb.
func (s SASL) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// MarshalText is String, so that JSON and zap do not print the password.
func (s SASL) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Validate checks the login; no message holds the password.
func (s SASL) Validate() error {
	if err := s.Mechanism.Check(); err != nil {
		return err
	}
	if s.Username == "" {
		return fmt.Errorf("sasl %s: no user name", s.Mechanism)
	}
	return s.prepared()
}

// prepared refuses a user or a password SASLprep refuses (SCRAM), without
// quoting the password.
func (s SASL) prepared() error {
	if s.Mechanism == SASLPlain {
		return nil
	}
	algo := scram.SHA256
	if s.Mechanism == SASLSCRAMSHA512 {
		algo = scram.SHA512
	}
	if _, err := scram.Mechanism(algo, s.Username, s.Password); err != nil {
		return fmt.Errorf("sasl %s: user %q or its password refused by SASLprep", s.Mechanism, s.Username)
	}
	return nil
}
