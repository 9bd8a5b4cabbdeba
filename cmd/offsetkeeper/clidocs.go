//go:build !nodev

// The reference is of the default build, the one with dev; a -tags nodev
// build (the container image) leaves this file out, and with it cobra/doc
// and its Markdown and roff renderers (about 350 kB of the binary).

package main

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
	"github.com/offsetkeeper/offsetkeeper/sinks/builtin"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
)

// The CLI reference, generated from the commands (cobra/doc) so that it
// cannot drift from them: a Markdown page per command in docs/cli and a
// man page per command in docs/cli/man. TestCLIDocsUpToDate fails when
// docs/cli is not what writeCLIDocs makes of the default build's commands;
// cliDocsRegenerate says how to regenerate it.

const (
	// cliDocsRegenerate is the command that rewrites docs/cli.
	cliDocsRegenerate = "OFFSETKEEPER_UPDATE_DOCS=1 go test ./cmd/offsetkeeper -run TestCLIDocsUpToDate"
	// cliDocsManSubdir holds the man pages, under the Markdown pages' directory.
	cliDocsManSubdir = "man"
)

// cliDocsManDate is the date in the man pages' headers. cobra/doc would
// put the day of the generation there, which would make every
// regeneration a change: it is fixed instead, and only names the month
// the reference was laid out.
var cliDocsManDate = time.Date(2026, time.December, 1, 0, 0, 0, 0, time.UTC)

// cliOnlyFlags are the flags that bindEnv sets from the environment but
// whose command then refuses the variable: they are taken from the command
// line only. Keyed by "<command path> --<flag>"; the value says why.
var cliOnlyFlags = map[string]string{
	"offsetkeeper offsets reset --execute": "command line only, so that a reset is never applied by accident",
}

