package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/offsetkeeper/offsetkeeper/internal/backoff"
	"github.com/offsetkeeper/offsetkeeper/internal/secure"
)

// Backoff between attempts of one Write after a lost connection, by
// internal/backoff's policy: from retryFirst, doubling up to retryMax,
// jittered.
const (
	retryFirst = 50 * time.Millisecond
	retryMax   = time.Second
)

// startRetryMax is the longest wait between attempts to reach the server
// at start: a database being failed over takes seconds, and a replica
// waiting for it need not knock every second.
const startRetryMax = 2 * time.Second

// unreachable reports whether New's setup failed for want of a server to
// talk to, which waiting can mend: the connection refused, reset or timed
// out, the name not resolved, the server starting up, shutting down,
// recovering or out of connection slots. A refused login, a database or a
// table that does not exist and TLS that does not verify are not: those
// fail at once.
func unreachable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return serverAway(pe.Code)
	}
	return !secure.HandshakeFailed(err) && (backoff.ConnectionLost(err) ||
		// connect_timeout's, one attempt's (New's own ctx is checked first)
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, pgconn.ErrConnClosed))
}

// loginRefused reports whether the server refused the login: a wrong
// password (28P01), none given where one is asked for, or no pg_hba.conf
// line that lets the role in (28000).
func loginRefused(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "28P01" || pe.Code == "28000"
	}
	return strings.Contains(err.Error(), "password")
}

// serverAway reports whether a server's error code says it cannot serve
// the connection now: a connection exception, the server starting up,
// shutting down or recovering, or out of connection slots.
func serverAway(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), // connection exception
		code == "57P01", // admin_shutdown
		code == "57P02", // crash_shutdown
		code == "57P03", // cannot_connect_now: starting up or recovering
		code == "53300": // too_many_connections
		return true
	}
	return false
}

// transient reports whether err is the connection's fault rather than the
// statement's: the server went away, restarted, is starting up or shutting
// down, or could not be reached; or the transaction lost a serialization
// race or a deadlock. A Write that failed so is retried as a whole.
func transient(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return serverAway(pe.Code) ||
			pe.Code == "40001" || // serialization_failure
			pe.Code == "40P01" // deadlock_detected
	}
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || backoff.ConnectionLost(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err)
}

// recordFault reports whether a statement failed because of the data of
// the rows it inserted, so that splitting the rows finds the culprit: a
// data exception (a value the column's type refuses), an integrity
// violation (NOT NULL, CHECK, UNIQUE, a foreign key), a trigger's RAISE, a
// row over a size limit, or a type mismatch. Anything else (a missing
// table, no permission, a lost connection) is the sink's problem, not the
// record's, and fails the whole write.
func recordFault(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code[:2] {
	case "22", "23", "P0", "54":
		return true
	}
	return pe.Code == "42804" || pe.Code == "42846" // datatype_mismatch, cannot_coerce
}

// columnGone reports whether a statement named a column the table no
// longer has (undefined_column): dropped since the sink read the table.
func columnGone(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42703"
}

// reason is what the dead-letter table says about a refused record.
func reason(err error) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err.Error()
	}
	s := pe.Message
	if pe.ColumnName != "" {
		s += " (column " + pe.ColumnName + ")"
	}
	if pe.Detail != "" {
		s += ": " + pe.Detail
	}
	return fmt.Sprintf("%s (SQLSTATE %s)", s, pe.Code)
}
