package main

import (
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"

	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

// The environment variables passwords are read from. There is deliberately
// no password flag: a command line is visible to every user of the machine
// (ps, /proc) and ends up in shell histories and process listings.
const (
	envEtcdPassword  = "OFFSETKEEPER_ETCD_PASSWORD"
	envKafkaPassword = "OFFSETKEEPER_KAFKA_PASSWORD"
)

// accessCheckTimeout bounds each of run's start-up checks of the
// credentials (see checkAccess); tlsProbeTimeout the connection and the
// first read of etcdTLSProblem.
const (
	accessCheckTimeout = 10 * time.Second
	tlsProbeTimeout    = time.Second
)

// accessCheckKey is the key below the group's prefix that checkAccess
// deletes to prove write access. It never exists, so the delete changes
// nothing and no watcher sees an event.
const accessCheckKey = "access-check"

// SASL mechanisms, as --kafka-sasl-mechanism takes them.
const (
	mechanismPlain     = "plain"
	mechanismSCRAM256  = "scram-sha-256"
	mechanismSCRAM512  = "scram-sha-512"
	mechanismsAccepted = "plain, scram-sha-256 or scram-sha-512"
)

// securityFlags are the TLS and authentication settings of etcd and Kafka,
// part of clusterFlags: every command that talks to a group takes them.
// validate loads the files and builds the TLS configurations and the SASL
// mechanism once; the results are then read by etcdClient, run's fetch
// configuration and the operator commands' Kafka client.
type securityFlags struct {
	cmd *cobra.Command // for its context: see withDryRun

	etcdCACert       string
	etcdCert         string
	etcdKey          string
	etcdUser         string
	etcdPasswordFile string

	kafkaTLSOn        bool
	kafkaCACert       string
	kafkaCert         string
	kafkaKey          string
	kafkaMechanism    string
	kafkaUser         string
	kafkaPasswordFile string

	// built is what validate made of the flags. It is held by pointer so
	// that printing the options (%+v) shows an address, not a password.
	built *securityState
}

// securityState is what validate builds from securityFlags.
type securityState struct {
	etcdTLS      *tls.Config
	etcdPassword secret
	kafka        kafkaAuth
}

func (s *securityFlags) register(cmd *cobra.Command) {
	s.cmd = cmd
	fs := cmd.Flags()
	fs.StringVar(&s.etcdCACert, "etcd-cacert", "", "CA bundle (PEM) that signed etcd's server certificate; turns on TLS to etcd (endpoints host:port or https://)")
	fs.StringVar(&s.etcdCert, "etcd-cert", "", "client certificate (PEM) for etcd's --client-cert-auth; needs --etcd-key; turns on TLS")
	fs.StringVar(&s.etcdKey, "etcd-key", "", "private key (PEM) of --etcd-cert")
	fs.StringVar(&s.etcdUser, "etcd-user", "", "etcd user (etcd auth); the password is read from $"+envEtcdPassword+" or --etcd-password-file")
	fs.StringVar(&s.etcdPasswordFile, "etcd-password-file", "", "file holding the --etcd-user's password (a trailing newline is ignored)")
	fs.BoolVar(&s.kafkaTLSOn, "kafka-tls", false, "connect to Kafka over TLS, verifying the brokers with the system's CAs or --kafka-cacert")
	fs.StringVar(&s.kafkaCACert, "kafka-cacert", "", "CA bundle (PEM) that signed the brokers' certificates; implies --kafka-tls")
	fs.StringVar(&s.kafkaCert, "kafka-cert", "", "client certificate (PEM) for brokers that require one (ssl.client.auth); needs --kafka-key; implies --kafka-tls")
	fs.StringVar(&s.kafkaKey, "kafka-key", "", "private key (PEM) of --kafka-cert")
	fs.StringVar(&s.kafkaMechanism, "kafka-sasl-mechanism", "", "SASL mechanism: "+mechanismsAccepted+" (needs --kafka-user; use plain only with TLS)")
	fs.StringVar(&s.kafkaUser, "kafka-user", "", "SASL user; the password is read from $"+envKafkaPassword+" or --kafka-password-file")
	fs.StringVar(&s.kafkaPasswordFile, "kafka-password-file", "", "file holding the --kafka-user's password (a trailing newline is ignored)")
}

// validate checks the flags, reads the certificate and password files and
// builds what etcdClient and the Kafka clients use. Every mistake is a usage
// error naming the flag; no message holds a password. It is idempotent.
func (s *securityFlags) validate(etcdEndpoints []string) error {
	if s.built != nil {
		return nil
	}
	etcdTLS, err := tlsConfig("etcd", s.etcdCACert, s.etcdCert, s.etcdKey, false)
	if err != nil {
		return err
	}
	if etcdTLS != nil {
		for _, e := range etcdEndpoints {
			if scheme, _, ok := strings.Cut(e, "://"); ok && scheme != "https" && scheme != "unixs" {
				return usagef("--etcd-endpoints %q is %s:// but --etcd-cacert or --etcd-cert ask for TLS: use https://host:port or host:port", redactURL(e), scheme)
			}
		}
	}
	etcdPassword, err := password("--etcd-user", s.etcdUser, envEtcdPassword, "--etcd-password-file", s.etcdPasswordFile)
	if err != nil {
		return err
	}

	kafkaTLS, err := tlsConfig("kafka", s.kafkaCACert, s.kafkaCert, s.kafkaKey, s.kafkaTLSOn)
	if err != nil {
		return err
	}
	kafkaPassword, err := password("--kafka-user", s.kafkaUser, envKafkaPassword, "--kafka-password-file", s.kafkaPasswordFile)
	if err != nil {
		return err
	}
	mech, err := saslMechanism(s.kafkaMechanism, s.kafkaUser, kafkaPassword)
	if err != nil {
		return err
	}

	s.built = &securityState{etcdTLS: etcdTLS, etcdPassword: etcdPassword, kafka: kafkaAuth{tls: kafkaTLS, sasl: mech}}
	return nil
}

// applyEtcd sets cfg's TLS and credentials, validating the flags first if
// that has not been done. In a dry run (withDryRun) it returns errDryRun
// instead: connecting to etcd is the first thing every command does once its
// input is checked.
func (s *securityFlags) applyEtcd(cfg *clientv3.Config) error {
	if err := s.validate(cfg.Endpoints); err != nil {
		return err
	}
	if s.cmd != nil && isDryRun(s.cmd.Context()) {
		return errDryRun
	}
	cfg.TLS = s.built.etcdTLS
	if s.etcdUser != "" {
		cfg.Username, cfg.Password = s.etcdUser, s.built.etcdPassword.reveal()
	}
	return nil
}

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

// checkAccess is run's start-up check of the credentials: when etcd or Kafka
// refuse them, it fails at once with an error that says what to fix, instead
// of a replica that retries forever and logs the refusal at warn. Only a
// refusal fails: etcd or Kafka being unreachable is left to the replica,
// which retries as always. It checks only what is configured: etcd when a
// user or a client certificate is given, Kafka when TLS or SASL is.
//
// etcd: one transaction reads the group's prefix (count only) and deletes
// P/access-check, a key that never exists: read and write permission on the
// prefix, the least role a replica needs. Kafka: the topics' metadata.
func (f *clusterFlags) checkAccess(ctx context.Context, cli *clientv3.Client, fetch kafka.Config, topics []string) error {
	if f.security.etcdUser != "" || f.security.etcdCert != "" {
		if err := f.checkEtcdAccess(ctx, cli); err != nil {
			return err
		}
	}
	if fetch.TLS != nil || fetch.SASL != nil {
		if err := f.checkKafkaAccess(ctx, fetch, topics); err != nil {
			return err
		}
	}
	return nil
}

func (f *clusterFlags) checkEtcdAccess(ctx context.Context, cli *clientv3.Client) error {
	prefix := coordinator.KeysFor(f.group).Prefix()
	cctx, cancel := context.WithTimeout(ctx, accessCheckTimeout)
	defer cancel()
	_, err := cli.Txn(cctx).Then(
		clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpDelete(prefix+accessCheckKey),
	).Commit()
	who := "the user named by the client certificate"
	if f.security.etcdUser != "" {
		who = fmt.Sprintf("user %q", f.security.etcdUser)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("etcd refused %s access to group %q: %w: its role needs readwrite on the prefix %s "+
			"(etcdctl role grant-permission ROLE readwrite --prefix=true %s)", who, f.group, err, prefix, prefix)
	case errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("etcd has authentication enabled and %s is not an etcd user: %w: set --etcd-user (password in $%s or --etcd-password-file)",
			who, err, envEtcdPassword)
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrInvalidAuthToken),
		errors.Is(err, rpctypes.ErrAuthOldRevision), errors.Is(err, rpctypes.ErrUserNotFound):
		return fmt.Errorf("etcd refused the credentials of %s for group %q: %w", who, f.group, err)
	default:
		// gRPC reports a TLS handshake that fails as a timeout: look.
		if p := f.security.etcdTLSProblem(ctx, f.etcdEndpoints); p != nil {
			return p
		}
		return nil // unreachable or slow: the replica retries
	}
}

