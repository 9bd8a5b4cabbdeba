package sinks

import (
	"fmt"
	"strings"
)

// Template is a table name that names a table per topic, or per value of
// a record's field: table={topic}, analytics.{topic}_raw or
// events_{route} in a sink URL. {topic} stands for the topic's name and
// {route} for the value of the record's route field (route_field=), each
// made a table name by TableName; the text around them is kept as
// written. A template without either is a plain table name.
type Template struct {
	parts []string // literal text and placeholders, in order
}

// The placeholders of a Template.
const (
	Placeholder      = "{topic}"
	RoutePlaceholder = "{route}"
)

// ParseTemplate reads a table template. A brace other than a
// placeholder's, or a placeholder twice, is refused, naming the
// placeholders there are.
func ParseTemplate(s string) (Template, error) {
	var t Template
	rest := s
	seen := map[string]bool{}
	for rest != "" {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			t.parts = append(t.parts, rest)
			break
		}
		if i > 0 {
			t.parts = append(t.parts, rest[:i])
			rest = rest[i:]
		}
		var ph string
		for _, p := range []string{Placeholder, RoutePlaceholder} {
			if strings.HasPrefix(rest, p) {
				ph = p
			}
		}
		if ph == "" || seen[ph] {
			return Template{}, fmt.Errorf("table %q: want {topic} (the topic's name) or {route} (the route field's value), each at most once, "+
				"and no other brace; each is made a table name: lower case, every character but a-z, 0-9 and _ made _", s)
		}
		seen[ph] = true
		t.parts = append(t.parts, ph)
		rest = rest[len(ph):]
	}
	return t, nil
}

// Routed reports whether the template names a table per topic.
func (t Template) Routed() bool { return t.has(Placeholder) }

// ByRoute reports whether the template names a table per route value.
func (t Template) ByRoute() bool { return t.has(RoutePlaceholder) }

func (t Template) has(ph string) bool {
	for _, p := range t.parts {
		if p == ph {
			return true
		}
	}
	return false
}

// Table is the table of topic's records.
func (t Template) Table(topic string) string { return t.Expand(topic, "") }

// Expand is the table of a record of topic whose route field holds route.
func (t Template) Expand(topic, route string) string {
	var b strings.Builder
	for _, p := range t.parts {
		switch p {
		case Placeholder:
			b.WriteString(TableName(topic))
		case RoutePlaceholder:
			b.WriteString(TableName(route))
		default:
			b.WriteString(p)
		}
	}
	return b.String()
}

// String is the template as written.
func (t Template) String() string { return strings.Join(t.parts, "") }

// TableName makes a topic's name, or a route value, a table name that
// every SQL store takes unquoted: lower case, and every character but a-z,
// 0-9 and _ (Kafka's '.' and '-') made '_'; a name that would start with
// a digit is given a leading '_'. Orders.EU-1 is orders_eu_1. Two topics
// can map to one name (orders.eu and orders_eu): a Router refuses the
// second.
func TableName(topic string) string {
	b := make([]byte, 0, len(topic)+1)
	if topic != "" && topic[0] >= '0' && topic[0] <= '9' {
		b = append(b, '_')
	}
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_':
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		default:
			c = '_'
		}
		b = append(b, c)
	}
	return string(b)
}
