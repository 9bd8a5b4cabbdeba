//go:build !nodev

// Package clidocs generates the CLI reference from the commands (cobra/doc)
// so that it cannot drift from them: a Markdown page per command in
// docs/cli, a man page per command in docs/cli/man, and the sinks' URL
// parameter tables in their pages of docs/. Only cmd/offsetkeeper's tests
// call it; a -tags nodev build (the container image) leaves it out, and
// with it cobra/doc and its Markdown and roff renderers (about 350 kB of
// the binary).
package clidocs

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
)

// TestCLIDocsUpToDate (cmd/offsetkeeper) fails when docs/cli is not what
// Write makes of the default build's commands; Regenerate says how to
// regenerate it.

const (
	// Regenerate is the command that rewrites docs/cli.
	Regenerate = "OFFSETKEEPER_UPDATE_DOCS=1 go test ./cmd/offsetkeeper -run TestCLIDocsUpToDate"
	// cliDocsManSubdir holds the man pages, under the Markdown pages' directory.
	cliDocsManSubdir = "man"
)

// cliDocsManDate is the date in the man pages' headers. cobra/doc would
// put the day of the generation there, which would make every
// regeneration a change: it is fixed instead, and only names the month
// the reference was laid out.
var cliDocsManDate = time.Date(2026, time.December, 1, 0, 0, 0, 0, time.UTC)

// Env says how flags map to environment variables: Name is the variable
// of a flag; CLIOnly are the flags whose command refuses the variable
// (taken from the command line only), keyed by "<command path> --<flag>",
// the value saying why.
// Prefix is the variables' prefix (OFFSETKEEPER_); Passwords are the
// variables of passwords, each beside the flag of its user (etcd-user).
type Env struct {
	Name      func(flag string) string
	Prefix    string
	CLIOnly   map[string]string
	Passwords [][2]string
}

// Write writes the reference of root's command tree into dir: a
// Markdown page per available command (offsetkeeper_offsets_reset.md), each
// with a table of its flags' OFFSETKEEPER_* variables and defaults, a
// README.md index, and the man pages in dir/man
// (offsetkeeper-offsets-reset.1). The output depends only on the commands:
// no date, no host. Pages of the same pattern (offsetkeeper*.md,
// man/offsetkeeper*.1) that root no longer has are removed; nothing else
// in dir is touched. root is changed (its help commands and flags are
// initialised, the auto-generated tag turned off): pass a fresh tree.
func Write(root *cobra.Command, dir string, env Env) error {
	manDir := filepath.Join(dir, cliDocsManSubdir)
	if err := os.MkdirAll(manDir, 0o755); err != nil {
		return fmt.Errorf("cli docs: %w", err)
	}
	root.InitDefaultHelpCmd()
	root.InitDefaultHelpFlag()
	var cmds []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		c.InitDefaultHelpFlag()
		cmds = append(cmds, c)
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() && !s.IsAdditionalHelpTopicCommand() {
				walk(s)
			}
		}
	}
	walk(root)

	written := map[string]bool{}
	write := func(name string, data []byte) error {
		written[name] = true
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("cli docs: %w", err)
		}
		return nil
	}
	header := &doc.GenManHeader{
		Section: "1",
		Date:    &cliDocsManDate,
		Source:  "offsetkeeper",
		Manual:  "offsetkeeper manual",
	}
	for _, c := range cmds {
		vars := EnvVars(c, env)

		var md bytes.Buffer
		fmt.Fprintf(&md, "<!-- Generated from the commands' help by clidocs.Write (internal/clidocs): do not edit.\n     %s -->\n\n", Regenerate)
		if err := doc.GenMarkdownCustom(c, &md, func(s string) string { return s }); err != nil {
			return fmt.Errorf("cli docs: %s: %w", c.CommandPath(), err)
		}
		page := insertBefore(md.Bytes(), "\n### SEE ALSO\n", markdownEnv(vars, env.Prefix))
		if err := write(markdownName(c), page); err != nil {
			return err
		}

		var man bytes.Buffer
		h := *header
		if err := doc.GenMan(c, &h, &man); err != nil {
			return fmt.Errorf("cli docs: %s: %w", c.CommandPath(), err)
		}
		page = insertBefore(man.Bytes(), "\n.SH SEE ALSO\n", manEnv(vars, env.Prefix))
		page = append([]byte(`.\" Generated from the commands' help by clidocs.Write (internal/clidocs): do not edit.`+"\n"+
			`.\" `+Regenerate+"\n"), page...)
		if err := write(filepath.Join(cliDocsManSubdir, manName(c)), page); err != nil {
			return err
		}
	}
	if err := write("README.md", cliDocsIndex(cmds)); err != nil {
		return err
	}

	// Pages of commands that are gone.
	for _, pattern := range []string{"offsetkeeper*.md", filepath.Join(cliDocsManSubdir, "offsetkeeper*.1")} {
		old, err := fs.Glob(os.DirFS(dir), filepath.ToSlash(pattern))
		if err != nil {
			return fmt.Errorf("cli docs: %w", err)
		}
		for _, name := range old {
			if !written[filepath.FromSlash(name)] {
				if err := os.Remove(filepath.Join(dir, name)); err != nil {
					return fmt.Errorf("cli docs: %w", err)
				}
			}
		}
	}
	return nil
}

