package harness_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// chOpen connects clickhouse-go to dsn; the connection is closed at
// cleanup.
func chOpen(t *testing.T, dsn string) driver.Conn {
	t.Helper()
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// chDedup is the context of a deduplicated insert with token.
func chDedup(ctx context.Context, token string) context.Context {
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"insert_deduplicate":         1,
		"insert_deduplication_token": token,
		"async_insert":               0,
	}))
}

func TestClickHouseLifecycle(t *testing.T) {
	ch := harness.StartClickHouse(t)
	for _, addr := range []string{ch.NativeAddr(), ch.HTTPAddr()} {
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("address %s is not on loopback", addr)
		}
	}
	if got := ch.QueryInt(t, `SELECT count() FROM system.databases WHERE name = ? AND engine = 'Atomic'`, ch.Database()); got != 1 {
		t.Fatalf("database %s of engine Atomic: %d, want 1", ch.Database(), got)
	}
	ch.Exec(t, `CREATE TABLE kept (n UInt64) ENGINE = MergeTree ORDER BY n`)
	ch.Exec(t, `INSERT INTO kept VALUES (1), (2)`)

	// A crash keeps what was inserted.
	conn := chOpen(t, ch.DSN())
	ctx := harness.Context(t, time.Minute)
	ch.Kill()
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("ping while killed: nil error")
	}
	if ch.PID() != 0 {
		t.Errorf("PID while killed: %d, want 0", ch.PID())
	}
	ch.Kill() // no-op
	ch.Start()
	ch.Start() // no-op
	if n := ch.QueryInt(t, `SELECT sum(n) FROM kept`); n != 3 {
		t.Fatalf("after a crash: sum %d, want 3", n)
	}
	ch.Restart()
	if rows := ch.Query(t, `SELECT n, toString(n) FROM kept ORDER BY n`); fmt.Sprint(rows) != "[[1 1] [2 2]]" {
		t.Fatalf("after Restart: %v, want [[1 1] [2 2]]", rows)
	}
}

// TestClickHouseDeduplication checks what the ClickHouse sink builds on:
// an insert repeated with the same insert_deduplication_token is kept once,
// over either protocol, by Exec or by a batch, and also when the engine
// crashed in between.
func TestClickHouseDeduplication(t *testing.T) {
	ch := harness.StartClickHouse(t)
	ch.Exec(t, `CREATE TABLE dedup (proto String, how String, n UInt64)
		ENGINE = MergeTree ORDER BY (proto, how, n)
		SETTINGS non_replicated_deduplication_window = 100`)
	inserts := map[string]func(ctx context.Context, conn driver.Conn, proto string) error{
		"exec": func(ctx context.Context, conn driver.Conn, proto string) error {
			return conn.Exec(ctx, `INSERT INTO dedup VALUES (?, 'exec', 1), (?, 'exec', 2)`, proto, proto)
		},
		"batch": func(ctx context.Context, conn driver.Conn, proto string) error {
			b, err := conn.PrepareBatch(ctx, `INSERT INTO dedup`)
			if err != nil {
				return err
			}
			for n := uint64(1); n <= 2; n++ {
				if err := b.Append(proto, "batch", n); err != nil {
					return err
				}
			}
			return b.Send()
		},
	}
	dsns := map[string]string{"native": ch.DSN(), "http": ch.HTTPDSN()}
	insertAll := func(round string) {
		t.Helper()
		for proto, dsn := range dsns {
			conn := chOpen(t, dsn)
			for how, insert := range inserts {
				ctx := chDedup(harness.Context(t, time.Minute), proto+"/"+how)
				if err := insert(ctx, conn, proto); err != nil {
					t.Fatalf("%s: insert %s over %s: %v", round, how, proto, err)
				}
			}
			_ = conn.Close()
		}
	}
	check := func(round string) {
		t.Helper()
		rows := ch.Query(t, `SELECT proto, how, count() FROM dedup GROUP BY proto, how ORDER BY proto, how`)
		if got, want := fmt.Sprint(rows), "[[http batch 2] [http exec 2] [native batch 2] [native exec 2]]"; got != want {
			t.Errorf("%s: %s, want %s (rows per protocol and way of inserting)", round, got, want)
		}
	}
	insertAll("first")
	check("first")
	insertAll("again")
	check("again")
	ch.Kill()
	ch.Start()
	insertAll("after a crash")
	check("after a crash")
	// A new token is a new insert.
	ch.Exec(t, `INSERT INTO dedup SETTINGS insert_deduplicate = 1, insert_deduplication_token = 'other' VALUES ('native', 'exec', 3)`)
	if n := ch.QueryInt(t, `SELECT count() FROM dedup`); n != 9 {
		t.Errorf("after an insert with a new token: %d rows, want 9", n)
	}
}
