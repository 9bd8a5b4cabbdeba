//go:build !nodev

package main

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/internal/clidocs"
	"github.com/offsetkeeper/offsetkeeper/sinks/builtin"
)

// cliEnv is how the commands' flags map to variables (env.go), for the
// reference.
var cliEnv = clidocs.Env{
	Name:   envName,
	Prefix: envPrefix,
	// Flags that bindEnv sets from the environment but whose command
	// then refuses the variable.
	CLIOnly: map[string]string{
		"offsetkeeper offsets reset --execute": "command line only, so that a reset is never applied by accident",
	},
	Passwords: [][2]string{{"etcd-user", envEtcdPassword}, {"kafka-user", envKafkaPassword}, {"schema-registry-user", envRegistryPassword}},
}

// cliDocsDir is the generated CLI reference, from this package.
const cliDocsDir = "../../docs/cli"

// sinkDocsDir holds the sinks' pages, whose parameter tables are generated.
const sinkDocsDir = "../../docs"

// TestCLIDocsUpToDate: docs/cli is what writeCLIDocs makes of the
// commands, byte for byte: a changed flag, help text or command fails here
// until the reference is regenerated. With OFFSETKEEPER_UPDATE_DOCS=1 it
// regenerates docs/cli instead (clidocs.Regenerate). The reference is of the
// default build, which has dev (internal/clidocs is not linked by a -tags nodev build).
// The sinks' URL parameter tables in docs/postgresql.md and
// docs/clickhouse.md are checked and regenerated the same way.
func TestCLIDocsUpToDate(t *testing.T) {
	t.Run("sink parameters", testSinkParamDocs)
	if os.Getenv("OFFSETKEEPER_UPDATE_DOCS") != "" {
		if err := clidocs.Write(newRootCommand(builtin.Sinks()), cliDocsDir, cliEnv); err != nil {
			t.Fatal(err)
		}
		t.Logf("regenerated %s", cliDocsDir)
		return
	}
	tmp := t.TempDir()
	if err := clidocs.Write(newRootCommand(builtin.Sinks()), tmp, cliEnv); err != nil {
		t.Fatal(err)
	}
	want, got := readTree(t, tmp), readTree(t, cliDocsDir)
	var stale bool
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range want {
			if !yield(n) {
				return
			}
		}
		for n := range got {
			if _, ok := want[n]; !ok && !yield(n) {
				return
			}
		}
	}) {
		w, inWant := want[name]
		g, inGot := got[name]
		switch {
		case !inGot:
			t.Errorf("docs/cli/%s is missing", name)
		case !inWant:
			t.Errorf("docs/cli/%s is not a page of the commands (a command removed or renamed?)", name)
		case !bytes.Equal(w, g):
			t.Errorf("docs/cli/%s is stale: %s", name, firstDiff(w, g))
		default:
			continue
		}
		stale = true
	}
	if stale {
		t.Fatalf("docs/cli does not match the commands: regenerate it with\n\t%s", clidocs.Regenerate)
	}
}

// testSinkParamDocs: the sink parameter blocks of the docs pages are what
// the sinks' parsers accept (sinkParamDocs), byte for byte; with
// OFFSETKEEPER_UPDATE_DOCS=1 they are regenerated instead.
func testSinkParamDocs(t *testing.T) {
	if os.Getenv("OFFSETKEEPER_UPDATE_DOCS") != "" {
		if err := clidocs.WriteSinkParams(sinkDocsDir, builtin.Sinks()); err != nil {
			t.Fatal(err)
		}
		t.Logf("regenerated the sink parameter tables in %s", sinkDocsDir)
		return
	}
	want, err := clidocs.SinkParams(sinkDocsDir, builtin.Sinks())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		got, err := os.ReadFile(filepath.Join(sinkDocsDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want[name], got) {
			t.Errorf("docs/%s: a sink parameter table is stale: %s\nregenerate it with\n\t%s", name, firstDiff(want[name], got), clidocs.Regenerate)
		}
	}
}

// readTree reads every file under dir, by slash-separated relative name.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return files
}

// firstDiff names the first line where got departs from want.
func firstDiff(want, got []byte) string {
	wl, gl := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := range max(len(wl), len(gl)) {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + strconv.Itoa(i+1) + ": the commands say\n\t" + w + "\nthe file has\n\t" + g
		}
	}
	return "they differ"
}

// TestCLIDocsEnvironment: the pages' variables are the ones the commands
// read: every flag's of the commands that bind the environment, none for
// the completion and group commands, and a variable said to be refused
// (cliOnlyFlags) is refused.
func TestCLIDocsEnvironment(t *testing.T) {
	root := newRootCommand(builtin.Sinks())
	find := func(args ...string) []clidocs.EnvVar {
		t.Helper()
		c, _, err := root.Find(args)
		if err != nil {
			t.Fatal(err)
		}
		return clidocs.EnvVars(c, cliEnv)
	}
	byName := func(vars []clidocs.EnvVar) map[string]clidocs.EnvVar {
		m := map[string]clidocs.EnvVar{}
		for _, v := range vars {
			m[v.Name] = v
		}
		return m
	}
	run := byName(find("run"))
	for name, def := range map[string]string{
		"OFFSETKEEPER_GROUP":            "",
		"OFFSETKEEPER_BROKERS":          "127.0.0.1:9092",
		"OFFSETKEEPER_MAX_BUFFER_BYTES": "256MiB",
		"OFFSETKEEPER_SHUTDOWN_TIMEOUT": "30s",
	} {
		v, ok := run[name]
		if !ok || v.Default != def {
			t.Errorf("run: %s %+v, want it with default %q", name, v, def)
		}
	}
	for _, name := range []string{envEtcdPassword, envKafkaPassword, envRegistryPassword, "OFFSETKEEPER_CLICKHOUSE_PASSWORD", "PGPASSWORD"} {
		if _, ok := run[name]; !ok {
			t.Errorf("run: %s not listed", name)
		}
	}
	for _, args := range [][]string{{}, {"offsets"}, {"completion"}, {"completion", "bash"}} {
		if vars := find(args...); len(vars) > 0 {
			t.Errorf("%v: variables %+v, want none (it reads no setting)", args, vars)
		}
	}

	// The refused ones are refused, as bad usage, naming the variable.
	// A command line that gets as far as the check, for each.
	reaches := map[string][]string{
		"offsetkeeper offsets reset --execute": {"offsets", "reset", "--group", "g", "--topic", "t", "--to-earliest"},
	}
	for key, why := range cliEnv.CLIOnly {
		path, flag, _ := strings.Cut(key, " --")
		args, ok := reaches[key]
		if !ok {
			t.Errorf("cliOnlyFlags' %s: give this test a command line that reaches its check", key)
			continue
		}
		vars := byName(find(strings.Fields(path)[1:]...))
		name := envName(flag)
		if v, ok := vars[name]; !ok || !v.Refused || !strings.Contains(v.Comment, why) {
			t.Errorf("%s: %+v, want it listed as refused", key, v)
		}
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, "true")
			r := runCLI(t, 10*time.Second, args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, name) {
				t.Errorf("offsetkeeper %s with %s=true: exit %d, stderr %q; want bad usage naming it", strings.Join(args, " "), name, r.code, r.stderr)
			}
		})
	}
}
