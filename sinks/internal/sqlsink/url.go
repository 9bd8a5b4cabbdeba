package sqlsink

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// URL is what one sink's URL shares with the other's: every error of its
// methods wraps Err, the sink's ErrURL.
type URL struct {
	// Err is the sink's ErrURL.
	Err error
	// GroupIs says what the group is to the sink, for the message of a
	// missing one: "the offsets table's key".
	GroupIs string
	// Password names the ways to give a password other than in the URL,
	// for the message of a URL whose user-info does not parse.
	Password string
}

// escapes says how to write, in a URL's user-info, the characters that
// end it or are not allowed there.
const escapes = "@ as %40, # as %23, / as %2F, ? as %3F, : as %3A, % as %25"

// Wrap returns err, if any, wrapped in u.Err.
func (u URL) Wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", u.Err, err)
}

// Parse parses a sink URL. Its error is not url.Error's message, which
// quotes the URL, password and all.
func (u URL) Parse(raw string) (*url.URL, error) {
	parsed, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if strings.HasPrefix(err.Error(), "invalid port") {
			// It quotes what follows the colon: a password's start.
			err = errors.New("invalid port after the host")
		}
		if strings.Contains(raw, "@") || strings.Contains(raw, "#") {
			// A password with @, #, / or ? that is not percent-encoded
			// splits the URL where the user did not mean it to.
			return nil, fmt.Errorf("%w: %w: a user or password holding @ # / ? : or %% must be percent-encoded (%s), "+
				"or give the password in %s", u.Err, err, escapes, u.Password)
		}
		return nil, u.Wrap(err)
	}
	if parsed.Fragment != "" || strings.Contains(raw, "#") {
		// Everything after # is dropped: a password's end, the host, the
		// parameters; the sink would connect elsewhere, or write to its
		// default table.
		return nil, fmt.Errorf("%w: the URL holds '#', which starts a fragment: everything after it would be dropped "+
			"(the rest of a password, the host, table= and the other parameters); percent-encode it as %%23 "+
			"(and the user-info's other special characters: %s), or give the password in %s", u.Err, escapes, u.Password)
	}
	return parsed, nil
}

// RequireGroup refuses an empty group.
func (u URL) RequireGroup(group string) error {
	if group == "" {
		return fmt.Errorf("%w: group= is required (the offsetkeeper group, %s)", u.Err, u.GroupIs)
	}
	return nil
}

// Group is the group a sink is opened for: the URL's group= (fromURL) or
// the one given with the sink's WithGroup (given), which must then be the
// same: two names for one thing is a mistake.
func (u URL) Group(fromURL, given string) (string, error) {
	switch {
	case given != "" && fromURL != "" && given != fromURL:
		return "", fmt.Errorf("%w: group=%q but the sink is opened for group %q", u.Err, fromURL, given)
	case given != "":
		return given, nil
	}
	return fromURL, u.RequireGroup(fromURL)
}

// RetryTimeout parses retry_timeout= (key): a duration from 0 (no retry)
// to MaxRetryTimeout.
func (u URL) RetryTimeout(key, val string) (time.Duration, error) {
	d, err := time.ParseDuration(val)
	if err != nil || d < 0 || d > MaxRetryTimeout {
		return 0, fmt.Errorf("%w: %s=%q: want a duration from 0 (no retry) to %s", u.Err, key, val, MaxRetryTimeout)
	}
	return d, nil
}

// Bool parses a boolean parameter: true or false (or 1 or 0), space
// trimmed, case folded.
func (u URL) Bool(key, val string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(val)) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("%w: %s=%q: want true or false", u.Err, key, val)
}

// Table splits a table parameter (key) into its one or two names, as
// written, each 1 to maxLen bytes without NUL; form is how the message
// says what is accepted ("table or schema.table"). A name with a dot
// cannot be given.
func (u URL) Table(key, val, form string, maxLen int) ([]string, error) {
	parts := strings.Split(val, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("%w: %s=%q: want %s", u.Err, key, val, form)
	}
	for _, p := range parts {
		if p == "" || len(p) > maxLen || strings.ContainsRune(p, 0) {
			return nil, fmt.Errorf("%w: %s=%q: want %s, each name 1 to %d bytes", u.Err, key, val, form, maxLen)
		}
	}
	return parts, nil
}

// Enum sets v, an enumeration (internal/enum), from the parameter key's
// value, or refuses it naming every accepted name.
func Enum(u URL, v interface {
	Set(string) error
	Type() string
}, key, val string) error {
	if v.Set(val) != nil {
		return u.Wrap(fmt.Errorf("%s=%q: want one of %s", key, val, strings.ReplaceAll(v.Type(), "|", ", ")))
	}
	return nil
}
