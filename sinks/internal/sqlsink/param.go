package sqlsink

import "github.com/offsetkeeper/offsetkeeper/sinks"

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
func ParamName(p sinks.Param) string { return p.Name }

// Params is a sink's table of parameters, from rows of name, default and
// meaning, in that order.
func Params(rows [][3]string) []sinks.Param {
	ps := make([]sinks.Param, len(rows))
	for i, r := range rows {
		ps[i] = sinks.Param{Name: r[0], Default: r[1], Meaning: r[2]}
	}
	return ps
}
