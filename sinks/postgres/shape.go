package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// ErrTableShape is wrapped by New's error for a table the sink cannot use
// as its mode needs: a raw, offsets or dead-letter table that exists with
// another layout (a column missing or of another type, no unique key for
// the sink's ON CONFLICT, a NOT NULL column the sink does not fill), a
// columns or upsert table that does not exist, has no key to upsert by, or
// has a kafka_* column of a type the record's value cannot go in. New
// refuses it at once, naming the table, what is wrong and the likely fix,
// and before it creates any table: no wait or retry mends it.
var ErrTableShape = errors.New("table does not fit the sink")

// colInfo is one column of a table as the catalog describes it.
type colInfo struct {
	typ      string // the type (a domain's base type), as format_type writes it
	category string // the type's pg_type.typcategory: S string, N numeric, D date/time...
	notNull  bool
	// filled: the column has a default, or is an identity or generated
	// column, so that an insert that leaves it out does not fail.
	filled bool
	// generated: an insert cannot give it a value (a generated column,
	// or an identity GENERATED ALWAYS).
	generated bool
}

// tableInfo is what the catalog says of a table.
type tableInfo struct {
	exists bool
	kind   string // pg_class.relkind: r table, p partitioned table, v view...
	cols   map[string]colInfo
	order  []string // the column names in the table's order
	// unique are the column sets of the unique indexes (a primary key's,
	// a unique constraint's) that ON CONFLICT (columns) can infer:
	// immediate, valid, without a predicate or an expression.
	unique [][]string
}

