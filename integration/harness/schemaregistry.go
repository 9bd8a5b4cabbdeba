package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// SchemaRegistryTool is the Schema Registry the tests run: AxonOps Schema
// Registry (Confluent's REST API, in Go), a tool of the module in
// SchemaRegistryModule, whose go.mod pins its version.
const SchemaRegistryTool = "github.com/axonops/axonops-schema-registry/cmd/schema-registry"

// SchemaRegistryModule is the directory of the tools module that holds
// SchemaRegistryTool, relative to the module's root: a module of its own,
// so that the registry's dependencies stay out of ours.
const SchemaRegistryModule = "integration/tools/schemaregistry"

// Timing of the private Schema Registry.
const (
	// The first build compiles some 300 packages: 25 s here with the
	// standard library already in Go's build cache, 80 s with an empty
	// cache, more when the cores are busy. Later builds are a look-up in
	// the cache (0.2 s).
	srBuildTimeout = 10 * time.Minute
	srStartTimeout = 30 * time.Second
	srStartTries   = 5
	srOpTimeout    = 30 * time.Second
)

// srBuild is the one build of the registry per test binary.
var srBuild struct {
	once sync.Once
	path string
	err  error
}

// SchemaRegistryBinary builds SchemaRegistryTool once per test binary and
// returns the executable's path, or an error that says what failed.
// `go tool -n` builds the tool into Go's build cache and prints its path
// there, so the binary outlives the test binary: only the first build on
// a machine takes long.
func SchemaRegistryBinary() (string, error) {
	srBuild.once.Do(func() { srBuild.path, srBuild.err = buildSchemaRegistry() })
	return srBuild.path, srBuild.err
}

func buildSchemaRegistry() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), srBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "tool", "-n", SchemaRegistryTool)
	cmd.Dir = filepath.Join(root, SchemaRegistryModule)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w\n%s", err, msg)
		}
		return "", fmt.Errorf("build %s in %s: %w", SchemaRegistryTool, SchemaRegistryModule, err)
	}
	path := strings.TrimSpace(string(out))
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("build %s: go tool -n printed %q: %w", SchemaRegistryTool, path, err)
	}
	return path, nil
}

// RequireSchemaRegistry returns the registry's executable, building it
// first, or skips the test when the build fails, except in CI (CI set in
// the environment), where that fails the test: there it must run.
func RequireSchemaRegistry(t testing.TB) string {
	t.Helper()
	path, err := SchemaRegistryBinary()
	skipUnlessCI(t, err, "schema registry", "Schema Registry")
	return path
}

// SchemaRegistryOption configures StartSchemaRegistry.
type SchemaRegistryOption func(*srOptions)

type srOptions struct {
	user, password string
	tls            bool
}

// SchemaRegistryBasicAuth has the registry require HTTP basic auth of every
// request of its API, and know one user, a super admin, of the given name
// and password. The harness's own requests send them.
func SchemaRegistryBasicAuth(user, password string) SchemaRegistryOption {
	return func(o *srOptions) { o.user, o.password = user, password }
}

// SchemaRegistryTLS has the registry serve HTTPS only, with a certificate
// for 127.0.0.1 and localhost issued by a throwaway CA (SchemaRegistry.TLS
// trusts it). No client certificate is asked for.
func SchemaRegistryTLS() SchemaRegistryOption {
	return func(o *srOptions) { o.tls = true }
}

// SchemaRegistry is a private Schema Registry for one test
// (SchemaRegistryTool, built once per test binary): in-memory storage, a
// free 127.0.0.1 port, compatibility checks off (level NONE, so a test can
// register any schema under any subject), no auth unless
// SchemaRegistryBasicAuth. It is killed in t.Cleanup; Pause and Resume
// stop and continue the process, Stop kills it.
//
// Its schemas live in its memory only, and its ids count from 1. Give
// subjects no "/": this registry (v0.2.1) keeps the %2F of an escaped one
// in the subject's name, so a reference to it by its real name fails.
type SchemaRegistry struct {
	// URL is the base URL of its API, http://127.0.0.1:PORT (https:// with
	// SchemaRegistryTLS).
	URL string
	// Username and Password are the credentials it requires, "" without
	// SchemaRegistryBasicAuth.
	Username, Password string
	// CAFile is the PEM file of the CA that signed its certificate, for a
	// client's --schema-registry-cacert; "" without SchemaRegistryTLS.
	CAFile string

	t    testing.TB
	bin  string
	dir  string
	opts srOptions
	ca   *x509.CertPool // nil without TLS
	id   string         // cluster id, unique to the registry
	port int
	out  *syncBuffer

	mu        sync.Mutex
	proc      *srProcess // nil once stopped
	client    *sr.Client // of Client, made on first use
	transport *http.Transport
}

// srProcess is one run of the registry.
type srProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // of Wait, set before done is closed
}

