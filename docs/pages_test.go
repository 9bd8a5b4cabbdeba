package docs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// pageConfig is what a page's examples need that the page does not say:
// what to start, where its placeholders point, and what to do between its
// commands.
type pageConfig struct {
	cluster         bool     // an etcd and a kfake broker holding topics (setup)
	postgres        bool     // a private PostgreSQL, with postgresSetup run as its superuser
	postgresSetup   []string // SQL
	clickhouse      bool     // a private ClickHouse (libchdb), with clickhouseSetup run
	clickhouseSetup []string
	dir             string // where commands run, from the module root; "": a temporary directory

	// subs are the page's substitution table: placeholder → the test's
	// value (session.subs adds those of every page).
	subs func(s *session) []sub
	// hooks run before or after a command, named as hookKey names it.
	hooks map[string]hook
	// goWrap makes a file of package docs of a Go block.
	goWrap func(body string) string
}

type hook struct {
	before func(s *session)
	after  func(s *session, out string)
}

// pages is the substitution table and the setup of each page with runnable
// examples. A page that is not here runs its examples with nothing
// started.
var pages = map[string]pageConfig{
	// `go run ./cmd/offsetkeeper dev`, from the module root.
	"README.md": {
		dir: ".",
		hooks: map[string]hook{
			"go run ./cmd/offsetkeeper dev#1": {after: endsWithNoLoss},
		},
	},

	// The session against `dev --hold --sink file:///data/offsetkeeper`:
	// the directory is the test's; between the two audits the test makes
	// the changes the page describes.
	"docs/audit.md": {
		subs: func(s *session) []sub {
			return []sub{{old: "/data/offsetkeeper", new: filepath.Join(s.tmp, "data")}}
		},
		hooks: map[string]hook{
			"offsetkeeper audit --sink file:///data/offsetkeeper#2": {before: plantAuditFindings, after: checkAuditFindings},
		},
	},

	// The session against `dev --hold`, and the bad input.
	"docs/cli.md": {
		subs: func(s *session) []sub {
			// The HOST column of replicas list: the page's host is vm.
			host, _ := os.Hostname()
			return []sub{{re: regexp.MustCompile(`(?m)^(dev-\d+ +)` + regexp.QuoteMeta(host) + `( )`), new: "${1}vm${2}", outputOnly: true}}
		},
		hooks: map[string]hook{
			"offsetkeeper offsets reset --topic events:0,1 --shift-by -500#1":           {after: checkShiftedBy(-500, "")},
			"offsetkeeper offsets reset --topic events:0,1 --shift-by -500 --execute#1": {after: checkShiftedBy(-500, "reset")},
			// The page says the owners re-deliver at once, under the same
			// epochs: the second describe shows them caught up, each
			// partition with the owner and epoch of the first.
			"offsetkeeper offsets describe#1": {after: func(s *session, out string) { s.saved = out }},
			"offsetkeeper offsets describe#2": {before: awaitCaughtUp, after: sameOwnersAndEpochs},
		},
	},

	"docs/dev.md": {
		hooks: map[string]hook{
			"offsetkeeper dev --value-format avro --messages 10000#1": {after: func(s *session, out string) {
				lastLineIs(s, out, "produced=10000 delivered=10000 lost=0 duplicates=0 mismatched=n/a dead_letters=0")
			}},
		},
	},

	// The curl of the compose walk-through, against a replica the test
	// runs: localhost:9464 is that replica's HTTP address (compose
	// publishes offsetkeeper-1's /metrics there).
	"docs/deploy.md": {
		cluster: true,
		subs: func(s *session) []sub {
			if s.bg == nil {
				return nil
			}
			return []sub{{old: "localhost:9464", new: s.bg.httpAddr}}
		},
	},

	// `run` into a role app's database shop on the test's PostgreSQL
	// (which has no TLS: sslmode=require becomes disable), and dev into
	// its postgres database.
	"docs/postgresql.md": {
		cluster:  true,
		postgres: true,
		postgresSetup: []string{
			"CREATE ROLE app LOGIN",
			"CREATE DATABASE shop OWNER app",
		},
		subs: func(s *session) []sub {
			return []sub{
				{old: "app@db:5432/shop", new: "app@" + s.pg.Addr() + "/shop"},
				{old: "sslmode=require", new: "sslmode=disable"},
				{old: "127.0.0.1:5432", new: s.pg.Addr()},
			}
		},
		hooks: map[string]hook{
			"offsetkeeper run ... --group orders --sink 'postgres://app@db:5432/shop?sslmode=require&table=orders_raw'#1": {
				after: func(s *session, _ string) {
					rowsAre(s, "postgres table orders_raw", s.pgCount("postgres://app@"+s.pg.Addr()+"/shop", "SELECT count(*) FROM orders_raw"))
				},
			},
		},
	},

	// `run` into the test's ClickHouse, as its user, into a database
	// shop; the password is the test server's.
	"docs/clickhouse.md": {
		cluster:         true,
		clickhouse:      true,
		clickhouseSetup: []string{"CREATE DATABASE IF NOT EXISTS shop"},
		subs: func(s *session) []sub {
			return []sub{
				{old: "OFFSETKEEPER_CLICKHOUSE_PASSWORD=…", new: "OFFSETKEEPER_CLICKHOUSE_PASSWORD=" + harness.ClickHousePassword},
				{old: "app@ch-1:9000/shop", new: harness.ClickHouseUser + "@" + s.ch.NativeAddr() + "/shop"},
			}
		},
		hooks: map[string]hook{
			"offsetkeeper run ... --group orders --sink 'clickhouse://app@ch-1:9000/shop?table=orders_raw'#1": {
				after: func(s *session, _ string) {
					rowsAre(s, "clickhouse table shop.orders_raw", s.ch.QueryInt(s.t, "SELECT count() FROM shop.orders_raw"))
				},
			},
		},
	},

	// etcd1..3 and kafka:9092 are the test's; /var/lib/offsetkeeper a
	// temporary directory.
	"docs/running.md": {
		cluster: true,
		subs: func(s *session) []sub {
			return []sub{
				{old: "etcd1:2379,etcd2:2379,etcd3:2379", new: s.env["OFFSETKEEPER_ETCD_ENDPOINTS"]},
				{old: "kafka:9092", new: s.env["OFFSETKEEPER_BROKERS"]},
				{old: "/var/lib/offsetkeeper", new: filepath.Join(s.tmp, "sink")},
			}
		},
		hooks: map[string]hook{
			"offsetkeeper run --etcd-endpoints etcd1:2379,etcd2:2379,etcd3:2379 --brokers kafka:9092 \\\n  --group orders --topics orders,refunds --sink file:///var/lib/offsetkeeper#1": {
				after: func(s *session, _ string) {
					for _, topic := range topics {
						for p := 0; p < topicPartitions; p++ {
							files, _ := filepath.Glob(filepath.Join(s.tmp, "sink", topic, strconv.Itoa(p), "*.jsonl"))
							if len(files) == 0 {
								s.t.Errorf("docs/running.md: the file sink holds no block of %s/%d", topic, p)
							}
						}
					}
				},
			},
		},
	},

	// The snippet is the body of a function given what it names.
	"docs/embedding.md": {
		subs: func(*session) []sub {
			return []sub{{old: "if err != nil { ... }", new: "if err != nil { return err }"}}
		},
		goWrap: func(body string) string {
			return `package docs

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// embeddingExample is the example of docs/embedding.md.
func embeddingExample(ctx context.Context, etcdClient *clientv3.Client, mySink sinks.Sink, logger *zap.Logger) error {
` + body + `
	return err
}
`
		},
	},
}

