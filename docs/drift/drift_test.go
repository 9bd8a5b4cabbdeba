// Package drift_test keeps the map from drifting from the code: DESIGN.md
// and every package's doc may name only identifiers, files and imports the
// code has.
package drift_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	root   = "../.."
	module = "github.com/offsetkeeper/offsetkeeper/"
)

// pkg is what the code of one package declares.
type pkg struct {
	dir     string // relative to the root: sinks/file
	name    string
	doc     string          // the package comment
	idents  map[string]bool // top-level names, test files' too
	members map[string]map[string]bool
	imports map[string]bool // of ours, from non-test files, relative to the module: internal/kafka
}

// code is every package of the module, by directory.
type code map[string]*pkg

func load(t *testing.T) code {
	t.Helper()
	c := code{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		p := c[rel]
		if p == nil {
			p = &pkg{dir: rel, idents: map[string]bool{}, members: map[string]map[string]bool{}, imports: map[string]bool{}}
			c[rel] = p
		}
		test := strings.HasSuffix(path, "_test.go")
		if !test || p.name == "" {
			p.name = strings.TrimSuffix(f.Name.Name, "_test")
		}
		if f.Doc != nil && !test {
			p.doc += f.Doc.Text()
		}
		if !test {
			for _, im := range f.Imports {
				ip, _ := strconv.Unquote(im.Path.Value)
				if strings.HasPrefix(ip, module) {
					p.imports[strings.TrimPrefix(ip, module)] = true
				}
			}
		}
		declare(p, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// declare notes f's top-level names, and the methods and fields of its
// types (an embedded field's name too).
func declare(p *pkg, f *ast.File) {
	member := func(typ, name string) {
		if p.members[typ] == nil {
			p.members[typ] = map[string]bool{}
		}
		p.members[typ][name] = true
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				p.idents[d.Name.Name] = true
				continue
			}
			typ := d.Recv.List[0].Type
			for {
				switch x := typ.(type) {
				case *ast.StarExpr:
					typ = x.X
					continue
				case *ast.IndexExpr:
					typ = x.X
					continue
				case *ast.IndexListExpr:
					typ = x.X
					continue
				}
				break
			}
			if id, ok := typ.(*ast.Ident); ok {
				member(id.Name, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					p.idents[s.Name.Name] = true
					if st, ok := s.Type.(*ast.StructType); ok {
						for _, fl := range st.Fields.List {
							for _, n := range fl.Names {
								member(s.Name.Name, n.Name)
							}
							if len(fl.Names) == 0 {
								member(s.Name.Name, embeddedName(fl.Type))
							}
						}
					}
					if it, ok := s.Type.(*ast.InterfaceType); ok {
						for _, m := range it.Methods.List {
							for _, n := range m.Names {
								member(s.Name.Name, n.Name)
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						p.idents[n.Name] = true
					}
				}
			}
		}
	}
}

func embeddedName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return embeddedName(x.X)
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.Ident:
		return x.Name
	case *ast.IndexExpr:
		return embeddedName(x.X)
	}
	return ""
}

var (
	span        = regexp.MustCompile("`([^`\n]+)`")
	qualified   = regexp.MustCompile(`^([a-z][a-z0-9]*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?(?:\(\))?$`)
	typeMember  = regexp.MustCompile(`^([A-Z]\w*)\.([A-Z]\w*)(?:\(\))?$`)
	bareIdent   = regexp.MustCompile(`^([A-Z]\w*)(?:\(\))?$`)
	filePath    = regexp.MustCompile(`^[\w./-]+\.(go|md|yml|yaml|sh)$`)
	packagePath = regexp.MustCompile(`^[a-z][a-z0-9]*(/[a-z][a-z0-9]*)*$`)
)

// byName are the packages of each name (several packages may share one).
func (c code) byName() map[string][]*pkg {
	m := map[string][]*pkg{}
	for _, p := range c {
		m[p.name] = append(m[p.name], p)
	}
	return m
}

// check returns what text (in the package of dir, "" for none) names that
// the code does not have: qualified identifiers (pkg.Name,
// pkg.Type.Member), a type's members (Type.Member) and files.
func (c code) check(text, dir string) []string {
	var bad []string
	names := c.byName()
	for _, m := range span.FindAllStringSubmatch(text, -1) {
		s := strings.TrimSpace(m[1])
		switch {
		case qualified.MatchString(s):
			q := qualified.FindStringSubmatch(s)
			ps, ours := names[q[1]]
			if !ours {
				continue // another module's: zap.Logger, kgo.Record
			}
			if !slices.ContainsFunc(ps, func(p *pkg) bool {
				return p.idents[q[2]] && (q[3] == "" || p.members[q[2]][q[3]])
			}) {
				bad = append(bad, s+": no such identifier in package "+q[1])
			}
		case typeMember.MatchString(s):
			q := typeMember.FindStringSubmatch(s)
			found, typed := false, false
			for _, p := range c {
				if p.idents[q[1]] {
					typed = true
					found = found || p.members[q[1]][q[2]]
				}
			}
			switch {
			case !typed:
				bad = append(bad, s+": no type "+q[1])
			case !found:
				bad = append(bad, s+": type "+q[1]+" has no "+q[2])
			}
		case filePath.MatchString(s) && !strings.HasPrefix(s, "_"):
			if !c.fileExists(s, dir) {
				bad = append(bad, s+": no such file")
			}
		}
	}
	return bad
}

// fileExists tells whether name is a file of the repository: a path from
// its root, or a bare file name in dir's package (anywhere when dir is "").
func (c code) fileExists(name, dir string) bool {
	if strings.Contains(name, "/") {
		_, err := os.Stat(filepath.Join(root, name))
		return err == nil
	}
	if dir != "" {
		if _, err := os.Stat(filepath.Join(root, dir, name)); err == nil {
			return true
		}
	}
	found := false
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || found {
			return filepath.SkipAll
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		found = !d.IsDir() && d.Name() == name
		return nil
	})
	return found
}

