package main

import (
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"

	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"strings"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// kafkaAuth is how Kafka clients connect and authenticate: TLS and SASL,
// nil for none. The SASL mechanism is a *saslLogin, which never prints its
// password.
type kafkaAuth struct {
	tls  *tls.Config
	sasl sasl.Mechanism
}

// apply sets the transport's TLS and SASL.
func (a kafkaAuth) apply(t *kafkago.Transport) {
	t.TLS, t.SASL = a.tls, a.sasl
}

// applyFetch sets the fetch configuration's TLS and SASL.
func (a kafkaAuth) applyFetch(c *kafka.Config) {
	c.TLS, c.SASL = a.tls, a.sasl
}

// kafkaAuth returns the Kafka settings: none before validate.
func (s *securityFlags) kafkaAuth() kafkaAuth {
	if s.built == nil {
		return kafkaAuth{}
	}
	return s.built.kafka
}

// tlsConfig builds the TLS configuration of one service from its flags: nil
// when none is set and on is false. A certificate needs its key and a key
// its certificate.
func tlsConfig(service, caFile, certFile, keyFile string, on bool) (*tls.Config, error) {
	flag := func(name string) string { return "--" + service + "-" + name }
	switch {
	case certFile != "" && keyFile == "":
		return nil, usagef("%s %q is set but %s is not: a client certificate needs its private key", flag("cert"), certFile, flag("key"))
	case keyFile != "" && certFile == "":
		return nil, usagef("%s %q is set but %s is not: a private key needs its client certificate", flag("key"), keyFile, flag("cert"))
	}
	if caFile == "" && certFile == "" && !on {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, usagef("%s: %v", flag("cacert"), err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("%s %q: no PEM certificate in it", flag("cacert"), caFile)
		}
		cfg.RootCAs = pool
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, usagef("%s %q, %s %q: %v", flag("cert"), certFile, flag("key"), keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// password returns the password of user from the environment variable env
// or the file fileFlag names. A user needs a password, a password needs a
// user, and it is given once.
func password(userFlag, user, env, fileFlag, file string) (secret, error) {
	fromEnv := os.Getenv(env)
	switch {
	case fromEnv != "" && file != "":
		return secret{}, usagef("the password is given twice, in $%s and %s %q: keep one", env, fileFlag, file)
	case user == "" && file != "":
		return secret{}, usagef("%s %q is set but %s is not: name the user the password is for", fileFlag, file, userFlag)
	case user == "" && fromEnv != "":
		return secret{}, usagef("$%s is set but %s is not: name the user the password is for, or unset it", env, userFlag)
	case user == "":
		return secret{}, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return secret{}, usagef("%s: %v", fileFlag, err) // names the file, never its content
		}
		p := strings.TrimRight(string(b), "\r\n")
		if p == "" {
			return secret{}, usagef("%s %q is empty: want the password of %s %q", fileFlag, file, userFlag, user)
		}
		return newSecret(p), nil
	case fromEnv != "":
		return newSecret(fromEnv), nil
	default:
		return secret{}, usagef("%s %q has no password: set $%s or %s", userFlag, user, env, fileFlag)
	}
}

// saslMechanism builds the kafka-go mechanism named by --kafka-sasl-mechanism
// (case insensitive) for user; nil when neither is set.
func saslMechanism(name, user string, pass secret) (sasl.Mechanism, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	switch name {
	case "":
		if user != "" {
			return nil, usagef("--kafka-user %q is set but --kafka-sasl-mechanism is not: want %s", user, mechanismsAccepted)
		}
		return nil, nil
	case mechanismPlain, mechanismSCRAM256, mechanismSCRAM512:
	default:
		return nil, usagef("--kafka-sasl-mechanism %q: want %s", name, mechanismsAccepted)
	}
	if user == "" {
		return nil, usagef("--kafka-sasl-mechanism %s is set but --kafka-user is not: name the SASL user", name)
	}
	if name == mechanismPlain {
		return newSASLLogin(plain.Mechanism{Username: user, Password: pass.reveal()}, user), nil
	}
	algo := scram.SHA256
	if name == mechanismSCRAM512 {
		algo = scram.SHA512
	}
	m, err := scram.Mechanism(algo, user, pass.reveal())
	if err != nil {
		// SASLprep refused the user or the password: the error may
		// quote the password, so it is not passed on.
		return nil, usagef("--kafka-user %q or its password cannot be used with %s: SASLprep refuses it", user, name)
	}
	return newSASLLogin(m, user), nil
}

// saslLogin is a SASL mechanism that holds its password out of sight: the
// mechanism that knows it is inside a closure, which fmt prints as an
// address and encoding/json refuses, so printing anything that holds a
// saslLogin (%+v of a kafka.Config, even through unexported fields)
// never shows the password. Its String names the mechanism and the user.
type saslLogin struct {
	name string
	user string
	mech func() sasl.Mechanism
}

func newSASLLogin(m sasl.Mechanism, user string) *saslLogin {
	return &saslLogin{name: m.Name(), user: user, mech: func() sasl.Mechanism { return m }}
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

// secret is a password, kept in a closure for the same reason as in
// saslLogin. It prints as xxxxx with every fmt verb and as text (JSON, zap);
// reveal gives the value to the client that needs it.
type secret struct{ get func() string }

const redacted = "xxxxx"

func newSecret(s string) secret { return secret{get: func() string { return s }} }

func (s secret) reveal() string {
	if s.get == nil {
		return ""
	}
	return s.get()
}

// String, Format and MarshalText print xxxxx.
func (s secret) String() string               { return redacted }
func (s secret) Format(f fmt.State, _ rune)   { _, _ = io.WriteString(f, redacted) }
func (s secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
