package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BuildOffsetkeeper builds the offsetkeeper command into a new temporary
// directory, for tests that run replicas as separate processes (to kill them
// for real). Call it from TestMain and run cleanup after m.Run.
func BuildOffsetkeeper() (path string, cleanup func(), err error) {
	return buildOffsetkeeper()
}

// BuildImageOffsetkeeper builds the offsetkeeper command as the container
// image does (Dockerfile: no cgo, -tags nodev, -trimpath, -ldflags "-s -w"),
// for the benchmarks: what production runs. Without the dev command's
// embedded etcd and kfake it starts in about half the time (18 ms to 35 ms
// for --version here; most of it the linked packages' initialisers). Its
// dev command only says it is not there. Run cleanup when done.
func BuildImageOffsetkeeper() (path string, cleanup func(), err error) {
	return buildOffsetkeeper("-tags", "nodev", "-trimpath", "-ldflags", "-s -w")
}

func buildOffsetkeeper(flags ...string) (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "offsetkeeper-bin-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	path = filepath.Join(dir, "offsetkeeper")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append(append([]string{"build"}, flags...), "-o", path, "github.com/offsetkeeper/offsetkeeper/cmd/offsetkeeper")
	cmd := exec.CommandContext(ctx, "go", args...)
	if len(flags) > 0 {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("build offsetkeeper: %w\n%s", err, out)
	}
	return path, cleanup, nil
}

// Process is a command started by StartProcess: a replica, usually, that a
// test can kill, pause and resume with real signals.
type Process struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

// StartProcess starts bin with args; its output is kept (Output) and shown
// in the test log if the test fails. The process is killed at cleanup if
// it is still running.
func StartProcess(t testing.TB, name, bin string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
	return startCommand(t, name, cmd)
}

// startCommand starts cmd as StartProcess does: its stdout and stderr are
// the Process's output.
func startCommand(t testing.TB, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{t: t, name: name, out: &syncBuffer{}, done: make(chan struct{}), cmd: cmd}
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, p.out.String())
		}
	})
	return p
}

// PID is the process ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Signal sends sig.
func (p *Process) Signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatalf("signal %s to %s: %v", sig, p.name, err)
	}
}

// Kill is SIGKILL, then waits for the process to be gone.
func (p *Process) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// Wait waits up to d for the process to exit and returns its exit code.
func (p *Process) Wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("%s still running after %s", p.name, d)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		p.t.Fatalf("%s: %v", p.name, p.err)
	}
	return 0
}

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Output is what the process printed so far.
func (p *Process) Output() string { return p.out.String() }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
