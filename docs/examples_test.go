// Package docs holds no code: its tests run the examples of README.md and
// docs/*.md, so that a page whose commands no longer work, or print
// something else than it shows, fails the tests (examples_test.go).
package docs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
)

// Bounds of what an example may take. A command that ends by itself (an
// operator command, dev without --hold) ends within commandTimeout; one
// that runs until stopped (run, dev --hold) is ready within readyTimeout
// and ends within stopTimeout of its SIGTERM (run's --shutdown-timeout is
// 30 s).
const (
	commandTimeout = 3 * time.Minute
	readyTimeout   = 2 * time.Minute
	stopTimeout    = 45 * time.Second
	pollEvery      = 100 * time.Millisecond
)

// moduleRoot is where README.md and go.mod are, seen from this package.
const moduleRoot = ".."

// bin is the offsetkeeper command, built once by TestMain; binDir, its
// directory, comes first on the examples' PATH.
var bin, binDir string

func TestMain(m *testing.M) {
	path, cleanup, err := harness.BuildOffsetkeeper()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, binDir = path, filepath.Dir(path)
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(harness.GoleakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	cleanup()
	os.Exit(code)
}

// TestExamples runs the shell examples of README.md and docs/*.md (```sh
// and ```console blocks) and type-checks their Go blocks. Each page runs as
// a subtest, against what its entry in pages (pages_test.go) starts: an
// etcd and a kfake broker, PostgreSQL, ClickHouse. A block or a command the
// page marks `<!-- not run ...: REASON -->` is not run, and the reason is
// logged; the PostgreSQL and ClickHouse URLs in it are still parsed by
// their sinks. Everything else is run: a new example is run by default.
//
// A command runs with bash, from a temporary directory (README.md's from
// the module root), with the offsetkeeper binary first on the PATH, after
// the page's substitutions (pages_test.go) replace its placeholders by
// the test's addresses and directories. It must exit 0, or with the status
// the page shows (`$ echo $?` under it), or 2 for a usage error it shows
// (`Error: --flag ...`) and 1 for another error; the output the page shows
// under it must have the same shape (output_test.go). `offsetkeeper run`
// and `offsetkeeper dev --hold` run until they are ready (a replica: its
// /readyz answers 200 and its group owns every partition with no lag;
// dev: it holds), then get SIGTERM and must exit 0.
func TestExamples(t *testing.T) {
	names := []string{"README.md"}
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		names = append(names, "docs/"+d)
	}
	for name := range pages {
		if !contains(names, name) {
			t.Errorf("pages has an entry for %s, which is not a page", name)
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runPage(t, name)
		})
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// session is one page's run: its environment and what it started.
type session struct {
	t    *testing.T
	name string
	cfg  pageConfig
	dir  string // where commands run
	tmp  string // a directory for the substitutions

	base map[string]string // the environment each block starts from
	env  map[string]string // the current block's

	etcd  *harness.Etcd
	kafka *harness.Kafka
	pg    *harness.Postgres
	ch    *harness.ClickHouse

	bg     *proc  // the `while running:` command of the current block
	status int    // of the last command run
	saved  string // what a hook keeps for a later one
	seen   map[string]int
	used   map[string]bool // hooks that ran
	count  struct{ run, compiled, skipped int }
	reason []string
}

func runPage(t *testing.T, name string) {
	raw, err := os.ReadFile(filepath.Join(moduleRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := parsePage(name, string(raw))
	if err != nil {
		t.Fatal(err)
	}
	s := &session{t: t, name: name, cfg: pages[name], tmp: t.TempDir(), seen: map[string]int{}, used: map[string]bool{}}
	s.dir = t.TempDir()
	if s.cfg.dir != "" {
		s.dir = filepath.Join(moduleRoot, s.cfg.dir)
	}
	s.base = environ()
	for _, b := range blocks {
		switch {
		case b.lang == "go":
			s.compileGo(b)
		case shellLangs[b.lang]:
			s.runBlock(b)
		}
	}
	for k := range s.cfg.hooks {
		if !s.used[k] && !t.Failed() {
			t.Errorf("pages[%q] has a hook for %q, a command the page does not run", name, k)
		}
	}
	if s.count.run+s.count.compiled+s.count.skipped > 0 {
		t.Logf("%s: %d commands run, %d Go blocks type-checked, %d commands not run%s",
			name, s.count.run, s.count.compiled, s.count.skipped, strings.Join(s.reason, ""))
	}
}

// environ is the examples' environment: the test's, without OFFSETKEEPER_*
// variables, with the binary first on the PATH; a replica binds its HTTP
// endpoints to a free loopback port, not :9464 of the machine.
func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "OFFSETKEEPER_") {
			env[k] = v
		}
	}
	env["PATH"] = binDir + string(os.PathListSeparator) + env["PATH"]
	env["OFFSETKEEPER_HTTP_ADDR"] = "127.0.0.1:0"
	return env
}

