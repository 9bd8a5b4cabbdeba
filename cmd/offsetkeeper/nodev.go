//go:build nodev

package main

import "github.com/spf13/cobra"

// extraCommands: a -tags nodev build has no dev command, and so neither an
// embedded etcd nor kfake linked in (dev.go).
func extraCommands() []*cobra.Command { return nil }
