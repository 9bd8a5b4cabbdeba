package main

import (
	"crypto/tls"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/internal/redact"
	"github.com/offsetkeeper/offsetkeeper/internal/secure"
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
	etcdPassword secure.Secret
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
	etcdTLS, err := tlsFlags("etcd", s.etcdCACert, s.etcdCert, s.etcdKey, false).Config()
	if err != nil {
		return usage(err)
	}
	if etcdTLS != nil {
		for _, e := range etcdEndpoints {
			if scheme, _, ok := strings.Cut(e, "://"); ok && scheme != "https" && scheme != "unixs" {
				return usagef("--etcd-endpoints %q is %s:// but --etcd-cacert or --etcd-cert ask for TLS: use https://host:port or host:port", redact.URL(e), scheme)
			}
		}
	}
	etcdPassword, err := loginFlags("etcd", s.etcdUser, s.etcdPasswordFile, envEtcdPassword).Read()
	if err != nil {
		return usage(err)
	}

	kafkaTLS, err := tlsFlags("kafka", s.kafkaCACert, s.kafkaCert, s.kafkaKey, s.kafkaTLSOn).Config()
	if err != nil {
		return usage(err)
	}
	// The mechanism first: a misspelt one is the mistake to name, not the
	// password it would go with.
	switch m := strings.ToLower(strings.TrimSpace(s.kafkaMechanism)); m {
	case "", mechanismPlain, mechanismSCRAM256, mechanismSCRAM512:
	default:
		return usagef("--kafka-sasl-mechanism %q: want %s", m, mechanismsAccepted)
	}
	kafkaPassword, err := loginFlags("kafka", s.kafkaUser, s.kafkaPasswordFile, envKafkaPassword).Read()
	if err != nil {
		return usage(err)
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
		cfg.Username, cfg.Password = s.etcdUser, s.built.etcdPassword.Reveal()
	}
	return nil
}

// tlsFlags are the TLS flags of one service (etcd, kafka,
// schema-registry): --SERVICE-cacert, --SERVICE-cert and --SERVICE-key; on
// turns TLS on with none of them set.
func tlsFlags(service, caFile, certFile, keyFile string, on bool) secure.TLS {
	flag := func(name string) secure.Name { return secure.Name("--" + service + "-" + name) }
	return secure.TLS{On: on, CAFile: caFile, CertFile: certFile, KeyFile: keyFile,
		Names: secure.TLSNames{CAFile: flag("cacert"), CertFile: flag("cert"), KeyFile: flag("key")}}
}

// loginFlags is the login of one service: --SERVICE-user, its password in
// the environment variable env or the file --SERVICE-password-file names.
func loginFlags(service, user, passwordFile, env string) secure.Login {
	return secure.Login{User: user, UserName: secure.Name("--" + service + "-user"),
		Password: secure.Password{File: passwordFile, FileName: secure.Name("--" + service + "-password-file"), Env: env}}
}
