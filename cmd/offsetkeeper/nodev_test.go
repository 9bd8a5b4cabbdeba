//go:build nodev

package main

import (
	"strings"
	"testing"
	"time"
)

// A -tags nodev build (the container image's) refuses dev as bad usage and
// says where to get it.
func TestNodevBuildRefusesDev(t *testing.T) {
	r := runCLI(t, 5*time.Second, "dev", "--chaos")
	if r.code != exitUsage {
		t.Fatalf("exit %d, want %d\nstderr: %s", r.code, exitUsage, r.stderr)
	}
	checkUsageError(t, r, []string{"-tags nodev", "go run ./cmd/offsetkeeper dev"}, nil)
	if h := runCLI(t, 5*time.Second, "--help"); strings.Contains(h.stdout, "\n  dev ") {
		t.Errorf("the root help lists dev in a nodev build:\n%s", h.stdout)
	}
}
