package harness

import (
	"context"
	_ "embed"
	"reflect"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Exec runs one SQL statement in Database over the native protocol, with
// clickhouse-go's positional binding of args.
func (c *ClickHouse) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	c.execIn(t, ClickHouseDatabase, sql, args...)
}

func (c *ClickHouse) execIn(t testing.TB, db, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), chOpTimeout)
	defer cancel()
	conn, err := clickhouse.Open(c.options(db))
	if err != nil {
		t.Fatalf("clickhouse: connect: %v", err)
	}
	defer conn.Close()
	if err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("clickhouse: %s: %v", sql, err)
	}
}

// Query runs a query in Database over the native protocol and returns its
// rows, each value of the Go type clickhouse-go scans the column's type
// into (uint64 for UInt64, string for String, time.Time for DateTime, ...).
func (c *ClickHouse) Query(t testing.TB, sql string, args ...any) [][]any {
	t.Helper()
	rows, err := c.query(t, sql, args...)
	if err != nil {
		t.Fatalf("clickhouse: %s: %v", sql, err)
	}
	return rows
}

// TryQuery is Query that returns its error, for a query that may fail
// (a table that does not exist yet).
func (c *ClickHouse) TryQuery(t testing.TB, sql string, args ...any) ([][]any, error) {
	t.Helper()
	return c.query(t, sql, args...)
}

// QueryInt runs a query of one row and one column of an integer type in
// Database, and returns its value.
func (c *ClickHouse) QueryInt(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	rows := c.Query(t, sql, args...)
	if len(rows) != 1 || len(rows[0]) != 1 {
		t.Fatalf("clickhouse: %s: %d rows, want 1 row of 1 column", sql, len(rows))
	}
	v := reflect.ValueOf(rows[0][0])
	switch {
	case v.CanInt():
		return v.Int()
	case v.CanUint():
		return int64(v.Uint())
	}
	t.Fatalf("clickhouse: %s: a %T, want an integer", sql, rows[0][0])
	return 0
}

func (c *ClickHouse) query(t testing.TB, sql string, args ...any) ([][]any, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), chOpTimeout)
	defer cancel()
	conn := c.open(t)
	defer conn.Close()
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	var out [][]any
	for rows.Next() {
		ptrs := make([]any, len(types))
		for i, ct := range types {
			ptrs[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := make([]any, len(ptrs))
		for i, p := range ptrs {
			row[i] = reflect.ValueOf(p).Elem().Interface()
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// open connects to Database over the native protocol.
func (c *ClickHouse) open(t testing.TB) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(c.options(ClickHouseDatabase))
	if err != nil {
		t.Fatalf("clickhouse: connect: %v", err)
	}
	return conn
}

func (c *ClickHouse) options(db string) *clickhouse.Options {
	return &clickhouse.Options{
		Addr:        []string{c.NativeAddr()},
		Auth:        clickhouse.Auth{Database: db},
		DialTimeout: 5 * time.Second,
	}
}
