package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// stageUpsert is upsert mode's staging table: k is the JSON object of the
// record's key columns, v the row's JSON object, NULL for a delete.
const stageUpsert = "offsetkeeper_stage_upsert"

const createStageUpsert = `CREATE TEMPORARY TABLE IF NOT EXISTS ` + stageUpsert + ` (
` + stagedRecordColumns + `	k text NOT NULL,
	v text
) ON COMMIT DELETE ROWS`

var stageUpsertColumns = []string{"ord", "topic", "partition", "offset", "key", "timestamp", "k", "v"}

// keyPlan is what upsert mode knows of the table's key: the columns of
// its primary key, or of the unique constraint named by conflict=, in the
// constraint's order.
type keyPlan struct {
	constraint string
	cols       []string // as the catalog has them
	fields     [][]byte // each column's name as a JSON string, for building k
}

// readKey finds the key constraint of the table (oid) and checks that
// records can fill its columns (cols, readColumns').
func readKey(ctx context.Context, pool *pgxpool.Pool, t pgx.Identifier, oid uint32, conflict string, cols []column) (keyPlan, error) {
	rows, err := pool.Query(ctx, `
SELECT c.conname, c.contype::text, c.condeferrable,
       array(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY AS k(n, i)
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i)
FROM pg_constraint c
WHERE c.conrelid = $1 AND c.contype IN ('p', 'u')
ORDER BY c.contype, c.conname`, oid)
	if err != nil {
		return keyPlan{}, fmt.Errorf("read the constraints of %s: %w", t.Sanitize(), err)
	}
	type constraint struct {
		name, kind string
		deferrable bool
		cols       []string
	}
	var all []constraint
	for rows.Next() {
		var c constraint
		if err := rows.Scan(&c.name, &c.kind, &c.deferrable, &c.cols); err != nil {
			rows.Close()
			return keyPlan{}, fmt.Errorf("read the constraints of %s: %w", t.Sanitize(), err)
		}
		all = append(all, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return keyPlan{}, fmt.Errorf("read the constraints of %s: %w", t.Sanitize(), err)
	}
	var names []string
	for _, c := range all {
		names = append(names, c.name)
	}
	known := "it has none"
	if len(names) > 0 {
		known = "its primary key and unique constraints: " + strings.Join(names, ", ")
	}
	var found *constraint
	for i, c := range all {
		if conflict == "" && c.kind == "p" || conflict != "" && c.name == conflict {
			found = &all[i]
			break
		}
	}
	switch {
	case found == nil && conflict == "":
		return keyPlan{}, fmt.Errorf("%w: table %s has no primary key: upsert mode finds rows by one, or by the unique constraint named by %s= (%s)", ErrTableShape, t.Sanitize(), paramConflict, known)
	case found == nil:
		return keyPlan{}, fmt.Errorf("%w: table %s has no primary key or unique constraint named %q (%s=; %s)", ErrTableShape, t.Sanitize(), conflict, paramConflict, known)
	case found.deferrable:
		return keyPlan{}, fmt.Errorf("%w: constraint %q of %s is deferrable: INSERT ... ON CONFLICT cannot use it", ErrTableShape, found.name, t.Sanitize())
	}
	for _, k := range found.cols {
		var c *column
		for i := range cols {
			if cols[i].raw == k {
				c = &cols[i]
			}
		}
		switch {
		case c == nil:
			return keyPlan{}, fmt.Errorf("%w: key column %q of %s (constraint %q) is generated: upsert mode takes the key from the records", ErrTableShape, k, t.Sanitize(), found.name)
		case c.meta:
			return keyPlan{}, fmt.Errorf("%w: key column %q of %s (constraint %q) is filled from the record's position, not its key", ErrTableShape, k, t.Sanitize(), found.name)
		}
	}
	p := keyPlan{constraint: found.name, cols: found.cols}
	for _, k := range found.cols {
		b, _ := json.Marshal(k) // a string: no error
		p.fields = append(p.fields, b)
	}
	return p, nil
}

// planUpsert builds upsert mode's statement for the staged rows [$1, $2).
// Each staged row is read once (json_populate_record of the key, and of
// the value), then merged by key (DISTINCT ON the key columns as their
// types read them, the last by ord winning), so that no statement touches
// a row twice. The keys whose last record is a delete are deleted, the
// others inserted, or updated where the table holds the key. The rows go
// in key order, so that concurrent writers lock the rows they share in one
// order.
func planUpsert(t pgx.Identifier, cols []column, key keyPlan) string {
	tab := t.Sanitize()
	keyAlias := map[string]string{}
	var keyCols, keyAliases, distinct, match, order []string
	for i, k := range key.cols {
		q := pgx.Identifier{k}.Sanitize()
		alias := pgx.Identifier{fmt.Sprintf("?k%d", i)}.Sanitize()
		keyAlias[k] = alias
		keyCols = append(keyCols, q)
		keyAliases = append(keyAliases, "kr."+q+" AS "+alias)
		distinct = append(distinct, "kr."+q)
		match = append(match, "t."+q+" = m."+alias)
		order = append(order, "s."+alias)
	}
	// A column takes its key column, its field of the record (meta), its
	// field of the value, or its default where the value has no such field.
	var names, exprs, set []string
	var defaults bool
	for _, c := range cols {
		expr := "r." + c.name
		switch {
		case keyAlias[c.raw] != "":
			expr = "s." + keyAlias[c.raw]
		case c.meta:
			expr = metaColumns[c.raw]
		case c.def != "":
			expr, defaults = `CASE WHEN s."?v" ? `+quoteLiteral(c.raw)+" THEN r."+c.name+" ELSE "+c.def+" END", true
		}
		names, exprs = append(names, c.name), append(exprs, expr)
		if keyAlias[c.raw] == "" && !c.serial {
			set = append(set, c.name+" = excluded."+c.name)
		}
	}
	action := "DO NOTHING"
	if len(set) > 0 {
		action = "DO UPDATE SET " + strings.Join(set, ", ")
	}
	fields := ""
	if defaults {
		fields = `, s.v::jsonb AS "?v"`
	}
	return `WITH m AS (
	SELECT DISTINCT ON (` + strings.Join(distinct, ", ") + `)
		s.topic, s.partition, s."offset", s.key, s."timestamp", s.v IS NULL AS "?delete", r AS "?r", ` + strings.Join(keyAliases, ", ") + fields + `
	FROM ` + stageUpsert + ` s
	CROSS JOIN LATERAL json_populate_record(NULL::` + tab + `, s.k::json) kr
	CROSS JOIN LATERAL json_populate_record(NULL::` + tab + `, s.v::json) r
	WHERE s.ord >= $1 AND s.ord < $2
	ORDER BY ` + strings.Join(distinct, ", ") + `, s.ord DESC
), gone AS (
	DELETE FROM ` + tab + ` AS t USING m WHERE m."?delete" AND ` + strings.Join(match, " AND ") + `
)
INSERT INTO ` + tab + ` AS t (` + strings.Join(names, ", ") + `)
SELECT ` + strings.Join(exprs, ", ") + `
FROM m s
CROSS JOIN LATERAL (SELECT (s."?r").*) r
WHERE NOT s."?delete"
ORDER BY ` + strings.Join(order, ", ") + `
ON CONFLICT (` + strings.Join(keyCols, ", ") + `) ` + action
}

// change is what one record does in upsert mode: k is the JSON object of
// its key columns, v the row's JSON object, nil for a delete.
type change struct {
	k, v []byte
}

// verdict is what becomes of a record in upsert mode.
type verdict int

const (
	apply  verdict = iota // its change is staged
	ignore                // a tombstone that does not delete: counted
	refuse                // a dead letter
)

// changeOf decides what rec does in upsert mode. Its checks are the ones
// that need no server: the record has the key columns, the row is a JSON
// object, the Debezium event makes sense. The column types, and the
// table's constraints, are the server's to check.
func (c *config) changeOf(key keyPlan, rec *sinks.Record) (change, verdict, string) {
	value := rec.Value
	if value != nil && rec.ValueOpaque() {
		return change{}, refuse, sqlsink.OpaqueValue
	}
	var idFrom []byte // the object the key columns come from, for key_from=value
	del := value == nil
	tombstone := del
	if !del && c.envelope == Debezium {
		ev, why := debeziumEvent(value)
		switch {
		case why != "":
			return change{}, refuse, why
		case ev.tombstone:
			del, tombstone, value = true, true, nil
		case ev.op == "d":
			del, value, idFrom = true, nil, ev.before
		default:
			value = ev.after
		}
	}
	switch {
	case del && !c.deletes:
		return change{}, ignore, ""
	case tombstone && c.keyFrom == FromValue:
		return change{}, ignore, ""
	}
	if !del {
		if why := sqlsink.RowReason(value); why != "" {
			return change{}, refuse, rowReason(c.envelope, value)
		}
		idFrom = value
	}
	var k []byte
	var why string
	switch {
	case c.keyFrom == FromKey:
		k, why = key.fromKey(rec.Key, c.envelope == Debezium)
	case del && idFrom == nil:
		why = "debezium delete without before: key_from=value finds the row by before's key columns"
	case del:
		if sqlsink.RowReason(idFrom) != "" {
			why = "debezium before is not a JSON object"
			break
		}
		k, why = key.fromObject(idFrom, "debezium before")
	default:
		k, why = key.fromObject(idFrom, "value")
	}
	if why != "" {
		return change{}, refuse, why
	}
	if del {
		return change{k: k}, apply, ""
	}
	return change{k: k, v: value}, apply, ""
}

// changeOf is config.changeOf of rec as the table reads it: a record
// the replica could not decode refused, the Bytes fields of a decoded key
// and value in bytea columns decoded (rowKey, rowValue); ignored counts the
// value's fields that no column takes.
func (a *attempt) changeOf(rec *sinks.Record) (ch change, v verdict, ignored int, why string) {
	if why := undecodable(rec); why != "" {
		return change{}, refuse, 0, why
	}
	if rec.Decoded == nil {
		ch, v, why = a.s.cfg.changeOf(a.s.key, rec)
		return ch, v, 0, why
	}
	r := *rec
	if r.Key, why = a.rowKey(rec); why != "" {
		return change{}, refuse, 0, why
	}
	if r.Value, ignored, why = a.rowValue(rec); why != "" {
		return change{}, refuse, 0, why
	}
	if ch, v, why = a.s.cfg.changeOf(a.s.key, &r); v != apply || ch.v == nil {
		ignored = 0 // a delete reads no fields
	}
	return ch, v, ignored, why
}

// rowReason says why value cannot be a row.
func rowReason(e Envelope, value []byte) string {
	why := sqlsink.RowReason(value)
	if why == "" {
		why = "value is not a JSON object"
	}
	if e == Debezium {
		return "debezium after: " + why
	}
	return why
}

// upsert writes the blocks' changes into the table through the staging
// table, with one statement for all of them; a record the sink refuses
// itself (one the replica could not decode included) goes to the
// dead-letter table without asking the server, and a tombstone that does
// not delete is counted and left out.
func (a *attempt) upsert(ctx context.Context, live []*blockWrite) error {
	for _, w := range live {
		keep := make([]sinks.Record, 0, len(w.recs))
		w.changes = make([]change, 0, len(w.recs))
		for i := range w.recs {
			ch, v, ignored, why := a.changeOf(&w.recs[i])
			switch v {
			case ignore:
				w.ignored++
			case refuse:
				w.dead = append(w.dead, deadLetter{&w.recs[i], why})
			default:
				if ch.v == nil {
					w.deletes++
				}
				w.ignoredFields += ignored
				keep = append(keep, w.recs[i])
				w.changes = append(w.changes, ch)
			}
		}
		w.recs = keep
	}
	r := newRun(live)
	if r.len() == 0 {
		return nil
	}
	src := &stageUpsertSource{runSource{r: r, row: make([]any, len(stageUpsertColumns))}}
	if _, err := a.tx.CopyFrom(ctx, pgx.Identifier{stageUpsert}, stageUpsertColumns, src); err != nil {
		return fmt.Errorf("copy into %s: %w", stageUpsert, err)
	}
	return a.place(ctx, r, 0, r.len(), func(lo, hi int, _ bool) (string, []any) {
		return a.tab.sql, []any{lo, hi}
	}, false)
}

// stageUpsertSource feeds the upsert staging table with the changes of
// the records that changeOf applies; it has no error of its own.
type stageUpsertSource struct{ runSource }

func (r *stageUpsertSource) Values() ([]any, error) {
	w, j := r.r.index(r.i - 1)
	rec, ch := &w.recs[j], &w.changes[j]
	r.row[0], r.row[1], r.row[2], r.row[3] = int32(r.i-1), w.b.Topic, int32(w.b.Partition), rec.Offset
	r.row[4], r.row[5], r.row[6] = kafkaKey(rec), rec.Time, ch.k
	if ch.v == nil {
		r.row[7] = nil
	} else {
		r.row[7] = ch.v
	}
	return r.row, nil
}
