// Package prometheus_test checks the alert rules of deploy/prometheus with
// promtool: their syntax (promtool check rules) and their unit tests
// (promtool test rules offsetkeeper.rules.test.yml).
package prometheus_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

const (
	rules     = "offsetkeeper.rules.yml"
	ruleTests = "offsetkeeper.rules.test.yml"
)

// promtool returns the path of promtool (Debian's package prometheus), on
// PATH or in /usr/bin. Without it the test skips, except with CI set, where
// it fails: test.sh installs the package when it runs as root.
func promtool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/promtool"); err == nil {
		return "/usr/bin/promtool"
	}
	const why = "promtool is missing (apt-get install prometheus; test.sh installs it as root)"
	if os.Getenv("CI") != "" {
		t.Fatal(why + "; CI is set, so the alert rules' tests must not be skipped")
	}
	t.Skip(why)
	return ""
}

func TestRules(t *testing.T) {
	bin := promtool(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"check", []string{"check", "rules", rules}},
		{"unit", []string{"test", "rules", ruleTests}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, tc.args...).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool %v: %v\n%s", tc.args, err, out)
			}
			t.Logf("promtool %v:\n%s", tc.args, out)
		})
	}
}