// StartSchemaRegistry builds the registry if need be (see
// RequireSchemaRegistry: a failed build skips the test, or fails it in
// CI), starts it and waits until it answers GET /schemas/types; it fails
// the test if that takes more than srStartTimeout. Methods that can fail
// report to t, so call them from t's goroutine.
func StartSchemaRegistry(t testing.TB, opts ...SchemaRegistryOption) *SchemaRegistry {
	t.Helper()
	bin := RequireSchemaRegistry(t)
	r := &SchemaRegistry{t: t, bin: bin, dir: t.TempDir(), out: &syncBuffer{}}
	for _, o := range opts {
		o(&r.opts)
	}
	r.Username, r.Password = r.opts.user, r.opts.password
	r.id = "offsetkeeper-test-" + filepath.Base(r.dir) + "-" + strconv.Itoa(os.Getpid())
	config, err := r.writeConfig()
	if err != nil {
		t.Fatalf("schema registry: %v", err)
	}
	t.Cleanup(r.cleanup)
	scheme := "http"
	if r.opts.tls {
		scheme = "https"
	}
	// Free ports are picked by binding :0 and closing, so another process
	// can take one first: then start again on another.
	for try := 0; ; try++ {
		if r.port, err = freePort(); err != nil {
			t.Fatalf("schema registry: %v", err)
		}
		r.URL = fmt.Sprintf("%s://127.0.0.1:%d", scheme, r.port)
		mark := len(r.out.String())
		err = r.start(config)
		if err == nil {
			return r
		}
		if try+1 == srStartTries || !strings.Contains(r.out.String()[mark:], "address already in use") {
			t.Fatalf("schema registry: start: %v\n%s", err, r.tail())
		}
	}
}

// writeConfig writes the registry's configuration file, for what its
// environment variables cannot set: cluster_id (how the harness knows it
// is its registry that answers on the port), TLS and auth.
func (r *SchemaRegistry) writeConfig() (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# written by the offsetkeeper test harness\nserver:\n  cluster_id: %q\n", r.id)
	if r.opts.tls || r.opts.user != "" {
		b.WriteString("security:\n")
	}
	if r.opts.tls {
		p := NewEtcdTLS(r.t) // a CA and a server certificate for 127.0.0.1
		pem, err := os.ReadFile(p.CAFile)
		if err != nil {
			return "", err
		}
		r.CAFile = p.CAFile
		r.ca = x509.NewCertPool()
		if !r.ca.AppendCertsFromPEM(pem) {
			return "", fmt.Errorf("no certificate in %s", p.CAFile)
		}
		fmt.Fprintf(&b, "  tls:\n    enabled: true\n    cert_file: %q\n    key_file: %q\n", p.ServerCertFile, p.ServerKeyFile)
	}
	if r.opts.user != "" {
		// The user is created at start (bootstrap) from the environment.
		b.WriteString("  auth:\n    enabled: true\n    methods: [basic]\n    bootstrap:\n      enabled: true\n")
	}
	path := filepath.Join(r.dir, "config.yaml")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// start runs the registry and waits until it answers; on failure it is
// killed.
func (r *SchemaRegistry) start(config string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cmd := exec.Command(r.bin, "-config", config)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(),
		"SCHEMA_REGISTRY_HOST=127.0.0.1",
		"SCHEMA_REGISTRY_PORT="+strconv.Itoa(r.port),
		"SCHEMA_REGISTRY_STORAGE_TYPE=memory",
		"SCHEMA_REGISTRY_COMPATIBILITY_LEVEL=NONE",
	)
	if r.opts.user != "" {
		cmd.Env = append(cmd.Env,
			"SCHEMA_REGISTRY_BOOTSTRAP_USERNAME="+r.opts.user,
			"SCHEMA_REGISTRY_BOOTSTRAP_PASSWORD="+r.opts.password,
		)
	}
	cmd.Stdout, cmd.Stderr = r.out, r.out
	// A test binary that dies (a panic, -timeout) runs no cleanup: have
	// the kernel kill the registry with it rather than leave it serving.
	// (It is sent when the thread that started the registry ends, and Go
	// ends a thread only under a goroutine that exits locked to it.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", r.bin, err)
	}
	p := &srProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	r.proc = p
	if err := r.awaitReady(p); err != nil {
		r.kill()
		return err
	}
	return nil
}