func (s *session) environ() []string {
	out := make([]string, 0, len(s.env))
	for k, v := range s.env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// setup starts what the page's commands need, once, when the first
// command is about to run.
func (s *session) setup() {
	if s.cfg.cluster && s.etcd == nil {
		s.etcd = harness.StartEtcd(s.t, 1)
		s.kafka = harness.StartKafka(s.t, harness.SeedTopics(topicPartitions, topics...))
		for _, topic := range topics {
			for p := 0; p < topicPartitions; p++ {
				values := make([]string, recordsPerPartition)
				for i := range values {
					values[i] = fmt.Sprintf(`{"id":%d,"topic":%q}`, p*recordsPerPartition+i, topic)
				}
				s.kafka.ProduceValues(s.t, topic, p, values...)
			}
		}
		s.base["OFFSETKEEPER_ETCD_ENDPOINTS"] = strings.Join(s.etcd.Endpoints(), ",")
		s.base["OFFSETKEEPER_BROKERS"] = strings.Join(s.kafka.Brokers(), ",")
		s.env["OFFSETKEEPER_ETCD_ENDPOINTS"] = s.base["OFFSETKEEPER_ETCD_ENDPOINTS"]
		s.env["OFFSETKEEPER_BROKERS"] = s.base["OFFSETKEEPER_BROKERS"]
	}
	if s.cfg.postgres && s.pg == nil {
		s.pg = harness.StartPostgres(s.t)
		for _, sql := range s.cfg.postgresSetup {
			s.pg.Exec(s.t, sql)
		}
	}
	if s.cfg.clickhouse && s.ch == nil {
		s.ch = harness.StartClickHouse(s.t)
		for _, sql := range s.cfg.clickhouseSetup {
			s.ch.Exec(s.t, sql)
		}
	}
}

// The topics of the page's kfake, each with recordsPerPartition JSON
// records in each partition: the examples name them.
var topics = []string{"orders", "refunds"}

const (
	topicPartitions     = 2
	recordsPerPartition = 10
)

// sub replaces a placeholder of the page by the test's value: old, or
// every match of re, by new. Literal substitutions are undone in what a
// command prints (new back to old) before its shape is compared with the
// page's. An outputOnly one applies to what a command printed alone,
// turning the matches of re into new (a template of re's groups).
type sub struct {
	old, new   string
	re         *regexp.Regexp
	outputOnly bool
}

// Substitutions of every page. `...` (or `…`) after `offsetkeeper run`
// stands for the flags an example leaves out: the topics, which the test
// gives as --topics orders, and the connection flags, which come from
// OFFSETKEEPER_ETCD_ENDPOINTS and OFFSETKEEPER_BROKERS. An `export` of
// those variables (a session against dev) takes the addresses of the
// cluster the test runs.
func (s *session) subs() []sub {
	out := []sub{
		{old: "offsetkeeper run ...", new: "offsetkeeper run --topics orders"},
		{old: "offsetkeeper run …", new: "offsetkeeper run --topics orders"},
		{re: regexp.MustCompile(`\bOFFSETKEEPER_ETCD_ENDPOINTS=\S+`), new: "OFFSETKEEPER_ETCD_ENDPOINTS=" + s.env["OFFSETKEEPER_ETCD_ENDPOINTS"]},
		{re: regexp.MustCompile(`\bOFFSETKEEPER_BROKERS=\S+`), new: "OFFSETKEEPER_BROKERS=" + s.env["OFFSETKEEPER_BROKERS"]},
	}
	if s.cfg.subs != nil {
		out = append(s.cfg.subs(s), out...)
	}
	return out
}

func (s *session) substitute(text string) string {
	for _, r := range s.subs() {
		switch {
		case r.outputOnly:
		case r.re != nil:
			text = r.re.ReplaceAllLiteralString(text, r.new)
		default:
			text = strings.ReplaceAll(text, r.old, r.new)
		}
	}
	return text
}

// unsubstitute puts the page's placeholders back into what a command
// printed.
func (s *session) unsubstitute(out string) string {
	for _, r := range s.subs() {
		switch {
		case r.outputOnly:
			out = r.re.ReplaceAllString(out, r.new)
		case r.re == nil && r.new != "":
			out = strings.ReplaceAll(out, r.new, r.old)
		}
	}
	return out
}

// hookKey names a command for the page's hooks: its text without a
// trailing comment, and which of the page's commands of that text it is
// (#1, #2...).
func (s *session) hookKey(c command) string {
	text := strings.TrimSpace(commentRe.ReplaceAllString(c.text, ""))
	s.seen[text]++
	return fmt.Sprintf("%s#%d", text, s.seen[text])
}

var commentRe = regexp.MustCompile(`(?m)[ \t]+#[ \t].*$`)

// notRun counts a command the page does not run, and parses its sink URLs.
func (s *session) notRun(c command, reason string, lines map[string][]int) {
	s.count.skipped++
	lines[reason] = append(lines[reason], c.line)
	for _, p := range append(badURLs(c.text), badFlags(c.text)...) {
		s.t.Errorf("%s:%d: %s", s.name, c.line, p)
	}
}

// logNotRun notes the reasons a block gives, once each, with the lines of
// the commands not run.
func (s *session) logNotRun(lines map[string][]int) {
	reasons := make([]string, 0, len(lines))
	for r := range lines {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool { return lines[reasons[i]][0] < lines[reasons[j]][0] })
	for _, r := range reasons {
		ls := make([]string, len(lines[r]))
		for i, l := range lines[r] {
			ls[i] = strconv.Itoa(l)
		}
		label := "line"
		if len(ls) > 1 {
			label = "lines"
		}
		s.reason = append(s.reason, fmt.Sprintf("\n\tnot run, %s %s: %s", label, strings.Join(ls, ", "), r))
	}
}

func firstLine(s string) string {
	l, _, more := strings.Cut(s, "\n")
	if more {
		l += " ..."
	}
	return l
}

// The sink URLs a command holds, which their sinks parse even where the
// command is not run.
var sinkURLRe = regexp.MustCompile(`\b(postgres|postgresql|clickhouse)://[^\s'"]+`)

// badURLs are the sink URLs of a command line that their sinks refuse.
func badURLs(text string) []string {
	var bad []string
	for _, m := range sinkURLRe.FindAllStringSubmatch(text, -1) {
		var err error
		if m[1] == "clickhouse" {
			err = clickhouse.ValidateURL(m[0], false)
		} else {
			err = postgres.ValidateURL(m[0], false)
		}
		if err != nil {
			bad = append(bad, fmt.Sprintf("the sink URL %s is refused: %v", m[0], err))
		}
	}
	return bad
}

// An offsetkeeper command in a command line (also after `docker compose
// exec SERVICE` or `kubectl exec POD --`): its subcommand words, then the
// rest of the line.
var (
	cliRe     = regexp.MustCompile(`(?s)(?:^|\s)offsetkeeper(?:\s+|$)((?:[a-z][a-z-]*(?:\s+|$))*)(.*)`)
	cliFlagRe = regexp.MustCompile(`(?:^|\s)--([a-z][a-z0-9-]*)`)
	helpFlag  = regexp.MustCompile(`^\s*(?:-[a-z], )?--([a-z][a-z0-9-]*)`)
	helpTexts sync.Map // subcommand path → the flags its --help lists
)

// badFlags are the flags of an offsetkeeper command in a command line
// that its --help does not list: an example that is not run still names
// only what exists.
func badFlags(text string) []string {
	m := cliRe.FindStringSubmatch(commentRe.ReplaceAllString(text, ""))
	if m == nil {
		return nil
	}
	path := strings.Fields(m[1])
	key := strings.Join(path, " ")
	flags, ok := helpTexts.Load(key)
	if !ok {
		out, err := exec.Command(bin, append(path, "--help")...).Output()
		if err != nil {
			return []string{fmt.Sprintf("offsetkeeper %s --help: %v", key, err)}
		}
		listed := map[string]bool{}
		for _, l := range strings.Split(string(out), "\n") {
			if f := helpFlag.FindStringSubmatch(l); f != nil {
				listed[f[1]] = true
			}
		}
		flags, _ = helpTexts.LoadOrStore(key, listed)
	}
	var bad []string
	for _, f := range cliFlagRe.FindAllStringSubmatch(m[2], -1) {
		if !flags.(map[string]bool)[f[1]] {
			bad = append(bad, fmt.Sprintf("offsetkeeper %s has no flag --%s", key, f[1]))
		}
	}
	return bad
}

// runBlock runs the commands of a shell block in order, from the page's
// environment, against its `while running:` command if it has one.
func (s *session) runBlock(b block) {
	t := s.t
	cmds, err := b.commands()
	if err != nil {
		t.Error(err)
		return
	}
	s.env = copyEnv(s.base)
	s.bg = nil
	runs := false
	for _, c := range cmds {
		if _, skip := b.skipped(c); !skip {
			runs = true
		}
	}
	if runs {
		s.setup()
	}
	if b.while != "" && runs {
		text := s.substitute(b.while)
		s.bg = s.start(text)
		s.awaitReady(s.bg, text)
		if strings.Contains(text, "offsetkeeper dev") {
			// The session's commands reach dev's cluster.
			s.env["OFFSETKEEPER_ETCD_ENDPOINTS"] = s.bg.field("etcd:")
			s.env["OFFSETKEEPER_BROKERS"] = s.bg.field("kafka:")
		}
	}
	skipped := map[string][]int{}
	defer s.logNotRun(skipped)
	for i, c := range cmds {
		if reason, skip := b.skipped(c); skip {
			s.notRun(c, reason, skipped)
			continue
		}
		if c.text == "echo $?" {
			// What the page shows is the status of the command above.
			if len(c.output) != 1 || strings.TrimSpace(c.output[0]) != strconv.Itoa(s.status) {
				t.Errorf("%s:%d: echo $? shows %q; the command above exited %d", s.name, c.line, c.output, s.status)
			}
			continue
		}
		s.count.run++
		s.runCommand(c, expectedStatus(cmds, i))
		if t.Failed() {
			break
		}
	}
	if s.bg != nil {
		s.stop(s.bg)
		s.bg = nil
	}
}

func copyEnv(env map[string]string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		out[k] = v
	}
	return out
}

