package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envPrefix starts the name of every environment variable the CLI reads.
const envPrefix = "OFFSETKEEPER_"

// bindEnv sets every flag of cmd not given on the command line from its
// OFFSETKEEPER_* environment variable. A value the flag refuses is bad
// usage naming the variable, the value and what is accepted; so is an
// OFFSETKEEPER_* variable that no command reads (a typo would otherwise
// leave its flag at the default without a word), with the nearest name.
func bindEnv(cmd *cobra.Command) error {
	if err := unknownEnv(cmd.Root(), os.Environ()); err != nil {
		return err
	}
	var first error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" || first != nil {
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
var knownEnv = []string{envEtcdPassword, envKafkaPassword, envName("help"), envName("version")}

// unknownEnv refuses the first OFFSETKEEPER_* variable of environ that is
// neither a flag's of any command under root nor one of knownEnv.
func unknownEnv(root *cobra.Command, environ []string) error {
	known := slices.Clone(knownEnv)
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { known = append(known, envName(f.Name)) })
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || slices.Contains(known, name) {
			continue
		}
		hint := "unset it"
		if s := closest(name, known); s != "" {
			hint = "did you mean " + s + "?"
		}
		return usagef("environment variable %s: no command reads it (each flag --NAME is read from %sNAME, upper case, '-' as '_'); %s",
			name, envPrefix, hint)
	}
	return nil
}
