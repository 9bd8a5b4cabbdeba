package postgres

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/enum"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// Defaults of the sink options. Every one can be changed by a query
// parameter of the URL (see the package documentation).
const (
	// DefaultTable is the table rows go to (table=). In raw mode it is
	// created if missing; in columns mode it must exist.
	DefaultTable = "offsetkeeper_records"
	// DefaultOffsetsTable holds each partition's next offset, epoch and
	// generation (offsets_table=). Created if missing.
	DefaultOffsetsTable = "offsetkeeper_offsets"
	// DefaultDeadLetterTable holds the records the table refused
	// (dead_letter_table=). Created if missing.
	DefaultDeadLetterTable = "offsetkeeper_dead_letters"
	// DefaultConnectTimeout bounds one connection attempt when the URL
	// has no connect_timeout (pgx's default is none), so that a server
	// that drops packets costs one attempt, not the whole wait.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultRetryTimeout is how long a Write keeps retrying after losing
	// its connection (retry_timeout=). Longer rides out a slower restart
	// of PostgreSQL; shorter hands the failure to the replica sooner, which
	// rolls the block back and writes it again after its own backoff.
	DefaultRetryTimeout = sqlsink.DefaultRetryTimeout
	// MaxRetryTimeout bounds retry_timeout: a write blocked longer than
	// this is better failed and seen.
	MaxRetryTimeout = sqlsink.MaxRetryTimeout
)

// Mode is how records become rows.
type Mode int

func (m Mode) String() string                { return enum.Name[modes](int(m)) }
func (m Mode) Check() error                  { return enum.Valid[modes](int(m)) }
func (m Mode) MarshalText() ([]byte, error)  { return enum.Text[modes](int(m)) }
func (m *Mode) UnmarshalText(b []byte) error { return enum.SetInt[modes]((*int)(m), string(b)) }
func (m *Mode) Set(s string) error           { return enum.SetInt[modes]((*int)(m), s) }
func (Mode) Type() string                    { return enum.Type[modes]() }

const (
	// Raw stores each record whole in a table of the sink's own layout,
	// keyed by (topic, partition, offset). The default.
	Raw Mode = iota
	// Columns fills the columns of an existing table from the fields of
	// the record's JSON value.
	Columns
	// Upsert keeps an existing table with a primary key (or the unique
	// constraint named by conflict=) equal to the records' last value per
	// key: a record's row is found by its key and inserted or updated, a
	// tombstone deletes it.
	Upsert
)

type modes struct{}

func (modes) Enum() (string, []string) { return "mode", []string{"raw", "columns", "upsert"} }

// KeyFrom is where upsert mode finds a record's key columns (key_from=).
type KeyFrom int

func (k KeyFrom) String() string                { return enum.Name[keySources](int(k)) }
func (k KeyFrom) Check() error                  { return enum.Valid[keySources](int(k)) }
func (k KeyFrom) MarshalText() ([]byte, error)  { return enum.Text[keySources](int(k)) }
func (k *KeyFrom) UnmarshalText(b []byte) error { return enum.SetInt[keySources]((*int)(k), string(b)) }
func (k *KeyFrom) Set(s string) error           { return enum.SetInt[keySources]((*int)(k), s) }
func (KeyFrom) Type() string                    { return enum.Type[keySources]() }

const (
	// FromKey takes the key columns from the Kafka record key: a JSON
	// object gives them by name, anything else is the one key column's
	// value. The default. A tombstone deletes the row of its key.
	FromKey KeyFrom = iota
	// FromValue takes the key columns from the fields of the value (for
	// envelope=debezium: of after, or of before for a delete). A tombstone
	// has no value to take them from, so it cannot delete: it is ignored
	// and counted (IgnoredTombstones).
	FromValue
)

type keySources struct{}

func (keySources) Enum() (string, []string) { return "key_from", []string{"key", "value"} }

// Envelope is what wraps the row in a record's value (envelope=).
type Envelope int

func (e Envelope) String() string                { return enum.Name[envelopes](int(e)) }
func (e Envelope) Check() error                  { return enum.Valid[envelopes](int(e)) }
func (e Envelope) MarshalText() ([]byte, error)  { return enum.Text[envelopes](int(e)) }
func (e *Envelope) UnmarshalText(b []byte) error { return enum.SetInt[envelopes]((*int)(e), string(b)) }
func (e *Envelope) Set(s string) error           { return enum.SetInt[envelopes]((*int)(e), s) }
func (Envelope) Type() string                    { return enum.Type[envelopes]() }

