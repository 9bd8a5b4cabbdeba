// Package enum gives the small enumerations of the configuration (commit
// mode, start policy, isolation level, output format, ...) one shape: a
// name per value, parsed with surrounding space trimmed and case folded,
// printed and marshalled as that name, usable as a command-line flag, and
// refused with a message that names the kind, the value and every accepted
// name.
//
// An enumeration is declared by a tag, an empty struct whose Enum method
// gives the kind and the names in value order, and an alias of Of:
//
//	type Mode = enum.Of[modes]
//
//	type modes struct{}
//
//	func (modes) Enum() (string, []string) { return "mode", []string{"raw", "columns"} }
//
//	const (
//		Raw Mode = iota
//		Columns
//	)
//
// Of's methods do the rest, so no enumeration writes its own String,
// MarshalText or UnmarshalText.
package enum

import (
	"fmt"
	"strings"
)

// Tag names the values of one enumeration: kind is what a message calls
// it ("commit mode"), names[i] the name of value i.
type Tag interface {
	Enum() (kind string, names []string)
}

// Of is a value of the enumeration T tags. Its zero value is the first
// name.
type Of[T Tag] int

func tag[T Tag]() (string, []string) {
	var t T
	return t.Enum()
}

// String returns v's name, or kind(v) for a value without one.
func (v Of[T]) String() string {
	kind, names := tag[T]()
	if v >= 0 && int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, int(v))
}

// Check refuses a value without a name (a Config field set out of range).
func (v Of[T]) Check() error {
	kind, names := tag[T]()
	if v < 0 || int(v) >= len(names) {
		return fmt.Errorf("%s %d: want one of %s", kind, int(v), List[T]())
	}
	return nil
}

// MarshalText implements encoding.TextMarshaler with v's name.
func (v Of[T]) MarshalText() ([]byte, error) {
	if err := v.Check(); err != nil {
		return nil, err
	}
	return []byte(v.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with Parse.
func (v *Of[T]) UnmarshalText(b []byte) error { return v.Set(string(b)) }

// Set implements pflag.Value with Parse, so a value is its own flag.
func (v *Of[T]) Set(s string) error {
	p, err := Parse[T](s)
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// Type implements pflag.Value: the names, as help shows them (table|json).
func (v Of[T]) Type() string {
	_, names := tag[T]()
	return strings.Join(names, "|")
}

// Parse returns the value named s (space trimmed, case folded).
func Parse[T Tag](s string) (Of[T], error) {
	kind, names := tag[T]()
	t := strings.TrimSpace(s)
	for i, name := range names {
		if strings.EqualFold(t, name) {
			return Of[T](i), nil
		}
	}
	return 0, fmt.Errorf("%s %q: want one of %s", kind, s, List[T]())
}

// List is the accepted names, comma-separated, for messages and help.
func List[T Tag]() string { return strings.Join(Names[T](), ", ") }

// Names returns the accepted names in value order.
func Names[T Tag]() []string {
	_, names := tag[T]()
	return names
}

// The methods of an enumeration's own named type delegate to these with
// its tag, so that its documentation shows them (an alias of Of shows
// none):
//
//	type Mode int
//
//	func (m Mode) String() string                { return enum.Name[modes](int(m)) }
//	func (m Mode) Check() error                  { return enum.Valid[modes](int(m)) }
//	func (m Mode) MarshalText() ([]byte, error)  { return enum.Text[modes](int(m)) }
//	func (m *Mode) UnmarshalText(b []byte) error { return enum.SetInt[modes]((*int)(m), string(b)) }
//	func (m *Mode) Set(s string) error           { return enum.SetInt[modes]((*int)(m), s) }
//	func (Mode) Type() string                    { return enum.Type[modes]() }

// Name is v's name (Of.String).
func Name[T Tag](v int) string { return Of[T](v).String() }

// Valid refuses a value without a name (Of.Check).
func Valid[T Tag](v int) error { return Of[T](v).Check() }

// Text is v's name as text (Of.MarshalText).
func Text[T Tag](v int) ([]byte, error) { return Of[T](v).MarshalText() }

// SetInt sets *p to the value named s (Parse).
func SetInt[T Tag](p *int, s string) error {
	v, err := Parse[T](s)
	if err != nil {
		return err
	}
	*p = int(v)
	return nil
}

// Type is the names, as help shows them (Of.Type).
func Type[T Tag]() string { return Of[T](0).Type() }