// layoutRow is a row of DESIGN.md's layout table.
type layoutRow struct {
	dir     string
	holds   string
	imports []string // nil: not stated ("all", "—")
	line    int
}

func layout(t *testing.T, design string) []layoutRow {
	t.Helper()
	var rows []layoutRow
	in := false
	for i, l := range strings.Split(design, "\n") {
		if strings.HasPrefix(l, "| package | holds | imports of ours |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(l, "|---") {
			continue
		}
		if !strings.HasPrefix(l, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("DESIGN.md line %d: a layout row of %d cells, want 3: %s", i+1, len(cells), l)
		}
		r := layoutRow{dir: strings.Trim(strings.TrimSpace(cells[0]), "`"), holds: cells[1], line: i + 1}
		switch imp := strings.TrimSpace(cells[2]); imp {
		case "all", "—":
		case "none":
			r.imports = []string{}
		default:
			r.imports = []string{}
			// Only what leads a cell or follows a comma is an import; words in
			// parentheses say what for.
			for _, m := range span.FindAllStringSubmatch(stripParens(imp), -1) {
				if packagePath.MatchString(m[1]) {
					r.imports = append(r.imports, m[1])
				}
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatal("DESIGN.md has no layout table (| package | holds | imports of ours |)")
	}
	return rows
}

// stripParens drops the parenthesised parts of s.
func stripParens(s string) string {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDesignNamesWhatExists: every identifier, member and file DESIGN.md
// names in code spans exists; each row of its layout table is a package
// whose "holds" names are its own and whose imports of ours are exactly
// the ones listed; and every package of the module is in the table.
func TestDesignNamesWhatExists(t *testing.T) {
	c := load(t)
	b, err := os.ReadFile(filepath.Join(root, "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	design := string(b)
	for _, bad := range c.check(design, "") {
		t.Errorf("DESIGN.md names %s", bad)
	}
	listed := map[string]bool{}
	for _, r := range layout(t, design) {
		var dirs []string
		for _, d := range strings.Split(r.dir, "`, `") {
			dirs = append(dirs, strings.Trim(d, "` "))
		}
		for _, dir := range dirs {
			listed[dir] = true
			if c[dir] == nil && !strings.Contains(dir, "<") && !strings.HasPrefix(dir, "deploy/") && !strings.HasPrefix(dir, "integration/tools/") {
				t.Errorf("DESIGN.md line %d: package %s does not exist", r.line, dir)
			}
		}
		if p := c[dirs[0]]; p != nil && len(dirs) == 1 {
			for _, bad := range holds(p, r.holds) {
				t.Errorf("DESIGN.md line %d: %s", r.line, bad)
			}
			for _, bad := range c.check(r.holds, p.dir) {
				t.Errorf("DESIGN.md line %d: %s", r.line, bad)
			}
		}
		if r.imports == nil || strings.Contains(r.dir, "<") {
			continue // not stated, or a row of a pattern (sinks/<store>)
		}
		// A row of several packages states their imports together.
		var want []string
		for _, d := range dirs {
			if p := c[d]; p != nil {
				for im := range p.imports {
					if !slices.Contains(dirs, im) {
						want = append(want, im)
					}
				}
			}
		}
		slices.Sort(want)
		want = slices.Compact(want)
		got := slices.Clone(r.imports)
		slices.Sort(got)
		got = slices.Compact(got)
		if !slices.Equal(got, want) {
			t.Errorf("DESIGN.md line %d: %s imports of ours are %v, the table says %v", r.line, r.dir, want, got)
		}
	}
	for dir, p := range c {
		if p.name == "main" && dir != "cmd/offsetkeeper" {
			continue
		}
		if !listed[dir] && !covered(dir, listed) {
			t.Errorf("package %s is not in DESIGN.md's layout table", dir)
		}
	}
}

// typeWithMembers is "`Type` (`A`, `B()`, ...)" in a layout row: the
// names in parentheses are Type's members or the package's own.
var typeWithMembers = regexp.MustCompile("`([A-Z]\\w*)` \\(([^)]*)\\)")

// holds returns what a layout row says p holds that p does not: its bare
// identifiers, and the members it lists after a type.
func holds(p *pkg, text string) []string {
	var bad []string
	for _, m := range typeWithMembers.FindAllStringSubmatch(text, -1) {
		for _, n := range span.FindAllStringSubmatch(m[2], -1) {
			q := bareIdent.FindStringSubmatch(n[1])
			if q != nil && !p.members[m[1]][q[1]] && !p.idents[q[1]] {
				bad = append(bad, p.dir+": "+m[1]+" has no "+q[1])
			}
		}
	}
	for _, m := range span.FindAllStringSubmatch(text, -1) {
		if q := bareIdent.FindStringSubmatch(m[1]); q != nil && !p.idents[q[1]] && !hasMember(p, q[1]) {
			bad = append(bad, p.dir+" holds no "+m[1])
		}
	}
	return bad
}

// hasMember tells whether name is a member (method, field) of a type of p.
func hasMember(p *pkg, name string) bool {
	for _, ms := range p.members {
		if ms[name] {
			return true
		}
	}
	return false
}

// covered tells whether a row covers dir: the sinks' row (sinks/<store>),
// integration's subpackages, docs' tests.
func covered(dir string, listed map[string]bool) bool {
	switch {
	case dir == "." || dir == "docs" || strings.HasPrefix(dir, "docs/"):
		return true
	case strings.HasPrefix(dir, "integration/") && listed["integration"]:
		return true
	case strings.HasPrefix(dir, "deploy/"):
		return true
	}
	if parent, _, ok := strings.Cut(dir, "/"); ok && parent == "sinks" && listed["sinks/<store>"] {
		return strings.Count(dir, "/") == 1
	}
	return false
}

// TestPackageDocsNameWhatExists: a package's doc names only identifiers,
// members and files the code has.
func TestPackageDocsNameWhatExists(t *testing.T) {
	c := load(t)
	for dir, p := range c {
		for _, bad := range c.check(p.doc, dir) {
			t.Errorf("the doc of package %s names %s", dir, bad)
		}
	}
}

// TestCheckFindsDrift: the check catches what drifted.
func TestCheckFindsDrift(t *testing.T) {
	c := load(t)
	for _, tc := range []struct{ text, want string }{
		{"`Claim.Next`", "type Claim has no Next"},
		{"`coordinator.NoSuchThing`", "no such identifier in package coordinator"},
		{"`guard.Guard.Nope`", "no such identifier in package guard"},
		{"`replica/nosuch.go`", "no such file"},
	} {
		bad := c.check(tc.text, "")
		if len(bad) != 1 || !strings.Contains(bad[0], tc.want) {
			t.Errorf("check(%s) = %q, want one finding saying %q", tc.text, bad, tc.want)
		}
	}
	p := c["coordinator"]
	if bad := holds(p, "`Claim` (`Epoch`, `Next`, fenced `Commit`)"); len(bad) != 1 || !strings.Contains(bad[0], "Claim has no Next") {
		t.Errorf("holds(Claim (Epoch, Next, Commit)) = %q, want one finding: Claim has no Next", bad)
	}
	for _, ok := range []string{"`Claim.Epoch`", "`coordinator.Claim`", "`guard.Guard.Commit`", "`replica/blocks.go`", "`zap.Logger`", "`keys.go`"} {
		if bad := c.check(ok, "coordinator"); len(bad) > 0 {
			t.Errorf("check(%s) = %q, want nothing", ok, bad)
		}
	}
}