// markdownName and manName are the pages' file names, as cobra/doc's
// GenMarkdownTree and GenManTree name them.
func markdownName(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "_") + ".md"
}

func manName(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
}

// EnvVar is one environment variable a command reads.
type EnvVar struct {
	Name        string // OFFSETKEEPER_GROUP
	Flag        string // --group; empty for a variable of no flag
	Default     string // the default, as the variable would give it
	DefaultNote string // the default, in words, where Default is empty: the flag's usage says it
	Comment     string // what else to know
	Refused     bool   // a variable the command refuses (Env.CLIOnly)
}

// EnvVars are the variables c reads: one per flag (bindEnv's
// envName), for the commands that run through runE, which are those with
// flags other than --help and --version outside the completion command
// (cobra's, which reads none); then the passwords, which have no flag.
func EnvVars(c *cobra.Command, env Env) []EnvVar {
	for p := c; p != nil; p = p.Parent() {
		if p.Name() == "completion" && p.Parent() == c.Root() {
			return nil
		}
	}
	var vars []EnvVar
	has := map[string]*pflag.Flag{}
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Name == "version" || f.Hidden || f.Deprecated != "" {
			return
		}
		has[f.Name] = f
		v := EnvVar{Name: env.Name(f.Name), Flag: "--" + f.Name, Default: envDefault(f)}
		if m := usageDefault.FindStringSubmatch(f.Usage); m != nil && v.Default == "" {
			v.DefaultNote = m[1]
		}
		if why, ok := env.CLIOnly[c.CommandPath()+" --"+f.Name]; ok {
			v.Comment, v.Refused, v.Default, v.DefaultNote = "refused: "+why, true, "", ""
		}
		vars = append(vars, v)
	})
	if len(vars) == 0 {
		return nil
	}
	for _, pw := range env.Passwords {
		if _, ok := has[pw[0]]; ok {
			vars = append(vars, EnvVar{Name: pw[1], Comment: fmt.Sprintf("the --%s's password (no flag: a password never shows in ps)", pw[0])})
		}
	}
	if f, ok := has["sink"]; ok {
		if strings.Contains(f.Usage, "clickhouse://") {
			vars = append(vars, EnvVar{Name: clickhouse.PasswordEnv, Comment: "a clickhouse:// sink's password"})
		}
		if strings.Contains(f.Usage, "postgres://") {
			vars = append(vars, EnvVar{Name: "PGPASSWORD", Comment: "a postgres:// sink's password (and the other PG* variables of libpq, read by pgx)"})
		}
	}
	return vars
}

// usageDefault finds the default a flag's usage states in words, as
// "(default host-pid)" or "(default: every partition of the group's
// topics)" at its end, for a flag whose zero value means it.
var usageDefault = regexp.MustCompile(`\(default:? ([^()]+)\)$`)

// envDefault is f's default as its variable would be written (a list
// comma-separated), or empty where --help shows none: pflag leaves out
// the zero values (false, 0, an empty string or list).
func envDefault(f *pflag.Flag) string {
	d := f.DefValue
	if strings.HasSuffix(f.Value.Type(), "Slice") || strings.HasSuffix(f.Value.Type(), "Array") || f.Value.Type() == "strings" {
		d = strings.TrimSuffix(strings.TrimPrefix(d, "["), "]")
	}
	switch d {
	case "false", "0", "0s", "<nil>":
		return ""
	}
	return d
}

