package sqlsink

// Param is one of a sink's own URL query parameters, as its documentation
// shows it; docs/postgresql.md's and docs/clickhouse.md's tables are
// generated from them.
type Param struct {
	// Name is the parameter as written in the URL: dead_letter_table.
	Name string
	// Default is the value when the URL has none, in Markdown: a value
	// (`offsetkeeper_dead_letters`) or words (the primary key); — for
	// none.
	Default string
	// Meaning says what the parameter does and, where the sink has
	// modes, which take it, in Markdown.
	Meaning string
}

// Names are the names of ps, in their order, as a parser checks them and
// its refusal of an unknown one lists them.
func Names[P any](ps []P, name func(P) string) []string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = name(p)
	}
	return names
}

// ParamName is a Param's name, for Names.
func ParamName(p Param) string { return p.Name }

// Params is a sink's table of parameters, from rows of name, default and
// meaning, in that order.
func Params(rows [][3]string) []Param {
	ps := make([]Param, len(rows))
	for i, r := range rows {
		ps[i] = Param{Name: r[0], Default: r[1], Meaning: r[2]}
	}
	return ps
}
