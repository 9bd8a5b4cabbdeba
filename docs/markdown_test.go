package docs

import (
	"fmt"
	"regexp"
	"strings"
)

// A code block of a page, with the markers written just above it.
type block struct {
	page string
	line int // of the opening fence, from 1
	lang string
	body []string

	// notRun are the page's reasons for not running the block, or some of
	// its commands: `<!-- not run: REASON -->` skips the whole block,
	// `<!-- not run "TEXT": REASON -->` the commands that hold TEXT.
	notRun []marker
	// while is the command of a `<!-- while running: COMMAND -->` marker:
	// the session the block shows runs against it, so the test starts it
	// first, runs the block, then stops it with SIGTERM.
	while string
}

type marker struct {
	match  string // "": the whole block
	reason string
}

// A command of a block: a line of a sh block (with its continuation
// lines), or a `$ ` line of a console block and the output shown under it.
type command struct {
	line   int    // in the page, from 1
	text   string // as the page shows it, continuation lines joined by "\n"
	output []string
}

var (
	fenceRe  = regexp.MustCompile("^(\\s*)```\\s*([A-Za-z0-9_+-]*)\\s*$")
	notRunRe = regexp.MustCompile(`^<!-- not run(?: "([^"]+)")?: (.+?) -->$`)
	whileRe  = regexp.MustCompile(`^<!-- while running: (.+?) -->$`)
	// What looks like a marker, to refuse a misspelt one rather than
	// ignore it.
	markerish = regexp.MustCompile(`^<!--\s*(not[ -]?run|while[ -]?running|skip)`)
	listItem  = regexp.MustCompile(`^\s*([-*+]|\d+\.)\s`)
)

// shellLangs are the languages of the blocks whose lines are commands;
// console blocks show `$ ` commands with their output.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// parsePage finds the fenced code blocks of a page and their markers. A
// block without a language, an indented code block, a malformed marker and
// a marker that is not just above a block are errors: each would hide an
// example from the test, or a reason from the reviewer.
func parsePage(name, text string) ([]block, error) {
	var (
		blocks  []block
		errs    []string
		pending []string // marker lines just above the current line
		pendAt  int
		cur     *block
		indent  string
		comment bool // inside a multi-line HTML comment
	)
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s:%d: %s", name, line, fmt.Sprintf(format, args...)))
	}
	lines := strings.Split(text, "\n")
	prevBlank, inList := true, false
	for i, l := range lines {
		n := i + 1
		if cur != nil {
			if strings.TrimSpace(l) == "```" && strings.HasPrefix(l, indent) {
				blocks = append(blocks, *cur)
				cur = nil
				prevBlank = false
				continue
			}
			cur.body = append(cur.body, strings.TrimPrefix(l, indent))
			continue
		}
		trimmed := strings.TrimSpace(l)
		if comment {
			if strings.Contains(l, "-->") {
				comment = false
			}
			prevBlank = false
			continue
		}
		if m := fenceRe.FindStringSubmatch(l); m != nil {
			b := block{page: name, line: n, lang: m[2]}
			if b.lang == "" {
				fail(n, "a code block without a language: give it one (sh or console to have it run, text, sql, json... for what is not a command)")
			}
			for _, p := range pending {
				if m := notRunRe.FindStringSubmatch(p); m != nil {
					b.notRun = append(b.notRun, marker{match: m[1], reason: m[2]})
				} else if m := whileRe.FindStringSubmatch(p); m != nil {
					b.while = m[1]
				}
			}
			pending = nil
			cur, indent = &b, m[1]
			continue
		}
		if markerish.MatchString(trimmed) {
			if !notRunRe.MatchString(trimmed) && !whileRe.MatchString(trimmed) {
				fail(n, "malformed marker %q: want <!-- not run: REASON -->, <!-- not run \"TEXT\": REASON --> or <!-- while running: COMMAND -->", trimmed)
			}
			if len(pending) == 0 {
				pendAt = n
			}
			pending = append(pending, trimmed)
			prevBlank = false
			continue
		}
		if len(pending) > 0 {
			fail(pendAt, "a marker that is not just above a code block")
			pending = nil
		}
		if strings.Contains(l, "<!--") && !strings.Contains(l[strings.Index(l, "<!--"):], "-->") {
			comment = true
			continue
		}
		if trimmed == "" {
			prevBlank = true
			continue
		}
		// An indented code block: four spaces (or a tab) after a blank
		// line, outside a list.
		if prevBlank && !inList && (strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t")) {
			fail(n, "an indented code block: fence it with its language (```sh, ```text...) so that the test sees it")
		}
		if listItem.MatchString(l) {
			inList = true
		} else if !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "\t") {
			inList = false
		}
		prevBlank = false
	}
	if cur != nil {
		fail(cur.line, "a code block that is never closed")
	}
	if len(pending) > 0 {
		fail(pendAt, "a marker that is not just above a code block")
	}
	if len(errs) > 0 {
		return blocks, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return blocks, nil
}

// commands are the commands of a shell block: in a sh block every line
// that is not blank or a comment (a line ending in \ goes on with the
// next); in a console block the `$ ` lines, each with the lines under it
// as its output.
func (b block) commands() ([]command, error) {
	var cmds []command
	console := b.lang == "console"
	cont := false
	for i, l := range b.body {
		n := b.line + 1 + i
		switch {
		case cont:
			c := &cmds[len(cmds)-1]
			c.text += "\n" + strings.TrimPrefix(l, "> ")
		case console && strings.HasPrefix(l, "$ "):
			cmds = append(cmds, command{line: n, text: strings.TrimPrefix(l, "$ ")})
		case console:
			if len(cmds) == 0 {
				if strings.TrimSpace(l) == "" {
					continue
				}
				return nil, fmt.Errorf("%s:%d: console block: output before the first `$ ` command", b.page, n)
			}
			c := &cmds[len(cmds)-1]
			c.output = append(c.output, l)
			continue
		default:
			t := strings.TrimSpace(l)
			if t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			cmds = append(cmds, command{line: n, text: l})
		}
		cont = strings.HasSuffix(l, "\\")
	}
	for i := range cmds {
		o := cmds[i].output
		for len(o) > 0 && strings.TrimSpace(o[len(o)-1]) == "" {
			o = o[:len(o)-1]
		}
		cmds[i].output = o
	}
	return cmds, nil
}

// skipped is the reason the page gives for not running c, if it gives one.
func (b block) skipped(c command) (string, bool) {
	for _, m := range b.notRun {
		if m.match == "" || strings.Contains(c.text, m.match) {
			return m.reason, true
		}
	}
	return "", false
}
