package clickhouse

import (
	"slices"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// params are the sink's parameters, in the order the unknown-parameter
// error lists them. The URL takes these and no others; docs/clickhouse.md's
// table is generated from them.
var params = sqlsink.Params([][3]string{
	{paramGroup, "`--group`", "part of every token; if given, it must equal `--group` (`dev` uses a group and a topic of its own per run, since the tokens and the rows outlive dev's etcd)"},
	{paramTable, "`" + DefaultTable + "`", "the rows' table, `name` or `db.name`; `{topic}` in it names a table per topic, `{route}` a table per value of `route_field` (docs/topics.md)"},
	{sqlsink.ParamRouteField, "—", "the top-level field of the record's value whose value names its table, in `table`'s `{route}`"},
	{sqlsink.ParamDefaultTable, "`table` with `{route}` as `default`", "with `route_field`: the table of the records without the field"},
	{paramMode, "`" + Raw.String() + "`", "`raw`: the sink's own table; `columns`: fill an existing table from JSON fields"},
	{paramEvolve, "`" + NoEvolve.String() + "`", "columns mode: `add-columns` adds a Nullable column for each field of a record's value schema (Avro, Protobuf, JSON Schema) the table lacks, and creates a missing table ordered by `(kafka_topic, kafka_partition, kafka_offset)`; `none` drops such fields, counted"},
	{sqlsink.ParamInferColumns, "`false`", "with `evolve=add-columns`: JSON records without a schema add columns too, typed from their values (a string `String`, a number `Int64` or `Float64`, `true`/`false` `Bool`, an object or array `String`), each `Nullable`; a later value the column cannot take goes to the dead-letter table. Each record's value is parsed once more for it"},
	{paramDeadLetters, "`" + DefaultDeadLetterTable + "`", "created if missing; with a routed `table`, `{topic}` and `{route}` in it name one per table (docs/topics.md)"},
	{paramProtocol, "`" + Native.String() + "`", "`native` (port 9000, 9440 with TLS) or `http` (8123, 8443)"},
	{paramSecure, "`false`", "TLS"},
	{paramSkipVerify, "`false`", "no verification (tests only)"},
	{paramServerName, "—", "the certificate's name"},
	{paramCAFile, "—", "a CA file of PEM certificates"},
	{paramPasswordFile, "—", "the password, read at start; else the URL's, else `$" + PasswordEnv + "` (two at once is an error)"},
	{paramAtLeastOnce, "`false`", "accept a table that does not deduplicate (logged as at-least-once)"},
	{paramDialTimeout, "`" + DefaultDialTimeout.String() + "`", "opening a connection"},
	{paramRetryTimeout, "`" + DefaultRetryTimeout.String() + "`", "how long a failed insert is retried, with the same token, and how long a sink opened while the server cannot be reached waits for it (`0`: never)"},
	{paramShards, "—", "more shards, `|` between them, each a comma list of `HOST[:PORT]` (its replicas, for a `Replicated` table); the URL's hosts are shard 0. A partition's rows, retries, checks and resume go to shard `partition mod shards`; read the whole through a `Distributed` table (docs/clickhouse.md)"},
	{paramPin, "—", "with `shards`: partitions pinned to another shard than the rule's, `PARTITION:SHARD` pairs separated by commas (`3:0,7:1`)"},
	{paramInterval, "`" + DefaultInsertInterval.String() + "`", "the least time between two inserts of a table's rounds (the blocks of many partitions that ended together go in as one insert, one part); a backlog's blocks, and a round of 32,768 rows or more, go at once; `0`: no pacing"},
	{paramCompression, "`" + LZ4.String() + "`", "`lz4`, `zstd` (native only) or `none`"},
})

// paramNames are params' names, as the parser checks and lists them.
var paramNames = sqlsink.Names(params, sqlsink.ParamName)

// Params returns the sink's URL query parameters, with their defaults and
// meanings: the ones the URL parser accepts and lists when it refuses an
// unknown one.
func Params() []sinks.Param { return slices.Clone(params) }
