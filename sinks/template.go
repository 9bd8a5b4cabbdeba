package sinks

import (
	"fmt"
	"strings"
)

// Template is a table name that names one table per topic: table={topic}
// or analytics.{topic}_raw in a sink URL. {topic} stands for the topic's
// name made a table name by TableName; the text around it is kept as
// written. A template without {topic} is a plain table name.
type Template struct {
	prefix, suffix string
	routed         bool
}

// Placeholder is what a template's topic is written as.
const Placeholder = "{topic}"

// ParseTemplate reads a table template. A brace other than {topic}'s is
// refused, naming the one placeholder there is.
func ParseTemplate(s string) (Template, error) {
	before, after, found := strings.Cut(s, Placeholder)
	if !found {
		if strings.ContainsAny(s, "{}") {
			return Template{}, fmt.Errorf("table %q: a brace outside {topic}; the one placeholder is {topic} (the topic's name, lower case, every character but a-z, 0-9 and _ made _)", s)
		}
		return Template{prefix: s}, nil
	}
	if strings.ContainsAny(before, "{}") || strings.ContainsAny(after, "{}") {
		return Template{}, fmt.Errorf("table %q: want {topic} once and no other brace (the one placeholder is {topic})", s)
	}
	return Template{prefix: before, suffix: after, routed: true}, nil
}

// Routed reports whether the template names a table per topic.
func (t Template) Routed() bool { return t.routed }

// Table is the table of topic's records.
func (t Template) Table(topic string) string {
	if !t.routed {
		return t.prefix
	}
	return t.prefix + TableName(topic) + t.suffix
}

// String is the template as written.
func (t Template) String() string {
	if !t.routed {
		return t.prefix
	}
	return t.prefix + Placeholder + t.suffix
}

// TableName makes a topic's name a table name that every SQL store takes
// unquoted: lower case, and every character but a-z, 0-9 and _ (Kafka's
// '.' and '-') made '_'; a name that would start with a digit is given a
// leading '_'. Orders.EU-1 is orders_eu_1. Two topics can map to one name
// (orders.eu and orders_eu): a Router refuses the second.
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