const (
	// NoEnvelope: the value is the row, a JSON object. The default.
	NoEnvelope Envelope = iota
	// Debezium: the value is a Debezium change event, with or without the
	// JsonConverter's schema/payload wrapper: op c, r and u upsert after,
	// op d deletes by before (or by the key). Upsert mode only.
	Debezium
)

type envelopes struct{}

func (envelopes) Enum() (string, []string) { return "envelope", []string{"none", "debezium"} }

// Evolve is what columns and upsert modes do with a field of a decoded
// record's schema that the table has no column for (evolve=).
type Evolve int

func (e Evolve) String() string                { return enum.Name[evolveRules](int(e)) }
func (e Evolve) Check() error                  { return enum.Valid[evolveRules](int(e)) }
func (e Evolve) MarshalText() ([]byte, error)  { return enum.Text[evolveRules](int(e)) }
func (e *Evolve) UnmarshalText(b []byte) error { return enum.SetInt[evolveRules]((*int)(e), string(b)) }
func (e *Evolve) Set(s string) error           { return enum.SetInt[evolveRules]((*int)(e), s) }
func (Evolve) Type() string                    { return enum.Type[evolveRules]() }

const (
	// NoEvolve leaves the table as it is: such a field is ignored, counted
	// (IgnoredFields) and logged once per schema. The default: the table's
	// shape is its owner's.
	NoEvolve Evolve = iota
	// AddColumns adds a nullable column of the field's type, in the
	// transaction of the first block that brings the field, so that block
	// fills it. It needs the right to ALTER the table, and holds the
	// table's exclusive lock until that transaction commits.
	AddColumns
)

type evolveRules struct{}

func (evolveRules) Enum() (string, []string) { return "evolve", []string{"none", "add-columns"} }

// Sink options carried as query parameters of the URL, each documented in
// params (params.go); they are removed before the rest of the URL goes to
// pgx.
const (
	paramGroup        = "group"
	paramTable        = "table"
	paramMode         = "mode"
	paramOffsets      = "offsets_table"
	paramDeadLetters  = "dead_letter_table"
	paramRetryTimeout = "retry_timeout"

	// Columns and upsert modes'.
	paramEvolve = "evolve"

	// Upsert mode's.
	paramConflict = "conflict"
	paramKeyFrom  = "key_from"
	paramDeletes  = "deletes"
	paramEnvelope = "envelope"
)

// upsertParams are the parameters only upsert mode takes.
var upsertParams = []string{paramConflict, paramKeyFrom, paramDeletes, paramEnvelope}

// ErrURL is wrapped by every error about the URL or an option.
var ErrURL = errors.New("bad postgres sink URL")

// sinkURL is what this sink's URL shares with clickhouse's; its errors
// wrap ErrURL.
var sinkURL = sqlsink.URL{Err: ErrURL, GroupIs: "the offsets table's key",
	Password: "$PGPASSWORD, a password file (passfile= or ~/.pgpass) or a service file (service=)"}

// Option changes the configuration New builds from the URL.
type Option func(*config)

// WithGroup sets the offsetkeeper group the offsets table is keyed by, for
// callers that know it already (a program that runs the replica itself). A
// group= in the URL must then be the same: two names for one thing is a
// mistake.
func WithGroup(group string) Option { return func(c *config) { c.optGroup = group } }

// WithLogger makes the sink log retries and dead letters (default: no logs).
func WithLogger(log *zap.Logger) Option { return func(c *config) { c.log = log } }

// withPool makes the sink use pool, which it leaves open at Close: the
// tables of a table template share their router's.
func withPool(pool *pgxpool.Pool) Option { return func(c *config) { c.pool, c.route = pool, true } }

// config is the parsed URL and options.
type config struct {
	connString   string // the URL without the sink's own parameters
	group        string
	optGroup     string
	table        pgx.Identifier
	mode         Mode
	offsets      pgx.Identifier
	deadLetters  pgx.Identifier
	retryTimeout time.Duration
	log          *zap.Logger
	evolve       Evolve        // columns and upsert modes'
	inferColumns bool          // evolve's, for JSON records without a schema
	pool         *pgxpool.Pool // withPool's: a router's tables share it
	route        bool          // withPool's: one of a router's tables

	// table=, route_field= and default_table= as given: a router's.
	tableRaw, routeField, defaultTable, deadRaw string

	// Upsert mode's; given records which of them the URL set.
	conflict string // the unique constraint; "" for the primary key
	keyFrom  KeyFrom
	deletes  bool // tombstones (and Debezium's deletes) delete
	envelope Envelope
	given    map[string]bool
}

