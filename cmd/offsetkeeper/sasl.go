package main

import (
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/offsetkeeper/offsetkeeper/internal/secure"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
)

// kafkaAuth is how Kafka clients connect and authenticate: TLS and SASL,
// nil for none. The SASL login is a *saslLogin, which never prints its
// password.
type kafkaAuth struct {
	tls  *tls.Config
	sasl *saslLogin
}

// apply sets the TLS and SASL of a Kafka configuration: the replica's,
// the audit's and the operator commands'.
func (a kafkaAuth) apply(k *kafkaconf.Config) {
	k.TLS, k.SASL = a.tls, nil
	if a.sasl != nil {
		k.SASL = &kafkaconf.SASL{Mechanism: a.sasl.mech, Username: a.sasl.user, Password: a.sasl.pass.Reveal()}
	}
}

// kafkaAuth returns the Kafka settings validate built. Called before
// validate it panics rather than answer "no TLS, no SASL": a client built
// so would dial Kafka without the credentials it was given.
func (s *securityFlags) kafkaAuth() kafkaAuth {
	if s.built == nil {
		panic("kafkaAuth before validate: the security flags are not read yet")
	}
	return s.built.kafka
}

// saslMechanism checks the login named by --kafka-sasl-mechanism (case
// insensitive) for user; nil when neither is set.
func saslMechanism(name, user string, pass secure.Secret) (*saslLogin, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	var mech kafkaconf.SASLMechanism
	switch name {
	case "":
		if user != "" {
			return nil, usagef("--kafka-user %q is set but --kafka-sasl-mechanism is not: want %s", user, mechanismsAccepted)
		}
		return nil, nil
	case mechanismPlain:
		mech = kafkaconf.SASLPlain
	case mechanismSCRAM256:
		mech = kafkaconf.SASLSCRAMSHA256
	case mechanismSCRAM512:
		mech = kafkaconf.SASLSCRAMSHA512
	default:
		return nil, usagef("--kafka-sasl-mechanism %q: want %s", name, mechanismsAccepted)
	}
	if user == "" {
		return nil, usagef("--kafka-sasl-mechanism %s is set but --kafka-user is not: name the SASL user", name)
	}
	l := &saslLogin{mech: mech, user: user, pass: pass}
	var c kafkaconf.Config
	kafkaAuth{sasl: l}.apply(&c)
	if err := c.SASL.Validate(); err != nil {
		// SASLprep refused the user or the password; the error never
		// quotes the password.
		return nil, usagef("--kafka-user %q or its password cannot be used with %s: SASLprep refuses it", user, name)
	}
	return l, nil
}

// saslLogin is the SASL login of the flags. Its password is a Secret, so
// printing anything that holds a saslLogin never shows it. Its String names
// the mechanism and the user.
type saslLogin struct {
	mech kafkaconf.SASLMechanism
	user string
	pass secure.Secret
}

// Name is the mechanism's name: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
func (l *saslLogin) Name() string { return l.mech.String() }

// String, GoString and MarshalText name the mechanism and the user only.
func (l *saslLogin) String() string               { return fmt.Sprintf("%s as %q", l.mech, l.user) }
func (l *saslLogin) GoString() string             { return l.String() }
func (l *saslLogin) MarshalText() ([]byte, error) { return []byte(l.String()), nil }
