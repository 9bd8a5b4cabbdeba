package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Timing of the private PostgreSQL cluster.
const (
	pgStartTimeout = 60 * time.Second
	pgStartTries   = 5
	pgOpTimeout    = 30 * time.Second
)

// pgUser is the cluster's superuser, and the OS user the server runs as
// when the tests run as root (PostgreSQL refuses to run as root).
const pgUser = "postgres"

// Postgres is a private PostgreSQL cluster for one test: its own data
// directory in a new temporary directory, listening on a free 127.0.0.1
// port only (no Unix socket), trusting its clients. It runs Debian's server binaries
// (/usr/lib/postgresql/*/bin, the newest version, else initdb found on the
// PATH) and is stopped and removed in t.Cleanup. Stop, Start and Restart
// let a test take the server away under its clients.
//
// The cluster trades durability against an OS crash for speed (fsync off),
// but keeps it against a crash of the server: synchronous_commit stays on,
// so a commit that returned is in the WAL the OS holds, and Stop is an
// immediate shutdown that recovers from that WAL on Start.
type Postgres struct {
	t      testing.TB
	bin    string // directory of initdb, pg_ctl
	dir    string // owned by the server's user
	data   string
	port   int
	asUser bool // run the binaries as pgUser through runuser

	mu      sync.Mutex
	running bool
	dbs     atomic.Int64
}

