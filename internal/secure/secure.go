// Package secure gives the TLS settings, the password sources and the
// logins of every client offsetkeeper makes one shape: etcd, Kafka and the
// Schema Registry through the command's flags, ClickHouse through its sink
// URL. Each site maps its own flag or URL-parameter names onto TLS,
// Password and Login, and their errors name those settings and the files
// they point at, never a password. What really differs between the sites
// stays there: whether a CA file turns TLS on or needs it on, what else a
// login needs, and PostgreSQL's sslmode, which pgx reads itself.
package secure

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// Name is what a setting is called where it was given, as messages show
// it: a flag (--kafka-cacert) or a URL parameter, written with its =
// (ca_file=).
type Name string

// is shows the setting with its value: --kafka-cacert "ca.pem", or
// ca_file="ca.pem" for a URL parameter.
func (n Name) is(value string) string {
	if strings.HasSuffix(string(n), "=") {
		return fmt.Sprintf("%s%q", n, value)
	}
	return fmt.Sprintf("%s %q", n, value)
}

// fileError is err of reading file, which the setting n named: the
// setting and the file, then the cause without the file again (the
// *fs.PathError's own message repeats it).
func fileError(n Name, file string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s: %w", n.is(file), err)
}
