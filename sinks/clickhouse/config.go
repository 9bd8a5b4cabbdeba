package clickhouse

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/internal/enum"
	"github.com/offsetkeeper/offsetkeeper/internal/secure"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// Defaults of the sink options. Every one can be changed by a query
// parameter of the URL (see the package documentation).
const (
	// DefaultTable is the table rows go to (table=). In raw mode it is
	// created if missing; in columns mode it must exist.
	DefaultTable = "offsetkeeper_records"
	// DefaultDeadLetterTable holds the records the table refused
	// (dead_letter_table=). Created if missing.
	DefaultDeadLetterTable = "offsetkeeper_dead_letters"
	// DefaultDatabase is the database when the URL's path names none.
	DefaultDatabase = "default"
	// DefaultDialTimeout bounds opening one connection (dial_timeout=).
	DefaultDialTimeout = 10 * time.Second
	// DefaultRetryTimeout is how long a Write keeps retrying an insert that
	// failed on the connection or the server's side (retry_timeout=). Each
	// attempt carries the same deduplication token, so a retry after a lost
	// answer is dropped by ClickHouse if the first went in. Longer rides out
	// a slower restart; shorter hands the failure to the replica sooner,
	// which rolls the block back and writes it again after its own backoff.
	DefaultRetryTimeout = sqlsink.DefaultRetryTimeout
	// MaxRetryTimeout bounds retry_timeout.
	MaxRetryTimeout = sqlsink.MaxRetryTimeout
	// DefaultInsertInterval is the least time between the starts of two
	// rounds' inserts into a table (insert_interval=), unless a round is a
	// backlog's (its blocks, or 32,768 rows or more): about one part a second per table
	// and replica, ClickHouse's own advice, whatever the partition count.
	DefaultInsertInterval = time.Second
	// MaxInsertInterval bounds insert_interval.
	MaxInsertInterval = time.Minute
	// DefaultWindow is the non_replicated_deduplication_window a raw table
	// is created with: the number of most recent inserts into the table
	// (all partitions together) whose tokens ClickHouse remembers.
	DefaultWindow = 10000
	// PasswordEnv is the environment variable the password is read from
	// when neither the URL nor password_file= gives one.
	PasswordEnv = "OFFSETKEEPER_CLICKHOUSE_PASSWORD"
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
	// ordered by (kafka_topic, kafka_partition, kafka_offset). The default.
	Raw Mode = iota
	// Columns fills the columns of an existing table from the fields of
	// the record's JSON value.
	Columns
)

type modes struct{}

func (modes) Enum() (string, []string) { return "mode", []string{"raw", "columns"} }

// Protocol is the interface the sink speaks to ClickHouse (protocol=).
type Protocol int

func (p Protocol) String() string                { return enum.Name[protocols](int(p)) }
func (p Protocol) Check() error                  { return enum.Valid[protocols](int(p)) }
func (p Protocol) MarshalText() ([]byte, error)  { return enum.Text[protocols](int(p)) }
func (p *Protocol) UnmarshalText(b []byte) error { return enum.SetInt[protocols]((*int)(p), string(b)) }
func (p *Protocol) Set(s string) error           { return enum.SetInt[protocols]((*int)(p), s) }
func (Protocol) Type() string                    { return enum.Type[protocols]() }

const (
	// Native is ClickHouse's TCP protocol (port 9000, 9440 with TLS). The
	// default.
	Native Protocol = iota
	// HTTP is the HTTP interface (port 8123, 8443 with TLS).
	HTTP
)

type protocols struct{}

func (protocols) Enum() (string, []string) { return "protocol", []string{"native", "http"} }

// Compression is how native blocks are compressed on the wire
// (compression=).
type Compression int

