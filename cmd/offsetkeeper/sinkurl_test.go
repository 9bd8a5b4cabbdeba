package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks/builtin"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// TestParseSinkForms: what each sink URL form becomes, and the forms
// refused, each refusal naming the value and the form accepted.
func TestParseSinkForms(t *testing.T) {
	for _, tc := range []struct {
		raw    string
		scheme string // when accepted
		dir    string
		want   []string // in the refusal
	}{
		{raw: "file:///var/lib/ok", scheme: "file", dir: "/var/lib/ok"},
		{raw: "file://localhost/var/lib/ok/", scheme: "file", dir: "/var/lib/ok"},
		// RFC 8089's short form of the same URL: nothing else it could mean.
		{raw: "file:/var/lib/ok", scheme: "file", dir: "/var/lib/ok"},
		{raw: "file:///var/lib/ok?fsync=0", want: []string{`"file:///var/lib/ok?fsync=0"`, `unknown parameter "fsync"`, "route_field=", "file:///DIR"}},
		{raw: "file:///var/lib/ok#x", want: []string{`"file:///var/lib/ok#x"`, "file:///DIR"}},
		{raw: "file://me@localhost/var/lib/ok", want: []string{"file:///DIR"}},
		{raw: "stdout:", scheme: "stdout"},
		{raw: "stdout://", scheme: "stdout"},
		{raw: "discard:", scheme: "discard"},
		{raw: "stdout:foo", want: []string{`"stdout:foo"`, "want stdout:"}},
		{raw: "stdout:/dev/null", want: []string{`"stdout:/dev/null"`, "want stdout:"}},
		{raw: "discard:?x=1", want: []string{`"discard:?x=1"`, "want discard:"}},
		{raw: "discard://host", want: []string{`"discard://host"`, "want discard:"}},
		// ClickHouse without a port: the protocol's default (9000), as documented.
		{raw: "clickhouse://ch/shop", scheme: "clickhouse"},
		{raw: "postgres://app@db/shop?sslmode=require&application_name=x&table=t", scheme: "postgres"},
		{raw: "postgres://app:secret@db/shop?tabel=x", want: []string{`unknown parameter "tabel"`, "table", "sslmode", "application_name"}},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			got, err := parseSink(builtin.Sinks(), tc.raw)
			if tc.want != nil {
				var ue *usageError
				if !errors.As(err, &ue) {
					t.Fatalf("parseSink = %+v, %v; want a usage error", got, err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%q does not say %q", err, w)
					}
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("%q shows the password", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var dir string
			if got.scheme() == "file" {
				dir, _ = file.Dir(got.URL)
			}
			if got.scheme() != tc.scheme || dir != tc.dir {
				t.Errorf("parseSink = %s %q, want %s %q", got.scheme(), dir, tc.scheme, tc.dir)
			}
		})
	}
}

// TestSinkURLBadUsageExits2: bad sink URLs through the CLI exit 2 at once
// with one line naming the value and what is accepted; a group= in the URL
// that is not --group is one of them (it was exit 1, after connecting).
func TestSinkURLBadUsageExits2(t *testing.T) {
	closed := harness.Refused(t)
	run := func(sink string, extra ...string) []string {
		return append([]string{"run", "--etcd-endpoints", closed, "--brokers", closed, "--group", "g", "--topics", "t", "--sink", sink}, extra...)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
		not  []string
	}{
		{"postgres unknown parameter", run("postgres://app:s3cret@db/shop?tabel=x"),
			[]string{"--sink", `unknown parameter "tabel"`, "table, mode", "sslmode", "options=-c NAME=VALUE"}, []string{"s3cret"}},
		{"postgres group= not --group", run("postgres://app:s3cret@db/shop?group=blue"),
			[]string{`--sink "postgres://app:xxxxx@db/shop?group=blue"`, "group=blue but --group is g", "drop group="}, []string{"s3cret"}},
		{"clickhouse group= not --group", run("clickhouse://ch/db?group=blue"),
			[]string{"group=blue but --group is g"}, nil},
		{"file with parameters", run("file:///data?sync=0"), []string{`"file:///data?sync=0"`, "file:///DIR"}, nil},
		{"stdout with a path", run("stdout:foo"), []string{`"stdout:foo"`, "want stdout:"}, nil},
		{"discard with parameters", run("discard:?x=1"), []string{`"discard:?x=1"`, "want discard:"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := runCLI(t, 5*time.Second, tc.args...)
			if r.code != exitUsage {
				t.Fatalf("exit %d, want 2\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %s: bad input must fail at once", d)
			}
			if strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("stderr %q, want one line", r.stderr)
			}
			checkUsageError(t, r, tc.want, tc.not)
		})
	}
}

