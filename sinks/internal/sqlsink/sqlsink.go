// Package sqlsink is what the SQL sinks, postgres and clickhouse, share:
// the parts of their URLs that read alike (URL: group=, retry_timeout=,
// table names, booleans), the shape of their parameters' documentation
// (Param), the retry of their setup while the server cannot be reached
// (Setup), and how the refusals of several tables read as one error
// (JoinRefusals). Each sink keeps its own URL's scheme and parameters and
// its rules of tables and modes.
package sqlsink

import "time"

// Retry bounds of both sinks.
const (
	// DefaultRetryTimeout is how long a sink keeps retrying a write, or
	// its setup at start, while the server cannot be reached
	// (retry_timeout=).
	DefaultRetryTimeout = 30 * time.Second
	// MaxRetryTimeout bounds retry_timeout: a write blocked longer than
	// this is better failed and seen.
	MaxRetryTimeout = 10 * time.Minute
)
