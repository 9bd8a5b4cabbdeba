package harness_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

func pgQueryInt(t *testing.T, url, sql string) (int64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int64
	err = conn.QueryRow(ctx, sql).Scan(&n)
	return n, err
}

func TestPostgresLifecycle(t *testing.T) {
	pg := harness.StartPostgres(t)
	if !strings.HasPrefix(pg.Addr(), "127.0.0.1:") {
		t.Errorf("Addr %s is not on loopback", pg.Addr())
	}
	pg.Exec(t, `CREATE TABLE kept (n integer)`)
	pg.Exec(t, `INSERT INTO kept VALUES (1), (2)`)

	// A crash keeps what was committed.
	pg.Stop()
	if _, err := pgQueryInt(t, pg.URL(), `SELECT 1`); err == nil {
		t.Fatal("query while stopped: nil error")
	}
	pg.Stop() // no-op
	pg.Start()
	pg.Start() // no-op
	if n, err := pgQueryInt(t, pg.URL(), `SELECT sum(n) FROM kept`); err != nil || n != 3 {
		t.Fatalf("after a crash: sum %d, %v; want 3", n, err)
	}

	// Restart cuts a connection in use.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	pg.Restart()
	if _, err := conn.Exec(ctx, `SELECT 1`); err == nil {
		t.Error("a connection from before Restart still works")
	}
	if n, err := pgQueryInt(t, pg.URL(), `SELECT count(*) FROM kept`); err != nil || n != 2 {
		t.Fatalf("after Restart: %d rows, %v; want 2", n, err)
	}

	// Databases are separate.
	a, b := pg.NewDatabase(t), pg.NewDatabase(t)
	if a == b {
		t.Fatalf("NewDatabase twice: %s both times", a)
	}
	pg.ExecIn(t, a, `CREATE TABLE only_in_a (n integer)`)
	if _, err := pgQueryInt(t, b, `SELECT count(*) FROM only_in_a`); err == nil {
		t.Error("a table of one new database is seen in another")
	}
}

func TestPostgresCleanup(t *testing.T) {
	var dir string
	t.Run("cluster", func(t *testing.T) {
		pg := harness.StartPostgres(t)
		n, err := pgQueryInt(t, pg.URL(), `SELECT count(*) FROM pg_settings WHERE name = 'data_directory'`)
		if err != nil || n != 1 {
			t.Fatal(n, err)
		}
		conn, err := pgx.Connect(context.Background(), pg.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if err := conn.QueryRow(context.Background(), `SELECT current_setting('data_directory')`).Scan(&dir); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("data directory %s still there after the test: %v", dir, err)
	}
}
