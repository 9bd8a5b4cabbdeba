// Command offsetkeeper moves records from Kafka into a sink with several
// replicas sharing the work, and keeps the consumer offsets in etcd.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes, documented in the root command's help.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs the CLI and returns the exit code; tests call it directly.
func execute(args []string, stdout, stderr io.Writer) int {
	root := newRootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "Error:", err)
	var ue *usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitError
}

// usageError is bad input: a flag, an argument or a value out of range. It
// exits with status 2, and nothing has been changed.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return &usageError{fmt.Errorf(format, a...)} }

func usage(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "offsetkeeper",
		Short: "Move Kafka records into a store, with offsets kept in etcd",
		Long: `offsetkeeper moves records from Kafka topics into a sink (files, stdout,
PostgreSQL) with several replicas sharing the partitions. Consumer offsets
live in etcd, not in Kafka: an offset is committed only after the rows
before it are in the sink, and only by the replica that still owns the
partition, so a crash never loses a record.

Every flag can also be set with an environment variable: OFFSETKEEPER_ and
the flag's name in upper case with '-' as '_' (--etcd-endpoints is
OFFSETKEEPER_ETCD_ENDPOINTS). A flag on the command line wins.

Exit status: 0 success, 1 failure, 2 bad usage (nothing was changed).`,
		Example: `  # A whole local cluster in one process: etcd, a Kafka-protocol broker,
  # three replicas, a producer; ends with a delivery report.
  offsetkeeper dev

  # One replica of group "orders" against a real cluster.
  offsetkeeper run --etcd-endpoints 10.0.0.1:2379 --brokers kafka:9092 \
    --group orders --topics orders --sink file:///var/lib/offsetkeeper`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q: see 'offsetkeeper --help'", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	root.AddCommand(newRunCommand(), newDevCommand(), newClaimsCommand(), newGroupsCommand(), newOffsetsCommand(), newReplicasCommand())
	return root
}

// options is the shape of every command's options, after kubectl's:
// complete from the environment, validate (bad input is a usage error, exit
// 2, before anything is touched), then run.
type options interface {
	complete(cmd *cobra.Command) error
	validate() error
	run(ctx context.Context, cmd *cobra.Command) error
}

// runE runs o's three steps; SIGINT and SIGTERM cancel the context.
func runE(o options) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
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

// bindEnv sets every flag of cmd not given on the command line from its
// OFFSETKEEPER_* environment variable.
func bindEnv(cmd *cobra.Command) error {
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" {
			return
		}
		name := envName(f.Name)
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("environment %s=%q: %w", name, v, err))
			return
		}
		f.Changed = true
	})
	return usage(errors.Join(errs...))
}

func envName(flag string) string {
	return "OFFSETKEEPER_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}
