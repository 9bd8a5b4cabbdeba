// Package redact hides the secrets of URLs before they reach a log, an
// error or a member key: user info, and query parameters named like
// secrets.
package redact

import (
	"net/url"
	"strings"
)

// URL hides the secrets of a URL, for logs and errors: its user
// info, and the values of query parameters that name a password, secret,
// token or key (postgres://u:pw@h/db?password=pw). A host:port with user
// info but no scheme loses the user info; anything else that does not parse
// as a URL with a scheme is returned as is.
func URL(raw string) string {
	if !strings.Contains(raw, "://") {
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			return "xxxxx" + raw[i:]
		}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return raw
	}
	if u.User != nil {
		u.User = url.User("xxxxx")
	}
	Query(u)
	return u.String()
}

// Query masks the values of u's query parameters that name a
// password, secret, token or key; a query without any is left as written.
func Query(u *url.URL) {
	q := u.Query()
	changed := false
	for k := range q {
		lk := strings.ToLower(k)
		if strings.Contains(lk, "pass") || strings.Contains(lk, "secret") || strings.Contains(lk, "token") || strings.Contains(lk, "key") {
			q.Set(k, "xxxxx")
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
}

// URLs is URL of each.
func URLs(raws []string) []string {
	out := make([]string, len(raws))
	for i, r := range raws {
		out[i] = URL(r)
	}
	return out
}

// Sink is a sink URL fit for a message: a postgres:// or
// clickhouse:// URL may hold a password, even one that does not parse. The
// password is masked, and parameters named like secrets; the user name is
// shown, since which role connects is what a reader of the message needs.
func Sink(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || strings.Contains(raw, "#") {
		// Unparsed, or parsed at a '#' of a password: mask up to the last
		// '@', which ends the user-info as the writer meant it.
		i, j := strings.Index(raw, "://"), strings.LastIndex(raw, "@")
		if i < 0 || j < i {
			return URL(raw)
		}
		if user, _, hasPassword := strings.Cut(raw[i+3:j], ":"); hasPassword {
			return raw[:i+3] + user + ":xxxxx" + raw[j:]
		}
		return raw
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	Query(u)
	return u.String()
}
