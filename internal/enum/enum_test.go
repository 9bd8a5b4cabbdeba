package enum

import (
	"encoding/json"
	"strings"
	"testing"
)

type color int

var colorNames = New[color]("color", "red", "dark-blue")

func (c color) String() string                { return colorNames.String(c) }
func (c color) MarshalText() ([]byte, error)  { return colorNames.Marshal(c) }
func (c *color) UnmarshalText(b []byte) error { return colorNames.Unmarshal(c, b) }

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want color
		err  string
	}{
		{"red", 0, ""},
		{" Dark-Blue\t", 1, ""},
		{"green", 0, `color "green": want one of red, dark-blue`},
		{"", 0, `color "": want one of red, dark-blue`},
	} {
		got, err := colorNames.Parse(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("Parse(%q) error = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestStringAndText(t *testing.T) {
	if s := color(1).String(); s != "dark-blue" {
		t.Errorf("String = %q", s)
	}
	if s := color(7).String(); s != "color(7)" {
		t.Errorf("String of a value without a name = %q", s)
	}
	b, err := json.Marshal(map[string]color{"c": 1})
	if err != nil || string(b) != `{"c":"dark-blue"}` {
		t.Errorf("Marshal = %s, %v", b, err)
	}
	if _, err := json.Marshal(color(-1)); err == nil || !strings.Contains(err.Error(), "color -1") {
		t.Errorf("Marshal of -1: %v", err)
	}
	var c color
	if err := json.Unmarshal([]byte(`"RED"`), &c); err != nil || c != 0 {
		t.Errorf("Unmarshal = %v, %v", c, err)
	}
	if err := c.UnmarshalText([]byte("x")); err == nil {
		t.Error("Unmarshal of an unknown name succeeded")
	}
	if err := colorNames.Check(2); err == nil {
		t.Error("Check(2) passed")
	}
}
