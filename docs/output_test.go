package docs

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// The shape of an output: what a page shows under a command is compared
// with what the command printed, line by line in order, each line
// normalised (every run of digits reads 0, every run of blanks one space),
// so that addresses, counts, times and seeds may differ while the words,
// the labels and the columns may not. `...` or `…` in a shown line stands
// for any text. A table (a header of capitalised column names two spaces
// apart, then its rows) is compared as the header and the set of its rows,
// in any order. Lines the command printed that the page leaves out
// (progress lines, logs) are allowed.

var (
	digitsRe = regexp.MustCompile(`[0-9]+`)
	blanksRe = regexp.MustCompile(`\s+`)
	headerRe = regexp.MustCompile(`^[A-Z][A-Z0-9-]*( {2,}[A-Z][A-Z0-9-]*)+\s*$`)
	elideRe  = regexp.MustCompile(`\.\.\.|…`)
)

func normalize(s string) string {
	return strings.TrimSpace(blanksRe.ReplaceAllString(digitsRe.ReplaceAllString(s, "0"), " "))
}

// lineMatcher matches a normalised printed line against a shown one.
func lineMatcher(shown string) *regexp.Regexp {
	parts := elideRe.Split(normalize(shown), -1)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}

// tableRows are the rows of the table whose header is lines[0]: the lines
// that follow it, up to a blank line or a line whose words do not start at
// the header's columns.
func tableRows(lines []string) []string {
	header := lines[0]
	var cols []int
	for i := 1; i < len(header); i++ {
		if header[i] != ' ' && header[i-1] == ' ' {
			cols = append(cols, i)
		}
	}
	var rows []string
	for _, l := range lines[1:] {
		if strings.TrimSpace(l) == "" || !aligned(l, cols) {
			break
		}
		rows = append(rows, l)
	}
	return rows
}

// aligned: at each column start, the row has a blank before and a word,
// or ends before it (an empty last column).
func aligned(row string, cols []int) bool {
	r := []rune(row)
	if len(r) == 0 || r[0] == ' ' {
		return false
	}
	for _, c := range cols {
		if c >= len(r) {
			return true
		}
		if r[c-1] != ' ' || r[c] == ' ' {
			return false
		}
	}
	return true
}

// checkOutput says how got (what a command printed, with the test's values
// put back to the page's by unsub) differs from the shape of shown.
func checkOutput(shown []string, got string) error {
	printed := strings.Split(got, "\n")
	pos := 0
	for i := 0; i < len(shown); i++ {
		s := shown[i]
		if strings.TrimSpace(s) == "" {
			continue
		}
		if headerRe.MatchString(s) {
			want := tableRows(shown[i:])
			j := indexFrom(printed, pos, func(p string) bool { return normalize(p) == normalize(s) })
			if j < 0 {
				return fmt.Errorf("no table with the header %q", strings.TrimSpace(s))
			}
			have := tableRows(printed[j:])
			if err := sameRows(want, have); err != nil {
				return fmt.Errorf("table %q: %v", strings.Fields(s), err)
			}
			i += len(want)
			pos = j + 1 + len(have)
			continue
		}
		m := lineMatcher(s)
		j := indexFrom(printed, pos, func(p string) bool { return m.MatchString(normalize(p)) })
		if j < 0 {
			return fmt.Errorf("no line like %q (in order, after what matched before)", s)
		}
		pos = j + 1
	}
	return nil
}

func indexFrom(lines []string, from int, ok func(string) bool) int {
	for j := from; j < len(lines); j++ {
		if ok(lines[j]) {
			return j
		}
	}
	return -1
}

// sameRows: the rows, normalised, are the same multiset.
func sameRows(want, have []string) error {
	norm := func(rows []string) []string {
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = normalize(r)
		}
		sort.Strings(out)
		return out
	}
	w, h := norm(want), norm(have)
	if len(w) != len(h) {
		return fmt.Errorf("%d rows, the page shows %d", len(h), len(w))
	}
	for i := range w {
		if w[i] != h[i] {
			return fmt.Errorf("a row like %q, the page shows one like %q", h[i], w[i])
		}
	}
	return nil
}

// table parses a printed table into rows keyed by column name: the first
// table of out whose header holds every one of cols.
func table(out string, cols ...string) []map[string]string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !headerRe.MatchString(l) {
			continue
		}
		names := strings.Fields(l)
		if !holdsAll(names, cols) {
			continue
		}
		var starts []int
		for k := 0; k < len(l); k++ {
			if l[k] != ' ' && (k == 0 || l[k-1] == ' ') {
				starts = append(starts, k)
			}
		}
		var rows []map[string]string
		for _, r := range tableRows(lines[i:]) {
			row := map[string]string{}
			for c, s := range starts {
				end := len(r)
				if c+1 < len(starts) && starts[c+1] < end {
					end = starts[c+1]
				}
				if s < len(r) {
					row[names[c]] = strings.TrimSpace(r[s:end])
				}
			}
			rows = append(rows, row)
		}
		return rows
	}
	return nil
}

func holdsAll(have, want []string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}
