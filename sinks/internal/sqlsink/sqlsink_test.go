package sqlsink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

var errTestURL = errors.New("bad test sink URL")

var testURL = URL{Err: errTestURL, GroupIs: "the test's key"}

func TestURL(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string // "" for none
	}{
		{"parse", func() error { _, err := testURL.Parse("postgres://u:s3cret@h:port/db"); return err }(), "port"},
		{"group required", testURL.RequireGroup(""), "group= is required (the offsetkeeper group, the test's key)"},
		{"group given", testURL.RequireGroup("g"), ""},
		{"groups differ", func() error { _, err := testURL.Group("a", "b"); return err }(), `group="a" but the sink is opened for group "b"`},
		{"no group", func() error { _, err := testURL.Group("", ""); return err }(), "group= is required"},
		{"retry timeout", func() error { _, err := testURL.RetryTimeout("retry_timeout", "1h"); return err }(), `retry_timeout="1h": want a duration from 0 (no retry) to 10m0s`},
		{"negative retry timeout", func() error { _, err := testURL.RetryTimeout("retry_timeout", "-1s"); return err }(), "want a duration"},
		{"bool", func() error { _, err := testURL.Bool("secure", "maybe"); return err }(), `secure="maybe": want true or false`},
		{"table of three names", func() error { _, err := testURL.Table("table", "a.b.c", "NAME or DB.NAME", 9); return err }(), `table="a.b.c": want NAME or DB.NAME`},
		{"table too long", func() error { _, err := testURL.Table("table", "abcdefghij", "NAME or DB.NAME", 9); return err }(), "each name 1 to 9 bytes"},
		{"empty name", func() error { _, err := testURL.Table("table", "db.", "NAME or DB.NAME", 9); return err }(), "each name 1 to 9 bytes"},
		{"not raw", testURL.NotRaw("orders", 3, time.Second), "read orders/3: bad test sink URL: mode=1s; ReadAll reads raw tables"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.want == "" && tc.err != nil:
				t.Fatalf("error %v, want none", tc.err)
			case tc.want == "":
			case tc.err == nil || !errors.Is(tc.err, errTestURL) || !strings.Contains(tc.err.Error(), tc.want):
				t.Fatalf("error %v, want one wrapping the sink's ErrURL saying %q", tc.err, tc.want)
			case strings.Contains(tc.err.Error(), "s3cret"):
				t.Fatalf("error %v shows the password", tc.err)
			}
		})
	}
	if g, err := testURL.Group("", "b"); err != nil || g != "b" {
		t.Errorf("Group from the option = %q, %v", g, err)
	}
	if g, err := testURL.Group("a", "a"); err != nil || g != "a" {
		t.Errorf("Group of the same name twice = %q, %v", g, err)
	}
	for val, want := range map[string]bool{"true": true, " TRUE ": true, "1": true, "false": false, "0": false} {
		if got, err := testURL.Bool("k", val); err != nil || got != want {
			t.Errorf("Bool(%q) = %v, %v; want %v", val, got, err, want)
		}
	}
	if parts, err := testURL.Table("table", "Sales.Events", "x", 63); err != nil || strings.Join(parts, "|") != "Sales|Events" {
		t.Errorf("Table = %q, %v", parts, err)
	}
	if d, err := testURL.RetryTimeout("retry_timeout", "0s"); err != nil || d != 0 {
		t.Errorf("RetryTimeout(0s) = %s, %v", d, err)
	}
	if testURL.Wrap(nil) != nil {
		t.Error("Wrap(nil) is not nil")
	}
}

func TestJoinRefusals(t *testing.T) {
	a, b := errors.New("a refused"), errors.New("b refused")
	if err := JoinRefusals([]error{nil, nil}); err != nil {
		t.Errorf("no refusal: %v", err)
	}
	if err := JoinRefusals([]error{nil, a}); err != a {
		t.Errorf("one refusal: %v", err)
	}
	err := JoinRefusals([]error{a, nil, b})
	if !errors.Is(err, a) || !errors.Is(err, b) || err.Error() != "a refused; and b refused" {
		t.Errorf("two refusals: %v", err)
	}
}

