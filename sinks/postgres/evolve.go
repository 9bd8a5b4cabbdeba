package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// recheckAfter is how long a value schema whose fields the table lacks is
// trusted to still lack them: after that, the next block of the schema
// reads the catalog again, so that a column added by hand or by another
// replica gets filled without a restart.
const recheckAfter = time.Minute

// table is what columns and upsert modes know of the table: the columns
// the insert fills and the statement built from them. It is never changed
// once made: a table that gained columns is a new table value.
type table struct {
	cols  []column
	names map[string]bool    // every column, generated ones included
	fill  map[string]*column // the columns a field of the value fills, by name
	sql   string             // planColumns' insert, or planUpsert's statement
}

// newTable makes the table of the columns readColumns read.
func (s *Sink) newTable(cols []column, names map[string]bool) *table {
	t := &table{cols: cols, names: names, fill: make(map[string]*column, len(cols))}
	for i := range cols {
		if !cols[i].meta {
			t.fill[cols[i].raw] = &cols[i]
		}
	}
	if s.cfg.mode == Upsert {
		t.sql = planUpsert(s.cfg.table, cols, s.key)
	} else {
		t.sql = planColumns(s.cfg.table, cols)
	}
	return t
}

// readTable reads the table's columns again, through db (the write's
// transaction, which sees the columns it added itself).
func (s *Sink) readTable(ctx context.Context, db querier) (*table, error) {
	_, cols, names, err := readColumns(ctx, db, s.cfg.table, s.cfg.mode)
	if err != nil {
		return nil, err
	}
	return s.newTable(cols, names), nil
}

// reload reads the table again, outside any write, and makes it the
// sink's; every schema is checked again.
func (s *Sink) reload(ctx context.Context) error {
	tab, err := s.readTable(ctx, s.pool)
	if err != nil {
		return err
	}
	s.schemaMu.Lock()
	defer s.schemaMu.Unlock()
	s.tab.Store(tab)
	clear(s.checked)
	return nil
}

// covers reports whether t fills every column o fills.
func (t *table) covers(o *table) bool {
	for name := range o.fill {
		if t.fill[name] == nil {
			return false
		}
	}
	return true
}

// fieldPlan is what the fields of one schema come to in one table.
type fieldPlan struct {
	tab *table
	// ignored are the top-level fields no column takes: without a column,
	// or named as a column filled from the record (kafka_*).
	ignored []string
	// bytea are the Bytes fields whose column is bytea: their base64 is
	// decoded before PostgreSQL reads them.
	bytea []string
}

func planFields(sc *sinks.Schema, tab *table) *fieldPlan {
	p := &fieldPlan{tab: tab}
	for _, f := range sc.Fields {
		c := tab.fill[f.Name]
		switch {
		case c == nil:
			p.ignored = append(p.ignored, f.Name)
		case c.bytea && f.Type.Kind == sinks.BytesKind:
			p.bytea = append(p.bytea, f.Name)
		}
	}
	return p
}

// fieldPlan returns sc's plan in tab, made once per schema and table.
func (s *Sink) fieldPlan(sc *sinks.Schema, tab *table) *fieldPlan {
	s.schemaMu.Lock()
	defer s.schemaMu.Unlock()
	return s.fieldPlanLocked(sc, tab)
}

func (s *Sink) fieldPlanLocked(sc *sinks.Schema, tab *table) *fieldPlan {
	if p := s.plans[sc.ID]; p != nil && p.tab == tab {
		return p
	}
	p := planFields(sc, tab)
	s.plans[sc.ID] = p
	return p
}

// fieldPlan returns sc's plan in the attempt's table, asking the sink
// once per schema and attempt.
func (a *attempt) fieldPlan(sc *sinks.Schema) *fieldPlan {
	if p := a.plans[sc.ID]; p != nil {
		return p
	}
	p := a.s.fieldPlan(sc, a.tab)
	a.plans[sc.ID] = p
	return p
}

// needsCheck reports whether the catalog must be read for a block of
// value schema sc: a schema not seen yet may bring fields that another
// replica gave columns already (or that evolve=add-columns adds), and one
// whose fields were missing is looked at again after recheckAfter.
func (s *Sink) needsCheck(sc *sinks.Schema, tab *table) bool {
	s.schemaMu.Lock()
	defer s.schemaMu.Unlock()
	at, ok := s.checked[sc.ID]
	if !ok {
		return true
	}
	return time.Since(at) >= s.recheck && len(s.fieldPlanLocked(sc, tab).ignored) > 0
}

// newColumn is a column evolve=add-columns adds for a field.
type newColumn struct {
	name, typ string
}

