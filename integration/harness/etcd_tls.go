package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// etcdBcryptCost is bcrypt's minimum cost: etcd hashes every password it
// is given with it, and the default cost takes a second under -race.
const etcdBcryptCost = 4

// EtcdTLS is a throwaway PKI for an etcd cluster that serves clients over
// TLS only and requires client certificates (StartEtcdTLS): a CA, a server
// certificate for 127.0.0.1 and localhost, a client certificate of common
// name "root", and more client certificates made on demand. The files are
// in a t.TempDir.
//
// With etcd auth enabled, etcd takes a request that carries no token as
// coming from the user named by its client certificate's common name: the
// harness's own Client (certificate "root") stays root, and a client
// certificate whose name is no etcd user grants nothing by itself.
type EtcdTLS struct {
	Dir            string
	CAFile         string
	ServerCertFile string
	ServerKeyFile  string
	RootCertFile   string
	RootKeyFile    string

	ca      *x509.Certificate
	caKey   *ecdsa.PrivateKey
	rootTLS *tls.Config
}

// NewEtcdTLS creates the CA, the server certificate and the root client
// certificate.
func NewEtcdTLS(t testing.TB) *EtcdTLS {
	t.Helper()
	p := &EtcdTLS{Dir: t.TempDir()}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "offsetkeeper test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("etcd tls: create CA: %v", err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatalf("etcd tls: parse CA: %v", err)
	}
	p.caKey = key
	p.CAFile = filepath.Join(p.Dir, "ca.pem")
	writePEM(t, p.CAFile, "CERTIFICATE", der)

	// etcd's gateway dials the server with the server's own certificate, so
	// it serves as a client certificate too.
	p.ServerCertFile, p.ServerKeyFile = p.issue(t, "server", "127.0.0.1",
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	p.RootCertFile, p.RootKeyFile = p.ClientCert(t, "root")
	p.rootTLS = p.ClientConfig(t, p.RootCertFile, p.RootKeyFile)
	return p
}

// ClientCert issues a client certificate of common name cn and returns the
// paths of its certificate and key.
func (p *EtcdTLS) ClientCert(t testing.TB, cn string) (certFile, keyFile string) {
	t.Helper()
	return p.issue(t, "client-"+cn, cn, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
}

// ClientConfig is a TLS configuration that trusts the CA and presents the
// given client certificate.
func (p *EtcdTLS) ClientConfig(t testing.TB, certFile, keyFile string) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatalf("etcd tls: load %s: %v", certFile, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}

func (p *EtcdTLS) issue(t testing.TB, name, cn string, usage []x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatalf("etcd tls: issue %s: %v", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("etcd tls: marshal key of %s: %v", name, err)
	}
	certFile, keyFile = filepath.Join(p.Dir, name+".pem"), filepath.Join(p.Dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

// StartEtcdTLS is StartEtcd with clients served over TLS only (endpoints
// https://), client certificates signed by p's CA required, and cheap
// password hashing for auth. Client connects as root (see EtcdTLS); turn
// auth on with EnableAuth.
func StartEtcdTLS(t testing.TB, members int, p *EtcdTLS) *Etcd {
	t.Helper()
	if p == nil {
		t.Fatalf("etcd: StartEtcdTLS needs an EtcdTLS")
	}
	return startEtcd(t, members, p)
}

// EnableAuth creates the user root (role root, no password: it is known by
// its client certificate) and turns etcd auth on. Only a TLS cluster can
// use it.
func (e *Etcd) EnableAuth(t testing.TB) {
	t.Helper()
	if e.tls == nil {
		t.Fatalf("etcd: EnableAuth needs a cluster from StartEtcdTLS")
	}
	cli := e.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), etcdReadyTimeout)
	defer cancel()
	if _, err := cli.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		t.Fatalf("etcd: add user root: %v", err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatalf("etcd: grant root: %v", err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatalf("etcd: enable auth: %v", err)
	}
}

// serverInfo is the TLS a member serves clients with (localetcd.Config's
// ClientTLS); empty on nil.
func (p *EtcdTLS) serverInfo() transport.TLSInfo {
	if p == nil {
		return transport.TLSInfo{}
	}
	return transport.TLSInfo{
		CertFile:       p.ServerCertFile,
		KeyFile:        p.ServerKeyFile,
		TrustedCAFile:  p.CAFile,
		ClientCertAuth: true,
	}
}

// configure makes a member hash passwords cheaply; no-op on nil.
func (p *EtcdTLS) configure(cfg *embed.Config) {
	if p == nil {
		return
	}
	cfg.BcryptCost = etcdBcryptCost
}

// rootConfig is the TLS configuration of the harness's own clients; nil on
// nil.
func (p *EtcdTLS) rootConfig() *tls.Config {
	if p == nil {
		return nil
	}
	return p.rootTLS.Clone()
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("etcd tls: generate key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatalf("etcd tls: serial number: %v", err)
	}
	return n
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatalf("etcd tls: write %s: %v", path, err)
	}
}
