package secure

import (
	"fmt"
	"io"
)

// Redacted is how a Secret prints.
const Redacted = "xxxxx"

// Secret is a password. It prints as Redacted with every fmt verb and as
// text (JSON, zap); Reveal gives the value to the client that needs it.
// The value is held in a closure, which fmt prints as an address and
// encoding/json refuses, so that printing a struct that holds a Secret,
// even through reflection, never shows it. The zero value is no password.
type Secret struct{ get func() string }

// NewSecret holds s.
func NewSecret(s string) Secret { return Secret{get: func() string { return s }} }

// Reveal returns the password, "" for the zero Secret.
func (s Secret) Reveal() string {
	if s.get == nil {
		return ""
	}
	return s.get()
}

// String, Format and MarshalText print Redacted.
func (s Secret) String() string               { return Redacted }
func (s Secret) Format(f fmt.State, _ rune)   { _, _ = io.WriteString(f, Redacted) }
func (s Secret) MarshalText() ([]byte, error) { return []byte(Redacted), nil }
