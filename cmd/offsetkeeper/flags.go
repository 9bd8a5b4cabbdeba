package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/enum"
	"github.com/offsetkeeper/offsetkeeper/internal/redact"
)

// The flags every command that talks to a group shares, and the flag types
// of the CLI.

// Defaults of the operator commands' timeouts.
const (
	defaultEtcdTimeout  = 10 * time.Second
	defaultKafkaTimeout = 5 * time.Second
)

// clusterFlags are the flags every command that talks to a group takes:
// where etcd and Kafka are, how to authenticate, and the group.
type clusterFlags struct {
	etcdEndpoints []string
	brokers       []string
	group         string
	security      securityFlags // TLS and credentials of etcd and Kafka (security.go)
	// kafkaClientID is run's --kafka-client-id; empty elsewhere.
	kafkaClientID string
}

func (f *clusterFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringSliceVar(&f.etcdEndpoints, "etcd-endpoints", []string{"127.0.0.1:2379"}, "etcd client endpoints, comma-separated host:port, http://host:port or https://host:port")
	fs.StringSliceVar(&f.brokers, "brokers", []string{"127.0.0.1:9092"}, "Kafka bootstrap brokers, comma-separated host:port")
	fs.StringVar(&f.group, "group", "", "the group (pipeline) name; its state is in etcd under /offsetkeeper/v1/groups/<group>/")
	f.security.register(cmd)
}

// validate checks the flags.
func (f *clusterFlags) validate() error { return f.check(true) }

// check checks the flags; the group is checked when needGroup, and
// otherwise only if given.
func (f *clusterFlags) check(needGroup bool) error {
	if needGroup || f.group != "" {
		if err := coordinator.ValidGroup(f.group); err != nil {
			if f.group == "" {
				return usagef("--group is required: name the pipeline, e.g. --group orders")
			}
			return usage(fmt.Errorf("--group: %w", err))
		}
	}
	if len(f.etcdEndpoints) == 0 {
		return usagef("--etcd-endpoints is empty: want host:port[,host:port...]")
	}
	for _, e := range f.etcdEndpoints {
		if err := coordinator.CheckEndpoint(e); err != nil {
			return usagef("--etcd-endpoints %q: %v", redact.URL(e), err)
		}
	}
	if len(f.brokers) == 0 {
		return usagef("--brokers is empty: want host:port[,host:port...]")
	}
	for _, b := range f.brokers {
		if err := coordinator.CheckHostPort(b); err != nil {
			return usagef("--brokers %q: %v; want host:port[,host:port...]", b, err)
		}
	}
	return f.security.validate(f.etcdEndpoints)
}

func (f *clusterFlags) etcdClient() (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   f.etcdEndpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	if err := f.security.applyEtcd(&cfg); err != nil { // TLS and credentials; errDryRun in a dry run
		return nil, err
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		err = f.security.explainEtcd(err, f.etcdEndpoints) // a TLS refusal, not a timeout
		return nil, fmt.Errorf("connect to etcd %s: %w", strings.Join(redact.URLs(f.etcdEndpoints), ","), err)
	}
	return cli, nil
}

// adminFlags are the flags every operator command takes: the cluster flags
// (the same as run's), how long to wait for etcd and, for the commands
// that ask it, Kafka, and -o.
type adminFlags struct {
	cluster      clusterFlags
	output       outputFlag
	etcdTimeout  time.Duration
	kafkaTimeout time.Duration
	withKafka    bool
	needGroup    bool
	// newGroup lets the command name a group etcd has no key of yet
	// (offsets reset --from-group starts one).
	newGroup bool
}

// Whether an operator command asks Kafka, and whether it needs --group.
const (
	etcdOnly  = false
	withKafka = true
)

