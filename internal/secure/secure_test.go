package secure

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const testSecret = "pw-Secret-7731"

// writeFile writes content to name in a directory of the test's.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// keyPair writes a self-signed certificate and its key, and returns their
// files.
func keyPair(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = writeFile(t, dir, name+".pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	keyFile = writeFile(t, dir, name+"-key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})))
	return certFile, keyFile
}

var flagNames = TLSNames{CAFile: "--kafka-cacert", CertFile: "--kafka-cert", KeyFile: "--kafka-key"}

func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	cert, key := keyPair(t, dir, "client")
	_, otherKey := keyPair(t, dir, "other")
	notPEM := writeFile(t, dir, "not.pem", "not a certificate\n")
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name string
		tls  TLS
		want []string // parts of the error; nil for none
		// checked without an error
		off, roots bool
		certs      int
	}{
		{name: "nothing set", tls: TLS{Names: flagNames}, off: true},
		{name: "on with the system's CAs", tls: TLS{On: true, Names: flagNames}},
		{name: "a CA file turns it on", tls: TLS{CAFile: cert, Names: flagNames}, roots: true},
		{name: "a client certificate turns it on", tls: TLS{CertFile: cert, KeyFile: key, Names: flagNames}, certs: 1},
		{name: "cert without key", tls: TLS{CertFile: cert, Names: flagNames},
			want: []string{`--kafka-cert "` + cert + `" is set but --kafka-key is not`, "private key"}},
		{name: "key without cert", tls: TLS{KeyFile: key, Names: flagNames},
			want: []string{`--kafka-key "` + key + `" is set but --kafka-cert is not`}},
		{name: "CA not PEM", tls: TLS{CAFile: notPEM, Names: flagNames}, want: []string{`--kafka-cacert "` + notPEM + `": no PEM certificate in it`}},
		{name: "CA missing", tls: TLS{CAFile: missing, Names: flagNames}, want: []string{`--kafka-cacert "` + missing + `": no such file`}},
		{name: "URL parameter", tls: TLS{On: true, CAFile: missing, Names: TLSNames{CAFile: "ca_file="}}, want: []string{`ca_file="` + missing + `": no such file`}},
		{name: "key missing", tls: TLS{CertFile: cert, KeyFile: missing, Names: flagNames}, want: []string{`--kafka-key "` + missing + `"`}},
		{name: "pair that does not match", tls: TLS{CertFile: cert, KeyFile: otherKey, Names: flagNames},
			want: []string{`--kafka-cert "` + cert + `", --kafka-key "` + otherKey + `"`, "does not match"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.tls.Config()
			if tc.want != nil {
				if err == nil {
					t.Fatalf("Config = %v, want an error saying %q", cfg, tc.want)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Config: %v; want it to say %q", err, w)
					}
				}
				if strings.Count(err.Error(), missing) > 1 {
					t.Errorf("Config: %v names the file twice", err)
				}
				return
			}
			switch {
			case err != nil:
				t.Fatal(err)
			case tc.off != (cfg == nil):
				t.Fatalf("Config = %v, want TLS off %v", cfg, tc.off)
			case cfg == nil:
				return
			case (cfg.RootCAs != nil) != tc.roots || len(cfg.Certificates) != tc.certs || cfg.MinVersion != tls.VersionTLS12:
				t.Errorf("Config = roots %v, %d certificates, min version %x", cfg.RootCAs != nil, len(cfg.Certificates), cfg.MinVersion)
			}
		})
	}
	if _, err := (TLS{CAFile: notPEM}).Config(); !errors.Is(err, ErrNoPEM) {
		t.Errorf("a CA file without PEM: %v, want ErrNoPEM", err)
	}
	if _, err := (TLS{CAFile: missing}).Config(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing CA file: %v, want os.ErrNotExist", err)
	}
	cfg, err := TLS{On: true, ServerName: "db.example", SkipVerify: true}.Config()
	if err != nil || cfg.ServerName != "db.example" || !cfg.InsecureSkipVerify {
		t.Errorf("server name and skip verify: %+v, %v", cfg, err)
	}
}

