package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ErrNoDeduplication is wrapped by New's error for a table that would not
// drop a repeated insert: a MergeTree without
// non_replicated_deduplication_window, or an engine that does not
// deduplicate at all. at_least_once=true accepts such a table.
var ErrNoDeduplication = errors.New("the table does not deduplicate inserts")

// recordColumnsDDL are the columns the raw and dead-letter tables both
// keep of a record.
const recordColumnsDDL = `	kafka_topic      LowCardinality(String),
	kafka_partition  Int32,
	kafka_offset     Int64,
	kafka_generation Int64,
	kafka_key        Nullable(String),
	kafka_timestamp  DateTime64(3, 'UTC'),
	value            Nullable(String),
`

// rawColumns are the columns of a raw table, in the order of an insert.
var rawColumns = []string{"kafka_topic", "kafka_partition", "kafka_offset", "kafka_generation",
	"kafka_key", "kafka_timestamp", "value", "header_keys", "header_values"}

func createRaw(t ident) string {
	return `CREATE TABLE IF NOT EXISTS ` + t.String() + ` (
` + recordColumnsDDL + `	header_keys      Array(String),
	header_values    Array(Nullable(String))
) ENGINE = MergeTree
ORDER BY (kafka_topic, kafka_partition, kafka_offset)
SETTINGS non_replicated_deduplication_window = ` + strconv.Itoa(DefaultWindow)
}

// deadColumns are the columns of the dead-letter table, in the order of
// an insert.
var deadColumns = []string{"kafka_topic", "kafka_partition", "kafka_offset", "kafka_generation",
	"kafka_key", "kafka_timestamp", "value", "error"}

func createDead(t ident) string {
	return `CREATE TABLE IF NOT EXISTS ` + t.String() + ` (
` + recordColumnsDDL + `	error            String,
	failed_at        DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree
ORDER BY (kafka_topic, kafka_partition, kafka_offset)
SETTINGS non_replicated_deduplication_window = ` + strconv.Itoa(DefaultWindow)
}

// dedupInfo is what New found out about a table's deduplication.
type dedupInfo struct {
	engine     string
	replicated bool
	window     int64 // the number of inserts whose tokens are remembered
	// partitioned: the table has a partition key, so that an insert of rows
	// of several table partitions is several parts, not atomic as a whole.
	partitioned bool
	// keyedByOffset: the sorting key holds kafka_topic, kafka_partition and
	// kafka_offset, so that no merge folds the rows of two offsets
	// together, whatever the engine.
	keyedByOffset bool
	// fsyncInsert and fsyncDirectory are the table's fsync_after_insert
	// and fsync_part_directory (its own, or the server's default).
	fsyncInsert, fsyncDirectory bool
}

// folds reports whether merges may fold, drop or rewrite rows: a MergeTree
// other than the plain one (Replacing, Aggregating, Collapsing,
// VersionedCollapsing, Coalescing) unless its sorting key keeps every
// offset's row apart; and always a SummingMergeTree, which drops a row
// whose summed columns are all zero even as it is inserted, and a
// GraphiteMergeTree, which rolls rows up by time.
func (d dedupInfo) folds() bool {
	switch strings.TrimPrefix(strings.TrimPrefix(d.engine, "Replicated"), "Shared") {
	case "MergeTree":
		return false
	case "SummingMergeTree", "GraphiteMergeTree":
		return true
	}
	return !d.keyedByOffset
}

// keyHasOffset reports whether a sorting key (system.tables.sorting_key:
// expressions separated by commas) names kafka_topic, kafka_partition and
// kafka_offset as bare columns.
func keyHasOffset(sortingKey string) bool {
	have := map[string]bool{}
	for _, e := range strings.Split(sortingKey, ",") {
		have[strings.Trim(strings.TrimSpace(e), "`\"")] = true
	}
	return have["kafka_topic"] && have["kafka_partition"] && have["kafka_offset"]
}

var (
	windowSetting     = regexp.MustCompile(`\bnon_replicated_deduplication_window\s*=\s*'?(\d+)`)
	replWindowSetting = regexp.MustCompile(`\breplicated_deduplication_window\s*=\s*'?(\d+)`)
)

