package harness

import (
	"context"
	"os/exec"
	"path"
	"path/filepath"
	"testing"
	"time"
)

// BuildCommand builds the main package pkg (an import path) into t's
// temporary directory and returns the binary's path, for tests that run a
// helper command as a separate process.
func BuildCommand(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), path.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if b, err := exec.CommandContext(ctx, "go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, b)
	}
	return out
}