// awaitReady polls until the registry answers, it exits, or
// srStartTimeout passes.
func (r *SchemaRegistry) awaitReady(p *srProcess) error {
	ctx, cancel := context.WithTimeout(context.Background(), srStartTimeout)
	defer cancel()
	hc := r.httpClient()
	defer hc.CloseIdleConnections()
	for {
		err := r.ping(ctx, hc)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("the registry exited (%v) before it answered: %w", p.err, err)
		case <-ctx.Done():
			return fmt.Errorf("the registry did not answer in %s: %w", srStartTimeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ping checks that the API answers, and that it is this registry that
// answers: while it has yet to bind its port, or fails to, another server
// may hold it.
func (r *SchemaRegistry) ping(ctx context.Context, hc *http.Client) error {
	if _, err := r.get(ctx, hc, "/schemas/types"); err != nil {
		return err
	}
	body, err := r.get(ctx, hc, "/v1/metadata/id")
	if err != nil {
		return err
	}
	var meta struct{ ID string }
	if err := json.Unmarshal(body, &meta); err != nil || meta.ID != r.id {
		return fmt.Errorf("%s answers on port %d, not this registry", body, r.port)
	}
	return nil
}

// get is a GET of path that must answer 200 OK.
func (r *SchemaRegistry) get(ctx context.Context, hc *http.Client, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL+path, nil)
	if err != nil {
		return nil, err
	}
	if r.Username != "" {
		req.SetBasicAuth(r.Username, r.Password)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return body, nil
}

// httpClient is a client of the registry for the harness's own requests.
func (r *SchemaRegistry) httpClient() *http.Client {
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: r.TLS(), DisableKeepAlives: true},
	}
}

// TLS is a client configuration that trusts the registry's CA, or nil
// without SchemaRegistryTLS. Each call returns a new one.
func (r *SchemaRegistry) TLS() *tls.Config {
	if r.ca == nil {
		return nil
	}
	return &tls.Config{RootCAs: r.ca, MinVersion: tls.VersionTLS12}
}

// PID is the registry's process ID, or 0 once stopped.
func (r *SchemaRegistry) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return 0
	}
	return r.proc.cmd.Process.Pid
}

// Pause stops the process (SIGSTOP) and waits until each of its threads
// has stopped: from then on the registry does not answer, but the kernel
// still accepts connections on its port, as with a registry that hangs.
// Requests wait until Resume.
func (r *SchemaRegistry) Pause() { r.signal(syscall.SIGSTOP, true) }

// Resume continues the paused process (SIGCONT) and waits until its
// threads run again; the requests that waited are answered.
func (r *SchemaRegistry) Resume() { r.signal(syscall.SIGCONT, false) }

// signal sends sig, then waits until the process's threads are stopped,
// or none is: the kernel stops and continues them after kill returns.
func (r *SchemaRegistry) signal(sig syscall.Signal, stopped bool) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		r.t.Fatalf("schema registry: %s: stopped", sig)
	}
	pid := r.proc.cmd.Process.Pid
	if err := r.proc.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("schema registry: %s: %v", sig, err)
	}
	deadline := time.Now().Add(srOpTimeout)
	for {
		all, err := threadsStopped(pid, stopped)
		if err != nil {
			r.t.Fatalf("schema registry: %s: %v", sig, err)
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			state := "running"
			if stopped {
				state = "stopped"
			}
			r.t.Fatalf("schema registry: %s: threads not %s after %s", sig, state, srOpTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// threadsStopped tells whether each thread of process pid is stopped
// (stopped true), or each is not.
func threadsStopped(pid int, stopped bool) (bool, error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return false, fmt.Errorf("no threads of process %d in /proc (%v)", pid, err)
	}
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a thread that ended
		}
		if err != nil {
			return false, err
		}
		// "tid (comm) S ...": the state follows the last ')', as comm may
		// hold one.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		f := strings.Fields(rest)
		if len(f) == 0 {
			return false, fmt.Errorf("%s: %q", path, b)
		}
		if isStopped := f[0] == "T" || f[0] == "t"; isStopped != stopped {
			return false, nil
		}
	}
	return true, nil
}

// Stop kills the registry (SIGKILL) and waits until it is gone: its port
// refuses connections from then on, and what it held is lost. No-op when
// stopped.
func (r *SchemaRegistry) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kill()
}

// kill kills the process and waits for it; r.mu is held.
func (r *SchemaRegistry) kill() {
	if r.proc == nil {
		return
	}
	p := r.proc
	r.proc = nil
	_ = p.cmd.Process.Kill() // a stopped process dies of SIGKILL too
	<-p.done
}

// tail is the end of the registry's output.
func (r *SchemaRegistry) tail() string {
	s := r.out.String()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

func (r *SchemaRegistry) cleanup() {
	r.mu.Lock()
	var exited error
	if p := r.proc; p != nil {
		select {
		case <-p.done:
			exited = fmt.Errorf("exited on its own: %v", p.err)
		default:
		}
	}
	r.kill()
	if r.transport != nil {
		r.transport.CloseIdleConnections()
	}
	r.mu.Unlock()
	if exited != nil {
		r.t.Logf("schema registry: %v", exited)
	}
	if r.t.Failed() || exited != nil {
		r.t.Logf("schema registry output (tail):\n%s", r.tail())
	}
}
