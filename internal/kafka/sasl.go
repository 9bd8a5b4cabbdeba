package kafka

import (
	"context"
	"fmt"
	"io"

	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/offsetkeeper/offsetkeeper/internal/enum"
)

// SASLMechanism names a SASL mechanism Kafka brokers accept
// (sasl.enabled.mechanisms).
type SASLMechanism int

func (m SASLMechanism) String() string               { return enum.Name[saslMechanisms](int(m)) }
func (m SASLMechanism) Check() error                 { return enum.Valid[saslMechanisms](int(m)) }
func (m SASLMechanism) MarshalText() ([]byte, error) { return enum.Text[saslMechanisms](int(m)) }
func (m *SASLMechanism) UnmarshalText(b []byte) error {
	return enum.SetInt[saslMechanisms]((*int)(m), string(b))
}
func (m *SASLMechanism) Set(s string) error { return enum.SetInt[saslMechanisms]((*int)(m), s) }
func (SASLMechanism) Type() string          { return enum.Type[saslMechanisms]() }

const (
	// SASLPlain sends the user and the password as they are: use it only
	// with TLS. It is the zero value.
	SASLPlain SASLMechanism = iota
	// SASLSCRAMSHA256 is SCRAM-SHA-256: the password never crosses the
	// wire.
	SASLSCRAMSHA256
	// SASLSCRAMSHA512 is SCRAM-SHA-512.
	SASLSCRAMSHA512
)

type saslMechanisms struct{}

func (saslMechanisms) Enum() (string, []string) {
	return "sasl mechanism", []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
}

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
	_, err := s.kafkaMechanism()
	return err
}

// kafkaMechanism builds kafka-go's mechanism, wrapped so that it never
// prints the password either.
func (s SASL) kafkaMechanism() (sasl.Mechanism, error) {
	var m sasl.Mechanism
	switch s.Mechanism {
	case SASLPlain:
		m = plain.Mechanism{Username: s.Username, Password: s.Password}
	case SASLSCRAMSHA256, SASLSCRAMSHA512:
		algo := scram.SHA256
		if s.Mechanism == SASLSCRAMSHA512 {
			algo = scram.SHA512
		}
		var err error
		if m, err = scram.Mechanism(algo, s.Username, s.Password); err != nil {
			// SASLprep refused the user or the password: the error may
			// quote the password, so it is not passed on.
			return nil, fmt.Errorf("sasl %s: user %q or its password refused by SASLprep", s.Mechanism, s.Username)
		}
	default:
		return nil, s.Mechanism.Check()
	}
	return &saslLogin{name: m.Name(), user: s.Username, mech: func() sasl.Mechanism { return m }}, nil
}

// KafkaMechanism returns kafka-go's mechanism of the login, for a client
// that is not a Client (a test's).
func (s SASL) KafkaMechanism() (sasl.Mechanism, error) { return s.kafkaMechanism() }

// saslLogin is a SASL mechanism that holds its password out of sight: the
// mechanism that knows it is inside a closure, which fmt prints as an
// address and encoding/json refuses, so printing anything that holds a
// saslLogin (a Transport, even through unexported fields) never shows the
// password. Its String names the mechanism and the user.
type saslLogin struct {
	name string
	user string
	mech func() sasl.Mechanism
}

// Name implements sasl.Mechanism.
func (l *saslLogin) Name() string { return l.name }

// Start implements sasl.Mechanism.
func (l *saslLogin) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	return l.mech().Start(ctx)
}

// String, GoString and MarshalText name the mechanism and the user only.
func (l *saslLogin) String() string               { return fmt.Sprintf("%s as %q", l.name, l.user) }
func (l *saslLogin) GoString() string             { return l.String() }
func (l *saslLogin) MarshalText() ([]byte, error) { return []byte(l.String()), nil }