func TestForAddress(t *testing.T) {
	base := &tls.Config{}
	if got := ForAddress(base, "broker-1:9093"); got.ServerName != "broker-1" || base.ServerName != "" {
		t.Errorf("ForAddress = %q (base %q), want broker-1 and the base unchanged", got.ServerName, base.ServerName)
	}
	named := &tls.Config{ServerName: "kafka.example"}
	if got := ForAddress(named, "10.0.0.1:9093"); got.ServerName != "kafka.example" {
		t.Errorf("ForAddress of a named config = %q", got.ServerName)
	}
	if ForAddress(nil, "h:1") != nil {
		t.Error("ForAddress(nil) is not nil")
	}
}

// env is a Getenv whose only variable is PW, set to v.
func env(v string) func(string) string {
	return func(k string) string {
		if k == "PW" {
			return v
		}
		return ""
	}
}

func TestPasswordRead(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ content, want string }{
		{"s3cret\n", "s3cret"}, {"s3cret\r\n", "s3cret"}, {"s3cret", "s3cret"}, {" spaced \n\n", " spaced "}, {"\n", ""},
	} {
		p := Password{File: writeFile(t, dir, "pw", tc.content), FileName: "password_file=", Getenv: env("")}
		got, set, err := p.Read()
		if err != nil || !set || got.Reveal() != tc.want {
			t.Errorf("a file of %q = %q, %v, %v; want %q", tc.content, got.Reveal(), set, err, tc.want)
		}
	}
	file := writeFile(t, dir, "pw", "from-file\n")
	missing := filepath.Join(dir, "none")
	for _, tc := range []struct {
		name    string
		p       Password
		want    string
		set     bool
		err     []string
		checkOK bool // Check, which reads no environment, passes
	}{
		{name: "none", p: Password{Env: "PW", Getenv: env("")}, checkOK: true},
		{name: "value", p: Password{Value: "v", HasValue: true, ValueIn: "the URL"}, want: "v", set: true, checkOK: true},
		{name: "empty value", p: Password{HasValue: true, ValueIn: "the URL"}, set: true, checkOK: true},
		{name: "env", p: Password{Env: "PW", Getenv: env("from-env")}, want: "from-env", set: true, checkOK: true},
		{name: "file", p: Password{File: file, FileName: "password_file=", Env: "PW", Getenv: env("")}, want: "from-file", set: true, checkOK: true},
		{name: "missing file", p: Password{File: missing, FileName: "password_file="}, err: []string{`password_file="` + missing + `": no such file`}, checkOK: true},
		{name: "value and file", p: Password{Value: testSecret, HasValue: true, ValueIn: "the URL", File: file, FileName: "password_file="},
			err: []string{"password given twice", "the URL", `password_file="` + file + `"`, "keep one"}},
		{name: "env and value", p: Password{Value: testSecret, HasValue: true, ValueIn: "the URL", Env: "PW", Getenv: env(testSecret)},
			err: []string{"password given twice", "the URL and $PW"}, checkOK: true},
		{name: "env and file", p: Password{File: file, FileName: "--etcd-password-file", Env: "PW", Getenv: env(testSecret)},
			err: []string{"password given twice", `--etcd-password-file "` + file + `" and $PW`}, checkOK: true},
		{name: "all three", p: Password{Value: "v", HasValue: true, ValueIn: "the URL", File: file, FileName: "password_file=", Env: "PW", Getenv: env(testSecret)},
			err: []string{"password given twice, in the URL, password_file="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.p.Check(); (err == nil) != tc.checkOK {
				t.Errorf("Check = %v, want ok %v", err, tc.checkOK)
			}
			got, set, err := tc.p.Read()
			if tc.err != nil {
				if err == nil {
					t.Fatalf("Read = %q, want an error", got.Reveal())
				}
				for _, w := range tc.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Read: %v; want it to say %q", err, w)
					}
				}
				if strings.Contains(err.Error(), testSecret) {
					t.Errorf("Read: %v shows the password", err)
				}
				return
			}
			if err != nil || set != tc.set || got.Reveal() != tc.want {
				t.Errorf("Read = %q, %v, %v; want %q, %v", got.Reveal(), set, err, tc.want, tc.set)
			}
		})
	}
}

