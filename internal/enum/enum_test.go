package enum

import (
	"encoding/json"
	"strings"
	"testing"
)

type color = Of[colors]

type colors struct{}

func (colors) Enum() (string, []string) { return "color", []string{"red", "dark-blue"} }

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
		got, err := Parse[colors](tc.in)
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
	if err := color(2).Check(); err == nil {
		t.Error("Check(2) passed")
	}
	if got := color(1).Type(); got != "red|dark-blue" {
		t.Errorf("Type = %q", got)
	}
	if err := c.Set(" dark-blue "); err != nil || c != 1 {
		t.Errorf("Set = %v, %v", c, err)
	}
}