func (c Compression) String() string               { return enum.Name[compressions](int(c)) }
func (c Compression) Check() error                 { return enum.Valid[compressions](int(c)) }
func (c Compression) MarshalText() ([]byte, error) { return enum.Text[compressions](int(c)) }
func (c *Compression) UnmarshalText(b []byte) error {
	return enum.SetInt[compressions]((*int)(c), string(b))
}
func (c *Compression) Set(s string) error { return enum.SetInt[compressions]((*int)(c), s) }
func (Compression) Type() string          { return enum.Type[compressions]() }

const (
	// LZ4 compresses cheaply. The default.
	LZ4 Compression = iota
	// ZSTD compresses more, for more CPU.
	ZSTD
	// NoCompression sends blocks as they are.
	NoCompression
)

type compressions struct{}

// Evolve is what columns mode does with a decoded record's fields that
// the table has no column for (evolve=).
type Evolve int

func (e Evolve) String() string                { return enum.Name[evolveRules](int(e)) }
func (e Evolve) Check() error                  { return enum.Valid[evolveRules](int(e)) }
func (e Evolve) MarshalText() ([]byte, error)  { return enum.Text[evolveRules](int(e)) }
func (e *Evolve) UnmarshalText(b []byte) error { return enum.SetInt[evolveRules]((*int)(e), string(b)) }
func (e *Evolve) Set(s string) error           { return enum.SetInt[evolveRules]((*int)(e), s) }
func (Evolve) Type() string                    { return enum.Type[evolveRules]() }

const (
	// NoEvolve leaves the table as it is: such fields are counted and
	// dropped. The default.
	NoEvolve Evolve = iota
	// AddColumns adds a Nullable column for each field of a record's
	// value schema the table lacks, before the record's block is
	// inserted, and creates a missing table.
	AddColumns
)

type evolveRules struct{}

func (evolveRules) Enum() (string, []string) { return "evolve", []string{"none", "add-columns"} }

func (compressions) Enum() (string, []string) { return "compression", []string{"lz4", "zstd", "none"} }

// The sink's URL parameters, each documented in params (params.go). The
// URL takes no others: a misspelt one is refused rather than sent to
// ClickHouse as a setting.
const (
	paramGroup        = "group"
	paramTable        = "table"
	paramMode         = "mode"
	paramDeadLetters  = "dead_letter_table"
	paramProtocol     = "protocol"
	paramSecure       = "secure"
	paramSkipVerify   = "skip_verify"
	paramServerName   = "tls_server_name"
	paramCAFile       = "ca_file"
	paramPasswordFile = "password_file"
	paramAtLeastOnce  = "at_least_once"
	paramDialTimeout  = "dial_timeout"
	paramRetryTimeout = "retry_timeout"
	paramCompression  = "compression"
	paramEvolve       = "evolve"
	paramInterval     = "insert_interval"
	paramShards       = "shards"
	paramPin          = "shard_of"
)

// ErrURL is wrapped by every error about the URL or an option.
var ErrURL = errors.New("bad clickhouse sink URL")

// sinkURL is what this sink's URL shares with postgres'; its errors wrap
// ErrURL.
var sinkURL = sqlsink.URL{Err: ErrURL, GroupIs: "part of every deduplication token",
	Password: "$" + PasswordEnv + " or password_file="}

// Option changes the configuration New builds from the URL.
type Option func(*config)

// WithGroup sets the offsetkeeper group, part of every deduplication
// token, for callers that know it already. A group= in the URL must then
// be the same: two names for one thing is a mistake.
func WithGroup(group string) Option { return func(c *config) { c.optGroup = group } }

// WithLogger makes the sink log its setup, retries, dead letters and tiny
// blocks (default: no logs).
func WithLogger(log *zap.Logger) Option { return func(c *config) { c.log = log } }

// WithGetenv replaces os.Getenv for reading PasswordEnv (for tests).
func WithGetenv(getenv func(string) string) Option { return func(c *config) { c.pass.Getenv = getenv } }

// ident is a table: its database and name.
type ident struct{ db, name string }

// String is the table quoted for SQL: `db`.`name`.
func (i ident) String() string { return quoteIdent(i.db) + "." + quoteIdent(i.name) }