func TestLoginRead(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "pw", testSecret+"\n")
	empty := writeFile(t, dir, "empty", "\n")
	pw := func(file, envValue string) Password {
		return Password{File: file, FileName: "--etcd-password-file", Env: "PW", Getenv: env(envValue)}
	}
	for _, tc := range []struct {
		name string
		l    Login
		want string
		err  []string
	}{
		{name: "no login", l: Login{UserName: "--etcd-user", Password: pw("", "")}},
		{name: "from the file", l: Login{User: "bob", UserName: "--etcd-user", Password: pw(file, "")}, want: testSecret},
		{name: "from the environment", l: Login{User: "bob", UserName: "--etcd-user", Password: pw("", "from-env")}, want: "from-env"},
		{name: "user without password", l: Login{User: "bob", UserName: "--etcd-user", Password: pw("", "")},
			err: []string{`--etcd-user "bob" has no password: set $PW or --etcd-password-file`}},
		{name: "file without user", l: Login{UserName: "--etcd-user", Password: pw(file, "")},
			err: []string{`--etcd-password-file "` + file + `" is set but --etcd-user is not: name the user the password is for`}},
		{name: "environment without user", l: Login{UserName: "--etcd-user", Password: pw("", testSecret)},
			err: []string{"$PW is set but --etcd-user is not", "or unset it"}},
		{name: "empty file", l: Login{User: "bob", UserName: "--etcd-user", Password: pw(empty, "")},
			err: []string{`--etcd-password-file "` + empty + `" is empty: want the password of --etcd-user "bob"`}},
		{name: "twice", l: Login{User: "bob", UserName: "--etcd-user", Password: pw(file, testSecret)},
			err: []string{"password given twice", "$PW", "--etcd-password-file", "keep one"}},
		{name: "twice without user: twice first", l: Login{UserName: "--etcd-user", Password: pw(file, testSecret)},
			err: []string{"password given twice"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.l.Read()
			if tc.err != nil {
				if err == nil {
					t.Fatal("Read: no error")
				}
				for _, w := range tc.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Read: %v; want it to say %q", err, w)
					}
				}
				if strings.Contains(err.Error(), testSecret) {
					t.Errorf("Read: %v shows the password", err)
				}
				return
			}
			if err != nil || got.Reveal() != tc.want {
				t.Errorf("Read = %q, %v; want %q", got.Reveal(), err, tc.want)
			}
		})
	}
}

// A Secret prints as xxxxx however it is printed, alone or in a struct.
func TestSecretNeverPrinted(t *testing.T) {
	s := NewSecret(testSecret)
	holder := struct {
		User string
		Pass Secret
		Ptr  *Secret
	}{"bob", s, &s}
	var printed []string
	for _, v := range []any{s, &s, holder, &holder} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
			printed = append(printed, fmt.Sprintf(verb, v))
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		printed = append(printed, string(b))
	}
	for _, p := range printed {
		if strings.Contains(p, testSecret) || strings.Contains(p, fmt.Sprintf("%x", testSecret)) {
			t.Errorf("printed with the password: %s", p)
		}
	}
	if s.Reveal() != testSecret || (Secret{}).Reveal() != "" {
		t.Errorf("Reveal = %q, zero %q", s.Reveal(), Secret{}.Reveal())
	}
}

func TestHandshakeFailed(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("dial: %w", x509.UnknownAuthorityError{}), true},
		{&tls.CertificateVerificationError{Err: errors.New("bad")}, true},
		{tls.RecordHeaderError{Msg: "not TLS"}, true},
		// an alert from the peer, as crypto/tls reports it
		{fmt.Errorf("handshake: %w", &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}), true},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{errors.New("connection reset"), false},
		{os.ErrDeadlineExceeded, false},
	} {
		if got := HandshakeFailed(tc.err); got != tc.want {
			t.Errorf("HandshakeFailed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
