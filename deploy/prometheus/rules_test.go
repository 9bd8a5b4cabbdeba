// Package prometheus_test checks the alert rules of deploy/prometheus with
// promtool: their syntax (promtool check rules) and their unit tests
// (promtool test rules offsetkeeper.rules.test.yml).
package prometheus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// TestDashboardQueries has promtool parse every query of the Grafana
// dashboard, as recording rules, with Grafana's variables replaced by values
// of their kind.
func TestDashboardQueries(t *testing.T) {
	bin := promtool(t)
	b, err := os.ReadFile(filepath.Join("..", "grafana", "offsetkeeper.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$group", ".+")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			q, err := json.Marshal(vars.Replace(tg.Expr)) // a JSON string is a YAML string
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&rules, "      - record: panel_%d\n        expr: %s\n", n, q)
			n++
		}
	}
	if n == 0 {
		t.Fatal("the dashboard has no queries")
	}
	path := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules (the dashboard's %d queries): %v\n%s", n, err, out)
	}
}
