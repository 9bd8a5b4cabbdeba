//go:build nodev

package main

import (
	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// hasDev tells whether this build has the dev command.
const hasDev = false

// extraCommands: a -tags nodev build, as the container image is, links
// neither an embedded etcd nor kfake (dev.go). Its dev command only says so.
func extraCommands(sinks.Table) []*cobra.Command {
	return []*cobra.Command{{
		Use:                "dev",
		Short:              "Not in this build (-tags nodev)",
		Hidden:             true,
		Args:               cobra.ArbitraryArgs,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return usagef("dev is not in this build (built with -tags nodev, as the container image is): run it from the source, go run ./cmd/offsetkeeper dev")
		},
	}}
}