// expectedStatus is the exit status the page shows for command i: the
// `echo $?` under it, else 2 for a usage error it shows (one line of
// stderr naming a flag, a variable, an unknown flag or command), 1 for
// another error, and 0.
func expectedStatus(cmds []command, i int) int {
	if i+1 < len(cmds) && cmds[i+1].text == "echo $?" && len(cmds[i+1].output) == 1 {
		if n, err := strconv.Atoi(strings.TrimSpace(cmds[i+1].output[0])); err == nil {
			return n
		}
	}
	for _, l := range cmds[i].output {
		if strings.HasPrefix(l, "Error: ") {
			if usageErrorRe.MatchString(l) {
				return 2
			}
			return 1
		}
	}
	return 0
}

var usageErrorRe = regexp.MustCompile(`^Error: (--|OFFSETKEEPER_|unknown (flag|command)|environment variable )`)

// longRunningRe matches a command that runs until it is stopped.
var longRunningRe = regexp.MustCompile(`(^|\s)offsetkeeper (run\b|dev\b.*--hold\b)`)

func (s *session) runCommand(c command, want int) {
	t := s.t
	key := s.hookKey(c)
	text := s.substitute(c.text)
	hooks := s.cfg.hooks[key]
	if hooks.before != nil || hooks.after != nil {
		s.used[key] = true
	}
	if hooks.before != nil {
		hooks.before(s)
	}
	where := fmt.Sprintf("%s:%d: %s", s.name, c.line, firstLine(c.text))
	var out string
	if want == 0 && longRunningRe.MatchString(text) {
		p := s.start(text)
		s.awaitReady(p, text)
		if hooks.after != nil {
			hooks.after(s, p.out.String())
		}
		s.stop(p)
		s.status = 0
		return
	}
	s.status, out = s.run(text)
	if s.status != want {
		t.Errorf("%s\nexited %d, want %d; its output:\n%s", where, s.status, want, out)
		return
	}
	if len(c.output) > 0 {
		if err := checkOutput(c.output, s.unsubstitute(out)); err != nil {
			t.Errorf("%s\nits output is not the page's: %v\nthe page shows:\n%s\nit printed:\n%s", where, err, strings.Join(c.output, "\n"), out)
			return
		}
	}
	if hooks.after != nil {
		hooks.after(s, out)
	}
}

