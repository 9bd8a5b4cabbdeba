package coordinator

import (
	"fmt"
	"regexp"
)

// legal reports whether s is 1 to max bytes of A-Z a-z 0-9 . _ - (the
// bytes of a legal Kafka topic name). A loop, not a regexp: `{1,249}`
// compiles into a program of 249 copies, a millisecond of every process
// start.
func legal(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// TopicsPattern compiles a pattern of topics (run's --topics-regex),
// anchored at both ends: a topic matches when its whole name does, as
// with Kafka's pattern subscriptions. An empty pattern is nil, matching
// nothing.
func TopicsPattern(pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		return nil, nil
	}
	re, err := regexp.Compile("^(?:" + pattern + ")$")
	if err != nil {
		return nil, fmt.Errorf("topics regex %q: %w (Go's RE2 syntax: https://golang.org/s/re2syntax)", pattern, err)
	}
	return re, nil
}
