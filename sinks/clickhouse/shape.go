package clickhouse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// ErrTableShape is wrapped by New's error for a table the sink cannot use
// as its mode needs: a raw or dead-letter table that exists with another
// layout (a column missing, of another type, or MATERIALIZED), a columns
// table that does not exist, has a column the client cannot insert, or
// has a kafka_* column of a type the record's topic, partition, offset,
// generation or time cannot go in (or, where the table resumes, that
// Resume cannot read). New refuses it at once, naming the table, what is
// wrong and the likely fix, before it creates any table: no retry mends
// it, and the partitions would otherwise fail every write or Resume after
// the sink said it was ready.
var ErrTableShape = errors.New("table does not fit the sink")

// chColumn is one column of a table, from system.columns.
type chColumn struct {
	name, typ string
	kind      string // default_kind: "", DEFAULT, MATERIALIZED, ALIAS, EPHEMERAL
}

// inspectColumns reads t's columns in their order; none when there is no
// table t.
func inspectColumns(ctx context.Context, conn driver.Conn, t ident) ([]chColumn, error) {
	rows, err := conn.Query(ctx, `SELECT name, type, default_kind FROM system.columns WHERE database = ? AND table = ? ORDER BY position`,
		t.db, t.name)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", t, err)
	}
	defer rows.Close()
	var cols []chColumn
	for rows.Next() {
		var c chColumn
		if err := rows.Scan(&c.name, &c.typ, &c.kind); err != nil {
			return nil, fmt.Errorf("read the columns of %s: %w", t, err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", t, err)
	}
	return cols, nil
}

// need is a column a layout needs: the types that will do (the first the
// one the sink creates it with), or a pattern of them.
type need struct {
	name  string
	types []string
	match *regexp.Regexp // instead of types, when set
	want  string         // the types, for the message, when match is set
}

func (n need) fits(typ string) bool {
	if n.match != nil {
		return n.match.MatchString(typ)
	}
	return slices.Contains(n.types, typ)
}

func (n need) wanted() string {
	if n.match != nil {
		return n.want
	}
	return strings.Join(n.types, " or ")
}

func (n need) created() string {
	if len(n.types) > 0 {
		return n.types[0]
	}
	return n.want
}

// layout is a table of the sink's own: the columns its inserts write and
// its reads (Resume, ReadAll) read.
type layout struct {
	what  string // for the message: "a mode=raw table"
	needs []need
	fix   string // the likely remedy, for the message
}

var (
	// millis is a DateTime64 that keeps milliseconds, in any zone: the
	// sink inserts and reads UTC instants.
	millis     = regexp.MustCompile(`^DateTime64\(([3-9])(, *'[^']*')?\)$`)
	topicTypes = []string{"LowCardinality(String)", "String"}
	recordCols = []need{
		{name: "kafka_topic", types: topicTypes}, {name: "kafka_partition", types: []string{"Int32"}},
		{name: "kafka_offset", types: []string{"Int64"}}, {name: "kafka_generation", types: []string{"Int64"}},
		{name: "kafka_key", types: []string{"Nullable(String)"}},
		{name: "kafka_timestamp", match: millis, want: "DateTime64(3, 'UTC') (a DateTime64 of 3 to 9 digits)"},
		{name: "value", types: []string{"Nullable(String)"}},
	}
	rawLayout = layout{
		what: "a mode=raw table",
		needs: append(slices.Clip(recordCols), need{name: "header_keys", types: []string{"Array(String)", "Array(LowCardinality(String))"}},
			need{name: "header_values", types: []string{"Array(Nullable(String))"}}),
		fix: "raw mode keeps each record whole in a table of its own layout, which it creates: to fill this table from the " +
			"records' JSON fields use mode=columns, else give table= a new name",
	}
	deadLayout = layout{
		what:  "the dead-letter table",
		needs: append(slices.Clip(recordCols), need{name: "error", types: []string{"String", "LowCardinality(String)"}}),
		fix: "the sink keeps the records it could not convert in a table of its own layout, which it creates: give " +
			paramDeadLetters + "= a new name (this table is not one the sink made)",
	}
)

// check returns nil when cols, an existing table's, have the layout, else
// an error wrapping ErrTableShape naming all that is wrong.
func (l layout) check(t ident, cols []chColumn) error {
	by := map[string]chColumn{}
	for _, c := range cols {
		by[c.name] = c
	}
	var missing, problems []string
	for _, n := range l.needs {
		c, ok := by[n.name]
		switch {
		case !ok:
			missing = append(missing, n.name+" "+n.created())
		case c.kind == "MATERIALIZED" || c.kind == "ALIAS":
			problems = append(problems, fmt.Sprintf("column %s is %s, and the sink inserts it", n.name, c.kind))
		case !n.fits(c.typ):
			problems = append(problems, fmt.Sprintf("column %s is %s, want %s", n.name, c.typ, n.wanted()))
		}
	}
	if len(missing) > 0 {
		problems = append([]string{"it lacks the columns " + strings.Join(missing, ", ")}, problems...)
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s as %s: %s; %s", ErrTableShape, t, l.what, strings.Join(problems, "; "), l.fix)
}

// probes are, for each kafka_* column of a columns table, the extreme
// value the record gives it: a column whose type refuses it would make a
// dead letter of every record (or, for the time, of each).
var probes = map[string]any{
	"kafka_topic":      strings.Repeat("t", 249), // Kafka's longest topic name
	"kafka_partition":  json.Number(strconv.Itoa(math.MaxInt32)),
	"kafka_offset":     json.Number(strconv.FormatInt(math.MaxInt64, 10)),
	"kafka_generation": json.Number(strconv.FormatInt(math.MaxInt64, 10)),
	"kafka_timestamp":  time.Date(2024, 5, 1, 12, 30, 0, 123e6, time.UTC),
}

// resumeColumns are the columns Resume reads; a columns table that has
// them all resumes from them.
var resumeColumns = []string{"kafka_topic", "kafka_partition", "kafka_offset", "kafka_generation"}

// checkColumns returns nil when the insertable columns of a columns table
// can be filled: the client can build each, and each kafka_* column takes
// what the record gives it. resumes says whether the table has every one
// of resumeColumns: Resume then compares kafka_topic with a string and
// takes the highest kafka_partition, kafka_offset and kafka_generation, so
// those must be a String and integers.
func checkColumns(t ident, cols []tableColumn, resumes bool) error {
	var problems []string
	for _, c := range cols {
		if _, err := column.Type(c.typ).Column(c.name, &column.ServerContext{Timezone: time.UTC}); err != nil {
			problems = append(problems, fmt.Sprintf("column %s is %s, which the sink's ClickHouse client cannot insert (%v): make it MATERIALIZED or ALIAS, or drop it", c.name, c.typ, err))
			continue
		}
		v, ok := probes[c.name]
		if !ok {
			continue
		}
		if err := probe(c, v); err != nil {
			problems = append(problems, fmt.Sprintf("column %s is %s, which cannot hold the record's %s: %v", c.name, c.typ, strings.TrimPrefix(c.name, "kafka_"), err))
			continue
		}
		if !resumes || !slices.Contains(resumeColumns, c.name) {
			continue
		}
		name := innerType(c.typ)
		switch {
		case c.name == "kafka_topic" && name != "String":
			problems = append(problems, fmt.Sprintf("column kafka_topic is %s: the sink resumes from the table (it has %s), and finds a partition's rows by kafka_topic = the topic: want String",
				c.typ, strings.Join(resumeColumns, ", ")))
		case c.name != "kafka_topic" && !strings.HasPrefix(name, "Int") && !strings.HasPrefix(name, "UInt"):
			want := "Int64"
			if c.name == "kafka_partition" {
				want = "Int32"
			}
			problems = append(problems, fmt.Sprintf("column %s is %s: the sink resumes from the table (it has %s), after the highest %s: want an integer type (%s)",
				c.name, c.typ, strings.Join(resumeColumns, ", "), c.name, want))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s as a mode=columns table: %s; the kafka_* columns are filled from the record, not its value: "+
		"change their types, or rename the columns if they are fields of the value", ErrTableShape, t, strings.Join(problems, "; "))
}

// probe converts v for column c as a write would (columnRow's path): its
// converter, then the column's Go type, then the client's column.
func probe(c tableColumn, v any) error {
	got, err := c.conv(v)
	if err != nil {
		return err
	}
	b, typed := newBuilder(c.typ, 1)
	if !b.fits(got) {
		return fmt.Errorf("a %T for this column", got)
	}
	if typed {
		return nil
	}
	col, err := column.Type(c.typ).Column(c.name, &column.ServerContext{Timezone: time.UTC})
	if err != nil {
		return err
	}
	return col.AppendRow(got)
}

// innerType is t without LowCardinality and Nullable around it, and
// without its arguments: Int64 of LowCardinality(Nullable(Int64)).
func innerType(t string) string {
	name, args := typeArgs(t)
	for (name == "LowCardinality" || name == "Nullable") && len(args) == 1 {
		name, args = typeArgs(args[0])
	}
	return name
}

// checkTables refuses, before anything is created, a table of the mode
// that exists in another shape: the raw table (raw mode) and the
// dead-letter table (both modes); in columns mode it reads the table's
// columns (readColumns') and checks them. The tables missing are created
// afterwards, in the sink's layout.
func (s *Sink) checkTables(ctx context.Context) error {
	var errs []error
	if s.cfg.mode == Raw {
		cols, err := inspectColumns(ctx, s.conn, s.cfg.table)
		if err != nil {
			return err
		}
		if len(cols) > 0 {
			errs = append(errs, rawLayout.check(s.cfg.table, cols))
		}
	} else {
		cols, err := readColumns(ctx, s.conn, s.cfg.table)
		if err != nil {
			return err
		}
		s.cols = cols
		have := map[string]bool{}
		for _, c := range cols {
			have[c.name] = true
		}
		s.resumes = !slices.ContainsFunc(resumeColumns, func(n string) bool { return !have[n] })
		errs = append(errs, checkColumns(s.cfg.table, cols, s.resumes))
	}
	dead, err := inspectColumns(ctx, s.conn, s.cfg.deadLetters)
	if err != nil {
		return err
	}
	if len(dead) > 0 {
		errs = append(errs, deadLayout.check(s.cfg.deadLetters, dead))
	}
	return sqlsink.JoinRefusals(errs)
}