func (f *clusterFlags) checkKafkaAccess(ctx context.Context, fetch kafka.Config, topics []string) error {
	// A connection of its own, not the fetchers' Transport: kafka-go's
	// Dialer reports a broker that closes the connection during the SASL
	// exchange, the way brokers reject a login, as SASLAuthenticationFailed,
	// where the Transport only sees an unexpected EOF.
	d := &kafkago.Dialer{ClientID: "offsetkeeper", Timeout: accessCheckTimeout, TLS: fetch.TLS, SASLMechanism: fetch.SASL}
	cctx, cancel := context.WithTimeout(ctx, accessCheckTimeout)
	defer cancel()
	var err error
	for _, b := range f.brokers { // the first broker that answers tells
		var conn *kafkago.Conn
		if conn, err = d.DialContext(cctx, "tcp", b); err == nil {
			_, err = conn.ReadPartitions(topics...)
			_ = conn.Close()
		}
		if err == nil || kafkaRefused(err) {
			break
		}
	}
	if err == nil || !kafkaRefused(err) {
		return nil // unreachable, or a topic still missing: the replica retries
	}
	login := "no SASL"
	if l, ok := fetch.SASL.(*saslLogin); ok {
		login = l.String()
	} else if fetch.SASL != nil {
		login = fetch.SASL.Name()
	}
	tlsState := "TLS off"
	if fetch.TLS != nil {
		tlsState = "TLS on"
	}
	return fmt.Errorf("kafka at %s refused this client (%s, %s): %w: check --kafka-user, --kafka-sasl-mechanism, "+
		"the password ($%s or --kafka-password-file) and the TLS flags", strings.Join(f.brokers, ","), login, tlsState, err, envKafkaPassword)
}