// ValidateURL checks a sink URL without connecting: the scheme, the sink
// options and the connection parameters as pgx reads them. The command line
// calls it so that a bad --sink is a usage error before anything starts.
// A group is required unless it will be given with WithGroup (needGroup
// false).
func ValidateURL(raw string, needGroup bool) error {
	c, err := parseURL(raw)
	if err != nil {
		return err
	}
	if needGroup {
		if err := sinkURL.RequireGroup(c.group); err != nil {
			return err
		}
	}
	_, err = pgxpool.ParseConfig(c.connString)
	return sinkURL.Wrap(err)
}

// parseURL splits the URL into the sink's options and the connection
// string, and checks the options.
func parseURL(raw string) (config, error) {
	c := config{
		table:        pgx.Identifier{DefaultTable},
		offsets:      pgx.Identifier{DefaultOffsetsTable},
		deadLetters:  pgx.Identifier{DefaultDeadLetterTable},
		retryTimeout: DefaultRetryTimeout,
	}
	u, err := sinkURL.Parse(raw)
	if err != nil {
		return c, err
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return c, fmt.Errorf("%w: scheme %q: want postgres:// or postgresql://", ErrURL, u.Scheme)
	}
	// The query is split by hand, so that every parameter that is not the
	// sink's reaches pgx exactly as written.
	var keep []string
	seen := map[string]bool{}
	c.given = seen
	if u.RawQuery != "" {
		for _, kv := range strings.Split(u.RawQuery, "&") {
			k, v, _ := strings.Cut(kv, "=")
			key, err := url.QueryUnescape(k)
			if err != nil {
				return c, fmt.Errorf("%w: query parameter %q: %w", ErrURL, k, err)
			}
			if !slices.Contains(sinkParams, key) {
				if !slices.Contains(connParams, key) {
					return c, fmt.Errorf("%w: unknown parameter %q: want one of the sink's (%s) or a connection parameter (%s); "+
						"a PostgreSQL setting goes in options=-c NAME=VALUE", ErrURL, key, strings.Join(sinkParams, ", "), strings.Join(connParams, ", "))
				}
				keep = append(keep, kv)
				continue
			}
			if seen[key] {
				return c, fmt.Errorf("%w: %s= given twice", ErrURL, key)
			}
			seen[key] = true
			val, err := url.QueryUnescape(v)
			if err != nil {
				return c, fmt.Errorf("%w: %s=%q: %w", ErrURL, key, v, err)
			}
			if err := c.set(key, val); err != nil {
				return c, err
			}
		}
	}
	u.RawQuery = strings.Join(keep, "&")
	c.connString = u.String()
	if err := c.checkUpsert(); err != nil {
		return c, err
	}
	if err := c.checkEvolve(); err != nil {
		return c, err
	}
	if _, err := sqlsink.ParseRouting(cmp.Or(c.tableRaw, DefaultTable), c.routeField, c.defaultTable, c.deadRaw); err != nil {
		return c, sinkURL.Wrap(err)
	}
	if c.defaultTable != "" {
		if _, err := parseTable(sqlsink.ParamDefaultTable, strings.ReplaceAll(c.defaultTable, sinks.Placeholder, "topic")); err != nil {
			return c, err
		}
	}
	return c, nil
}

// checkEvolve refuses evolve= where the table is not the user's (raw
// mode), and add-columns where the schema's fields are not the row's
// (envelope=debezium: they are the event's, the row is inside after).
func (c *config) checkEvolve() error {
	switch {
	case c.mode == Raw && c.given[paramEvolve]:
		return fmt.Errorf("%w: %s= is for mode=columns or mode=upsert, not mode=%s (the raw table is the sink's own)", ErrURL, paramEvolve, c.mode)
	case c.evolve == AddColumns && c.envelope == Debezium:
		return fmt.Errorf("%w: %s=%s with %s=%s: the schema's fields are the event's (before, after, op...), not the row's; want %s=none",
			ErrURL, paramEvolve, c.evolve, paramEnvelope, c.envelope, paramEvolve)
	case c.inferColumns && c.evolve != AddColumns:
		return fmt.Errorf("%w: %s=true adds columns: it needs %s=%s", ErrURL, sqlsink.ParamInferColumns, paramEvolve, AddColumns)
	}
	return nil
}

