package coordinator

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// CheckEndpoint checks an etcd endpoint: host:port, http:// or https://
// host:port, or unix:// or unixs:// and a socket path.
func CheckEndpoint(e string) error {
	scheme, rest, hasScheme := strings.Cut(e, "://")
	if !hasScheme {
		return CheckHostPort(e)
	}
	const want = "want host:port, http://host:port or https://host:port"
	switch scheme {
	case "http", "https":
		u, err := url.Parse(e)
		if err != nil {
			return fmt.Errorf("not a URL; %s", want)
		}
		if err := CheckHostPort(u.Host); err != nil {
			return fmt.Errorf("%v; %s", err, want)
		}
		return nil
	case "unix", "unixs":
		if rest == "" {
			return fmt.Errorf("no socket path; want %s://PATH", scheme)
		}
		return nil
	}
	return fmt.Errorf("unknown scheme %q; %s", scheme, want)
}

// CheckHostPort checks host:port: a host and a port 1 to 65535.
func CheckHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || strings.ContainsAny(host, " \t/") {
		return errors.New("want host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not 1 to 65535", port)
	}
	return nil
}