// kafkaRefused tells a refusal of the credentials or certificates from
// Kafka being unreachable.
func kafkaRefused(err error) bool {
	for _, e := range []kafkago.Error{kafkago.SASLAuthenticationFailed, kafkago.UnsupportedSASLMechanism, kafkago.IllegalSASLState,
		kafkago.TopicAuthorizationFailed, kafkago.ClusterAuthorizationFailed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return tlsRefused(err)
}

// tlsRefused tells whether err is a TLS handshake that failed: a
// certificate that does not verify, a peer that is not TLS, or an alert
// from the peer (which refused our certificate).
func tlsRefused(err error) bool {
	var (
		unknownCA  x509.UnknownAuthorityError
		hostname   x509.HostnameError
		invalid    x509.CertificateInvalidError
		verify     *tls.CertificateVerificationError
		record     tls.RecordHeaderError
		alert      tls.AlertError
		netOpError *net.OpError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &alert) {
		return true
	}
	// A broker that refuses the client's certificate sends an alert, which
	// crypto/tls reports as a *net.OpError around a tls.alert.
	return errors.As(err, &netOpError) && netOpError.Op == "remote error"
}

// explainEtcd makes the error of connecting to etcd say what to fix where
// it can: gRPC reports a TLS handshake that fails as a timeout, and a
// refused password does not name the flags.
func (s *securityFlags) explainEtcd(err error, endpoints []string) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		if p := s.etcdTLSProblem(context.Background(), endpoints); p != nil {
			return p
		}
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return fmt.Errorf("%w: check --etcd-user %q and its password ($%s or --etcd-password-file)", err, s.etcdUser, envEtcdPassword)
	}
	return err
}

// etcdTLSProblem connects to the https endpoints itself and returns the
// first TLS failure: a server certificate that does not verify, or a client
// certificate the server refuses. It returns nil when there is none, also
// when no endpoint answers, and at once when TLS is off.
func (s *securityFlags) etcdTLSProblem(ctx context.Context, endpoints []string) error {
	if s.built == nil || s.built.etcdTLS == nil {
		return nil
	}
	for _, ep := range endpoints {
		addr := ep
		if scheme, rest, ok := strings.Cut(ep, "://"); ok {
			if scheme != "https" {
				continue
			}
			addr = strings.TrimSuffix(rest, "/")
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			continue
		}
		cfg := s.built.etcdTLS.Clone()
		cfg.ServerName = host
		d := tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg}
		dctx, cancel := context.WithTimeout(ctx, tlsProbeTimeout)
		conn, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			// Under TLS 1.3 the server checks the client's certificate
			// after the client's side of the handshake is done: its
			// verdict comes with the first read, as an alert, or not at
			// all (the server waits for a request).
			_ = conn.SetReadDeadline(time.Now().Add(tlsProbeTimeout))
			_, err = conn.Read(make([]byte, 1))
			_ = conn.Close()
		}
		if err != nil && tlsRefused(err) {
			return fmt.Errorf("TLS with etcd at %s failed: %w: check --etcd-cacert (the CA of etcd's server certificate), "+
				"--etcd-cert and --etcd-key (a client certificate etcd's --trusted-ca-file signed)", addr, err)
		}
	}
	return nil
}

// A dry run parses and validates a command's flags and environment and stops
// where the command would first connect to etcd, with errDryRun. The
// docker-compose test checks command lines with it, without a cluster.
type dryRunKey struct{}

var errDryRun = errors.New("dry run: the command line is valid; not connecting")

func withDryRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, dryRunKey{}, true)
}

func isDryRun(ctx context.Context) bool {
	if ctx == nil {
		return false
	}
	v, _ := ctx.Value(dryRunKey{}).(bool)
	return v
}