// writeCLIDocs writes the reference of root's command tree into dir: a
// Markdown page per available command (offsetkeeper_offsets_reset.md), each
// with a table of its flags' OFFSETKEEPER_* variables and defaults, a
// README.md index, and the man pages in dir/man
// (offsetkeeper-offsets-reset.1). The output depends only on the commands:
// no date, no host. Pages of the same pattern (offsetkeeper*.md,
// man/offsetkeeper*.1) that root no longer has are removed; nothing else
// in dir is touched. root is changed (its help commands and flags are
// initialised, the auto-generated tag turned off): pass a fresh tree.
func writeCLIDocs(root *cobra.Command, dir string) error {
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
		vars := cliEnvVars(c)

		var md bytes.Buffer
		fmt.Fprintf(&md, "<!-- Generated from the commands' help by writeCLIDocs (cmd/offsetkeeper/clidocs.go): do not edit.\n     %s -->\n\n", cliDocsRegenerate)
		if err := doc.GenMarkdownCustom(c, &md, func(s string) string { return s }); err != nil {
			return fmt.Errorf("cli docs: %s: %w", c.CommandPath(), err)
		}
		page := insertBefore(md.Bytes(), "\n### SEE ALSO\n", markdownEnv(vars))
		if err := write(markdownName(c), page); err != nil {
			return err
		}

		var man bytes.Buffer
		h := *header
		if err := doc.GenMan(c, &h, &man); err != nil {
			return fmt.Errorf("cli docs: %s: %w", c.CommandPath(), err)
		}
		page = insertBefore(man.Bytes(), "\n.SH SEE ALSO\n", manEnv(vars))
		page = append([]byte(`.\" Generated from the commands' help by writeCLIDocs (cmd/offsetkeeper/clidocs.go): do not edit.`+"\n"+
			`.\" `+cliDocsRegenerate+"\n"), page...)
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

// cliEnvVar is one environment variable a command reads.
type cliEnvVar struct {
	name    string // OFFSETKEEPER_GROUP
	flag    string // --group; empty for a variable of no flag
	def     string // the default, as the variable would give it
	defNote string // the default, in words, where def is empty: the flag's usage says it
	comment string // what else to know
	refused bool   // a variable the command refuses (cliOnlyFlags)
}

// cliEnvVars are the variables c reads: one per flag (bindEnv's
// envName), for the commands that run through runE, which are those with
// flags other than --help and --version outside the completion command
// (cobra's, which reads none); then the passwords, which have no flag.
func cliEnvVars(c *cobra.Command) []cliEnvVar {
	for p := c; p != nil; p = p.Parent() {
		if p.Name() == "completion" && p.Parent() == c.Root() {
			return nil
		}
	}
	var vars []cliEnvVar
	has := map[string]*pflag.Flag{}
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Name == "version" || f.Hidden || f.Deprecated != "" {
			return
		}
		has[f.Name] = f
		v := cliEnvVar{name: envName(f.Name), flag: "--" + f.Name, def: envDefault(f)}
		if m := usageDefault.FindStringSubmatch(f.Usage); m != nil && v.def == "" {
			v.defNote = m[1]
		}
		if why, ok := cliOnlyFlags[c.CommandPath()+" --"+f.Name]; ok {
			v.comment, v.refused, v.def, v.defNote = "refused: "+why, true, "", ""
		}
		vars = append(vars, v)
	})
	if len(vars) == 0 {
		return nil
	}
	for _, pw := range []struct{ user, env string }{
		{"etcd-user", envEtcdPassword},
		{"kafka-user", envKafkaPassword},
		{"schema-registry-user", envRegistryPassword},
	} {
		if _, ok := has[pw.user]; ok {
			vars = append(vars, cliEnvVar{name: pw.env, comment: fmt.Sprintf("the --%s's password (no flag: a password never shows in ps)", pw.user)})
		}
	}
	if f, ok := has["sink"]; ok {
		if strings.Contains(f.Usage, "clickhouse://") {
			vars = append(vars, cliEnvVar{name: clickhouse.PasswordEnv, comment: "a clickhouse:// sink's password"})
		}
		if strings.Contains(f.Usage, "postgres://") {
			vars = append(vars, cliEnvVar{name: "PGPASSWORD", comment: "a postgres:// sink's password (and the other PG* variables of libpq, read by pgx)"})
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
func markdownEnv(vars []cliEnvVar) []byte {
	if len(vars) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("\n### Environment\n\n")
	b.WriteString("A flag not given on the command line is read from its variable (" + envPrefix + " and the flag's name\n")
	b.WriteString("in upper case, '-' as '_'); the command line wins. A variable that no command reads is\n")
	b.WriteString("refused when it is a near miss of one, else warned of.\n\n")
	b.WriteString("| variable | flag | default |\n|---|---|---|\n")
	for _, v := range vars {
		name, def := "`"+v.name+"`", ""
		switch {
		case v.def != "":
			def = "`" + strings.ReplaceAll(v.def, "|", `\|`) + "`"
		case v.defNote != "":
			def = strings.ReplaceAll(v.defNote, "|", `\|`)
		}
		flag := v.flag
		if flag != "" {
			flag = "`" + flag + "`"
		}
		if v.comment != "" {
			if flag != "" {
				flag += ": "
			}
			flag += v.comment
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, flag, def)
	}
	return b.Bytes()
}

// manEnv is the ENVIRONMENT section of a command's man page (roff).
func manEnv(vars []cliEnvVar) []byte {
	if len(vars) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("\n.SH ENVIRONMENT\n.PP\n")
	b.WriteString(roff("A flag not given on the command line is read from its variable ("+envPrefix+" and the flag's name in upper case, '-' as '_'); the command line wins.") + "\n")
	for _, v := range vars {
		b.WriteString(".TP\n\\fB" + roff(v.name) + "\\fP\n")
		var what []string
		if v.flag != "" {
			what = append(what, v.flag)
		}
		if v.comment != "" {
			what = append(what, v.comment)
		}
		switch {
		case v.def != "":
			what = append(what, "default "+v.def)
		case v.defNote != "":
			what = append(what, "default: "+v.defNote)
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
	fmt.Fprintf(&b, "<!-- Generated by writeCLIDocs (cmd/offsetkeeper/clidocs.go): do not edit.\n     %s -->\n\n", cliDocsRegenerate)
	b.WriteString("# offsetkeeper CLI reference\n\n")
	b.WriteString("One page per command, generated from its `--help` (usage, flags, examples), with the\n")
	b.WriteString("`OFFSETKEEPER_*` variable and the default of each flag; the same as man pages in\n")
	b.WriteString("[`man/`](man/) (`man -l docs/cli/man/offsetkeeper-run.1`). `TestCLIDocsUpToDate` fails\n")
	b.WriteString("when these pages are not what the commands say; regenerate them with\n\n")
	fmt.Fprintf(&b, "```sh\n%s\n```\n\n", cliDocsRegenerate)
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
// TestCLIDocsUpToDate checks them with docs/cli, and cliDocsRegenerate
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
	fmt.Fprintf(&b, "\n<!-- Generated from %s by writeSinkParamDocs (cmd/offsetkeeper/clidocs.go): do not edit.\n     %s -->\n\n", from, cliDocsRegenerate)
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

// sinkParamDocs are the pages of docsDir that hold sink parameter blocks,
// by name, as they should be: as they are, with each block's text
// regenerated. A page without its block's markers, or with them twice, is
// an error.
func sinkParamDocs(docsDir string) (map[string][]byte, error) {
	pages := map[string][]byte{}
	for _, blk := range sinkParamBlocks(builtin.Sinks()) {
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

// writeSinkParamDocs regenerates the sink parameter blocks of the pages in
// docsDir, writing only the pages that change.
func writeSinkParamDocs(docsDir string) error {
	pages, err := sinkParamDocs(docsDir)
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