// markdownEnv is the "Environment" section of a command's page.
func markdownEnv(vars []EnvVar, prefix string) []byte {
	if len(vars) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("\n### Environment\n\n")
	b.WriteString("A flag not given on the command line is read from its variable (" + prefix + " and the flag's name\n")
	b.WriteString("in upper case, '-' as '_'); the command line wins. A variable that no command reads is\n")
	b.WriteString("refused when it is a near miss of one, else warned of.\n\n")
	b.WriteString("| variable | flag | default |\n|---|---|---|\n")
	for _, v := range vars {
		name, def := "`"+v.Name+"`", ""
		switch {
		case v.Default != "":
			def = "`" + strings.ReplaceAll(v.Default, "|", `\|`) + "`"
		case v.DefaultNote != "":
			def = strings.ReplaceAll(v.DefaultNote, "|", `\|`)
		}
		flag := v.Flag
		if flag != "" {
			flag = "`" + flag + "`"
		}
		if v.Comment != "" {
			if flag != "" {
				flag += ": "
			}
			flag += v.Comment
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, flag, def)
	}
	return b.Bytes()
}

// manEnv is the ENVIRONMENT section of a command's man page (roff).
func manEnv(vars []EnvVar, prefix string) []byte {
	if len(vars) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("\n.SH ENVIRONMENT\n.PP\n")
	b.WriteString(roff("A flag not given on the command line is read from its variable ("+prefix+" and the flag's name in upper case, '-' as '_'); the command line wins.") + "\n")
	for _, v := range vars {
		b.WriteString(".TP\n\\fB" + roff(v.Name) + "\\fP\n")
		var what []string
		if v.Flag != "" {
			what = append(what, v.Flag)
		}
		if v.Comment != "" {
			what = append(what, v.Comment)
		}
		switch {
		case v.Default != "":
			what = append(what, "default "+v.Default)
		case v.DefaultNote != "":
			what = append(what, "default: "+v.DefaultNote)
		}
		b.WriteString(roff(strings.Join(what, "; ")) + "\n")
	}
	return b.Bytes()
}

// roff escapes text for a roff line: backslashes and hyphens, and a
// leading dot or quote, which would start a request.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// insertBefore inserts add into page before the first mark (keeping mark's
// leading newline before add), or at the end when there is none.
func insertBefore(page []byte, mark string, add []byte) []byte {
	if len(add) == 0 {
		return page
	}
	i := bytes.Index(page, []byte(mark))
	if i < 0 {
		return append(bytes.TrimRight(page, "\n"), append(append([]byte("\n"), add...), '\n')...)
	}
	out := slices.Clone(page[:i])
	out = append(out, add...)
	return append(out, page[i:]...)
}

// cliDocsIndex is docs/cli/README.md: the pages, by command.
func cliDocsIndex(cmds []*cobra.Command) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "<!-- Generated by clidocs.Write (internal/clidocs): do not edit.\n     %s -->\n\n", Regenerate)
	b.WriteString("# offsetkeeper CLI reference\n\n")
	b.WriteString("One page per command, generated from its `--help` (usage, flags, examples), with the\n")
	b.WriteString("`OFFSETKEEPER_*` variable and the default of each flag; the same as man pages in\n")
	b.WriteString("[`man/`](man/) (`man -l docs/cli/man/offsetkeeper-run.1`). `TestCLIDocsUpToDate` fails\n")
	b.WriteString("when these pages are not what the commands say; regenerate them with\n\n")
	fmt.Fprintf(&b, "```sh\n%s\n```\n\n", Regenerate)
	b.WriteString("| command | page | man page |\n|---|---|---|\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "| `%s` — %s | [%s](%s) | [%s](man/%s) |\n",
			c.CommandPath(), strings.ReplaceAll(c.Short, "|", `\|`), markdownName(c), markdownName(c), manName(c), manName(c))
	}
	return b.Bytes()
}

// The sinks' URL parameter tables in docs/ (docs/postgresql.md,
// docs/clickhouse.md), generated from the Params of each sink's
// Descriptor, each between <!-- params:NAME --> and <!-- /params --> in the
// page its Doc names. The rest of the page is not touched.
// TestCLIDocsUpToDate checks them with docs/cli, and Regenerate
// rewrites them too.

