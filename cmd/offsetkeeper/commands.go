package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

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
			return unknownCommand(c, args[0])
		}
		return nil
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	return cmd
}

// options is the shape of every command's options, after kubectl's:
// complete what derives from the flags (after the environment set the flags
// not given), validate (bad input is a usage error, exit
// 2, before anything is touched), then run.
type options interface {
	complete(cmd *cobra.Command) error
	validate() error
	run(ctx context.Context, cmd *cobra.Command) error
}

// runE sets the flags not given from the environment (bindEnv), then runs
// o's three steps; SIGINT and SIGTERM cancel the context.
func runE(o options) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := bindEnv(cmd); err != nil {
			return err
		}
		if err := o.complete(cmd); err != nil {
			return err
		}
		if err := o.validate(); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return o.run(ctx, cmd)
	}
}
