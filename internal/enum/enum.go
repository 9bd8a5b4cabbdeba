// Package enum gives the small enumerations of the configuration (commit
// mode, start policy, isolation level, output format, ...) one shape: a
// name per value, parsed with surrounding space trimmed and case folded,
// printed and marshalled as that name, and refused with a message that
// names the kind, the value and every accepted name.
package enum

import (
	"fmt"
	"strings"
)

// Names holds the names of an enumeration's values, the value i named
// names[i].
type Names[T ~int | ~int8] struct {
	kind  string
	names []string
}

// New returns the names of kind ("commit mode"), in value order.
func New[T ~int | ~int8](kind string, names ...string) Names[T] {
	return Names[T]{kind: kind, names: names}
}

// String returns v's name, or kind(v) for a value without one.
func (n Names[T]) String(v T) string {
	if v >= 0 && int(v) < len(n.names) {
		return n.names[v]
	}
	return fmt.Sprintf("%s(%d)", n.kind, int(v))
}

// Parse returns the value named s (space trimmed, case folded).
func (n Names[T]) Parse(s string) (T, error) {
	t := strings.TrimSpace(s)
	for i, name := range n.names {
		if strings.EqualFold(t, name) {
			return T(i), nil
		}
	}
	return 0, fmt.Errorf("%s %q: want one of %s", n.kind, s, n.List())
}

// Check refuses a value without a name (a Config field set out of range).
func (n Names[T]) Check(v T) error {
	if v < 0 || int(v) >= len(n.names) {
		return fmt.Errorf("%s %d: want one of %s", n.kind, int(v), n.List())
	}
	return nil
}

// List is the accepted names, comma-separated, for messages and help.
func (n Names[T]) List() string { return strings.Join(n.names, ", ") }

// Marshal implements encoding.TextMarshaler for v.
func (n Names[T]) Marshal(v T) ([]byte, error) {
	if err := n.Check(v); err != nil {
		return nil, err
	}
	return []byte(n.names[v]), nil
}

// Unmarshal implements encoding.TextUnmarshaler into v with Parse.
func (n Names[T]) Unmarshal(v *T, b []byte) error {
	p, err := n.Parse(string(b))
	if err != nil {
		return err
	}
	*v = p
	return nil
}