// PostgresBinDir finds the directory of PostgreSQL's server binaries, or
// returns an error that says what is missing.
func PostgresBinDir() (string, error) {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(matches, func(i, j int) bool { return pgVersion(matches[i]) > pgVersion(matches[j]) })
	for _, m := range matches {
		dir := filepath.Dir(m)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries: neither /usr/lib/postgresql/*/bin/initdb nor initdb on the PATH (Debian: apt-get install postgresql)")
}

// pgVersion is the major version in a path like /usr/lib/postgresql/15/bin.
func pgVersion(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// RequirePostgres returns the binaries' directory, or skips the test when
// PostgreSQL is not installed, except in CI (CI set in the environment),
// where a missing PostgreSQL fails the test: there it must run.
func RequirePostgres(t testing.TB) string {
	t.Helper()
	dir, err := PostgresBinDir()
	skipUnlessCI(t, err, "postgres", "PostgreSQL")
	return dir
}

// StartPostgres creates and starts a private cluster; it fails the test if
// that takes more than a minute. Methods that can fail report to t, so call
// them from t's goroutine.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	bin := RequirePostgres(t)
	p := &Postgres{t: t, bin: bin, asUser: os.Geteuid() == 0}
	dir, err := os.MkdirTemp("", "offsetkeeper-pg-")
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	p.dir, p.data = dir, filepath.Join(dir, "data")
	t.Cleanup(p.cleanup)
	if p.asUser {
		if err := chownToUser(dir, pgUser); err != nil {
			t.Fatalf("postgres: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgStartTimeout)
	defer cancel()
	if out, err := p.run(ctx, "initdb", "-D", p.data, "-U", pgUser, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		t.Fatalf("postgres: initdb: %v\n%s", err, out)
	}
	if err := p.passwordLogins(); err != nil {
		t.Fatalf("postgres: %v", err)
	}
	// Free ports are picked by binding :0 and closing, so another process
	// can take one first: then start again on another.
	for try := 0; ; try++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("postgres: %v", err)
		}
		p.port = port
		if err := p.configure(); err != nil {
			t.Fatalf("postgres: %v", err)
		}
		err = p.start(ctx)
		if err == nil {
			break
		}
		if try+1 == pgStartTries || !strings.Contains(p.log(), "could not bind") {
			t.Fatalf("postgres: start: %v\n%s", err, p.log())
		}
	}
	return p
}

// configure writes the settings the harness owns, replacing earlier ones.
func (p *Postgres) configure() error {
	conf := fmt.Sprintf(`# written by the offsetkeeper test harness
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = ''
max_connections = 200
fsync = off
full_page_writes = off
synchronous_commit = on
shared_buffers = 128MB
max_wal_size = 1GB
log_min_messages = warning
`, p.port)
	path := filepath.Join(p.data, "postgresql.auto.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return err
	}
	if p.asUser {
		return chownToUser(path, pgUser)
	}
	return nil
}

// PasswordUser is the one role whose logins the server checks with a
// password (scram-sha-256), as a stock install checks every role's: the
// others are trusted. A test creates it with the password it needs.
const PasswordUser = "offsetkeeper_password"

// passwordLogins puts the line of PasswordUser first in pg_hba.conf, where
// the first line that matches decides.
func (p *Postgres) passwordLogins() error {
	path := filepath.Join(p.data, "pg_hba.conf")
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	line := "host all " + PasswordUser + " 127.0.0.1/32 scram-sha-256\n"
	return os.WriteFile(path, append([]byte(line), old...), 0o600)
}

// URL is the connection URL of database postgres, as the superuser.
func (p *Postgres) URL() string { return p.DatabaseURL("postgres") }

// DatabaseURL is the connection URL of a database of the cluster.
func (p *Postgres) DatabaseURL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", pgUser, p.port, db)
}

// Addr is the server's host:port.
func (p *Postgres) Addr() string { return fmt.Sprintf("127.0.0.1:%d", p.port) }

// NewDatabase creates an empty database with a fresh name and returns its
// URL: a clean slate for one test or subtest on a shared cluster.
func (p *Postgres) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("test_%d", p.dbs.Add(1))
	p.Exec(t, "CREATE DATABASE "+name)
	return p.DatabaseURL(name)
}

// Exec runs SQL statements in database postgres.
func (p *Postgres) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	p.ExecIn(t, p.URL(), sql, args...)
}

// ExecIn runs one SQL statement in the database of url.
func (p *Postgres) ExecIn(t testing.TB, url, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgOpTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("postgres: connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("postgres: %s: %v", sql, err)
	}
}

// Stop crashes the server: an immediate shutdown, which cuts every
// connection at once and leaves the next Start to recover from the WAL, as
// after a power loss of the server alone. No-op when stopped.
func (p *Postgres) Stop() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgStartTimeout)
	defer cancel()
	if out, err := p.run(ctx, "pg_ctl", "-D", p.data, "-m", "immediate", "-w", "stop"); err != nil {
		p.t.Fatalf("postgres: stop: %v\n%s", err, out)
	}
	p.running = false
}

// Start starts the stopped server on the same port and waits until it
// accepts connections. No-op when running.
func (p *Postgres) Start() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgStartTimeout)
	defer cancel()
	// The port is free again, but an outgoing connection may have been
	// given it as its local port meanwhile: retry for a while.
	var err error
	for try := 0; try < pgStartTries; try++ {
		if err = p.start(ctx); err == nil || !strings.Contains(p.log(), "could not bind") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("postgres: start: %v\n%s", err, p.log())
	}
}

// Restart is Stop then Start.
func (p *Postgres) Restart() {
	p.t.Helper()
	p.Stop()
	p.Start()
}

func (p *Postgres) start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return nil
	}
	if out, err := p.run(ctx, "pg_ctl", "-D", p.data, "-l", filepath.Join(p.dir, "log"), "-w", "-t", "60", "start"); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	p.running = true
	return nil
}

// log is the tail of the server's log.
func (p *Postgres) log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (p *Postgres) cleanup() {
	p.mu.Lock()
	running := p.running
	p.running = false
	p.mu.Unlock()
	if running {
		ctx, cancel := context.WithTimeout(context.Background(), pgStartTimeout)
		defer cancel()
		if out, err := p.run(ctx, "pg_ctl", "-D", p.data, "-m", "immediate", "-w", "stop"); err != nil {
			p.t.Errorf("postgres: stop at cleanup: %v\n%s", err, out)
		}
	}
	if p.t.Failed() {
		p.t.Logf("postgres log (tail):\n%s", p.log())
	}
	_ = os.RemoveAll(p.dir)
}

// run runs one of the server binaries, as pgUser when the tests run as
// root.
func (p *Postgres) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	path := filepath.Join(p.bin, name)
	var cmd *exec.Cmd
	if p.asUser {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", pgUser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	cmd.Dir = p.dir
	return cmd.CombinedOutput()
}

// chownToUser gives path to the named OS user.
func chownToUser(path, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("the server must not run as root, and there is no %q user to run it as: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(path, uid, gid)
}

// freePort finds a free loopback port by listening on it, then releases it
// for the server to bind.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("reserve port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
