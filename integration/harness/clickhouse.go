package harness

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// CHDBLibEnv names the environment variable holding the path of
// libchdb.so, the ClickHouse engine the tests run (test.sh sets it). When
// it is empty the harness looks in CHDBLibDefault under the module root.
const CHDBLibEnv = "CHDB_LIB"

// CHDBLibDefault is where test.sh unpacks libchdb.so, relative to the
// module's root.
const CHDBLibDefault = ".cache/chdb/libchdb.so"

// ClickHouseDatabase is the database StartClickHouse creates in each
// engine (ENGINE = Atomic): the engine's own default database is an
// Overlay one that shows the files of its working directory.
const ClickHouseDatabase = "offsetkeeper"

// ClickHouseUser is a user of every engine that needs its password,
// ClickHousePassword, for tests of credentials; DSN and HTTPDSN connect as
// user default, which has none.
const (
	ClickHouseUser     = "offsetkeeper"
	ClickHousePassword = "offsetkeeper-secret"
)

// Timing of the private ClickHouse engine.
const (
	chStartTimeout = 60 * time.Second
	chStartTries   = 5
	chOpTimeout    = 30 * time.Second
)

// chMemoryLimit is the engine's max_server_memory_usage.
const chMemoryLimit = 2 << 30

// chConfig is the engine's configuration file: its name (what
// displayName() returns: the harness checks it is its engine that answers
// on the ports), max_server_memory_usage and the path of the users' file,
// chUsers.
const chConfig = `<clickhouse>
  <!-- written by the offsetkeeper test harness -->
  <display_name>%s</display_name>
  <max_server_memory_usage>%d</max_server_memory_usage>
  <mark_cache_size>268435456</mark_cache_size>
  <user_directories><users_xml><path>%s</path></users_xml></user_directories>
  <!-- the parts made, for tests that count them -->
  <part_log><database>system</database><table>part_log</table><flush_interval_milliseconds>1000</flush_interval_milliseconds></part_log>
</clickhouse>
`

// Users of every engine whose profile or row policy works against a
// sink, for tests of what the sink does about it; none has a password.
//   - ClickHouseUserNoDedup's profile turns insert deduplication off
//     (insert_deduplicate 0, deduplicate_insert 'disable').
//   - ClickHouseUserCached's has its SELECTs use the query cache, cached at
//     the first run.
//   - ClickHouseUserHidden sees no row of ClickHouseHiddenTable (a row
//     policy whose filter is 0).
const (
	ClickHouseUserNoDedup = "nodedup"
	ClickHouseUserCached  = "cached"
	ClickHouseUserHidden  = "hidden"
	ClickHouseHiddenTable = "hidden_rows"
)

// chUsers is the users' file: user default with no password,
// ClickHouseUser with ClickHousePassword, and the users above.
const chUsers = `<clickhouse>
  <!-- written by the offsetkeeper test harness -->
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
    <%[1]s>
      <password>%[2]s</password>
      <networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </%[1]s>
    <nodedup>
      <password></password>
      <networks><ip>127.0.0.1</ip></networks>
      <profile>nodedup</profile>
      <quota>default</quota>
    </nodedup>
    <cached>
      <password></password>
      <networks><ip>127.0.0.1</ip></networks>
      <profile>cached</profile>
      <quota>default</quota>
    </cached>
    <hidden>
      <password></password>
      <networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
      <databases><offsetkeeper><hidden_rows><filter>0</filter></hidden_rows></offsetkeeper></databases>
    </hidden>
  </users>
  <profiles>
    <default/>
    <nodedup><insert_deduplicate>0</insert_deduplicate><deduplicate_insert>disable</deduplicate_insert></nodedup>
    <cached><use_query_cache>1</use_query_cache><query_cache_min_query_runs>0</query_cache_min_query_runs><query_cache_ttl>600</query_cache_ttl></cached>
  </profiles>
  <quotas><default/></quotas>
</clickhouse>
`

