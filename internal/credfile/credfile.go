// Package credfile reads the files that credentials are given in, the
// same way for every client (Kafka, the Schema Registry and etcd through
// the command's flags, ClickHouse through its sink URL): a password file
// and a PEM bundle of CA certificates. Errors name the file, never its
// content; the caller adds the flag or parameter that named the file.
package credfile

import (
	"crypto/x509"
	"errors"
	"os"
	"strings"
)

// ErrNoPEM is returned by CAPool for a file that holds no PEM certificate.
var ErrNoPEM = errors.New("no PEM certificate")

// Password returns the password held in the file at path, less a trailing
// newline (\n or \r\n, as editors and `echo` leave one). An empty result
// is not an error here: whether a password may be empty is the caller's
// rule.
func Password(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// CAPool returns the CA certificates of the PEM file at path, for
// tls.Config.RootCAs; ErrNoPEM when it holds none.
func CAPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, ErrNoPEM
	}
	return pool, nil
}