// register adds the flags to cmd. A command that asks Kafka (withKafka) gets
// --kafka-timeout; one that does not still takes --brokers and the
// --kafka-* flags, so that one set of flags and OFFSETKEEPER_* variables
// serves every command, and its help says they are not used.
func (f *adminFlags) register(cmd *cobra.Command, kafka bool) {
	f.cluster.register(cmd)
	f.output.register(cmd)
	fs := cmd.Flags()
	fs.DurationVar(&f.etcdTimeout, "etcd-timeout", defaultEtcdTimeout, "give up on etcd after this long (exit 1); must be positive. A refused connection fails at once")
	f.withKafka, f.needGroup = kafka, true
	if kafka {
		fs.DurationVar(&f.kafkaTimeout, "kafka-timeout", defaultKafkaTimeout, "give up on Kafka after this long; must be positive")
		return
	}
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Name == "brokers" || strings.HasPrefix(fl.Name, "kafka-") {
			fl.Usage = "(not used: etcd only) " + fl.Usage
		}
	})
	cmd.Long += "\n\n--brokers and the --kafka-* flags are accepted, as by every command, so that one\n" +
		"set of flags or OFFSETKEEPER_* variables serves them all, but not used:\nthis command reads etcd only."
}

// validate checks the flags.
func (f *adminFlags) validate() error {
	if err := f.cluster.check(f.needGroup); err != nil {
		return err
	}
	if f.etcdTimeout <= 0 {
		return usagef("--etcd-timeout %s: want a positive duration such as 10s", f.etcdTimeout)
	}
	if f.withKafka && f.kafkaTimeout <= 0 {
		return usagef("--kafka-timeout %s: want a positive duration such as 5s", f.kafkaTimeout)
	}
	return nil
}

// Output formats of -o.
type outputFormat = enum.Of[outputFormats]

const (
	outputTable outputFormat = iota
	outputJSON
)

type outputFormats struct{}

func (outputFormats) Enum() (string, []string) { return "output format", []string{"table", "json"} }

// outputFlag is -o/--output: how a command prints what it found.
type outputFlag struct{ format outputFormat }

func (f *outputFlag) register(cmd *cobra.Command) {
	cmd.Flags().VarP(enumVar(&f.format), "output", "o",
		"output format: table (aligned columns for people) or json (stable snake_case fields for programs)")
}

// waitFlags are --wait and --timeout of a command that can wait for the
// group to act on what it asked.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func (f *waitFlags) register(cmd *cobra.Command, what string, timeout time.Duration) {
	cmd.Flags().BoolVar(&f.wait, "wait", true, what)
	cmd.Flags().DurationVar(&f.timeout, "timeout", timeout, "how long --wait waits (exit 1 after it); must be positive")
}

func (f *waitFlags) validate() error {
	if f.timeout <= 0 {
		return usagef("--timeout %s: want a positive duration", f.timeout)
	}
	return nil
}

// enumFlag is a flag whose value is one of an enumeration's names
// (internal/enum): parsed with space trimmed and case folded, shown in help
// with its names as its type (table|json), refused naming them.
type enumFlag struct{ v pflag.Value }

func enumVar(v pflag.Value) *enumFlag { return &enumFlag{v} }

func (f *enumFlag) String() string { return f.v.String() }
func (f *enumFlag) Type() string   { return f.v.Type() }

func (f *enumFlag) Set(s string) error {
	if f.v.Set(s) != nil {
		return errors.New("want " + orList(strings.Split(f.v.Type(), "|")))
	}
	return nil
}

// parsedFlag is a flag of a library's enumeration, parsed by its parse
// function (space trimmed, case folded first, as enumFlag does).
type parsedFlag[T fmt.Stringer] struct {
	v     *T
	parse func(string) (T, error)
	names []string
}

func (f *parsedFlag[T]) String() string { return (*f.v).String() }
func (f *parsedFlag[T]) Type() string   { return strings.Join(f.names, "|") }

func (f *parsedFlag[T]) Set(s string) error {
	v, err := f.parse(strings.ToLower(strings.TrimSpace(s)))
	if err != nil {
		return errors.New("want " + orList(f.names))
	}
	*f.v = v
	return nil
}

// orList is "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// int64Flag is a flag of a whole number whose help names what it is
// (offset, delta) rather than "string"; want is its error.
type int64Flag struct {
	v    *int64
	typ  string
	want string
}

func (f *int64Flag) String() string { return strconv.FormatInt(*f.v, 10) }
func (f *int64Flag) Type() string   { return f.typ }

func (f *int64Flag) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return errors.New(f.want)
	}
	*f.v = n
	return nil
}
