package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schemaLock is the advisory lock key under which replicas create the
// tables: CREATE TABLE IF NOT EXISTS run by two sessions at once can still
// fail on the catalog's unique index.
const schemaLock = 0x6f6b5f736368656d // "ok_schem"

// rawColumns are the raw table's columns in COPY order.
var rawColumns = []string{"topic", "partition", "offset", "key", "value", "value_bytes", "timestamp", "headers"}

// recordColumns begin the raw and the dead-letter tables: where the record
// stood, the tables' key, and the record's key.
const recordColumns = `
	topic text NOT NULL,
	partition integer NOT NULL,
	"offset" bigint NOT NULL,
	key bytea,`

func createRawTable(t pgx.Identifier) string {
	return `CREATE TABLE IF NOT EXISTS ` + t.Sanitize() + ` (` + recordColumns + `
	value jsonb,
	value_bytes bytea,
	"timestamp" timestamptz NOT NULL,
	headers jsonb NOT NULL,
	PRIMARY KEY (topic, partition, "offset")
)`
}

// truncatedTable is where raw mode keeps the rows Kafka no longer holds
// after it truncated a partition's log (sinks.Block.Truncated): the raw
// table's name with _truncated.
func truncatedTable(t pgx.Identifier) pgx.Identifier {
	out := append(pgx.Identifier{}, t...)
	out[len(out)-1] += "_truncated"
	return out
}

// createTruncatedTable makes truncatedTable(raw): the raw table's columns,
// then the generation the rows were written in and when they were moved.
// No key: an offset may be truncated more than once.
func createTruncatedTable(raw pgx.Identifier) string {
	return `CREATE TABLE IF NOT EXISTS ` + truncatedTable(raw).Sanitize() + ` (LIKE ` + raw.Sanitize() + `,
	generation bigint NOT NULL,
	moved_at timestamptz NOT NULL DEFAULT now()
)`
}

func createOffsetsTable(t pgx.Identifier) string {
	return `CREATE TABLE IF NOT EXISTS ` + t.Sanitize() + ` (
	"group" text NOT NULL,
	topic text NOT NULL,
	partition integer NOT NULL,
	next bigint NOT NULL,
	epoch bigint NOT NULL,
	generation bigint NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY ("group", topic, partition)
)`
}

func createDeadLetterTable(t pgx.Identifier) string {
	return `CREATE TABLE IF NOT EXISTS ` + t.Sanitize() + ` (` + recordColumns + `
	value bytea,
	"timestamp" timestamptz NOT NULL,
	error text NOT NULL,
	failed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (topic, partition, "offset")
)`
}

// Staging tables, one set per connection (temporary tables are private to
// a session), made when the pool opens the connection. Rows are staged
// only on the slow path, and ON COMMIT DELETE ROWS empties them at the end
// of a transaction that used them; transactions that did not touch them
// skip that truncation. The rows of all the blocks of a call are staged
// together, numbered by ord across the blocks, each row naming its
// partition, so that one insert takes them all.
const (
	stageRaw  = "offsetkeeper_stage_raw"
	stageCols = "offsetkeeper_stage_columns"
)

const createStageRaw = `CREATE TEMPORARY TABLE IF NOT EXISTS ` + stageRaw + ` (
	ord integer NOT NULL,
	topic text NOT NULL,
	partition integer NOT NULL,
	"offset" bigint NOT NULL,
	key bytea,
	value text,
	value_bytes bytea,
	"timestamp" timestamptz NOT NULL,
	headers jsonb NOT NULL
) ON COMMIT DELETE ROWS`

// stagedRecordColumns are the columns a staging table of columns or upsert
// mode keeps of each record, ord (its place in the write) first.
const stagedRecordColumns = `	ord integer NOT NULL,
	topic text NOT NULL,
	partition integer NOT NULL,
	"offset" bigint NOT NULL,
	key bytea,
	"timestamp" timestamptz NOT NULL,
`

const createStageCols = `CREATE TEMPORARY TABLE IF NOT EXISTS ` + stageCols + ` (
` + stagedRecordColumns + `	value text NOT NULL
) ON COMMIT DELETE ROWS`

var stageRawColumns = []string{"ord", "topic", "partition", "offset", "key", "value", "value_bytes", "timestamp", "headers"}
var stageColsColumns = []string{"ord", "topic", "partition", "offset", "key", "timestamp", "value"}

// ensureTables creates the tables the mode needs, under the advisory lock.
func ensureTables(ctx context.Context, pool *pgxpool.Pool, c *config) error {
	ddl := []string{createOffsetsTable(c.offsets), createDeadLetterTable(c.deadLetters)}
	if c.mode == Raw {
		ddl = append(ddl, createRawTable(c.table))
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schemaLock)); err != nil {
			return fmt.Errorf("lock the schema: %w", err)
		}
		for _, q := range ddl {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("create table: %w", err)
			}
		}
		return nil
	})
}

// createColumnsTable is the table columns mode makes for evolve=add-columns
// when it is missing: the kafka_* columns alone, the first record's schema
// adds the rest. Rows are exactly-once by the offsets table, not a key.
func createColumnsTable(t pgx.Identifier) string {
	return `CREATE TABLE IF NOT EXISTS ` + t.Sanitize() + ` (
	kafka_topic text NOT NULL,
	kafka_partition integer NOT NULL,
	kafka_offset bigint NOT NULL,
	kafka_key bytea,
	kafka_timestamp timestamptz NOT NULL
)`
}

