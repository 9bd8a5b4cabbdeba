package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"hash"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The SCRAM user of every cluster started with SASLSCRAMOverTLS, for both
// mechanisms, created when its nodes are formatted.
const (
	KafkaSCRAMUser     = "alice"
	KafkaSCRAMPassword = "alice-secret"
)

// kafkaSCRAMIterations is the iteration count of the credentials the
// harness creates: Kafka's minimum.
const kafkaSCRAMIterations = 4096

// SCRAMConfig configures the SASL_SSL listener of SASLSCRAMOverTLS.
type SCRAMConfig struct {
	// Users are SCRAM users, name to password, created when the nodes
	// are formatted (so they authenticate from a node's first second),
	// each for SCRAM-SHA-256 and SCRAM-SHA-512, besides KafkaSCRAMUser.
	// Names and passwords are of letters, digits, '-', '_' and '.' (the
	// formatter's syntax has no quoting). More can be made later with
	// CreateSCRAMUser.
	Users map[string]string
	// ReauthAfter is the listener's connections.max.reauth.ms: a broker
	// closes a connection that has not authenticated again within it
	// (KIP-368). Zero keeps Kafka's default, 0: never.
	ReauthAfter time.Duration
}

// SASLSCRAMOverTLS adds a SASL_SSL listener to every node (SASLAddrs), with
// SCRAM-SHA-256 and SCRAM-SHA-512, served with a certificate for 127.0.0.1
// and localhost of a CA the harness makes (CACertFile, TLSConfig). The
// PLAINTEXT listener stays, for the helpers and between brokers; there is
// no authorizer, so every user may do everything.
func SASLSCRAMOverTLS(cfg SCRAMConfig) ApacheKafkaOption {
	return func(c *apacheConfig) { c.scram = &cfg }
}

// scramWordRE matches what the formatter's --add-scram takes unquoted.
var scramWordRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func (c *SCRAMConfig) validate() error {
	if c == nil {
		return nil
	}
	for name, pass := range c.Users {
		if !scramWordRE.MatchString(name) || !scramWordRE.MatchString(pass) {
			return fmt.Errorf("scram user %q: names and passwords must match %s", name, scramWordRE)
		}
	}
	if c.ReauthAfter < 0 {
		return fmt.Errorf("scram: ReauthAfter %v is negative", c.ReauthAfter)
	}
	return nil
}

// formatArgs are the formatter's arguments that create the users.
func (c *SCRAMConfig) formatArgs() []string {
	if c == nil {
		return nil
	}
	users := map[string]string{KafkaSCRAMUser: KafkaSCRAMPassword}
	for name, pass := range c.Users {
		users[name] = pass
	}
	var args []string
	for name, pass := range users {
		for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
			args = append(args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", mech, name, pass))
		}
	}
	return args
}

// kafkaTLS is the throwaway PKI of a cluster's SASL_SSL listener: a CA, and
// one server certificate for 127.0.0.1 and localhost that every node
// serves.
type kafkaTLS struct {
	caFile   string
	keystore string // the server's key and certificate chain, PEM
	pool     *x509.CertPool
}

