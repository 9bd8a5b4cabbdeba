package secure

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// ErrNoPEM is wrapped by the error of a CA file that holds no PEM
// certificate.
var ErrNoPEM = errors.New("no PEM certificate")

// TLS is one client's TLS settings, as its flags or URL parameters give
// them. The zero value is no TLS.
type TLS struct {
	// On asks for TLS when no file is given: the system's CAs verify the
	// server. A CA file or a client certificate asks for it too.
	On bool
	// CAFile is a PEM bundle of the CAs that sign the server's
	// certificate; "" trusts the system's.
	CAFile string
	// CertFile and KeyFile are a client certificate and its private key
	// (PEM), for a server that asks for one. Each needs the other.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must hold; "" is
	// the host dialled.
	ServerName string
	// SkipVerify accepts any server certificate: for tests only.
	SkipVerify bool
	// Names are what the site calls the files' settings, for messages.
	Names TLSNames
}

// TLSNames are what a site calls the settings of TLS that name files.
type TLSNames struct {
	CAFile, CertFile, KeyFile Name
}

// Enabled reports whether t asks for TLS: On, or a CA file or a client
// certificate given.
func (t TLS) Enabled() bool { return t.On || t.CAFile != "" || t.CertFile != "" }

// Check refuses a client certificate without its key and a key without
// its certificate, without reading a file.
func (t TLS) Check() error {
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return fmt.Errorf("%s is set but %s is not: a client certificate needs its private key", t.Names.CertFile.is(t.CertFile), t.Names.KeyFile)
	case t.KeyFile != "" && t.CertFile == "":
		return fmt.Errorf("%s is set but %s is not: a private key needs its client certificate", t.Names.KeyFile.is(t.KeyFile), t.Names.CertFile)
	}
	return nil
}

// Config checks t, reads its files and returns the client's
// configuration, nil when t is not Enabled. Its errors name the setting
// and the file; one of a CA file without a certificate wraps ErrNoPEM.
func (t TLS) Config() (*tls.Config, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if !t.Enabled() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.SkipVerify}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fileError(t.Names.CAFile, t.CAFile, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: %w in it", t.Names.CAFile.is(t.CAFile), ErrNoPEM)
		}
	}
	if t.CertFile != "" {
		cert, err := os.ReadFile(t.CertFile)
		if err != nil {
			return nil, fileError(t.Names.CertFile, t.CertFile, err)
		}
		key, err := os.ReadFile(t.KeyFile)
		if err != nil {
			return nil, fileError(t.Names.KeyFile, t.KeyFile, err)
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", t.Names.CertFile.is(t.CertFile), t.Names.KeyFile.is(t.KeyFile), err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// ForAddress is cfg for a connection to address (host:port): with the
// host as the name the server's certificate must hold, unless cfg names
// one. cfg itself is not changed.
func ForAddress(cfg *tls.Config, address string) *tls.Config {
	if cfg == nil || cfg.ServerName != "" {
		return cfg
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	cfg = cfg.Clone()
	cfg.ServerName = host
	return cfg
}

// HandshakeFailed tells whether err is a TLS handshake that failed: a
// certificate that does not verify, a peer that does not speak TLS, or
// an alert from the peer (which refused our certificate). No wait mends
// those.
func HandshakeFailed(err error) bool {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		record    tls.RecordHeaderError
		alert     tls.AlertError
		op        *net.OpError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &alert) {
		return true
	}
	// A peer that refuses the client's certificate sends an alert, which
	// crypto/tls reports as a *net.OpError around a tls.alert.
	return errors.As(err, &op) && op.Op == "remote error"
}