// endsWithNoLoss: dev's last line, `produced=N delivered=N lost=0 ...`.
func endsWithNoLoss(s *session, out string) {
	m := regexp.MustCompile(`(?m)^produced=(\d+) delivered=(\d+) lost=0 duplicates=0 `).FindStringSubmatch(out)
	if m == nil || m[1] != m[2] {
		s.t.Errorf("%s: dev does not end with produced=N delivered=N lost=0 duplicates=0:\n%s", s.name, out)
	}
}

func lastLineIs(s *session, out, want string) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := lines[len(lines)-1]; got != want {
		s.t.Errorf("%s: the last line is %q, the page shows %q", s.name, got, want)
	}
}

func rowsAre(s *session, what string, n int64) {
	if want := int64(topicPartitions * recordsPerPartition); n != want {
		s.t.Errorf("%s: %s holds %d rows, want the %d records of topic orders", s.name, what, n, want)
	}
}

func (s *session) pgCount(url, query string) int64 {
	var n int64
	ctx := harness.Context(s.t, 30*time.Second)
	if err := pgQueryRow(ctx, url, query, &n); err != nil {
		s.t.Fatalf("%s: %s: %v", s.name, query, err)
	}
	return n
}

// checkShiftedBy: each row of the reset's plan moves its partition by n
// from CURRENT to NEW, with status.
func checkShiftedBy(n int64, status string) func(*session, string) {
	return func(s *session, out string) {
		rows := table(out, "TOPIC", "PARTITION", "CURRENT", "NEW")
		if len(rows) == 0 {
			s.t.Errorf("%s: the reset printed no plan:\n%s", s.name, out)
		}
		for _, r := range rows {
			cur, err1 := strconv.ParseInt(r["CURRENT"], 10, 64)
			nw, err2 := strconv.ParseInt(r["NEW"], 10, 64)
			if err1 != nil || err2 != nil || nw != cur+n || r["STATUS"] != status {
				s.t.Errorf("%s: reset row %v, want NEW = CURRENT %+d, STATUS %q", s.name, r, n, status)
			}
		}
	}
}

