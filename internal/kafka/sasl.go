package kafka

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// kafkaMechanism builds kafka-go's mechanism, wrapped so that it never
// prints the password either.
func kafkaMechanism(s SASL) (sasl.Mechanism, error) {
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

// Mechanism returns kafka-go's mechanism of the login, for a client
// that is not a Client (a test's).
func Mechanism(s SASL) (sasl.Mechanism, error) { return kafkaMechanism(s) }

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