// chKeepAlive is the last query of the engine's command line: it serves
// while this runs, so it runs until the process is killed, asleep (one row
// per block, a second per row, well under the engine's limit of 3 s of
// sleep per block).
const chKeepAlive = "SELECT sleepEachRow(1) FROM system.numbers SETTINGS max_block_size = 1 FORMAT Null"

//go:embed chlaunch/chlaunch.c
var chLaunchSource []byte

// ClickHouse is a private ClickHouse engine for one test: clickhouse-local
// of a current release (from libchdb.so, see CHDBLibEnv) started by a small
// launcher as a server on free 127.0.0.1 ports, native TCP and HTTP, with
// its data in t's temporary directory and a database of its own
// (Database). It is killed in t.Cleanup; Kill, Start and Restart let a
// test take it away under its clients.
//
// Clients connect as user default with no password, or as ClickHouseUser
// with ClickHousePassword. But a failed authentication over the native
// protocol takes the engine down some 3 s later (a quirk of libchdb's,
// logged nowhere): test bad credentials over HTTP, which it survives.
//
// The engine's defaults are ClickHouse's, as a sink meets them: among
// them async_insert = 1 (an insert with a deduplication token must set
// async_insert = 0) and non_replicated_deduplication_window = 0 (a
// MergeTree table deduplicates only with the setting). Its keep-alive
// query (chKeepAlive) shows in system.processes.
//
// What an insert returned is kept across Kill: MergeTree parts are written
// to files before the insert returns, and the process's death does not take
// the OS's page cache with it.
//
// An engine starts in about 0.2 s and is about 220 MiB resident, of which
// some 160 MiB are the library's pages, shared between engines: each
// engine's own memory is about 60 MiB (four at once: 400 MiB in all). Its
// memory is capped at chMemoryLimit: past it, queries fail rather than
// take the machine.
type ClickHouse struct {
	t        testing.TB
	lib      string
	launcher string
	dir      string // the engine's working directory, and its log
	data     string // --path
	config   string // --config-file
	name     string // display_name, unique to the engine
	httpPort int
	tcpPort  int

	mu   sync.Mutex
	proc *chProcess // nil when not running
	// closed: the test is over, and nothing starts the engine again.
	closed bool
	// Aborts counts the times the engine exited on its own and was
	// started again (see supervise).
	Aborts atomic.Int64
}

// chProcess is one run of the engine.
type chProcess struct {
	cmd   *exec.Cmd
	alive *os.File // our end of the pipe the launcher watches
	done  chan struct{}
	err   error // of Wait, set before done is closed
}

// CHDBLib finds libchdb.so: the path in CHDB_LIB, else CHDBLibDefault
// under the module root; or returns an error that says what is missing.
func CHDBLib() (string, error) {
	if p := os.Getenv(CHDBLibEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", CHDBLibEnv, p, err)
		}
		return p, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, CHDBLibDefault)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no libchdb.so: %s unset and %s missing (./test.sh installs it)", CHDBLibEnv, p)
	}
	return p, nil
}

// moduleRoot is the directory of the go.mod above the working directory
// (a test runs in its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// RequireClickHouse returns the path of libchdb.so, or skips the test when
// it or gcc (which builds the launcher) is missing, except in CI (CI set in
// the environment), where that fails the test: there it must run.
func RequireClickHouse(t testing.TB) string {
	t.Helper()
	lib, err := CHDBLib()
	if err == nil {
		if _, err = exec.LookPath("gcc"); err != nil {
			err = fmt.Errorf("no gcc to build the engine's launcher: %w", err)
		}
	}
	skipUnlessCI(t, err, "clickhouse", "ClickHouse")
	return lib
}