func TestParams(t *testing.T) {
	ps := Params([][3]string{{"table", "`t`", "the rows' table"}, {"mode", "`raw`", "how"}})
	if len(ps) != 2 || ps[1] != (sinks.Param{Name: "mode", Default: "`raw`", Meaning: "how"}) {
		t.Fatalf("Params = %+v", ps)
	}
	if names := Names(ps, ParamName); strings.Join(names, ",") != "table,mode" {
		t.Errorf("Names = %q", names)
	}
}

// unreachableErr is what a server that is not there answers.
var unreachableErr = &net.OpError{Op: "dial", Err: errors.New("connection refused")}

func TestSetupRetries(t *testing.T) {
	isNet := func(err error) bool { var ne net.Error; return errors.As(err, &ne) }
	refused := errors.New("table of the wrong shape")
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		fails    []error // what the attempts return, then nil
		want     string  // part of the error; "" for none
		attempts int
	}{
		{"at once", time.Minute, nil, "", 1},
		{"after two unreachable", time.Minute, []error{unreachableErr, unreachableErr}, "", 3},
		{"a refusal is not retried", time.Minute, []error{refused}, refused.Error(), 1},
		{"unreachable past the timeout", 0, []error{unreachableErr, unreachableErr}, "still unreachable after retry_timeout=0s (1 attempts)", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.WarnLevel)
			retried, attempts := 0, 0
			r := Setup{Sink: "test", Timeout: tc.timeout, Min: time.Millisecond, Max: time.Millisecond,
				Unreachable: isNet, Log: zap.New(core), Retried: func() { retried++ }}
			err := r.Run(context.Background(), func(context.Context) error {
				attempts++
				if attempts <= len(tc.fails) {
					return tc.fails[attempts-1]
				}
				return nil
			})
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Run = %v, want an error saying %q", err, tc.want)
			}
			if attempts != tc.attempts || retried != attempts-1 || logs.FilterMessage("test unreachable at start; retrying").Len() != retried {
				t.Errorf("%d attempts, %d retries, %d warnings; want %d attempts", attempts, retried, logs.Len(), tc.attempts)
			}
		})
	}
	t.Run("a stop ends it", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		r := Setup{Sink: "test", Timeout: time.Minute, Min: time.Hour, Max: time.Hour, Unreachable: isNet, Log: zap.NewNop()}
		err := r.Run(ctx, func(context.Context) error { cancel(); return unreachableErr })
		if err != unreachableErr {
			t.Errorf("Run after a stop = %v, want the attempt's error at once", err)
		}
	})
}

// rows are a query's rows of n records, failing at fail (-1: never).
type rows struct {
	n, at, fail int
	err         error
}

func (r *rows) Next() bool { r.at++; return r.at <= r.n }
func (r *rows) Err() error { return r.err }

func TestRecords(t *testing.T) {
	scan := func(rs *rows) func(*sinks.Record) error {
		return func(rec *sinks.Record) error {
			if rs.at == rs.fail {
				return fmt.Errorf("offset %d: bad headers", rs.at)
			}
			rec.Offset = int64(rs.at)
			return nil
		}
	}
	rs := &rows{n: 3, fail: -1}
	got, err := Records(rs, "orders/3 from t", scan(rs))
	if err != nil || len(got) != 3 || got[2].Offset != 3 {
		t.Fatalf("Records = %v, %v", got, err)
	}
	rs = &rows{n: 3, fail: 2}
	if _, err := Records(rs, "orders/3 from t", scan(rs)); err == nil || err.Error() != "read orders/3 from t: offset 2: bad headers" {
		t.Errorf("a row that does not scan: %v", err)
	}
	rs = &rows{n: 1, fail: -1, err: errors.New("connection lost")}
	if _, err := Records(rs, "orders/3 from t", scan(rs)); err == nil || err.Error() != "read orders/3 from t: connection lost" {
		t.Errorf("rows that end in an error: %v", err)
	}
}
