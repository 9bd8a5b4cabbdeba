package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/offsetkeeper/offsetkeeper/internal/enum"
)

// usageError is bad input: a flag, an argument, an environment variable or a
// value out of range. It exits with status 2, and nothing has been changed.
// Its message names the flag (or the variable), the value and what is
// accepted.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return &usageError{fmt.Errorf(format, a...)} }

func usage(err error) error {
	if err == nil {
		return nil
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return err
	}
	return &usageError{err}
}

// flagName is how messages name f: -o for the output flag, --name for the
// others.
func flagName(f *pflag.Flag) string {
	if f.Shorthand != "" && f.Name == "output" {
		return "-" + f.Shorthand
	}
	return "--" + f.Name
}

// valueHints say what a flag of a pflag built-in type accepts, in place of
// the Go parser's text (strconv.ParseBool: parsing "maybe": invalid syntax).
// The flag types of this package (byteSize, enumFlag, int64Flag) say it
// themselves.
var valueHints = map[string]string{
	"bool":        "want true or false",
	"int":         "want a whole number",
	"int64":       "want a whole number",
	"uint64":      "want a whole number, 0 or more",
	"duration":    "want a duration with a unit, such as 500ms, 10s, 2m or 1h30m",
	"strings":     "want comma-separated values",
	"stringSlice": "want comma-separated values",
}

// badValue is the usage error of a value refused by flag f: given names the
// flag or the environment variable and the value, as in --rows "abc" or
// OFFSETKEEPER_ROWS="abc" (--rows).
func badValue(given string, f *pflag.Flag, cause error) error {
	why := cause.Error()
	if hint, ok := valueHints[f.Value.Type()]; ok {
		why = hint
	}
	return usagef("%s: %s", given, why)
}

// flagError makes pflag's errors say which flag, which value and what is
// accepted, and suggests the flag meant by an unknown one.
func flagError(cmd *cobra.Command, err error) error {
	var invalid *pflag.InvalidValueError
	var unknown *pflag.NotExistError
	switch {
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		return badValue(fmt.Sprintf("%s %q", flagName(f), invalid.GetValue()), f, invalid.Unwrap())
	case errors.As(err, &unknown) && unknown.GetSpecifiedShortnames() == "":
		name := unknown.GetSpecifiedName()
		var names []string
		cmd.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
		if s := enum.Closest(name, names); s != "" {
			return usagef("unknown flag: --%s; did you mean --%s? (see %s --help)", name, s, cmd.CommandPath())
		}
		return usagef("unknown flag: --%s (see %s --help)", name, cmd.CommandPath())
	}
	return usage(err)
}

// unknownCommand is the usage error of an unknown subcommand name of
// parent, with the nearest one if there is one near enough.
func unknownCommand(parent *cobra.Command, name string) error {
	var names []string
	for _, s := range parent.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	hint := ""
	if s := parent.SuggestionsFor(name); len(s) > 0 {
		hint = fmt.Sprintf("; did you mean %q?", s[0])
	} else if s := enum.Closest(name, names); s != "" {
		hint = fmt.Sprintf("; did you mean %q?", s)
	}
	return usagef("unknown command %q for %q: want one of %s%s", name, parent.CommandPath(), strings.Join(names, ", "), hint)
}

// newHelpCommand is `offsetkeeper help [command]`: cobra's, but an unknown
// topic is bad usage (exit 2), not a help page and exit 0.
func newHelpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help prints the help of any command: offsetkeeper help offsets reset.",
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := c.Root().Find(args)
			if err != nil || target == nil || len(rest) > 0 {
				parent := target
				if parent == nil {
					parent = c.Root()
				}
				name := strings.Join(args, " ")
				if len(rest) > 0 {
					name = rest[0]
				}
				return unknownCommand(parent, name)
			}
			return target.Help()
		},
	}
}

// strictCompletion makes cobra's completion command refuse a shell it does
// not know (completion nosh) as bad usage, instead of printing its help.
func strictCompletion(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	i := slices.IndexFunc(root.Commands(), func(c *cobra.Command) bool { return c.Name() == "completion" })
	if i >= 0 {
		groupCommand(root.Commands()[i])
	}
}