// newKafkaTLS makes the CA and the server's certificate in dir.
func newKafkaTLS(dir string) (*kafkaTLS, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tls: CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "offsetkeeper test Kafka CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("tls: create CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("tls: parse CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tls: server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("tls: issue the server's certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("tls: marshal the server's key: %w", err)
	}
	x := &kafkaTLS{caFile: filepath.Join(dir, "ca.pem"), keystore: filepath.Join(dir, "server.pem"), pool: x509.NewCertPool()}
	x.pool.AddCert(ca)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(x.caFile, caPEM, 0o644); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	// Kafka's PEM key store (KIP-651): an unencrypted PKCS#8 key, then the
	// certificate chain.
	store := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	store = append(store, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	store = append(store, caPEM...)
	if err := os.WriteFile(x.keystore, store, 0o600); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return x, nil
}

// properties are the server properties of the SASL_SSL listener.
func (x *kafkaTLS) properties(cfg *SCRAMConfig) [][2]string {
	const ln = "listener.name.sasl_ssl."
	const jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
	p := [][2]string{
		{"sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512"},
		{ln + "sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512"},
		{ln + "scram-sha-256.sasl.jaas.config", jaas},
		{ln + "scram-sha-512.sasl.jaas.config", jaas},
		{ln + "ssl.keystore.type", "PEM"},
		{ln + "ssl.keystore.location", x.keystore},
		{ln + "ssl.client.auth", "none"},
	}
	if cfg.ReauthAfter > 0 {
		p = append(p, [2]string{ln + "connections.max.reauth.ms", strconv.FormatInt(cfg.ReauthAfter.Milliseconds(), 10)})
	}
	return p
}

// SASLAddrs are the host:port addresses of the nodes' SASL_SSL listeners
// (SASLSCRAMOverTLS), nil without one.
func (k *Kafka) SASLAddrs() []string {
	if k.real == nil || k.real.tls == nil {
		return nil
	}
	var addrs []string
	for _, n := range k.real.nodes {
		addrs = append(addrs, n.SASLAddr())
	}
	return addrs
}

// CACertFile is the path of the PEM certificate of the CA that signed the
// SASL_SSL listeners' certificate, "" without SASLSCRAMOverTLS.
func (k *Kafka) CACertFile() string {
	if k.real == nil || k.real.tls == nil {
		return ""
	}
	return k.real.tls.caFile
}

// TLSConfig is a client's TLS configuration for the SASL_SSL listeners: it
// trusts the harness's CA (kgo.DialTLSConfig sets the server name to the
// address's host, 127.0.0.1). Nil without SASLSCRAMOverTLS.
func (k *Kafka) TLSConfig() *tls.Config {
	if k.real == nil || k.real.tls == nil {
		return nil
	}
	return &tls.Config{RootCAs: k.real.tls.pool, MinVersion: tls.VersionTLS12}
}

// CreateSCRAMUser creates (or updates) the SCRAM credential of user for
// mechanism, SCRAM-SHA-256 or SCRAM-SHA-512, and waits until every running
// node has it.
func (k *Kafka) CreateSCRAMUser(t testing.TB, mechanism, user, password string) {
	t.Helper()
	k.requireReal(t, "create SCRAM user")
	what := fmt.Sprintf("create %s user %s", mechanism, user)
	var (
		mech int8
		h    func() hash.Hash
	)
	switch mechanism {
	case "SCRAM-SHA-256":
		mech, h = 1, sha256.New
	case "SCRAM-SHA-512":
		mech, h = 2, sha512.New
	default:
		t.Fatalf("kafka: %s: mechanism %q: want SCRAM-SHA-256 or SCRAM-SHA-512", what, mechanism)
	}
	salt := make([]byte, 24)
	_, _ = rand.Read(salt)
	salted, err := pbkdf2.Key(h, password, salt, kafkaSCRAMIterations, h().Size())
	if err != nil {
		t.Fatalf("kafka: %s: %v", what, err)
	}
	req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	u := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
	u.Name, u.Mechanism, u.Iterations, u.Salt, u.SaltedPassword = user, mech, kafkaSCRAMIterations, salt, salted
	req.Upsertions = append(req.Upsertions, u)
	admin(t, k, what, req, func(resp *kmsg.AlterUserSCRAMCredentialsResponse) []int16 {
		return errorCodes(resp.Results, func(r kmsg.AlterUserSCRAMCredentialsResponseResult) int16 { return r.ErrorCode })
	})
	describe := func() kmsg.Request {
		req := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
		du := kmsg.NewDescribeUserSCRAMCredentialsRequestUser()
		du.Name = user
		req.Users = append(req.Users, du)
		return req
	}
	awaitEach(t, k, what, describe, func(resp *kmsg.DescribeUserSCRAMCredentialsResponse) error {
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		for _, r := range resp.Results {
			if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
				return err
			}
			for _, ci := range r.CredentialInfos {
				if ci.Mechanism == mech {
					return nil
				}
			}
		}
		return fmt.Errorf("no %s credential yet", mechanism)
	})
}