const sinkParamsEnd = "<!-- /params -->"

// sinkParamBlock is one generated block of a docs page.
type sinkParamBlock struct {
	page string // the page, in the docs directory: postgresql.md
	name string // the block's marker name: postgres for <!-- params:postgres -->
	text string
}

// sinkParamBlocks are the blocks of the sinks of table: a table of each
// sink's own parameters, and a list of those it passes on.
func sinkParamBlocks(table sinks.Table) []sinkParamBlock {
	var blocks []sinkParamBlock
	for _, d := range table {
		var own [][3]string
		var passed []sinks.Param
		for _, p := range d.Params {
			if p.PassedTo != "" {
				passed = append(passed, p)
				continue
			}
			own = append(own, [3]string{p.Name, p.Default, p.Meaning})
		}
		if len(own) > 0 {
			blocks = append(blocks, sinkParamBlock{d.Doc, d.Scheme, sinkParamTable(d.Scheme+".Descriptor's Params", own)})
		}
		if len(passed) > 0 {
			blocks = append(blocks, sinkParamBlock{d.Doc, d.Scheme + "-conn", passedParamList(passed)})
		}
	}
	return blocks
}

// sinkParamTable is a block of a parameter table, on lines of its own
// between the markers, under a comment naming where it comes from.
func sinkParamTable(from string, rows [][3]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n<!-- Generated from %s by clidocs.WriteSinkParams (internal/clidocs): do not edit.\n     %s -->\n\n", from, Regenerate)
	b.WriteString("| parameter | default | meaning |\n|---|---|---|\n")
	esc := strings.NewReplacer("|", `\|`).Replace
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r[0], esc(r[1]), esc(r[2]))
	}
	b.WriteString("\n")
	return b.String()
}

// passedParamList is the parameters a sink passes on, inline in a
// sentence: libpq's `host`, ...; pgx's `database`, ...; pgxpool's
// `pool_max_conns`, ... (by who defines them, in the parser's order).
func passedParamList(ps []sinks.Param) string {
	var from []string
	names := map[string][]string{}
	for _, p := range ps {
		if _, ok := names[p.PassedTo]; !ok {
			from = append(from, p.PassedTo)
		}
		names[p.PassedTo] = append(names[p.PassedTo], "`"+p.Name+"`")
	}
	var parts []string
	for _, f := range from {
		parts = append(parts, f+"'s "+strings.Join(names[f], ", "))
	}
	return strings.Join(parts, "; ")
}

// SinkParams are the pages of docsDir that hold sink parameter blocks,
// by name, as they should be: as they are, with each block's text
// regenerated. A page without its block's markers, or with them twice, is
// an error.
func SinkParams(docsDir string, table sinks.Table) (map[string][]byte, error) {
	pages := map[string][]byte{}
	for _, blk := range sinkParamBlocks(table) {
		page, ok := pages[blk.page]
		if !ok {
			b, err := os.ReadFile(filepath.Join(docsDir, blk.page))
			if err != nil {
				return nil, fmt.Errorf("sink parameter docs: %w", err)
			}
			page = b
		}
		start := "<!-- params:" + blk.name + " -->"
		i := bytes.Index(page, []byte(start))
		if i < 0 || bytes.Count(page, []byte(start)) > 1 {
			return nil, fmt.Errorf("sink parameter docs: %s: want one %s ... %s", blk.page, start, sinkParamsEnd)
		}
		i += len(start)
		j := bytes.Index(page[i:], []byte(sinkParamsEnd))
		if j < 0 {
			return nil, fmt.Errorf("sink parameter docs: %s: %s has no %s after it", blk.page, start, sinkParamsEnd)
		}
		out := slices.Clone(page[:i])
		out = append(out, blk.text...)
		pages[blk.page] = append(out, page[i+j:]...)
	}
	return pages, nil
}

// WriteSinkParams regenerates the sink parameter blocks of the pages in
// docsDir, writing only the pages that change.
func WriteSinkParams(docsDir string, table sinks.Table) error {
	pages, err := SinkParams(docsDir, table)
	if err != nil {
		return err
	}
	for name, want := range pages {
		path := filepath.Join(docsDir, name)
		got, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("sink parameter docs: %w", err)
		}
		if bytes.Equal(got, want) {
			continue
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			return fmt.Errorf("sink parameter docs: %w", err)
		}
	}
	return nil
}
