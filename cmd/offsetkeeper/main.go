// Command offsetkeeper moves records from Kafka into a sink with several
// replicas sharing the work, and keeps the consumer offsets in etcd.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/offsetkeeper/offsetkeeper/admin"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/builtin"
)

// Exit codes, documented in the root command's help.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	// exitInterrupted is the shells' status of a command ended by SIGINT
	// (128 + 2): a run of dev cut short by Ctrl-C, so that a script can
	// tell it from a pass.
	exitInterrupted = 130
)

// interruptedError is a command cut short by SIGINT or SIGTERM before it
// could say whether it passed.
type interruptedError struct{ what string }

func (e *interruptedError) Error() string { return "interrupted: " + e.what }

func main() {
	// A test aid: records still aliasing a buffer given back show garbage.
	kafka.PoisonBuffers(os.Getenv(kafka.PoisonBuffersEnv) == "1")
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs the CLI and returns the exit code; tests call it directly.
func execute(args []string, stdout, stderr io.Writer) int {
	return executeWith(context.Background(), builtin.Sinks(), args, stdout, stderr)
}

// executeWith is execute with the sinks of table, what --sink may name;
// ending ctx stops a command as SIGTERM does.
func executeWith(ctx context.Context, table sinks.Table, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(table)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ie *interruptedError
	if errors.As(err, &ie) {
		fmt.Fprintln(stderr, err)
		return exitInterrupted
	}
	fmt.Fprintln(stderr, "Error:", err)
	var ue *usageError
	var bad *admin.InputError
	if errors.As(err, &ue) || errors.As(err, &bad) {
		return exitUsage
	}
	return exitError
}

func newRootCommand(table sinks.Table) *cobra.Command {
	root := &cobra.Command{
		Use:   "offsetkeeper",
		Short: "Move Kafka records into a store, with offsets kept in etcd",
		Long: `offsetkeeper moves records from Kafka topics into a sink (files, stdout,
PostgreSQL, ClickHouse) with several replicas sharing the partitions. Consumer offsets
live in etcd, not in Kafka: an offset is committed only after the rows
before it are in the sink, and only by the replica that still owns the
partition, so a crash never loses a record.

Every flag can also be set with an environment variable: OFFSETKEEPER_ and
the flag's name in upper case with '-' as '_' (--etcd-endpoints is
OFFSETKEEPER_ETCD_ENDPOINTS). A flag on the command line wins.

Exit status: 0 success, 1 failure, 2 bad usage (nothing was changed), 130
a run of dev interrupted (SIGINT) before its report.`,
		Example: `  # A whole local cluster in one process: etcd, a Kafka-protocol broker,
  # three replicas, a producer; ends with a delivery report.
  offsetkeeper dev

  # One replica of group "orders" against a real cluster.
  offsetkeeper run --etcd-endpoints 10.0.0.1:2379 --brokers kafka:9092 \
    --group orders --topics orders --sink file:///var/lib/offsetkeeper`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetFlagErrorFunc(flagError)
	root.SetHelpCommand(newHelpCommand())
	root.AddCommand(newRunCommand(table), newClaimsCommand(), newGroupsCommand(), newOffsetsCommand(), newReplicasCommand(), newAuditCommand(table))
	root.AddCommand(extraCommands(table)...)
	strictCompletion(root)
	return root
}