// run runs text with bash until it ends and returns its exit status and
// output (stdout and stderr as they came); the variables it exports are
// the block's from then on.
func (s *session) run(text string) (int, string) {
	t := s.t
	envFile := filepath.Join(s.tmp, "env")
	script := text + "\n__okrc=$?\nenv -0 >" + shellQuote(envFile) + "\nexit $__okrc\n"
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = s.dir, s.environ()
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var ee *exec.ExitError
	status := 0
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s: still running after %s; its output:\n%s", firstLine(text), commandTimeout, out.String())
	case errors.As(err, &ee):
		status = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", firstLine(text), err)
	}
	if raw, err := os.ReadFile(envFile); err == nil {
		env := map[string]string{}
		for _, kv := range strings.Split(string(raw), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "_" && k != "SHLVL" && k != "PWD" && k != "OLDPWD" {
				env[k] = v
			}
		}
		s.env = env
		_ = os.Remove(envFile)
	}
	return status, out.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// assignRe: the variable assignments that start a command line, before
// which start puts exec.
var assignRe = regexp.MustCompile(`^((?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*)`)

// proc is a command that runs until stopped.
type proc struct {
	text string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error

	httpAddr string // a replica's, once ready
}

// start starts text with bash, which execs its command, so that the
// signals the test sends reach it.
func (s *session) start(text string) *proc {
	t := s.t
	script := assignRe.ReplaceAllString(text, "${1}exec ")
	p := &proc{text: text, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command("bash", "-c", script)
	p.cmd.Dir, p.cmd.Env = s.dir, s.environ()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", firstLine(text), err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// field is the value of the first line of p's output that starts with
// label (dev's `etcd:`, `kafka:`).
func (p *proc) field(label string) string {
	for _, l := range strings.Split(p.out.String(), "\n") {
		if strings.HasPrefix(l, label) {
			return strings.Fields(strings.TrimPrefix(l, label))[0]
		}
	}
	return ""
}

// stop sends SIGTERM and wants a clean exit.
func (s *session) stop(p *proc) {
	t := s.t
	if p.exited() {
		t.Errorf("%s ended before it was stopped: %v; its output:\n%s", firstLine(p.text), p.err, p.out.String())
		return
	}
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		t.Fatalf("%s: still running %s after SIGTERM; its output:\n%s", firstLine(p.text), stopTimeout, p.out.String())
	}
	if p.err != nil {
		t.Errorf("%s: after SIGTERM: %v, want exit 0; its output:\n%s", firstLine(p.text), p.err, p.out.String())
	}
}

// awaitReady waits until p is ready: dev --hold holds its cluster; a
// replica answers 200 on /readyz and its group owns every partition of
// its topics, with no lag.
func (s *session) awaitReady(p *proc, text string) {
	t := s.t
	dev := strings.Contains(text, "offsetkeeper dev")
	group := flagValue(text, "group")
	if group == "" {
		group = s.env["OFFSETKEEPER_GROUP"]
	}
	what := "dev to hold its cluster"
	if !dev {
		what = fmt.Sprintf("the replica of group %q to be ready, owning every partition with no lag", group)
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		if p.exited() {
			t.Fatalf("%s: exited before it was ready (%v); its output:\n%s", firstLine(text), p.err, p.out.String())
		}
		if dev && holdingRe.MatchString(p.out.String()) {
			return
		}
		if !dev && s.replicaReady(p, group) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out after %s waiting for %s; its output:\n%s", firstLine(text), readyTimeout, what, p.out.String())
		}
		time.Sleep(pollEvery)
	}
}

