package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode"
)

// What the client asks for and how much of an answer it reads.
const (
	mediaType    = "application/vnd.schemaregistry.v1+json"
	userAgent    = "offsetkeeper"
	maxBodyBytes = 16 << 20 // a schema's text and references
	maxErrBytes  = 4 << 10  // what an error shows of a body
)

// The registry's error codes that mean what was asked for does not exist
// (Confluent's: subject, version, schema not found). A 404 with another
// code, or none, is not one of them: the generic 404 of a path that is no
// route of the registry's, as when the URL has a wrong prefix, must not
// pass for unknown schemas.
var notFoundCodes = map[int]bool{40401: true, 40402: true, 40403: true}

// StatusError is an answer of the registry other than the one asked for.
// It wraps ErrNotFound when the registry said that what was asked for
// does not exist.
type StatusError struct {
	URL        string // of the request; never with credentials
	StatusCode int
	Status     string // "404 Not Found"
	ErrorCode  int    // the registry's error_code, 0 if its answer had none
	Message    string // the registry's message, else the start of the body
}

func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "get %s: %s", e.URL, e.Status)
	if e.ErrorCode != 0 {
		fmt.Fprintf(&b, " (error code %d)", e.ErrorCode)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.StatusCode == http.StatusNotFound && !e.notFound() {
		b.WriteString(" (not the registry's not-found: is the URL the registry's?)")
	}
	return b.String()
}

// Unwrap is ErrNotFound for the registry's not-found, else nil.
func (e *StatusError) Unwrap() error {
	if e.notFound() {
		return ErrNotFound
	}
	return nil
}

func (e *StatusError) notFound() bool {
	return e.StatusCode == http.StatusNotFound && notFoundCodes[e.ErrorCode]
}

// get sends GET path to each URL in turn, from the one that last
// answered, until one answers; it returns the body of a 2xx. An answer
// that is final (a 4xx: not found, credentials refused, ...) is returned
// at once; no answer, or a 5xx, tries the next URL. When none answers for
// good, the error holds each URL's. It returns the URL of the last
// request too, for errors.
func (c *Client) get(ctx context.Context, path string) ([]byte, string, error) {
	first := int(c.next.Load())
	var errs error
	u := ""
	for i := range c.bases {
		at := (first + i) % len(c.bases)
		u = c.bases[at] + path
		body, final, err := c.getFrom(ctx, u)
		if final {
			c.next.Store(int32(at))
		}
		if err == nil || final || ctx.Err() != nil {
			// The errors of URLs before a final answer do not matter.
			return body, u, err
		}
		if errs == nil {
			errs = err
		} else {
			errs = fmt.Errorf("%w; %w", errs, err)
		}
	}
	return nil, u, errs
}

// getFrom is one request to one URL. final tells whether the registry
// answered for good: a 2xx or a 4xx.
func (c *Client) getFrom(ctx context.Context, u string) (body []byte, final bool, err error) {
	attempt, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(attempt, http.MethodGet, u, nil)
	if err != nil {
		return nil, false, fmt.Errorf("get %s: %w", u, err)
	}
	req.Header.Set("Accept", mediaType)
	req.Header.Set("User-Agent", userAgent)
	if c.username != "" {
		req.SetBasicAuth(c.username, c.password)
	}
	c.nRequests.Add(1)
	resp, err := c.hc.Do(req)
	if err != nil {
		// url.Error repeats the URL, quoted: say it once.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil {
			return nil, false, fmt.Errorf("get %s: %w", u, ctx.Err())
		}
		c.nErrors.Add(1)
		if attempt.Err() != nil {
			return nil, false, fmt.Errorf("get %s: no answer within %s: %w", u, c.timeout, err)
		}
		return nil, false, fmt.Errorf("get %s: %w", u, err)
	}
	defer resp.Body.Close()
	limit := int64(maxErrBytes)
	if resp.StatusCode/100 == 2 {
		limit = maxBodyBytes + 1
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, limit))
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return nil, false, fmt.Errorf("get %s: read the answer: %w", u, ctx.Err())
		}
		c.nErrors.Add(1)
		return nil, false, fmt.Errorf("get %s: read the answer: %w", u, err)
	case resp.StatusCode/100 == 2 && len(body) > maxBodyBytes:
		c.nErrors.Add(1)
		return nil, true, fmt.Errorf("get %s: the answer is over %d MiB", u, maxBodyBytes>>20)
	case resp.StatusCode/100 == 2:
		return body, true, nil
	}
	se := &StatusError{URL: u, StatusCode: resp.StatusCode, Status: resp.Status}
	var answer struct {
		ErrorCode int    `json:"error_code"`
		Message   string `json:"message"`
	}
	if json.Unmarshal(body, &answer) == nil {
		se.ErrorCode, se.Message = answer.ErrorCode, answer.Message
	} else {
		se.Message = excerpt(body)
	}
	if se.notFound() {
		c.nNotFound.Add(1)
	} else {
		c.nErrors.Add(1)
	}
	return nil, resp.StatusCode < 500, se
}

// excerpt is the start of a body that is not the registry's JSON, on one
// line.
func excerpt(body []byte) string {
	s := strings.Join(strings.FieldsFunc(string(body), unicode.IsSpace), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
