package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// noArgs refuses positional arguments as bad usage.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q (flags start with --; see %s --help)", cmd.CommandPath(), args, cmd.CommandPath())
	}
	return nil
}

// groupCommand is a command that only holds subcommands: without one it
// prints its help; with an unknown one it is bad usage.
func groupCommand(cmd *cobra.Command) *cobra.Command {
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			var names []string
			for _, s := range c.Commands() {
				if s.IsAvailableCommand() {
					names = append(names, s.Name())
				}
			}
			return usagef("unknown command %q for %q: want one of %s", args[0], c.CommandPath(), strings.Join(names, ", "))
		}
		return nil
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	return cmd
}
