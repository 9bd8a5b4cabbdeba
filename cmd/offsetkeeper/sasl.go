package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/offsetkeeper/offsetkeeper/internal/credfile"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/replica"
)

// kafkaAuth is how Kafka clients connect and authenticate: TLS and SASL,
// nil for none. The SASL login is a *saslLogin, which never prints its
// password.
type kafkaAuth struct {
	tls  *tls.Config
	sasl *saslLogin
}

// apply sets the TLS and SASL of the operator commands' Kafka client.
func (a kafkaAuth) apply(c *kafka.Config) {
	c.TLS, c.SASL = a.tls, nil
	if a.sasl != nil {
		c.SASL = &kafka.SASL{Mechanism: kafka.SASLMechanism(a.sasl.mech), Username: a.sasl.user, Password: a.sasl.pass.reveal()}
	}
}

// applyFetch sets the replica's TLS and SASL.
func (a kafkaAuth) applyFetch(k *replica.Kafka) {
	k.TLS, k.SASL = a.tls, nil
	if a.sasl != nil {
		k.SASL = &replica.SASL{Mechanism: a.sasl.mech, Username: a.sasl.user, Password: a.sasl.pass.reveal()}
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
		pool, err := credfile.CAPool(caFile)
		switch {
		case errors.Is(err, credfile.ErrNoPEM):
			return nil, usagef("%s %q: no PEM certificate in it", flag("cacert"), caFile)
		case err != nil:
			return nil, usagef("%s: %v", flag("cacert"), err)
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
		p, err := credfile.Password(file)
		if err != nil {
			return secret{}, usagef("%s: %v", fileFlag, err) // names the file, never its content
		}
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

// saslMechanism checks the login named by --kafka-sasl-mechanism (case
// insensitive) for user; nil when neither is set.
func saslMechanism(name, user string, pass secret) (*saslLogin, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	var mech replica.SASLMechanism
	switch name {
	case "":
		if user != "" {
			return nil, usagef("--kafka-user %q is set but --kafka-sasl-mechanism is not: want %s", user, mechanismsAccepted)
		}
		return nil, nil
	case mechanismPlain:
		mech = replica.SASLPlain
	case mechanismSCRAM256:
		mech = replica.SASLSCRAMSHA256
	case mechanismSCRAM512:
		mech = replica.SASLSCRAMSHA512
	default:
		return nil, usagef("--kafka-sasl-mechanism %q: want %s", name, mechanismsAccepted)
	}
	if user == "" {
		return nil, usagef("--kafka-sasl-mechanism %s is set but --kafka-user is not: name the SASL user", name)
	}
	l := &saslLogin{mech: mech, user: user, pass: pass}
	var c kafka.Config
	kafkaAuth{sasl: l}.apply(&c)
	if err := c.SASL.Validate(); err != nil {
		// SASLprep refused the user or the password; the error never
		// quotes the password.
		return nil, usagef("--kafka-user %q or its password cannot be used with %s: SASLprep refuses it", user, name)
	}
	return l, nil
}

// saslLogin is the SASL login of the flags. Its password is a secret, so
// printing anything that holds a saslLogin never shows it. Its String names
// the mechanism and the user.
type saslLogin struct {
	mech replica.SASLMechanism
	user string
	pass secret
}

// Name is the mechanism's name: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
func (l *saslLogin) Name() string { return l.mech.String() }

// String, GoString and MarshalText name the mechanism and the user only.
func (l *saslLogin) String() string               { return fmt.Sprintf("%s as %q", l.mech, l.user) }
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
