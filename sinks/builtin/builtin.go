// Package builtin lists the sinks offsetkeeper ships: the table the CLI,
// `audit` and `dev` are given unless a caller gives another. It is an
// explicit list, not registration by import: a sink is added by writing
// its package and one line here, or, by an embedder or a test, with
// sinks.Table.With.
package builtin

import (
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
	"github.com/offsetkeeper/offsetkeeper/sinks/stdout"
)

// Sinks is the built-in table, in the order help texts list it.
func Sinks() sinks.Table {
	return sinks.Table{
		file.Descriptor,
		postgres.Descriptor,
		clickhouse.Descriptor,
		stdout.Descriptor,
		discard.Descriptor,
	}
}