// checkDedup reads the table's engine and deduplication window.
func checkDedup(ctx context.Context, conn driver.Conn, t ident) (dedupInfo, error) {
	var d dedupInfo
	var create, partitionKey, sortingKey string
	err := conn.QueryRow(ctx, `SELECT engine, create_table_query, partition_key, sorting_key FROM system.tables WHERE database = ? AND name = ?`,
		t.db, t.name).Scan(&d.engine, &create, &partitionKey, &sortingKey)
	if err != nil {
		return d, fmt.Errorf("read the engine of %s: %w", t, err)
	}
	d.replicated = strings.HasPrefix(d.engine, "Replicated") || strings.HasPrefix(d.engine, "Shared")
	d.partitioned = partitionKey != ""
	d.keyedByOffset = keyHasOffset(sortingKey)
	if !strings.HasSuffix(d.engine, "MergeTree") {
		return d, nil
	}
	if d.fsyncInsert, err = treeSetting(ctx, conn, create, "fsync_after_insert"); err != nil {
		return d, err
	}
	if d.fsyncDirectory, err = treeSetting(ctx, conn, create, "fsync_part_directory"); err != nil {
		return d, err
	}
	re, setting := windowSetting, "non_replicated_deduplication_window"
	if d.replicated {
		re, setting = replWindowSetting, "replicated_deduplication_window"
	}
	if m := re.FindStringSubmatch(create); m != nil {
		d.window, _ = strconv.ParseInt(m[1], 10, 64)
		return d, nil
	}
	// Not set on the table: the server's default for MergeTree tables.
	var v string
	if err := conn.QueryRow(ctx, `SELECT value FROM system.merge_tree_settings WHERE name = ?`, setting).Scan(&v); err != nil {
		return d, fmt.Errorf("read the server's %s: %w", setting, err)
	}
	d.window, _ = strconv.ParseInt(v, 10, 64)
	return d, nil
}

// treeSetting reads a boolean MergeTree setting of a table: as its CREATE
// statement sets it, else the server's default.
func treeSetting(ctx context.Context, conn driver.Conn, create, name string) (bool, error) {
	if m := regexp.MustCompile(`\b` + name + `\s*=\s*'?(\w+)`).FindStringSubmatch(create); m != nil {
		return m[1] == "1" || strings.EqualFold(m[1], "true"), nil
	}
	var v string
	if err := conn.QueryRow(ctx, `SELECT value FROM system.merge_tree_settings WHERE name = ?`, name).Scan(&v); err != nil {
		return false, fmt.Errorf("read the server's %s: %w", name, err)
	}
	return v == "1" || strings.EqualFold(v, "true"), nil
}

// refusal is the message for a table that does not deduplicate: what to
// set, or how to opt out.
func (d dedupInfo) refusal(t ident) error {
	switch {
	case !strings.HasSuffix(d.engine, "MergeTree"):
		return fmt.Errorf("%w: %s has engine %s, which does not deduplicate inserts: use a MergeTree table with "+
			"SETTINGS non_replicated_deduplication_window = %d, or a Replicated one (a Distributed table's inserts are "+
			"deduplicated only by its local tables: point table= at one of them); or add %s=true to the URL to accept "+
			"duplicates after a crash (at-least-once)", ErrNoDeduplication, t, d.engine, DefaultWindow, paramAtLeastOnce)
	case d.replicated:
		return fmt.Errorf("%w: %s has replicated_deduplication_window = 0: set it (ALTER TABLE %s MODIFY SETTING "+
			"replicated_deduplication_window = %d); or add %s=true to the URL to accept duplicates after a crash (at-least-once)",
			ErrNoDeduplication, t, t, DefaultWindow, paramAtLeastOnce)
	}
	return fmt.Errorf("%w: %s is a %s without non_replicated_deduplication_window: set it (ALTER TABLE %s MODIFY SETTING "+
		"non_replicated_deduplication_window = %d), or use a Replicated table; or add %s=true to the URL to accept "+
		"duplicates after a crash (at-least-once)", ErrNoDeduplication, t, d.engine, t, DefaultWindow, paramAtLeastOnce)
}

// tableColumn is one insertable column of a columns-mode table.
type tableColumn struct {
	name, typ string
	conv      converter
}

// readColumns reads the columns an insert can fill: all but MATERIALIZED
// and ALIAS ones.
func readColumns(ctx context.Context, conn driver.Conn, t ident) ([]tableColumn, error) {
	all, err := inspectColumns(ctx, conn, t)
	if err != nil {
		return nil, err
	}
	var cols []tableColumn
	for _, c := range all {
		if c.kind == "MATERIALIZED" || c.kind == "ALIAS" {
			continue
		}
		cols = append(cols, tableColumn{name: c.name, typ: c.typ, conv: columnConverter(c.typ)})
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("%w: table %s not found, or without columns to insert: columns mode fills an existing table "+
			"(create it first, or use mode=raw, which creates a table of its own)", ErrTableShape, t)
	}
	return cols, nil
}

// insertSQL is the INSERT of the named columns, for PrepareBatch.
func insertSQL(t ident, cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = quoteIdent(c)
	}
	return "INSERT INTO " + t.String() + " (" + strings.Join(q, ", ") + ")"
}
