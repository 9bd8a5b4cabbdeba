package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/offsetkeeper/offsetkeeper/internal/enum"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/sinks/clickhouse"
)

// envPrefix starts the name of every environment variable the CLI reads.
const envPrefix = "OFFSETKEEPER_"

// bindEnv sets every flag of cmd not given on the command line from its
// OFFSETKEEPER_* environment variable. A value the flag refuses is bad
// usage naming the variable, the value and what is accepted. An
// OFFSETKEEPER_* variable that no command reads is bad usage too when it is
// a near miss of one cmd reads (a typo would otherwise leave that flag at
// its default without a word), and otherwise a warning on stderr; the
// variables Kubernetes derives from a Service named offsetkeeper[-...]
// (service links) are ignored.
func bindEnv(cmd *cobra.Command) error {
	if err := unknownEnv(cmd, os.Environ()); err != nil {
		return err
	}
	var first error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" || first != nil || len(f.Annotations[noEnvAnnotation]) > 0 {
			return
		}
		name := envName(f.Name)
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			first = badValue(fmt.Sprintf("%s=%q (%s)", name, v, flagName(f)), f, err)
			return
		}
		f.Changed = true
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[envAnnotation] = []string{name}
	})
	return first
}

// noEnvAnnotation marks a flag bindEnv does not set: dev's --brokers and
// --etcd-endpoints, whose variables the operator commands read (dev
// --hold prints them to export), and which would turn a later dev into a
// run against that cluster.
const noEnvAnnotation = "offsetkeeper-noenv"

// noEnv marks the named flags of fs as not read from the environment.
func noEnv(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		_ = fs.SetAnnotation(n, noEnvAnnotation, []string{"true"})
	}
}

// envAnnotation marks, in a flag's annotations, a flag bindEnv set.
const envAnnotation = "offsetkeeper-env"

// fromEnv tells whether bindEnv set f from the environment.
func fromEnv(f *pflag.Flag) bool {
	_, ok := f.Annotations[envAnnotation]
	return ok
}

func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// knownEnv are the variables read other than as a flag's.
var knownEnv = []string{envEtcdPassword, envKafkaPassword, envRegistryPassword, clickhouse.PasswordEnv, envName("help"), envName("version"),
	kafka.PoisonBuffersEnv}

// serviceLink matches the variables Kubernetes puts into every pod for a
// Service whose name starts offsetkeeper: OFFSETKEEPER_SERVICE_HOST,
// OFFSETKEEPER_PORT_9464_TCP_ADDR and the like.
var serviceLink = regexp.MustCompile(`^` + envPrefix + `(?:[A-Z0-9_]+_)?(?:SERVICE_HOST|SERVICE_PORT(?:_[A-Z0-9_]+)?|PORT(?:_[0-9]+_(?:TCP|UDP|SCTP)(?:_PROTO|_PORT|_ADDR)?)?)$`)

// unknownEnv looks at the OFFSETKEEPER_* variables of environ that are
// neither a flag's of any command (under cmd's root) nor one of knownEnv:
// the first that is a near miss of a variable cmd reads is refused, with
// that name; the others are warned of on cmd's stderr.
func unknownEnv(cmd *cobra.Command, environ []string) error {
	known := slices.Clone(knownEnv)
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { known = append(known, envName(f.Name)) })
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(cmd.Root())
	var own []string // the suffixes (after the prefix) of what cmd reads
	for _, n := range knownEnv {
		own = append(own, strings.TrimPrefix(n, envPrefix))
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) { own = append(own, strings.TrimPrefix(envName(f.Name), envPrefix)) })
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || serviceLink.MatchString(name) {
			continue
		}
		if slices.Contains(known, name) {
			// Another command's: shared environments are common, but a
			// near miss of one this command reads is likely a mistake
			// (OFFSETKEEPER_TOPIC for run, which reads --topics).
			suffix := strings.TrimPrefix(name, envPrefix)
			if !slices.Contains(own, suffix) {
				if s := enum.Closest(suffix, own); s != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "Warning: environment variable %s: %q does not read it (another command does), ignored; did you mean %s%s?\n",
						name, cmd.CommandPath(), envPrefix, s)
				}
			}
			continue
		}
		if s := enum.Closest(strings.TrimPrefix(name, envPrefix), own); s != "" {
			return usagef("environment variable %s: no command reads it; did you mean %s%s? (each flag --NAME is read from %sNAME, upper case, '-' as '_')",
				name, envPrefix, s, envPrefix)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "Warning: environment variable %s: no command reads it, ignored (each flag --NAME is read from %sNAME, upper case, '-' as '_')\n",
			name, envPrefix)
	}
	return nil
}
