package registry

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// DefaultTimeout bounds each request when Config.Timeout is 0.
const DefaultTimeout = 10 * time.Second

// urlForms is what Config.URL accepts, for error messages.
const urlForms = "want http://host:port or https://host:port (a path allowed), or a comma-separated list of them"

// Config is how a Client reaches the registry.
type Config struct {
	// URL is the registry's base URL, http:// or https://, with a path if
	// the registry is served under one. A comma-separated list of URLs (of
	// instances of one registry) is tried in order: a request that gets no
	// answer, or a 5xx, from one goes to the next, and the client keeps to
	// the last one that answered. Credentials go in Username and Password,
	// not in the URL.
	URL string
	// TLS configures https; nil means the system's roots and Go's
	// defaults. Setting it with no https URL is refused as a mistake.
	TLS *tls.Config
	// Username and Password are sent as HTTP basic auth when Username is
	// not "".
	Username, Password string
	// Timeout bounds each request, to one URL; the default is
	// DefaultTimeout. A registry that hangs costs a caller this long per
	// URL before it gets an error: shorter fails faster but may give up on
	// a slow but healthy registry.
	Timeout time.Duration
}

// Validate checks cfg as New would, without making a client.
func (cfg Config) Validate() error {
	_, err := cfg.validate()
	return err
}

// validate checks cfg and returns the base URLs, without trailing slashes.
func (cfg *Config) validate() ([]string, error) {
	if strings.TrimSpace(cfg.URL) == "" {
		return nil, errors.New("registry URL is empty: " + urlForms)
	}
	var bases []string
	https := false
	for _, raw := range strings.Split(cfg.URL, ",") {
		raw = strings.TrimSpace(raw)
		base, err := parseURL(raw)
		if err != nil {
			return nil, err
		}
		https = https || strings.HasPrefix(base, "https://")
		bases = append(bases, base)
	}
	if cfg.TLS != nil && !https {
		return nil, fmt.Errorf("registry TLS configuration given, but no URL of %q is https://", cfg.URL)
	}
	if cfg.Username == "" && cfg.Password != "" {
		return nil, errors.New("registry password given without a username")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("registry timeout %s: want a positive duration, or 0 for the default (%s)", cfg.Timeout, DefaultTimeout)
	}
	return bases, nil
}

// parseURL checks one base URL and returns it without trailing slashes.
// Its errors never show a password.
func parseURL(raw string) (string, error) {
	if raw == "" {
		return "", errors.New("registry URL list has an empty entry: " + urlForms)
	}
	u, err := url.Parse(raw)
	if err != nil {
		if strings.Contains(raw, "@") {
			return "", errors.New("registry URL (not shown: it may hold credentials) is not a URL: " + urlForms)
		}
		return "", fmt.Errorf("registry URL %q is not a URL: %s", raw, urlForms)
	}
	shown := raw
	if u.User != nil {
		shown = u.Redacted()
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("registry URL %q: scheme %q: %s", shown, u.Scheme, urlForms)
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("registry URL %q has no host: %s", shown, urlForms)
	case u.User != nil:
		return "", fmt.Errorf("registry URL %q holds credentials: set the username and password apart", shown)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", fmt.Errorf("registry URL %q has a query or fragment: %s", shown, urlForms)
	}
	return strings.TrimRight(u.String(), "/"), nil
}