// holdingRe: dev --hold's line once its cluster is up after the report.
var holdingRe = regexp.MustCompile(`(?m)^holding:`)

var flagRes sync.Map

// flagValue is the value of --name in a command line.
func flagValue(text, name string) string {
	re, ok := flagRes.Load(name)
	if !ok {
		re, _ = flagRes.LoadOrStore(name, regexp.MustCompile(`--`+regexp.QuoteMeta(name)+`[= ]'?([^\s']+)`))
	}
	if m := re.(*regexp.Regexp).FindStringSubmatch(text); m != nil {
		return m[1]
	}
	return ""
}

func (s *session) replicaReady(p *proc, group string) bool {
	var replicas []struct {
		PID         int    `json:"pid"`
		HTTPAddress string `json:"http_address"`
	}
	if err := s.cliJSON(&replicas, "replicas", "list", "-o", "json", "--group", group); err != nil {
		return false
	}
	p.httpAddr = ""
	for _, r := range replicas {
		if r.PID == p.cmd.Process.Pid {
			p.httpAddr = r.HTTPAddress
		}
	}
	if p.httpAddr == "" {
		return false
	}
	resp, err := http.Get("http://" + p.httpAddr + "/readyz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	var d struct {
		Partitions []struct {
			Owner *string `json:"owner"`
			Lag   *int64  `json:"lag"`
		} `json:"partitions"`
	}
	if err := s.cliJSON(&d, "offsets", "describe", "-o", "json", "--group", group); err != nil || len(d.Partitions) == 0 {
		return false
	}
	for _, part := range d.Partitions {
		if part.Owner == nil || part.Lag == nil || *part.Lag != 0 {
			return false
		}
	}
	return true
}

