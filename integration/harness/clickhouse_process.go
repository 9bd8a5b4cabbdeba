package harness

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// Kill kills the engine (SIGKILL to its process group), as a crash of the
// server: connections are cut at once. No-op when not running.
func (c *ClickHouse) Kill() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kill()
}

// kill kills the engine and waits for it; c.mu is held.
func (c *ClickHouse) kill() {
	if c.proc == nil {
		return
	}
	p := c.proc
	c.proc = nil
	// The group outlives its leader if the engine forked; the leader's
	// PID is not reused before it is reaped, so not before done.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.alive.Close()
	<-p.done
}

// Start starts the killed (or exited) engine again on the same data and
// ports, and waits until it answers. No-op when running.
func (c *ClickHouse) Start() {
	c.t.Helper()
	if err := c.restart(); err != nil {
		c.t.Fatalf("clickhouse: start: %v\n%s", err, c.log())
	}
}

// restart starts the engine again on its ports. They are free again, but
// an outgoing connection may have been given one as its local port
// meanwhile: a start that fails to bind is retried for a while.
func (c *ClickHouse) restart() error {
	var err error
	for try := 0; try < chStartTries; try++ {
		if err = c.start(); err == nil || !c.bindFailed() {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

// Restart is Kill then Start.
func (c *ClickHouse) Restart() {
	c.t.Helper()
	c.Kill()
	c.Start()
}

// start starts the engine and waits until it answers on both ports; on
// failure the engine is killed.
func (c *ClickHouse) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running() {
		return nil
	}
	if c.closed {
		return errors.New("the test is over")
	}
	c.kill() // of one that exited on its own
	// Appended to, so that what an engine said before it died is still
	// there after it is started again.
	logf, err := os.OpenFile(c.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(c.launcher, c.lib,
		"--config-file="+c.config,
		"--path="+c.data+"/",
		"--listen_host=127.0.0.1",
		fmt.Sprintf("--http_port=%d", c.httpPort),
		fmt.Sprintf("--tcp_port=%d", c.tcpPort),
		// The engine's own log, where an abort says why (stdout and
		// stderr hold only what the launcher and the query print).
		"--logger.log="+c.serverLogPath(),
		"--logger.level=information",
		"--multiquery",
		"--query", "SYSTEM START LISTEN HTTP; SYSTEM START LISTEN TCP; "+chKeepAlive,
	)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "TZ=UTC", "LC_ALL=C")
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{r} // fd 3, watched by the launcher
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return fmt.Errorf("run the launcher: %w", err)
	}
	p := &chProcess{cmd: cmd, alive: w, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	c.proc = p
	if err := c.awaitReady(p); err != nil {
		c.kill()
		return err
	}
	go c.supervise(p)
	return nil
}

// supervise starts the engine again, on the same data and ports, when it
// aborts on its own (SIGABRT; a kill from outside stays a death, for the
// tests of one). The engine (clickhouse-local, unlike clickhouse-server)
// aborts when a client is SIGKILLed in the middle of a native-protocol
// insert: its log says "Terminate called for uncaught exception: Code: 210.
// DB::NetException: Connection reset by peer" from the native handler. The
// tests that kill replicas mid-insert therefore speak HTTP to it, which it
// survives; an abort is still possible elsewhere, and for the
// tests that is one more crash of the store, which the sink must survive
// as it survives Kill and Start (TestClickHouseRestartDuringRun), and
// their assertions stay whole. Each time is logged and counted in Aborts.
func (c *ClickHouse) supervise(p *chProcess) {
	<-p.done
	c.mu.Lock()
	mine := c.proc == p && !c.closed
	c.mu.Unlock()
	var exit *exec.ExitError
	if !mine || !errors.As(p.err, &exit) {
		return // killed, or the test is over
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGABRT {
		return
	}
	n := c.Aborts.Add(1)
	c.t.Logf("clickhouse: the engine exited on its own (%v), %d time(s) in this test; starting it again on the same data; its log's last errors:\n%s",
		p.err, n, c.fatalLines(5))
	if err := c.restart(); err != nil {
		c.t.Logf("clickhouse: starting the engine again failed: %v", err)
	}
}

// awaitReady polls both ports until the engine answers, it exits, or
// chStartTimeout passes.
func (c *ClickHouse) awaitReady(p *chProcess) error {
	ctx, cancel := context.WithTimeout(context.Background(), chStartTimeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for {
		err := c.ping(ctx, hc)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("the engine exited (%v) before it answered: %w", p.err, err)
		case <-ctx.Done():
			return fmt.Errorf("the engine did not answer in %s: %w", chStartTimeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ping checks that both interfaces answer, and that it is this engine
// that answers: while it has yet to bind its ports, or fails to, another
// server may hold one.
func (c *ClickHouse) ping(ctx context.Context, hc *http.Client) error {
	const who = "SELECT displayName()"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.HTTPAddr()+"/?query="+url.QueryEscape(who), nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	switch {
	case err != nil:
		return fmt.Errorf("http: %w", err)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("http: %s: %s", resp.Status, body)
	case strings.TrimSpace(string(body)) != c.name:
		return fmt.Errorf("http: %s answers on %s, not this engine", body, c.HTTPAddr())
	}
	conn, err := clickhouse.Open(c.options("default"))
	if err != nil {
		return fmt.Errorf("native: %w", err)
	}
	defer conn.Close()
	qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
	defer qcancel()
	var name string
	if err := conn.QueryRow(qctx, who).Scan(&name); err != nil {
		return fmt.Errorf("native: %w", err)
	}
	if name != c.name {
		return fmt.Errorf("native: %s answers on %s, not this engine", name, c.NativeAddr())
	}
	return nil
}

// bindFailed tells whether the last start failed on a port in use.
func (c *ClickHouse) bindFailed() bool {
	return strings.Contains(c.log(), "Address already in use")
}

func (c *ClickHouse) logPath() string { return filepath.Join(c.dir, "engine.log") }

// serverLogPath is the engine's own log (--logger.log).
func (c *ClickHouse) serverLogPath() string { return filepath.Join(c.dir, "server.log") }

// fatalLines are the engine's last lines at Fatal or Error level, and the
// uncaught exceptions that end it: why it aborted, when it did.
func (c *ClickHouse) fatalLines(n int) string {
	b, _ := os.ReadFile(c.serverLogPath())
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "<Fatal>") || strings.Contains(l, "<Error>") || strings.Contains(l, "Terminate called") {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}

// log is the tail of the engine's output.
func (c *ClickHouse) log() string {
	b, _ := os.ReadFile(c.logPath())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (c *ClickHouse) cleanup() {
	c.mu.Lock()
	c.closed = true
	exited := c.proc != nil && !c.running()
	var err error
	if exited {
		err = c.proc.err
	}
	c.kill()
	c.mu.Unlock()
	if exited {
		c.t.Logf("clickhouse: the engine had exited on its own (%v)", err)
	}
	if c.t.Failed() {
		c.t.Logf("clickhouse output (tail):\n%s\nits log's errors (tail of %s):\n%s", c.log(), c.serverLogPath(), c.fatalLines(20))
	}
}