// checkUpsert checks the upsert parameters against the mode and each
// other, and sets deletes' default: true, unless key_from=value without
// envelope=debezium leaves nothing to delete by.
func (c *config) checkUpsert() error {
	if c.mode != Upsert {
		for _, p := range upsertParams {
			if c.given[p] {
				return fmt.Errorf("%w: %s= is for mode=upsert, not mode=%s", ErrURL, p, c.mode)
			}
		}
		return nil
	}
	canDelete := c.keyFrom == FromKey || c.envelope == Debezium // by the key, or by Debezium's before
	if !c.given[paramDeletes] {
		c.deletes = canDelete
		return nil
	}
	if c.deletes && !canDelete {
		return fmt.Errorf("%w: %s=true with %s=value: a tombstone has no value to take the key from; "+
			"want %s=key to delete by the record key, or %s=false (tombstones are then ignored and counted)",
			ErrURL, paramDeletes, paramKeyFrom, paramKeyFrom, paramDeletes)
	}
	return nil
}

func (c *config) set(key, val string) error {
	var err error
	switch key {
	case paramGroup:
		if val == "" {
			return fmt.Errorf("%w: %s= is empty", ErrURL, key)
		}
		c.group = val
	case paramTable:
		var t sinks.Template
		if t, err = sinks.ParseTemplate(val); err != nil {
			return sinkURL.Wrap(err)
		}
		c.tableRaw = val
		c.table, err = parseTable(key, t.Expand("topic", "route")) // a template's: checked as one of its tables
	case sqlsink.ParamRouteField:
		c.routeField = val
	case sqlsink.ParamInferColumns:
		c.inferColumns, err = sinkURL.Bool(key, val)
	case sqlsink.ParamDefaultTable:
		c.defaultTable = val
	case paramOffsets:
		c.offsets, err = parseTable(key, val)
	case paramDeadLetters:
		var t sinks.Template
		if t, err = sinks.ParseTemplate(val); err != nil {
			return sinkURL.Wrap(fmt.Errorf("%s: %w", key, err))
		}
		c.deadRaw = val
		c.deadLetters, err = parseTable(key, t.Expand("topic", "route"))
	case paramMode:
		err = sqlsink.Enum(sinkURL, &c.mode, key, val)
	case paramEvolve:
		err = sqlsink.Enum(sinkURL, &c.evolve, key, val)
	case paramConflict:
		if val == "" || len(val) > 63 || strings.ContainsRune(val, 0) {
			return fmt.Errorf("%w: %s=%q: want the name of a unique constraint of the table, 1 to 63 bytes", ErrURL, key, val)
		}
		c.conflict = val
	case paramKeyFrom:
		err = sqlsink.Enum(sinkURL, &c.keyFrom, key, val)
	case paramEnvelope:
		err = sqlsink.Enum(sinkURL, &c.envelope, key, val)
	case paramDeletes:
		c.deletes, err = sinkURL.Bool(key, val)
	case paramRetryTimeout:
		c.retryTimeout, err = sinkURL.RetryTimeout(key, val)
	}
	return err
}

// parseTable reads table or schema.table. Names are taken as written
// (case kept) and quoted in SQL, so any name PostgreSQL allows works, but
// a name with a dot cannot be given.
func parseTable(key, val string) (pgx.Identifier, error) {
	parts, err := sinkURL.Table(key, val, "table or schema.table", 63)
	return pgx.Identifier(parts), err
}

// finish applies the options and checks what needs both.
func (c *config) finish(opts []Option) error {
	for _, o := range opts {
		o(c)
	}
	var err error
	if c.group, err = sinkURL.Group(c.group, c.optGroup); err != nil {
		return err
	}
	if c.table.Sanitize() == c.offsets.Sanitize() || c.table.Sanitize() == c.deadLetters.Sanitize() || c.offsets.Sanitize() == c.deadLetters.Sanitize() {
		return fmt.Errorf("%w: %s, %s and %s must be three different tables", ErrURL, paramTable, paramOffsets, paramDeadLetters)
	}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	return nil
}
