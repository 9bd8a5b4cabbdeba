package harness_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
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

	// Killed from outside (say, by the OOM killer), it is no longer
	// running, and Start brings it back.
	if err := syscall.Kill(ch.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	harness.Await(t, 10*time.Second, "the engine to be seen dead", func() bool { return ch.PID() == 0 })
	ch.Start()
	if n := ch.QueryInt(t, `SELECT count() FROM kept`); n != 2 {
		t.Fatalf("after a kill from outside: %d rows, want 2", n)
	}

	// Aborting on its own (SIGABRT, as libchdb has been seen to under
	// load), it is started again by itself, on the same data.
	pid := ch.PID()
	if err := syscall.Kill(pid, syscall.SIGABRT); err != nil {
		t.Fatal(err)
	}
	harness.Await(t, 30*time.Second, "the engine started again after its abort", func() bool {
		p := ch.PID()
		return p != 0 && p != pid && ch.Aborts.Load() == 1
	})
	if n := ch.QueryInt(t, `SELECT count() FROM kept`); n != 2 {
		t.Fatalf("after an abort: %d rows, want 2", n)
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

// TestClickHouseCredentials connects as ClickHouseUser over both
// protocols, and with a wrong password over HTTP, which the engine
// survives (over the native protocol it does not: see ClickHouse).
func TestClickHouseCredentials(t *testing.T) {
	ch := harness.StartClickHouse(t)
	ctx := harness.Context(t, time.Minute)
	as := func(dsn, password string) (string, error) {
		scheme, rest, _ := strings.Cut(dsn, "://")
		conn := chOpen(t, scheme+"://"+harness.ClickHouseUser+":"+password+"@"+rest)
		defer conn.Close()
		var user string
		err := conn.QueryRow(ctx, `SELECT currentUser()`).Scan(&user)
		return user, err
	}
	for _, dsn := range []string{ch.DSN(), ch.HTTPDSN()} {
		if user, err := as(dsn, harness.ClickHousePassword); err != nil || user != harness.ClickHouseUser {
			t.Errorf("%s as %s: user %q, %v", dsn, harness.ClickHouseUser, user, err)
		}
	}
	if _, err := as(ch.HTTPDSN(), "wrong"); err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
		t.Errorf("http with a wrong password: %v, want AUTHENTICATION_FAILED", err)
	}
	if n := ch.QueryInt(t, `SELECT 1`); n != 1 || ch.PID() == 0 {
		t.Errorf("after a wrong password over http: SELECT 1 = %d, PID %d", n, ch.PID())
	}
}

// TestClickHouseNoOrphan kills a test process that runs an engine, by
// SIGKILL, so that no cleanup runs: the engine must go with it.
func TestClickHouseNoOrphan(t *testing.T) {
	if os.Getenv("CHHARNESS_CHILD") != "" {
		ch := harness.StartClickHouse(t)
		fmt.Printf("engine %d\n", ch.PID())
		select {} // until killed
	}
	harness.RequireClickHouse(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestClickHouseNoOrphan$", "-test.v")
	cmd.Env = append(os.Environ(), "CHHARNESS_CHILD=1", "TMPDIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var engine int
	sc := bufio.NewScanner(out)
	for engine == 0 && sc.Scan() {
		fmt.Sscanf(sc.Text(), "engine %d", &engine)
	}
	if engine == 0 {
		t.Fatalf("the child printed no engine's PID: %v", sc.Err())
	}
	t.Cleanup(func() {
		if processLives(engine) { // an orphan: the test failed
			_ = syscall.Kill(engine, syscall.SIGKILL)
		}
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	harness.Await(t, 30*time.Second, fmt.Sprintf("engine %d to go with its test", engine), func() bool {
		return !processLives(engine)
	})
}

// processLives tells whether pid is a process that is not a zombie.
func processLives(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z")
}

// TestClickHouseFootprint reports what an engine costs: the time to start
// one and its resident memory once it has served some inserts.
func TestClickHouseFootprint(t *testing.T) {
	begin := time.Now()
	ch := harness.StartClickHouse(t)
	started := time.Since(begin)
	ch.Exec(t, `CREATE TABLE f (n UInt64, s String) ENGINE = MergeTree ORDER BY n`)
	for range 10 {
		ch.Exec(t, `INSERT INTO f SELECT number, toString(number) FROM numbers(10000)`)
	}
	if n := ch.QueryInt(t, `SELECT count() FROM f`); n != 100000 {
		t.Fatalf("%d rows, want 100000", n)
	}
	begin = time.Now()
	ch.Restart()
	restarted := time.Since(begin)
	ch.QueryInt(t, `SELECT count() FROM f`)
	rss, peak, err := harness.ProcMemory(ch.PID())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("start %s (with building the launcher), restart %s; resident %d MiB (peak %d MiB)",
		started.Round(time.Millisecond), restarted.Round(time.Millisecond), rss>>20, peak>>20)
}