// quoteIdent quotes a ClickHouse identifier in backquotes.
func quoteIdent(s string) string {
	return "`" + strings.NewReplacer(`\`, `\\`, "`", "\\`").Replace(s) + "`"
}

// config is the parsed URL and options.
type config struct {
	addrs        []string
	user         string
	pass         secure.Password // the URL's user info, password_file= and PasswordEnv
	password     string          // what finish read from pass
	database     string
	group        string
	optGroup     string
	table        ident
	deadLetters  ident
	tableRaw     string // table= as given, before the database is applied
	deadRaw      string
	mode         Mode
	protocol     Protocol
	tlsOpts      secure.TLS // secure=, skip_verify=, tls_server_name=, ca_file=
	atLeastOnce  bool
	dialTimeout  time.Duration
	retryTimeout time.Duration
	// insertInterval: the least time between the starts of two rounds'
	// inserts of fewer than paceRows rows (WriteBlocks).
	insertInterval time.Duration
	compression    Compression
	evolve         Evolve // columns mode's
	inferColumns   bool   // evolve's, for JSON records without a schema

	// shards= and shard_of= as given: the other shards' host lists, and
	// partitions pinned to a shard (Sharded).
	shardsRaw, pinRaw string

	// table=, route_field= and default_table= as given: a router's.
	template, routeField, defaultTable, deadTemplate string
	given                                            map[string]bool
	log                                              *zap.Logger
	tls                                              *tls.Config // what finish made of tlsOpts
}

// ValidateURL checks a sink URL without connecting or reading files. The
// command line calls it so that a bad --sink is a usage error before
// anything starts. A group is required unless it will be given with
// WithGroup (needGroup false).
func ValidateURL(raw string, needGroup bool) error {
	c, err := parseURL(raw)
	if err != nil {
		return err
	}
	if needGroup {
		return sinkURL.RequireGroup(c.group)
	}
	return nil
}

// parseURL reads the URL: clickhouse://[USER[:PASSWORD]@]HOST[:PORT][,HOST[:PORT]...]/DB?...
func parseURL(raw string) (config, error) {
	c := config{
		database:       DefaultDatabase,
		tableRaw:       DefaultTable,
		deadRaw:        DefaultDeadLetterTable,
		dialTimeout:    DefaultDialTimeout,
		retryTimeout:   DefaultRetryTimeout,
		insertInterval: DefaultInsertInterval,
		given:          map[string]bool{},
		pass:           secure.Password{ValueIn: "the URL", FileName: paramPasswordFile + "=", Env: PasswordEnv},
		tlsOpts:        secure.TLS{Names: secure.TLSNames{CAFile: paramCAFile + "="}},
	}
	u, err := sinkURL.Parse(raw)
	if err != nil {
		return c, err
	}
	if u.Scheme != "clickhouse" {
		return c, fmt.Errorf("%w: scheme %q: want clickhouse://", ErrURL, u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return c, fmt.Errorf("%w: no host: want clickhouse://[USER[:PASSWORD]@]HOST:PORT/DB", ErrURL)
	}
	if u.User != nil {
		c.user = u.User.Username()
		c.pass.Value, c.pass.HasValue = u.User.Password()
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		if strings.Contains(db, "/") {
			return c, fmt.Errorf("%w: path %q: want /DB, one database name", ErrURL, u.Path)
		}
		c.database = db
	}
	if u.Fragment != "" {
		return c, fmt.Errorf("%w: a fragment (#...) is not part of a sink URL; a password with # must be written %%23", ErrURL)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return c, fmt.Errorf("%w: query: %w", ErrURL, err)
	}
	for k, vs := range q {
		if !slices.Contains(paramNames, k) {
			return c, fmt.Errorf("%w: unknown parameter %q: want one of %s", ErrURL, k, strings.Join(paramNames, ", "))
		}
		if len(vs) > 1 {
			return c, fmt.Errorf("%w: %s= given twice", ErrURL, k)
		}
		c.given[k] = true
		if err := c.set(k, vs[0]); err != nil {
			return c, err
		}
	}
	for _, h := range strings.Split(u.Host, ",") {
		addr, err := c.hostPort(h)
		if err != nil {
			return c, err
		}
		c.addrs = append(c.addrs, addr)
	}
	if _, err := c.shardList(); err != nil {
		return c, err
	}
	c.table, err = c.parseTable(paramTable, c.tableRaw)
	if err != nil {
		return c, err
	}
	c.deadLetters, err = c.parseTable(paramDeadLetters, c.deadRaw)
	if err != nil {
		return c, err
	}
	if c.table == c.deadLetters {
		return c, fmt.Errorf("%w: %s and %s must be two different tables", ErrURL, paramTable, paramDeadLetters)
	}
	if _, err := sqlsink.ParseRouting(cmp.Or(c.template, DefaultTable), c.routeField, c.defaultTable, c.deadTemplate); err != nil {
		return c, sinkURL.Wrap(err)
	}
	if c.defaultTable != "" {
		if _, err := c.parseTable(sqlsink.ParamDefaultTable, strings.ReplaceAll(c.defaultTable, sinks.Placeholder, "topic")); err != nil {
			return c, err
		}
	}
	if c.inferColumns && c.evolve != AddColumns {
		return c, fmt.Errorf("%w: %s=true adds columns: it needs %s=%s", ErrURL, sqlsink.ParamInferColumns, paramEvolve, AddColumns)
	}
	if c.evolve == AddColumns && c.mode != Columns {
		return c, fmt.Errorf("%w: %s=%s is for mode=columns (raw mode keeps the whole value in one column)", ErrURL, paramEvolve, c.evolve)
	}
	if !c.tlsOpts.On {
		for _, p := range []string{paramSkipVerify, paramServerName, paramCAFile} {
			if c.given[p] {
				return c, fmt.Errorf("%w: %s= is for TLS: it needs %s=true", ErrURL, p, paramSecure)
			}
		}
	}
	if err := c.pass.Check(); err != nil {
		return c, sinkURL.Wrap(err)
	}
	if c.protocol == HTTP && c.given[paramCompression] && c.compression == ZSTD {
		return c, fmt.Errorf("%w: %s=zstd with %s=http: want lz4 or none", ErrURL, paramCompression, paramProtocol)
	}
	return c, nil
}

// hostPort is h with the protocol's default port when it has none.
func (c *config) hostPort(h string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("%w: an empty host in the host list", ErrURL)
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		// No port: the default of the protocol and TLS.
		if strings.Contains(err.Error(), "missing port") {
			host, port = strings.Trim(h, "[]"), c.defaultPort()
		} else {
			return "", fmt.Errorf("%w: host %q: want HOST or HOST:PORT", ErrURL, h)
		}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%w: host %q: port %q: want 1 to 65535", ErrURL, h, port)
	}
	if host == "" {
		return "", fmt.Errorf("%w: host %q: no host name", ErrURL, h)
	}
	return net.JoinHostPort(host, port), nil
}

func (c *config) defaultPort() string {
	switch {
	case c.protocol == HTTP && c.tlsOpts.On:
		return "8443"
	case c.protocol == HTTP:
		return "8123"
	case c.tlsOpts.On:
		return "9440"
	}
	return "9000"
}

func (c *config) set(key, val string) error {
	var err error
	switch key {
	case paramGroup:
		if val == "" || strings.Contains(val, "/") {
			return fmt.Errorf("%w: %s=%q: want the group's name (not empty, no /)", ErrURL, key, val)
		}
		c.group = val
	case paramTable:
		t, err := sinks.ParseTemplate(val)
		if err != nil {
			return sinkURL.Wrap(err)
		}
		c.template = val
		c.tableRaw = t.Expand("topic", "route") // a template's: checked as one of its tables
	case sqlsink.ParamRouteField:
		c.routeField = val
	case sqlsink.ParamInferColumns:
		c.inferColumns, err = sinkURL.Bool(key, val)
	case sqlsink.ParamDefaultTable:
		c.defaultTable = val
	case paramDeadLetters:
		t, err := sinks.ParseTemplate(val)
		if err != nil {
			return sinkURL.Wrap(fmt.Errorf("%s: %w", key, err))
		}
		c.deadTemplate = val
		c.deadRaw = t.Expand("topic", "route") // a template's: checked as one of its tables
	case paramMode:
		err = sqlsink.Enum(sinkURL, &c.mode, key, val)
	case paramProtocol:
		err = sqlsink.Enum(sinkURL, &c.protocol, key, val)
	case paramEvolve:
		err = sqlsink.Enum(sinkURL, &c.evolve, key, val)
	case paramCompression:
		err = sqlsink.Enum(sinkURL, &c.compression, key, val)
	case paramSecure:
		c.tlsOpts.On, err = sinkURL.Bool(key, val)
	case paramSkipVerify:
		c.tlsOpts.SkipVerify, err = sinkURL.Bool(key, val)
	case paramAtLeastOnce:
		c.atLeastOnce, err = sinkURL.Bool(key, val)
	case paramServerName:
		if strings.TrimSpace(val) == "" {
			return fmt.Errorf("%w: %s= is empty: want the name the server's certificate holds", ErrURL, key)
		}
		c.tlsOpts.ServerName = val
	case paramCAFile:
		if val == "" {
			return fmt.Errorf("%w: %s= is empty: want a PEM file of CA certificates", ErrURL, key)
		}
		c.tlsOpts.CAFile = val
	case paramPasswordFile:
		if val == "" {
			return fmt.Errorf("%w: %s= is empty: want a file holding the password", ErrURL, key)
		}
		c.pass.File = val
	case paramDialTimeout:
		d, perr := time.ParseDuration(val)
		if perr != nil || d <= 0 || d > MaxRetryTimeout {
			return fmt.Errorf("%w: %s=%q: want a duration above 0 and at most %s", ErrURL, key, val, MaxRetryTimeout)
		}
		c.dialTimeout = d
	case paramRetryTimeout:
		c.retryTimeout, err = sinkURL.RetryTimeout(key, val)
	case paramShards:
		if strings.TrimSpace(val) == "" {
			return fmt.Errorf("%w: %s= is empty: want the other shards, HOST[:PORT][,HOST[:PORT]...] each, separated by |", ErrURL, key)
		}
		c.shardsRaw = val
	case paramPin:
		c.pinRaw = val
	case paramInterval:
		d, perr := time.ParseDuration(val)
		if perr != nil || d < 0 || d > MaxInsertInterval {
			return fmt.Errorf("%w: %s=%q: want a duration from 0 (no pacing) to %s", ErrURL, key, val, MaxInsertInterval)
		}
		c.insertInterval = d
	}
	return err
}

// parseTable reads NAME or DB.NAME; NAME alone is in the URL's database.
// Names are used as written, case kept, and quoted in SQL; a name with a
// dot cannot be given.
func (c *config) parseTable(key, val string) (ident, error) {
	parts, err := sinkURL.Table(key, val, "NAME or DB.NAME", 255)
	switch {
	case err != nil:
		return ident{}, err
	case len(parts) == 1:
		return ident{c.database, parts[0]}, nil
	}
	return ident{parts[0], parts[1]}, nil
}

// finish applies the options, reads the password and CA files, and
// checks what needs both.
func (c *config) finish(opts []Option) error {
	for _, o := range opts {
		o(c)
	}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	var err error
	if c.group, err = sinkURL.Group(c.group, c.optGroup); err != nil {
		return err
	}
	pw, _, err := c.pass.Read()
	if err != nil {
		return sinkURL.Wrap(err)
	}
	if c.password = pw.Reveal(); c.password != "" && c.user == "" {
		c.user = "default"
	}
	c.tls, err = c.tlsOpts.Config()
	return sinkURL.Wrap(err)
}