// StartClickHouse starts a private engine, creates its database and waits
// until it answers on both ports; it fails the test if that takes more
// than a minute. Methods that can fail report to t, so call them from t's
// goroutine.
func StartClickHouse(t testing.TB) *ClickHouse {
	t.Helper()
	lib := RequireClickHouse(t)
	base := t.TempDir()
	c := &ClickHouse{t: t, lib: lib, dir: filepath.Join(base, "run"), data: filepath.Join(base, "data")}
	for _, d := range []string{c.dir, c.data} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("clickhouse: %v", err)
		}
	}
	// Registered after TempDir, so it runs before the directory goes.
	t.Cleanup(c.cleanup)
	c.launcher = filepath.Join(base, "chlaunch")
	if err := buildLauncher(base, c.launcher); err != nil {
		t.Fatalf("clickhouse: %v", err)
	}
	c.config = filepath.Join(base, "config.xml")
	users := filepath.Join(base, "users.xml")
	if err := os.WriteFile(users, fmt.Appendf(nil, chUsers, ClickHouseUser, ClickHousePassword), 0o600); err != nil {
		t.Fatalf("clickhouse: %v", err)
	}
	c.name = "offsetkeeper-test-" + filepath.Base(base) + "-" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(c.config, fmt.Appendf(nil, chConfig, c.name, chMemoryLimit, users), 0o600); err != nil {
		t.Fatalf("clickhouse: %v", err)
	}
	// Free ports are picked by binding :0 and closing, so another process
	// can take one first: then start again on others.
	for try := 0; ; try++ {
		var err error
		if c.httpPort, err = freePort(); err == nil {
			c.tcpPort, err = freePort()
		}
		if err != nil {
			t.Fatalf("clickhouse: %v", err)
		}
		err = c.start()
		if err == nil {
			break
		}
		if try+1 == chStartTries || !c.bindFailed() {
			t.Fatalf("clickhouse: start: %v\n%s", err, c.log())
		}
	}
	c.execIn(t, "default", "CREATE DATABASE IF NOT EXISTS "+ClickHouseDatabase+" ENGINE = Atomic")
	return c
}

// buildLauncher compiles chlaunch.c into out.
func buildLauncher(dir, out string) error {
	src := filepath.Join(dir, "chlaunch.c")
	if err := os.WriteFile(src, chLaunchSource, 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := exec.CommandContext(ctx, "gcc", "-O2", "-o", out, src, "-ldl", "-lpthread").CombinedOutput()
	if err != nil {
		return fmt.Errorf("build the launcher: %w\n%s", err, b)
	}
	return nil
}

// Database is the engine's database for the test's tables.
func (c *ClickHouse) Database() string { return ClickHouseDatabase }

// NativeAddr is the host:port of the native protocol.
func (c *ClickHouse) NativeAddr() string { return fmt.Sprintf("127.0.0.1:%d", c.tcpPort) }

// HTTPAddr is the host:port of the HTTP interface.
func (c *ClickHouse) HTTPAddr() string { return fmt.Sprintf("127.0.0.1:%d", c.httpPort) }

// DSN is the clickhouse-go DSN of Database over the native protocol:
// clickhouse://127.0.0.1:PORT/DB.
func (c *ClickHouse) DSN() string { return "clickhouse://" + c.NativeAddr() + "/" + ClickHouseDatabase }

// HTTPDSN is the clickhouse-go DSN of Database over HTTP:
// http://127.0.0.1:PORT/DB.
func (c *ClickHouse) HTTPDSN() string { return "http://" + c.HTTPAddr() + "/" + ClickHouseDatabase }

// PID is the launcher's process ID (the engine runs in it), or 0 when the
// engine is not running.
func (c *ClickHouse) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running() {
		return 0
	}
	return c.proc.cmd.Process.Pid
}

// running tells whether the engine runs: started, not killed, and not
// exited on its own; c.mu is held.
func (c *ClickHouse) running() bool {
	if c.proc == nil {
		return false
	}
	select {
	case <-c.proc.done:
		return false
	default:
		return true
	}
}