// TestOpenClaimsTheDestination: run's sink open records its group for its
// topics; another group's open of the directory is bad usage naming the
// directory, both groups and --allow-shared-sink, and with shared it opens,
// saying so in a warning.
func TestOpenClaimsTheDestination(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	target := func(group string, shared bool, log *zap.Logger) sinkTarget {
		t.Helper()
		tg, err := parseSink(builtin.Sinks(), "file://"+dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := tg.setGroup(group); err != nil {
			t.Fatal(err)
		}
		tg.claim, tg.shared, tg.log = []string{"orders"}, shared, log
		return tg
	}
	blue, err := target("blue", false, nil).open(ctx, io.Discard)
	if err != nil {
		t.Fatalf("blue: %v", err)
	}
	_ = blue.Close()
	_, err = target("green", false, nil).open(ctx, io.Discard)
	var ue *usageError
	if !errors.As(err, &ue) {
		t.Fatalf("green: %v, want a usage error", err)
	}
	for _, want := range []string{"file://" + dir, `group "blue"`, `group "green"`, "--allow-shared-sink", filepath.Join(dir, ".offsetkeeper-groups", "orders")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %d entries after the refusal, want the groups' alone", len(entries))
	}
	core, logs := observer.New(zapcore.WarnLevel)
	green, err := target("green", true, zap.New(core)).open(ctx, io.Discard)
	if err != nil {
		t.Fatalf("green with --allow-shared-sink: %v", err)
	}
	_ = green.Close()
	if w := logs.FilterMessageSnippet("--allow-shared-sink").All(); len(w) != 1 {
		t.Errorf("warnings %+v, want one saying the destination is shared", logs.All())
	}
	// Without claim (dev, audit) nothing is checked.
	other := target("green", false, nil)
	other.claim = nil
	s, err := other.open(ctx, io.Discard)
	if err != nil {
		t.Fatalf("open without claim: %v", err)
	}
	_ = s.Close()
}

// TestOpenRefusesATableOfAnotherShape (issue 23): a PostgreSQL or
// ClickHouse table the sink's mode cannot use is bad usage (exit 2), named
// with what is wrong and the likely fix, and nothing is claimed: the
// groups table is not made.
func TestOpenRefusesATableOfAnotherShape(t *testing.T) {
	ctx := context.Background()
	pg := harness.StartPostgres(t)
	chs := harness.StartClickHouse(t)
	pg.Exec(t, `CREATE TABLE shaped (id bigint, pad text, kafka_topic text, kafka_partition integer, kafka_offset bigint)`)
	chs.Exec(t, `CREATE TABLE shaped (id UInt64, pad String, kafka_topic String, kafka_partition Int32, kafka_offset Int64)
		ENGINE = MergeTree ORDER BY tuple() SETTINGS non_replicated_deduplication_window = 1000`)
	for _, tc := range []struct {
		url  string
		want []string
	}{
		{pg.URL() + "&table=shaped", []string{`"shaped" as a mode=raw table`, "value_bytes bytea", "use mode=columns"}},
		{pg.URL() + "&table=shaped&mode=upsert", []string{`"shaped" has no primary key`}},
		{chs.DSN() + "?table=shaped", []string{"`shaped` as a mode=raw table", "kafka_generation Int64", "use mode=columns"}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			tg, err := parseSink(builtin.Sinks(), tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if err := tg.setGroup("g"); err != nil {
				t.Fatal(err)
			}
			tg.claim = []string{"orders"}
			s, err := tg.open(ctx, io.Discard)
			if err == nil {
				_ = s.Close()
				t.Fatal("open: nil error, want the table refused")
			}
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Errorf("open: %v, want a usage error (exit 2)", err)
			}
			for _, w := range append([]string{"--sink", "table does not fit the sink"}, tc.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
		})
	}
	if n := chs.QueryInt(t, `SELECT count() FROM system.tables WHERE database = currentDatabase() AND name = 'offsetkeeper_sink_groups'`); n != 0 {
		t.Errorf("ClickHouse: the refused open made the groups table")
	}
	conn, err := pgx.Connect(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var groups *string
	if err := conn.QueryRow(ctx, `SELECT to_regclass('offsetkeeper_sink_groups')::text`).Scan(&groups); err != nil || groups != nil {
		t.Errorf("PostgreSQL: the refused open made the groups table (%v, %v)", groups, err)
	}
}