// inspectTable reads t from the catalog; exists is false when there is no
// relation of that name.
func inspectTable(ctx context.Context, db querier, t pgx.Identifier) (tableInfo, error) {
	var info tableInfo
	var oid *uint32
	var kind *string
	err := db.QueryRow(ctx, `SELECT c.oid, c.relkind::text FROM pg_class c WHERE c.oid = to_regclass($1)`, t.Sanitize()).Scan(&oid, &kind)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return info, nil
	case err != nil:
		return info, fmt.Errorf("look up table %s: %w", t.Sanitize(), err)
	case oid == nil:
		return info, nil
	}
	info.exists, info.kind, info.cols = true, *kind, map[string]colInfo{}
	rows, err := db.Query(ctx, `
SELECT a.attname,
       CASE WHEN ty.typtype = 'd' THEN format_type(ty.typbasetype, ty.typtypmod) ELSE format_type(a.atttypid, a.atttypmod) END,
       bt.typcategory::text,
       a.attnotnull,
       a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '',
       a.attidentity = 'a' OR a.attgenerated <> ''
FROM pg_attribute a
JOIN pg_type ty ON ty.oid = a.atttypid
JOIN pg_type bt ON bt.oid = CASE WHEN ty.typtype = 'd' THEN ty.typbasetype ELSE a.atttypid END
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, *oid)
	if err != nil {
		return info, fmt.Errorf("read the columns of %s: %w", t.Sanitize(), err)
	}
	for rows.Next() {
		var name string
		var c colInfo
		if err := rows.Scan(&name, &c.typ, &c.category, &c.notNull, &c.filled, &c.generated); err != nil {
			rows.Close()
			return info, fmt.Errorf("read the columns of %s: %w", t.Sanitize(), err)
		}
		info.cols[name] = c
		info.order = append(info.order, name)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return info, fmt.Errorf("read the columns of %s: %w", t.Sanitize(), err)
	}
	rows, err = db.Query(ctx, `
SELECT array(SELECT a.attname::text FROM unnest(i.indkey::int2[]) AS k(n)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n)
FROM pg_index i
WHERE i.indrelid = $1 AND i.indisunique AND i.indimmediate AND i.indisvalid
  AND i.indpred IS NULL AND i.indexprs IS NULL`, *oid)
	if err != nil {
		return info, fmt.Errorf("read the indexes of %s: %w", t.Sanitize(), err)
	}
	for rows.Next() {
		var cols []string
		if err := rows.Scan(&cols); err != nil {
			rows.Close()
			return info, fmt.Errorf("read the indexes of %s: %w", t.Sanitize(), err)
		}
		info.unique = append(info.unique, cols)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return info, fmt.Errorf("read the indexes of %s: %w", t.Sanitize(), err)
	}
	return info, nil
}

// need is a column a layout needs and the types that will do, the first
// the one the sink creates it with.
type need struct {
	name  string
	types []string
}

// layout is a table of the sink's own: the columns its statements write
// and read, and the unique key its ON CONFLICT names.
type layout struct {
	what  string // what the table is, for the message: "a mode=raw table", "the offsets table"
	needs []need
	key   []string
	// fix is the likely remedy, for the message.
	fix string
}

var (
	textTypes = []string{"text", "character varying"}
	rawLayout = layout{
		what: "a mode=raw table",
		needs: []need{{"topic", textTypes}, {"partition", []string{"integer", "bigint"}}, {"offset", []string{"bigint"}},
			{"key", []string{"bytea"}}, {"value", []string{"jsonb"}}, {"value_bytes", []string{"bytea"}},
			{"timestamp", []string{"timestamp with time zone"}}, {"headers", []string{"jsonb"}}},
		key: []string{"topic", "partition", "offset"},
		fix: "raw mode keeps each record whole in a table of its own layout, which it creates: to fill this table from the " +
			"records' JSON fields use mode=columns (or mode=upsert, to keep the last value of each key), else give table= a new name",
	}
	offsetsLayout = layout{
		what: "the offsets table",
		needs: []need{{"group", textTypes}, {"topic", textTypes}, {"partition", []string{"integer", "bigint"}},
			{"next", []string{"bigint"}}, {"epoch", []string{"bigint"}}, {"generation", []string{"bigint"}},
			{"updated_at", []string{"timestamp with time zone", "timestamp without time zone"}}},
		key: []string{"group", "topic", "partition"},
		fix: "the sink keeps each partition's next offset in a table of its own layout, which it creates: give " +
			paramOffsets + "= a new name (this table is not one the sink made)",
	}
	deadLayout = layout{
		what: "the dead-letter table",
		needs: []need{{"topic", textTypes}, {"partition", []string{"integer", "bigint"}}, {"offset", []string{"bigint"}},
			{"key", []string{"bytea"}}, {"value", []string{"bytea"}}, {"timestamp", []string{"timestamp with time zone"}},
			{"error", textTypes}, {"failed_at", []string{"timestamp with time zone", "timestamp without time zone"}}},
		key: []string{"topic", "partition", "offset"},
		fix: "the sink keeps the records a table refused in a table of its own layout, which it creates: give " +
			paramDeadLetters + "= a new name (this table is not one the sink made)",
	}
)

// check returns nil when info, an existing table, has the layout, and
// else an error wrapping ErrTableShape naming all that is wrong with it.
func (l layout) check(t pgx.Identifier, info tableInfo) error {
	var problems, missing []string
	if info.kind != "r" && info.kind != "p" {
		what, ok := relkinds[info.kind]
		if !ok {
			what = "of relkind " + info.kind
		}
		problems = append(problems, "it is "+what+", not a table")
	}
	for _, n := range l.needs {
		c, ok := info.cols[n.name]
		switch {
		case !ok:
			missing = append(missing, n.name+" "+n.types[0])
		case !slices.Contains(n.types, baseType(c.typ)):
			problems = append(problems, fmt.Sprintf("column %s is %s, want %s", n.name, c.typ, strings.Join(n.types, " or ")))
		case c.generated:
			problems = append(problems, fmt.Sprintf("column %s is generated, and the sink writes it", n.name))
		}
	}
	if len(missing) > 0 {
		problems = append([]string{"it lacks the columns " + strings.Join(missing, ", ")}, problems...)
	}
	for _, name := range info.order {
		c := info.cols[name]
		if c.notNull && !c.filled && !slices.ContainsFunc(l.needs, func(n need) bool { return n.name == name }) {
			problems = append(problems, fmt.Sprintf("column %s is NOT NULL without a default, and the sink does not fill it", name))
		}
	}
	if !hasKey(info.unique, l.key) {
		problems = append(problems, "it has no primary key or unique index on ("+strings.Join(l.key, ", ")+")")
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s as %s: %s; %s", ErrTableShape, t.Sanitize(), l.what, strings.Join(problems, "; "), l.fix)
}

// baseType is a type without its modifier: character varying(20) is
// character varying. A limited varchar is a varchar.
func baseType(typ string) string {
	if i := strings.IndexByte(typ, '('); i > 0 && !strings.HasPrefix(typ, "timestamp") {
		return typ[:i]
	}
	if strings.HasPrefix(typ, "timestamp(") {
		// timestamp(3) with time zone
		if j := strings.IndexByte(typ, ')'); j > 0 {
			return "timestamp" + typ[j+1:]
		}
	}
	return typ
}

// relkinds name what pg_class.relkind says a relation is, but a table.
var relkinds = map[string]string{"v": "a view", "m": "a materialized view", "f": "a foreign table", "c": "a composite type",
	"S": "a sequence", "i": "an index", "I": "an index", "t": "a TOAST table"}

// hasKey reports whether one of the unique column sets is key's set.
func hasKey(unique [][]string, key []string) bool {
	for _, u := range unique {
		if len(u) == len(key) && !slices.ContainsFunc(key, func(k string) bool { return !slices.Contains(u, k) }) {
			return true
		}
	}
	return false
}

// metaCategories are the type categories (pg_type.typcategory) a kafka_*
// column of a columns or upsert table may have: those PostgreSQL assigns
// the record's value to (its topic text, partition integer, offset bigint,
// key bytea, timestamp timestamptz). A string type takes any of them, as
// text.
var metaCategories = map[string]struct {
	categories string   // the letters of the categories that do
	narrow     []string // types of those categories too narrow for every value
	want       string   // for the message
}{
	"kafka_topic":     {"S", nil, "a string type (text)"},
	"kafka_partition": {"NS", []string{"smallint"}, "a numeric type (integer, bigint) or text"},
	"kafka_offset":    {"NS", []string{"smallint", "integer", "real"}, "a numeric type that holds 64-bit offsets (bigint, numeric) or text"},
	"kafka_key":       {"S", nil, "bytea, or a string type (text: the key's hex form)"},
	"kafka_timestamp": {"DS", nil, "a date/time type (timestamptz) or text"},
}

// checkMeta returns nil when the kafka_* columns of info, a columns or
// upsert table, can take what the record gives them, and else an error
// wrapping ErrTableShape naming each one that cannot: every row's insert
// would fail on it (a dead letter each).
func checkMeta(t pgx.Identifier, mode Mode, info tableInfo) error {
	var problems []string
	for _, name := range info.order {
		m, ok := metaCategories[name]
		c := info.cols[name]
		if !ok || c.generated {
			continue
		}
		if name == "kafka_key" && baseType(c.typ) == "bytea" || strings.Contains(m.categories, c.category) && !slices.Contains(m.narrow, c.typ) {
			continue
		}
		problems = append(problems, fmt.Sprintf("column %s is %s, want %s", name, c.typ, m.want))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s as a mode=%s table: %s; the kafka_* columns are filled from the record, not its value: "+
		"change their types, or rename the columns if they are fields of the value", ErrTableShape, t.Sanitize(), mode, strings.Join(problems, "; "))
}

// checkTables refuses, before anything is created, a table of the mode
// that exists in another shape: the raw table (raw mode), the offsets and
// the dead-letter tables (every mode), and the kafka_* columns of a
// columns or upsert table. The ones missing are created afterwards, by
// ensureTables, in the sink's layout.
func checkTables(ctx context.Context, db querier, c *config) error {
	type role struct {
		t pgx.Identifier
		l layout
	}
	roles := []role{{c.offsets, offsetsLayout}, {c.deadLetters, deadLayout}}
	if c.mode == Raw {
		roles = append([]role{{c.table, rawLayout}}, roles...)
	}
	var errs []error
	for _, r := range roles {
		info, err := inspectTable(ctx, db, r.t)
		if err != nil {
			return err
		}
		if info.exists {
			if err := r.l.check(r.t, info); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c.mode != Raw {
		info, err := inspectTable(ctx, db, c.table)
		if err != nil {
			return err
		}
		if info.exists {
			if err := checkMeta(c.table, c.mode, info); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return sqlsink.JoinRefusals(errs)
}

// prepareAll has the server parse and plan every statement the sink's
// writes and Resume will run, without running any: a table that passed
// the checks above but that a statement still does not fit (a type no
// cast reaches, a column the catalog query missed) is refused now, in the
// server's own words, rather than at every write. Only analysis errors
// (SQLSTATE class 42, but a missing privilege) are the table's shape.
func (s *Sink) prepareAll(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Release()
	type stmt struct {
		t   pgx.Identifier
		sql string
	}
	stmts := []stmt{{s.cfg.offsets, s.sql.lock}, {s.cfg.offsets, s.sql.setOffsets}, {s.cfg.offsets, s.sql.resume},
		{s.cfg.deadLetters, s.sql.deadLetter}}
	if s.cfg.mode == Raw {
		stmts = append(stmts, stmt{s.cfg.table, s.sql.rawInsert})
	} else {
		stmts = append(stmts, stmt{s.cfg.table, s.tab.Load().sql})
	}
	for _, st := range stmts {
		_, err := conn.Conn().PgConn().Prepare(ctx, "", st.sql, nil)
		var pe *pgconn.PgError
		switch {
		case err == nil:
		case errors.As(err, &pe) && strings.HasPrefix(pe.Code, "42") && pe.Code != "42501":
			return fmt.Errorf("%w: %s, with mode=%s: the sink's statement does not fit it: %s (SQLSTATE %s)",
				ErrTableShape, st.t.Sanitize(), s.cfg.mode, pe.Message, pe.Code)
		default:
			return fmt.Errorf("prepare a statement on %s: %w", st.t.Sanitize(), err)
		}
	}
	return nil
}