// prepareTable settles the table the attempt fills: the sink's, unless a
// block brings a value schema to check, for which it reads the catalog in
// the transaction and, with evolve=add-columns, adds the columns the
// schema's fields lack, before any row, so that the block fills them. The
// sink takes the table the attempt used once it commits (publish).
func (a *attempt) prepareTable(ctx context.Context, live []*blockWrite) error {
	s := a.s
	a.tab = s.tab.Load()
	a.plans = map[int]*fieldPlan{}
	if s.cfg.envelope == Debezium {
		return nil // the schema's fields are the event's, not the row's
	}
	seen := map[int]bool{}
	for _, w := range live {
		for i := range w.recs {
			sc := sqlsink.ValueSchema(&w.recs[i], s.cfg.inferColumns)
			if sc == nil || seen[sc.ID] {
				continue
			}
			seen[sc.ID] = true
			if s.needsCheck(sc, a.tab) {
				a.checked = append(a.checked, sc)
			}
		}
	}
	if len(a.checked) == 0 {
		return nil
	}
	tab, err := s.readTable(ctx, a.tx)
	if err != nil {
		return err
	}
	if s.cfg.evolve == AddColumns {
		if a.added = missingColumns(a.checked, tab); len(a.added) > 0 {
			if err := a.addColumns(ctx); err != nil {
				return err
			}
			if tab, err = s.readTable(ctx, a.tx); err != nil {
				return err
			}
		}
	}
	if !slices.Equal(tab.cols, a.tab.cols) {
		a.tab = tab
	} // else keep the sink's, and the plans made for it
	return nil
}

// missingColumns are the columns the fields of schemas need and tab lacks,
// each once (the first schema's type wins). Fields named kafka_* are the
// record's columns, not the value's, and a name PostgreSQL would cut to 63
// bytes would not match its field: both are left out.
func missingColumns(schemas []*sinks.Schema, tab *table) []newColumn {
	var add []newColumn
	seen := map[string]bool{}
	for _, sc := range schemas {
		for _, f := range sc.Fields {
			n := f.Name
			if tab.names[n] || seen[n] || n == "" || len(n) > 63 || strings.ContainsRune(n, 0) || strings.HasPrefix(n, "kafka_") {
				continue
			}
			seen[n] = true
			add = append(add, newColumn{name: n, typ: columnType(f.Type)})
		}
	}
	return add
}

// addColumns adds a.added to the table in the attempt's transaction.
// IF NOT EXISTS lets two writers add one column: the second waits for the
// first's lock and then finds it. The schema lock makes evolving writers
// take their turns, and keeps them off New's table creation.
func (a *attempt) addColumns(ctx context.Context) error {
	t := a.s.cfg.table.Sanitize()
	adds := make([]string, len(a.added))
	for i, c := range a.added {
		adds[i] = "ADD COLUMN IF NOT EXISTS " + pgx.Identifier{c.name}.Sanitize() + " " + c.typ
	}
	batch := &pgx.Batch{}
	batch.Queue(`SELECT pg_advisory_xact_lock($1)`, int64(schemaLock))
	batch.Queue(`ALTER TABLE ` + t + ` ` + strings.Join(adds, ", "))
	if err := a.tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("add columns to %s: %w", t, err)
	}
	return nil
}

// columnType is the PostgreSQL type of a new column for a field of kind
// t: the type whose input reads the field's decoded JSON as it is.
func columnType(t sinks.FieldType) string {
	switch t.Kind {
	case sinks.Boolean:
		return "boolean"
	case sinks.Int:
		return "integer"
	case sinks.Long:
		return "bigint"
	case sinks.Float:
		return "real"
	case sinks.Double:
		return "double precision"
	case sinks.String, sinks.Enum:
		return "text"
	case sinks.UUID:
		return "uuid"
	case sinks.BytesKind:
		return "bytea"
	case sinks.Timestamp:
		return "timestamptz"
	case sinks.LocalTimestamp:
		return "timestamp"
	case sinks.Date:
		return "date"
	case sinks.Time:
		return "time"
	case sinks.Decimal:
		// numeric(p,s) takes 1 <= p <= 1000, 0 <= s <= p on every supported
		// version; anything else keeps every digit in a plain numeric.
		if t.Precision >= 1 && t.Precision <= 1000 && t.Scale >= 0 && t.Scale <= t.Precision {
			return fmt.Sprintf("numeric(%d,%d)", t.Precision, t.Scale)
		}
		return "numeric"
	case sinks.Duration:
		return "interval"
	}
	return "jsonb" // JSONValue, and any kind newer than this sink: JSON as it is
}

// publish makes the table the attempt committed with the sink's, and
// records its schemas as checked. A table read before another write added
// a column does not replace the one with the column; a table that lost
// columns too (dropped by hand) does, and every schema is checked again.
func (s *Sink) publish(a *attempt) {
	if a.tab == nil {
		return
	}
	s.schemaMu.Lock()
	defer s.schemaMu.Unlock()
	if cur := s.tab.Load(); a.tab != cur {
		switch {
		case a.tab.covers(cur):
			s.tab.Store(a.tab)
		case cur.covers(a.tab):
		default:
			s.tab.Store(a.tab)
			clear(s.checked)
		}
	}
	if len(a.added) > 0 {
		names := make([]string, len(a.added))
		for i, c := range a.added {
			names[i] = c.name + " " + c.typ
		}
		s.ddl.Add(1)
		s.cfg.log.Info("columns added", zap.String("table", s.cfg.table.Sanitize()), zap.Strings("columns", names))
	}
	now := time.Now()
	tab := s.tab.Load()
	for _, sc := range a.checked {
		s.checked[sc.ID] = now
		if p := s.fieldPlanLocked(sc, tab); len(p.ignored) > 0 && !s.logged[sc.ID] {
			s.logged[sc.ID] = true
			s.cfg.log.Warn("fields without a column are ignored",
				zap.String("table", s.cfg.table.Sanitize()), zap.Int("schema", sc.ID), zap.String("subject", sc.Subject),
				zap.Strings("fields", p.ignored), zap.Stringer("evolve", s.cfg.evolve))
		}
	}
}