// createMissing makes columns mode's table when it is missing, under the
// schema lock that keeps replicas starting at once from racing; it
// reports whether this sink made it.
func createMissing(ctx context.Context, pool *pgxpool.Pool, t pgx.Identifier) (made bool, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schemaLock)); err != nil {
			return fmt.Errorf("lock the schema: %w", err)
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t.Sanitize()).Scan(&exists); err != nil || exists {
			return err
		}
		if _, err := tx.Exec(ctx, createColumnsTable(t)); err != nil {
			return fmt.Errorf("create table %s: %w", t.Sanitize(), err)
		}
		made = true
		return nil
	})
	return made, err
}

// Columns of a columns-mode table that come from the record rather than
// from its value; a field of the value with one of these names is ignored.
var metaColumns = map[string]string{
	"kafka_topic":     "s.topic",
	"kafka_partition": "s.partition",
	"kafka_offset":    `s."offset"`,
	"kafka_key":       "s.key",
	"kafka_timestamp": `s."timestamp"`,
}

// column is one column of a columns-mode or upsert-mode table as the
// insert fills it.
type column struct {
	raw  string // the name as the catalog has it
	name string // quoted
	expr string
	// serial: the column's default takes the next value of a sequence (an
	// identity or a serial column). An upsert leaves it as it is on update.
	serial bool
	meta   bool   // filled from the record (metaColumns), not its value
	def    string // the default, for a field the value lacks; "" for NULL
	// bytea: the column's type is bytea (or a domain over it), which reads
	// a decoded record's base64 as text, so the sink decodes it first.
	bytea bool
}

// querier is what reading the catalog needs: the pool at New, the write's
// transaction when a schema makes the sink look again.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readColumns reads the columns of an existing table the insert can fill,
// the names of all its columns (generated ones too: a field of that name
// is no new column) and the table's oid. A column whose name is a field
// of the value takes the field, converted to the column's type by
// jsonb_populate_record (so by the type's input function: "2024-05-01"
// fills a date, 42 a text); a field that is absent leaves the column its
// default, or NULL; generated columns and GENERATED ALWAYS identities are
// left to PostgreSQL.
func readColumns(ctx context.Context, db querier, t pgx.Identifier, mode Mode) (uint32, []column, map[string]bool, error) {
	var oid *uint32
	if err := db.QueryRow(ctx, `SELECT to_regclass($1)::oid`, t.Sanitize()).Scan(&oid); err != nil {
		return 0, nil, nil, fmt.Errorf("look up table %s: %w", t.Sanitize(), err)
	}
	if oid == nil {
		return 0, nil, nil, fmt.Errorf("%w: table %s does not exist: %s mode fills an existing table (create it first, or use mode=raw, which creates a table of its own)",
			ErrTableShape, t.Sanitize(), mode)
	}
	rows, err := db.Query(ctx, `
SELECT a.attname, a.attidentity::text, a.attgenerated::text,
       coalesce(pg_get_expr(d.adbin, d.adrelid), ''),
       coalesce(pg_get_serial_sequence($2, a.attname), ''),
       coalesce(nullif(ty.typbasetype, 0), a.atttypid) = 'bytea'::regtype
FROM pg_attribute a
JOIN pg_type ty ON ty.oid = a.atttypid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, *oid, t.Sanitize())
	if err != nil {
		return 0, nil, nil, fmt.Errorf("read the columns of %s: %w", t.Sanitize(), err)
	}
	defer rows.Close()
	var cols []column
	names := map[string]bool{}
	for rows.Next() {
		var name, identity, generated, def, seq string
		var bytea bool
		if err := rows.Scan(&name, &identity, &generated, &def, &seq, &bytea); err != nil {
			return 0, nil, nil, fmt.Errorf("read the columns of %s: %w", t.Sanitize(), err)
		}
		names[name] = true
		if generated != "" || identity == "a" {
			continue
		}
		if identity == "d" && seq != "" {
			def = "nextval(" + quoteLiteral(seq) + "::regclass)"
		}
		q := pgx.Identifier{name}.Sanitize()
		c := column{raw: name, name: q, expr: "r." + q, serial: seq != "", def: def, bytea: bytea}
		switch {
		case metaColumns[name] != "":
			c.expr, c.meta = metaColumns[name], true
		case def != "":
			c.expr = "CASE WHEN j.v ? " + quoteLiteral(name) + " THEN r." + q + " ELSE " + def + " END"
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, nil, fmt.Errorf("read the columns of %s: %w", t.Sanitize(), err)
	}
	if len(cols) == 0 {
		return 0, nil, nil, fmt.Errorf("%w: table %s has no column the sink can fill", ErrTableShape, t.Sanitize())
	}
	return *oid, cols, names, nil
}

// planColumns builds columns mode's INSERT, which fills the table's
// columns (readColumns') from the staged values.
func planColumns(t pgx.Identifier, cols []column) string {
	names, exprs := namesAndExprs(cols)
	// $1 and $2: the staged rows [lo, hi).
	return `INSERT INTO ` + t.Sanitize() + ` (` + strings.Join(names, ", ") + `)
SELECT ` + strings.Join(exprs, ", ") + `
FROM ` + stageCols + ` s
CROSS JOIN LATERAL (SELECT s.value::jsonb AS v) j
CROSS JOIN LATERAL jsonb_populate_record(NULL::` + t.Sanitize() + `, j.v) r
WHERE s.ord >= $1 AND s.ord < $2
ORDER BY s.ord`
}

func namesAndExprs(cols []column) (names, exprs []string) {
	names = make([]string, len(cols))
	exprs = make([]string, len(cols))
	for i, c := range cols {
		names[i], exprs[i] = c.name, c.expr
	}
	return names, exprs
}

func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
