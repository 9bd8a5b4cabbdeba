package integration_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"
)

// TestDeployMetricsExist checks that every metric the alert rules
// (deploy/prometheus) and the dashboard (deploy/grafana) query is one a
// running replica exports: `offsetkeeper run` as a process, owning both
// partitions of its topic and having written blocks, so that its lag and
// histogram series exist. A renamed metric would leave an alert that never
// fires and a panel that stays empty, silently. up is Prometheus's own.
func TestDeployMetricsExist(t *testing.T) {
	queries := deployQueries(t)

	e := newEnv(t, "deployed", 2)
	e.produce(100)
	e.process("a", t.TempDir())
	var base string
	await(t, 20*time.Second, "a to register with its http address", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ms, err := e.coord.Members(ctx)
		if err != nil || len(ms) != 1 || ms[0].HTTPAddr == "" {
			return false
		}
		base = "http://" + ms[0].HTTPAddr
		return true
	})
	var m metrics
	await(t, 30*time.Second, "200 records written, lag and log end of both partitions", func() bool {
		m = scrape(t, base+"/metrics")
		return m.value("offsetkeeper_records_written_total") == 200 &&
			m.lag(0) == 0 && m.lag(1) == 0 &&
			m.value("kafka_partition_latest_offset", "partition", "1") == 100
	})

	for _, q := range queries {
		names := promqlMetrics(q.expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric found in %q", q.where, q.expr)
		}
		for _, name := range names {
			if !m.exports(name) {
				t.Errorf("%s: %s is not exported by a running replica (query %q)", q.where, name, q.expr)
			}
		}
	}
}

// exports tells whether the scrape has the metric name: a family, or a
// histogram family's _bucket, _sum or _count series. up is Prometheus's.
func (m metrics) exports(name string) bool {
	if name == "up" {
		return true
	}
	if _, ok := m[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := m[strings.TrimSuffix(name, suffix)]; ok && strings.HasSuffix(name, suffix) && f.GetType() == dto.MetricType_HISTOGRAM {
			return true
		}
	}
	return false
}

// deployQuery is one PromQL expression of the deploy files, and where it is.
type deployQuery struct{ where, expr string }

// deployQueries reads the alert rules' expressions and the dashboard's
// queries, its variables' included.
func deployQueries(t *testing.T) []deployQuery {
	t.Helper()
	var qs []deployQuery
	b, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", "offsetkeeper.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string `json:"alert"`
				Record string `json:"record"`
				Expr   string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("alert rules: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			qs = append(qs, deployQuery{"alert " + r.Alert + r.Record, r.Expr})
		}
	}
	nrules := len(qs)

	b, err = os.ReadFile(filepath.Join("..", "deploy", "grafana", "offsetkeeper.json"))
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
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, deployQuery{"panel " + p.Title, tg.Expr})
		}
	}
	labelValues := regexp.MustCompile(`^label_values\(\s*(.+?)\s*,\s*[a-zA-Z_]\w*\s*\)$`)
	for _, v := range dash.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			qs = append(qs, deployQuery{"variable " + v.Name, m[1]})
		}
	}
	if nrules == 0 || len(qs) == nrules {
		t.Fatalf("%d alert rules and %d dashboard queries: want some of each", nrules, len(qs)-nrules)
	}
	return qs
}

// promqlKeywords are PromQL's words that are not metric names: binary
// operators, modifiers, and the aggregations (which may be followed by
// their by (...) before their parenthesis). Functions are told by the
// parenthesis that follows them.
var promqlKeywords = []string{"and", "or", "unless", "offset", "bool", "by", "without",
	"on", "ignoring", "group_left", "group_right", "inf", "nan", "atan2", "start", "end",
	"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
	"bottomk", "topk", "quantile"}

// labelLists are the keywords followed by a parenthesised list of labels.
var labelLists = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

// promqlMetrics returns the metric names a PromQL expression selects: the
// identifiers outside strings, label matchers ({...}), ranges ([...]) and
// label lists (by (...)), that are neither functions (followed by "(") nor
// keywords. Grafana's variables ($name) are skipped.
func promqlMetrics(expr string) []string {
	var names []string
	isStart := func(c byte) bool { return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || '0' <= c && c <= '9' }
	// skipTo returns the index past the close matching the open at i,
	// stepping over strings.
	skipTo := func(i int, open, close byte) int {
		depth := 0
		for ; i < len(expr); i++ {
			switch c := expr[i]; c {
			case '"', '\'', '`':
				for i++; i < len(expr) && expr[i] != c; i++ {
					if expr[i] == '\\' && c != '`' {
						i++
					}
				}
			case open:
				depth++
			case close:
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipTo(i, 0, 0) // a string outside a selector: runs to its end
		case c == '{':
			i = skipTo(i, '{', '}')
		case c == '[':
			i = skipTo(i, '[', ']')
		case c == '$' || '0' <= c && c <= '9' || c == '.':
			for i++; i < len(expr) && (isPart(expr[i]) || expr[i] == '.'); i++ {
			}
		case isStart(c):
			j := i
			for i++; i < len(expr) && isPart(expr[i]); i++ {
			}
			word := expr[j:i]
			k := i
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\n' || expr[k] == '\t') {
				k++
			}
			switch {
			case slices.Contains(labelLists, word) && k < len(expr) && expr[k] == '(':
				i = skipTo(k, '(', ')')
			case k < len(expr) && expr[k] == '(', slices.Contains(promqlKeywords, word):
			default:
				if !slices.Contains(names, word) {
					names = append(names, word)
				}
			}
		default:
			i++
		}
	}
	return names
}

func TestPromQLMetrics(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up{job="offsetkeeper"} == 0`, []string{"up"}},
		{`increase(offsetkeeper_commit_failures_total[15m]) > 0`, []string{"offsetkeeper_commit_failures_total"}},
		{`deriv(max by (group, topic, partition) (kafka_consumergroup_group_lag)[10m:1m]) > 0
		  and on (group, topic, partition) max by (group, topic, partition) (kafka_consumergroup_group_lag) > 1000`,
			[]string{"kafka_consumergroup_group_lag"}},
		{`histogram_quantile(0.99, sum by (le) (rate(offsetkeeper_block_rows_bucket{group=~"$group"}[$__rate_interval])))`,
			[]string{"offsetkeeper_block_rows_bucket"}},
		{`kafka_partition_latest_offset * on (instance) group_left () (offsetkeeper_build_info{group=~"a}b"})`,
			[]string{"kafka_partition_latest_offset", "offsetkeeper_build_info"}},
		{`sum(x offset 10m) unless bool y{a='it\'s'} / 1e3`, []string{"x", "y"}},
		{`vector(1)`, nil},
	} {
		if got := promqlMetrics(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("promqlMetrics(%q) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}
