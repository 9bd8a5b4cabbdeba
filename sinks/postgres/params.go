package postgres

import (
	"slices"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// params are the sink's own parameters, in the order the unknown-parameter
// error lists them. The parser accepts these names and no others of its
// own; docs/postgresql.md's table is generated from them.
var params = sqlsink.Params([][3]string{
	{paramGroup, "`--group`", "the offsets table's key; if given, it must equal `--group` (`dev` with a postgres sink uses a group and a topic of its own per run, `dev-<time>` and `events-<time>`, since the table outlives dev's etcd and its raw rows are keyed by topic)"},
	{paramTable, "`" + DefaultTable + "`", "the rows' table, `name` or `schema.name` (taken as written, quoted); `{topic}` in it names a table per topic, `{route}` a table per value of `route_field` (docs/topics.md)"},
	{sqlsink.ParamRouteField, "—", "the top-level field of the record's value whose value names its table, in `table`'s `{route}`"},
	{sqlsink.ParamDefaultTable, "`table` with `{route}` as `default`", "with `route_field`: the table of the records without the field"},
	{paramMode, "`" + Raw.String() + "`", "`raw`: the sink's own table; `columns`: fill an existing table from JSON fields; `upsert`: keep an existing table equal to the last value of each key"},
	{paramOffsets, "`" + DefaultOffsetsTable + "`", "created if missing"},
	{paramDeadLetters, "`" + DefaultDeadLetterTable + "`", "created if missing; with a routed `table`, `{topic}` and `{route}` in it name one per table (docs/topics.md)"},
	{paramRetryTimeout, "`" + DefaultRetryTimeout.String() + "`", "how long a write retries after losing its connection, and how long a sink opened while the server cannot be reached waits for it (`0`: never)"},
	{paramEvolve, "`" + NoEvolve.String() + "`", "`columns`, `upsert`: what a decoded record's field without a column does: `none` ignores and counts it, `add-columns` adds the column (below)"},
	{sqlsink.ParamInferColumns, "`false`", "with `evolve=add-columns`: JSON records without a schema add columns too, typed from their values (a string `text`, a number `bigint` or `double precision`, `true`/`false` `boolean`, an object or array `jsonb`); a later value the column cannot take goes to the dead-letter table. Each record's value is parsed once more for it"},
	{paramConflict, "the primary key", "`upsert`: the unique constraint rows are found by"},
	{paramKeyFrom, "`" + FromKey.String() + "`", "`upsert`: the key columns come from the record `key` or from the `value`"},
	{paramDeletes, "`true` (`false` with `key_from=value`)", "`upsert`: a tombstone deletes its key's row; `false` ignores and counts it"},
	{paramEnvelope, "`" + NoEnvelope.String() + "`", "`upsert`: `debezium` reads values as Debezium change events"},
})

// Params returns the sink's own URL query parameters, with their defaults
// and meanings: the ones the URL parser accepts and lists when it refuses
// an unknown one.
func Params() []sinks.Param { return slices.Clone(params) }

// ConnParam is a connection parameter the sink's URL passes on to pgx.
type ConnParam struct {
	// Name is the parameter as written in the URL: sslmode.
	Name string
	// From is who defines it: libpq (its connection parameters, which pgx
	// reads too), pgx or pgxpool.
	From string
}

// connParamList are the query parameters that go on to pgx: libpq's
// connection parameters that pgx reads itself, application_name and
// options (the startup settings libpq sends), and pgx's and pgxpool's own,
// in the order the unknown-parameter error lists them. pgx would send any
// other name to the server as a setting, where a misspelt sink option
// (tabel=) fails the connection, or worse, a real setting changes the
// session unnoticed: those are refused instead, and a server setting goes
// in options=-c NAME=VALUE, as with libpq.
var connParamList = []ConnParam{
	{"host", "libpq"}, {"port", "libpq"}, {"dbname", "libpq"}, {"database", "pgx"}, {"user", "libpq"},
	{"password", "libpq"}, {"passfile", "libpq"}, {"service", "libpq"}, {"servicefile", "libpq"},
	{"connect_timeout", "libpq"}, {"target_session_attrs", "libpq"}, {"application_name", "libpq"}, {"options", "libpq"},
	{"ssl", "pgx"}, {"sslmode", "libpq"}, {"sslnegotiation", "libpq"}, {"sslcert", "libpq"}, {"sslkey", "libpq"},
	{"sslpassword", "libpq"}, {"sslcertmode", "libpq"}, {"sslrootcert", "libpq"}, {"sslsni", "libpq"},
	{"min_protocol_version", "libpq"}, {"max_protocol_version", "libpq"}, {"channel_binding", "libpq"},
	{"require_auth", "libpq"}, {"krbsrvname", "libpq"}, {"krbspn", "libpq"},
	{"statement_cache_capacity", "pgx"}, {"description_cache_capacity", "pgx"}, {"default_query_exec_mode", "pgx"},
	{"pool_max_conns", "pgxpool"}, {"pool_min_conns", "pgxpool"}, {"pool_min_idle_conns", "pgxpool"},
	{"pool_max_conn_lifetime", "pgxpool"}, {"pool_max_conn_lifetime_jitter", "pgxpool"},
	{"pool_max_conn_idle_time", "pgxpool"}, {"pool_health_check_period", "pgxpool"}, {"pool_ping_timeout", "pgxpool"},
}

// ConnParams returns the connection parameters the URL may hold besides
// the sink's own: the only other names the URL parser accepts.
func ConnParams() []ConnParam { return slices.Clone(connParamList) }

// Names of the parameters, as the parser checks and lists them.
var (
	sinkParams = sqlsink.Names(params, sqlsink.ParamName)
	connParams = sqlsink.Names(connParamList, func(p ConnParam) string { return p.Name })
)