// cliJSON runs an operator command with the block's environment and
// decodes its JSON output into v.
func (s *session) cliJSON(v any, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = s.environ()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("offsetkeeper %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return json.Unmarshal(out, v)
}

// compileGo type-checks a Go block: the page's goWrap makes a file of
// package docs of it, which `go vet` checks with this package (through an
// overlay: nothing is written to the module).
func (s *session) compileGo(b block) {
	t := s.t
	if len(b.notRun) > 0 {
		s.count.skipped++
		s.reason = append(s.reason, fmt.Sprintf("\n\tnot type-checked, line %d: %s", b.line, b.notRun[0].reason))
		return
	}
	if s.cfg.goWrap == nil {
		t.Errorf("%s:%d: a Go block, and pages[%q] has no goWrap to make a file of it", s.name, b.line, s.name)
		return
	}
	s.count.compiled++
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(s.tmp, fmt.Sprintf("example%d.go", b.line))
	if err := os.WriteFile(src, []byte(s.cfg.goWrap(s.substitute(strings.Join(b.body, "\n")))), 0o644); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("zz_example_%s_%d.go", strings.TrimSuffix(filepath.Base(s.name), ".md"), b.line)
	overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(here, name): src}})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(s.tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "vet", "-overlay", overlayFile, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		body, _ := os.ReadFile(src)
		t.Errorf("%s:%d: the Go block does not type-check: %v\n%s\nthe file checked:\n%s", s.name, b.line, err, out, body)
	}
}

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