// sameOwnersAndEpochs: every partition has the owner and the epoch it had
// in the describe saved before, and is committed up to its log end.
func sameOwnersAndEpochs(s *session, out string) {
	key := func(r map[string]string) string { return r["TOPIC"] + "/" + r["PARTITION"] }
	before := map[string]map[string]string{}
	for _, r := range table(s.saved, "TOPIC", "PARTITION", "OWNER", "EPOCH") {
		before[key(r)] = r
	}
	after := table(out, "TOPIC", "PARTITION", "COMMITTED", "LOG-END", "OWNER", "EPOCH")
	if len(after) == 0 || len(after) != len(before) {
		s.t.Errorf("%s: describe shows %d partitions, and %d before the reset", s.name, len(after), len(before))
	}
	for _, r := range after {
		b := before[key(r)]
		if r["OWNER"] != b["OWNER"] || r["EPOCH"] != b["EPOCH"] || r["COMMITTED"] != r["LOG-END"] {
			s.t.Errorf("%s: after the reset %s is %v; before it, %v: want the same owner and epoch, committed to the log end", s.name, key(r), r, b)
		}
	}
}

// awaitCaughtUp waits until every partition of the group is committed up
// to its log end, with nothing in flight.
func awaitCaughtUp(s *session) {
	deadline := time.Now().Add(readyTimeout)
	for {
		var d struct {
			Partitions []struct {
				Lag      *int64           `json:"lag"`
				InFlight *json.RawMessage `json:"in_flight"`
			} `json:"partitions"`
		}
		err := s.cliJSON(&d, "offsets", "describe", "-o", "json")
		done := err == nil && len(d.Partitions) > 0
		for _, p := range d.Partitions {
			done = done && p.Lag != nil && *p.Lag == 0 && p.InFlight == nil
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: the group has not caught up after %s (%v)", s.name, readyTimeout, err)
		}
		time.Sleep(pollEvery)
	}
}

// plantAuditFindings makes the changes docs/audit.md describes between its
// two audits, in the file sink of the dev it runs against: offset 2's value
// changed in partition 0, offsets 100 to 109 of partition 1 given a
// timestamp a day later, the line of offset 4 of partition 2 deleted.
func plantAuditFindings(s *session) {
	dir := s.sinkTopicDir(filepath.Join(s.tmp, "data"))
	s.editLine(dir, 0, func(off int64, rec map[string]json.RawMessage) bool {
		if off == 2 {
			rec["value"] = json.RawMessage(`{"changed":true}`)
		}
		return true
	})
	s.editLine(dir, 1, func(off int64, rec map[string]json.RawMessage) bool {
		if off >= 100 && off < 110 {
			ts, _ := strconv.ParseInt(string(rec["timestamp"]), 10, 64)
			rec["timestamp"] = json.RawMessage(strconv.FormatInt(ts+int64(24*time.Hour/time.Millisecond), 10))
		}
		return true
	})
	s.editLine(dir, 2, func(off int64, _ map[string]json.RawMessage) bool { return off != 4 })
}

// checkAuditFindings: the findings are the three the page shows, at the
// offsets it shows.
func checkAuditFindings(s *session, out string) {
	var got []string
	for _, r := range table(out, "TOPIC", "PARTITION", "FINDING", "OFFSETS", "RANGES") {
		got = append(got, strings.Join([]string{r["PARTITION"], r["FINDING"], r["OFFSETS"], r["RANGES"]}, " "))
	}
	want := []string{"0 mismatched 1 2", "1 mismatched 10 [100, 110)", "2 missing 1 4"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		s.t.Errorf("%s: the audit finds %q, the page shows %q", s.name, got, want)
	}
}

// sinkTopicDir is the one topic directory of a file sink (dev's topic of
// its own).
func (s *session) sinkTopicDir(base string) string {
	entries, err := os.ReadDir(base)
	if err != nil {
		s.t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			dirs = append(dirs, e.Name())
		}
	}
	if len(dirs) != 1 {
		s.t.Fatalf("%s: the file sink %s holds topics %v, want dev's one", s.name, base, dirs)
	}
	return filepath.Join(base, dirs[0])
}

// editLine rewrites the lines of a partition's block files: edit changes a
// record in place, and returns false to delete its line.
func (s *session) editLine(topicDir string, partition int, edit func(off int64, rec map[string]json.RawMessage) bool) {
	files, err := filepath.Glob(filepath.Join(topicDir, strconv.Itoa(partition), "*.jsonl"))
	if err != nil || len(files) == 0 {
		s.t.Fatalf("%s: no block files in partition %d of %s (%v)", s.name, partition, topicDir, err)
	}
	sort.Strings(files)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			s.t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
			var rec map[string]json.RawMessage
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				s.t.Fatalf("%s: %s: %v", s.name, f, err)
			}
			off, _ := strconv.ParseInt(string(rec["offset"]), 10, 64)
			before := fmt.Sprint(rec)
			if !edit(off, rec) {
				continue
			}
			if fmt.Sprint(rec) == before {
				out = append(out, l)
				continue
			}
			b, err := json.Marshal(rec)
			if err != nil {
				s.t.Fatal(err)
			}
			out = append(out, string(b))
		}
		if err := os.WriteFile(f, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
}

// pgQueryRow runs a query of one row on a new connection to url.
func pgQueryRow(ctx context.Context, url, query string, dest ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	return conn.QueryRow(ctx, query).Scan(dest...)
}
