package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// Columns mode with evolve=add-columns: a table made at start when it is
// missing, and columns added for the fields of a record's value schema
// the table lacks, before the block that brings them is inserted.

// createColumns makes a columns table of the kafka_* columns alone, in the
// engine and order that keep exactly-once (a MergeTree ordered by
// topic, partition and offset, deduplicating): the first record's schema
// adds the rest.
func createColumns(t ident) string {
	return `CREATE TABLE IF NOT EXISTS ` + t.String() + ` (
	kafka_topic      LowCardinality(String),
	kafka_partition  Int32,
	kafka_offset     Int64,
	kafka_generation Int64,
	kafka_key        Nullable(String),
	kafka_timestamp  DateTime64(3, 'UTC')
) ENGINE = MergeTree
ORDER BY (kafka_topic, kafka_partition, kafka_offset)
SETTINGS non_replicated_deduplication_window = ` + strconv.Itoa(DefaultWindow)
}

// tableExists is ClickHouse's TABLE_ALREADY_EXISTS: two replicas made the
// table at once.
const tableExists = 57

// createMissing makes the table when it is missing (evolve=add-columns).
func (s *Sink) createMissing(ctx context.Context) error {
	cols, err := inspectColumns(ctx, s.conn, s.cfg.table)
	if err != nil || len(cols) > 0 {
		return err
	}
	var ex *proto.Exception
	if err := s.conn.Exec(ctx, createColumns(s.cfg.table)); err != nil && !(errors.As(err, &ex) && ex.Code == tableExists) {
		return fmt.Errorf("create %s: %w", s.cfg.table, err)
	}
	s.ddl.Add(1)
	s.cfg.log.Info("table created", zap.String("table", s.cfg.table.String()), zap.String("order_by", "kafka_topic, kafka_partition, kafka_offset"))
	return nil
}

// evolve adds the columns the value schemas of b's records need and the
// table lacks, each Nullable (the rows before hold NULL), and reads the
// table's columns again. Schemas are looked at once each. ADD COLUMN IF
// NOT EXISTS lets replicas that add one column at once both succeed.
func (s *Sink) evolve(ctx context.Context, b *sinks.Block) error {
	var add []string
	var names []string
	s.colsMu.RLock()
	have := make(map[string]bool, len(s.cols))
	for _, c := range s.cols {
		have[c.name] = true
	}
	var schemas []int
	for i := range b.Records {
		sc := sqlsink.ValueSchema(&b.Records[i], s.cfg.inferColumns)
		if sc == nil || s.evolved[sc.ID] || slices.Contains(schemas, sc.ID) {
			continue
		}
		schemas = append(schemas, sc.ID)
		for _, f := range sc.Fields {
			if have[f.Name] || f.Name == "" || strings.HasPrefix(f.Name, "kafka_") {
				continue
			}
			have[f.Name] = true
			typ := "Nullable(" + columnType(f.Type) + ")"
			add = append(add, "ADD COLUMN IF NOT EXISTS "+quoteIdent(f.Name)+" "+typ)
			names = append(names, f.Name+" "+typ)
		}
	}
	s.colsMu.RUnlock()
	if len(schemas) == 0 {
		return nil
	}
	if len(add) > 0 {
		if err := s.conn.Exec(ctx, `ALTER TABLE `+s.cfg.table.String()+` `+strings.Join(add, ", ")); err != nil {
			return fmt.Errorf("add columns to %s: %w", s.cfg.table, err)
		}
		s.ddl.Add(1)
		s.cfg.log.Info("columns added", zap.String("table", s.cfg.table.String()), zap.Strings("columns", names))
	}
	cols, err := readColumns(ctx, s.conn, s.cfg.table)
	if err != nil {
		return err
	}
	s.colsMu.Lock()
	defer s.colsMu.Unlock()
	s.cols = cols
	for _, id := range schemas {
		s.evolved[id] = true
	}
	return nil
}

// DDL counts the statements that changed the table's shape: a table
// created, columns added.
func (s *Sink) DDL() int64 { return s.ddl.Load() }

// columnType is the ClickHouse type of a new column for a field of kind
// t: one its converter fills from the field's decoded JSON.
func columnType(t sinks.FieldType) string {
	switch t.Kind {
	case sinks.Boolean:
		return "Bool"
	case sinks.Int:
		return "Int32"
	case sinks.Long:
		return "Int64"
	case sinks.Float:
		return "Float32"
	case sinks.Double:
		return "Float64"
	case sinks.UUID:
		return "UUID"
	case sinks.Timestamp:
		return "DateTime64(3, 'UTC')"
	case sinks.LocalTimestamp:
		return "DateTime64(3)"
	case sinks.Date:
		return "Date32"
	case sinks.Decimal:
		if t.Precision >= 1 && t.Precision <= 76 && t.Scale >= 0 && t.Scale <= t.Precision {
			return fmt.Sprintf("Decimal(%d, %d)", t.Precision, t.Scale)
		}
	}
	return "String" // strings, enums, bytes, times, durations, JSON: as decoded
}
