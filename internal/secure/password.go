package secure

import (
	"fmt"
	"os"
	"strings"
)

// Password is where a password comes from: given as it is (a URL's user
// info), in a file, or in an environment variable. It is read from the one
// that is set; two at once is an error that names both.
type Password struct {
	// Value is a password given as it is, when HasValue; ValueIn says
	// where, for messages ("the URL"), which never show the value.
	Value    string
	HasValue bool
	ValueIn  string
	// File holds the password; a trailing newline (\n or \r\n, as editors
	// and echo leave one) is not part of it. FileName is what the site
	// calls the setting that names the file.
	File     string
	FileName Name
	// Env is the environment variable that may hold the password, ""
	// for none. An empty variable counts as unset.
	Env string
	// Getenv reads Env; nil is os.Getenv.
	Getenv func(string) string
}

// source is one place a Password is set in.
type source struct {
	shown string // for messages: $VAR, --flag "file", the URL
	env   bool   // Env
	get   func() (string, error)
}

// sources returns the places p is set in, reading the environment but no
// file.
func (p Password) sources() []source {
	var out []source
	if p.HasValue {
		out = append(out, source{shown: p.ValueIn, get: func() (string, error) { return p.Value, nil }})
	}
	if p.File != "" {
		out = append(out, source{shown: p.FileName.is(p.File), get: func() (string, error) {
			b, err := os.ReadFile(p.File)
			if err != nil {
				return "", fileError(p.FileName, p.File, err) // names the file, never its content
			}
			return strings.TrimRight(string(b), "\r\n"), nil
		}})
	}
	if p.Env != "" {
		getenv := p.Getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		if v := getenv(p.Env); v != "" {
			out = append(out, source{shown: "$" + p.Env, env: true, get: func() (string, error) { return v, nil }})
		}
	}
	return out
}

// one returns the one place p is set in, nil for none, and an error for
// more than one.
func (p Password) one() (*source, error) {
	src := p.sources()
	switch len(src) {
	case 0:
		return nil, nil
	case 1:
		return &src[0], nil
	}
	shown := make([]string, len(src))
	for i, s := range src {
		shown[i] = s.shown
	}
	return nil, fmt.Errorf("password given twice, in %s and %s: keep one", strings.Join(shown[:len(shown)-1], ", "), shown[len(shown)-1])
}

// Check refuses a password given both as it is and in a file, without
// reading the file or the environment: for a URL checked before anything
// is read.
func (p Password) Check() error {
	p.Env = ""
	_, err := p.one()
	return err
}

// Read returns the password from the one place it is set in; set is
// false when it is set in none. An empty file is an empty password: whether
// that is allowed is the site's rule (Login refuses it).
func (p Password) Read() (pw Secret, set bool, err error) {
	src, err := p.one()
	if src == nil || err != nil {
		return Secret{}, false, err
	}
	v, err := src.get()
	if err != nil {
		return Secret{}, false, err
	}
	return NewSecret(v), true, nil
}

// alternatives says where a password may be given, for a message: $VAR or
// --flag.
func (p Password) alternatives() string {
	var alts []string
	if p.Env != "" {
		alts = append(alts, "$"+p.Env)
	}
	if p.FileName != "" {
		alts = append(alts, string(p.FileName))
	}
	return strings.Join(alts, " or ")
}
