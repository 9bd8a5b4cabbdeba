package clickhouse

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // a part of the error; "" for none
		// checked when the URL parses
		addrs []string
		table string
		mode  Mode
	}{
		{url: "clickhouse://127.0.0.1:9000/db?table=t&group=g", addrs: []string{"127.0.0.1:9000"}, table: "`db`.`t`"},
		{url: "clickhouse://u:p@h1,h2:9001/db?group=g&mode=columns&table=other.t", addrs: []string{"h1:9000", "h2:9001"}, table: "`other`.`t`", mode: Columns},
		// No port: the protocol's documented default, not a refusal.
		{url: "clickhouse://ch/shop?group=g", addrs: []string{"ch:9000"}, table: "`shop`.`offsetkeeper_records`"},
		{url: "clickhouse://h?group=g&protocol=http", addrs: []string{"h:8123"}, table: "`default`.`offsetkeeper_records`"},
		{url: "clickhouse://h?group=g&protocol=http&secure=true", addrs: []string{"h:8443"}, table: "`default`.`offsetkeeper_records`"},
		{url: "clickhouse://h?group=g&secure=true&ca_file=/x.pem", addrs: []string{"h:9440"}, table: "`default`.`offsetkeeper_records`"},
		{url: "postgres://h/db", want: `scheme "postgres": want clickhouse://`},
		{url: "clickhouse:///db?group=g", want: "no host"},
		{url: "clickhouse://h/db?group=g&tabel=t", want: `unknown parameter "tabel"`},
		{url: "clickhouse://h/db?group=g&insert_deduplicate=0", want: `unknown parameter "insert_deduplicate"`},
		{url: "clickhouse://h/db?group=g&mode=upsert", want: `mode="upsert": want one of raw, columns`},
		{url: "clickhouse://h/db?group=g&protocol=grpc", want: `protocol="grpc": want one of native, http`},
		{url: "clickhouse://h/db?group=g&table=a.b.c", want: `table="a.b.c": want NAME or DB.NAME`},
		{url: "clickhouse://h/db?group=g&table=t&dead_letter_table=t", want: "two different tables"},
		{url: "clickhouse://h/db?group=g&ca_file=/x", want: "ca_file= is for TLS: it needs secure=true"},
		{url: "clickhouse://h/db?group=g&secure=maybe", want: `secure="maybe": want true or false`},
		{url: "clickhouse://h/db?group=g&retry_timeout=forever", want: `retry_timeout="forever"`},
		{url: "clickhouse://h:99999/db?group=g", want: `port "99999"`},
		{url: "clickhouse://u:p@h/db?group=g&password_file=/p", want: "password given twice"},
		{url: "clickhouse://h/db?group=a/b", want: `group="a/b"`},
		{url: "clickhouse://h/db?group=g&group=h", want: "group= given twice"},
		{url: "clickhouse://h/a/b?group=g", want: `path "/a/b"`},
	} {
		t.Run(tc.url, func(t *testing.T) {
			c, err := parseURL(tc.url)
			if tc.want != "" {
				if err == nil || !errors.Is(err, ErrURL) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("parseURL = %v; want an ErrURL saying %q", err, tc.want)
				}
				if strings.Contains(err.Error(), ":p@") {
					t.Fatalf("the error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(c.addrs, " ") != strings.Join(tc.addrs, " ") || c.table.String() != tc.table || c.mode != tc.mode {
				t.Fatalf("parseURL = %v %s %s; want %v %s %s", c.addrs, c.table, c.mode, tc.addrs, tc.table, tc.mode)
			}
		})
	}
}

func TestPasswordSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(v string) Option {
		return WithGetenv(func(k string) string {
			if k == PasswordEnv {
				return v
			}
			return ""
		})
	}
	for _, tc := range []struct {
		name, url, env, want, err string
	}{
		{"url", "clickhouse://u:secret@h/db?group=g", "", "secret", ""},
		{"file", "clickhouse://u@h/db?group=g&password_file=" + file, "", "from-file", ""},
		{"env", "clickhouse://u@h/db?group=g", "from-env", "from-env", ""},
		{"env and url", "clickhouse://u:secret@h/db?group=g", "from-env", "", "given twice"},
		{"env and file", "clickhouse://u@h/db?group=g&password_file=" + file, "from-env", "", "given twice"},
		{"missing file", "clickhouse://u@h/db?group=g&password_file=" + filepath.Join(dir, "none"), "", "", "password_file="},
		{"no group", "clickhouse://u@h/db", "", "", "group= is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseURL(tc.url)
			if err == nil {
				err = c.finish([]Option{env(tc.env)})
			}
			if tc.err != "" {
				if err == nil || !errors.Is(err, ErrURL) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v; want %q", err, tc.err)
				}
				return
			}
			if err != nil || c.password != tc.want {
				t.Fatalf("password %q, err %v; want %q", c.password, err, tc.want)
			}
		})
	}
}

func TestGroupOption(t *testing.T) {
	c, _ := parseURL("clickhouse://h/db?group=a")
	if err := c.finish([]Option{WithGroup("b")}); err == nil || !errors.Is(err, ErrURL) {
		t.Fatalf("group=a opened for b: %v; want ErrURL", err)
	}
	c, _ = parseURL("clickhouse://h/db")
	if err := c.finish([]Option{WithGroup("b")}); err != nil || c.group != "b" {
		t.Fatalf("WithGroup: %v, group %q", err, c.group)
	}
}

// The token names the group, the partition, the generation and the exact
// range, and nothing else: the same block (whatever its records, epoch or
// buffers) is the same token, any other range or generation another.
func TestToken(t *testing.T) {
	b := &sinks.Block{Topic: "orders", Partition: 3, Epoch: 7, Generation: 2, From: 100, Next: 180}
	if got, want := Token("g", b), "offsetkeeper/g/orders/3/2/100-180"; got != want {
		t.Fatalf("Token = %q, want %q", got, want)
	}
	same := *b
	same.Epoch = 9
	same.Records = []sinks.Record{{Offset: 100}}
	if Token("g", &same) != Token("g", b) {
		t.Fatal("a replay by a new owner (another epoch) has another token")
	}
	for _, other := range []sinks.Block{
		{Topic: "orders", Partition: 3, Generation: 3, From: 100, Next: 180},
		{Topic: "orders", Partition: 3, Generation: 2, From: 100, Next: 181},
		{Topic: "orders", Partition: 4, Generation: 2, From: 100, Next: 180},
		{Topic: "orders.x", Partition: 3, Generation: 2, From: 100, Next: 180},
	} {
		if Token("g", &other) == Token("g", b) {
			t.Fatalf("%s has the token of %s", &other, b)
		}
	}
	if Token("h", b) == Token("g", b) {
		t.Fatal("two groups share a token")
	}
}

func TestTypeArgs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		name string
		args []string
	}{
		{"Int64", "Int64", nil},
		{"Nullable(String)", "Nullable", []string{"String"}},
		{"Map(String, Array(Nullable(Int32)))", "Map", []string{"String", "Array(Nullable(Int32))"}},
		{"DateTime64(3, 'Europe/Berlin')", "DateTime64", []string{"3", "'Europe/Berlin'"}},
		{"Enum8('a, b' = 1, 'c' = 2)", "Enum8", []string{"'a, b' = 1", "'c' = 2"}},
		{"Tuple(a Int32, b String)", "Tuple", []string{"a Int32", "b String"}},
	} {
		name, args := typeArgs(tc.in)
		if name != tc.name || strings.Join(args, "|") != strings.Join(tc.args, "|") {
			t.Errorf("typeArgs(%q) = %q %q; want %q %q", tc.in, name, args, tc.name, tc.args)
		}
	}
}

func TestConvert(t *testing.T) {
	num := func(s string) any { return json.Number(s) }
	at := time.Date(2024, 5, 1, 12, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		typ  string
		in   any
		want any
		err  bool
	}{
		{"Int32", num("12"), int32(12), false},
		{"Int32", "12", int32(12), false},
		{"Int32", num("1e3"), int32(1000), false},
		{"Int32", num("1.5"), nil, true},
		{"Int8", num("200"), nil, true},
		{"UInt16", num("-1"), nil, true},
		{"UInt64", num("18446744073709551615"), uint64(18446744073709551615), false},
		{"Int64", "abc", nil, true},
		{"Int64", true, nil, true},
		{"Float64", num("2.5"), 2.5, false},
		{"Bool", true, true, false},
		{"Bool", "yes", nil, true},
		{"String", "x", "x", false},
		{"String", num("12"), "12", false},
		{"String", map[string]any{"b": num("1"), "a": "<"}, `{"a":"<","b":1}`, false},
		{"FixedString(2)", "abc", nil, true},
		{"Nullable(Int64)", nil, nil, false},
		{"LowCardinality(String)", "x", "x", false},
		{"DateTime", "2024-05-01 12:30:00", at, false},
		{"DateTime64(3)", "2024-05-01T12:30:00Z", at, false},
		{"Date", "2024-05-01", time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC), false},
		{"DateTime", num("1714566600"), at, false},
		{"DateTime", "yesterday", nil, true},
		{"Decimal(10, 2)", num("1.25"), "1.25", false},
		{"Decimal(10, 2)", true, nil, true},
		{"Enum8('a' = 1)", "a", "a", false},
		{"Array(Int32)", []any{num("1"), num("2")}, []any{int32(1), int32(2)}, false},
		{"Array(Int32)", []any{num("1"), "x"}, nil, true},
		{"Array(Int32)", "x", nil, true},
	} {
		got, err := newConverter(tc.typ)(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("%s of %#v: err %v, want error %v", tc.typ, tc.in, err, tc.err)
			continue
		}
		if tc.err {
			continue
		}
		if gt, ok := got.(time.Time); ok {
			if !gt.Equal(tc.want.(time.Time)) {
				t.Errorf("%s of %#v = %v, want %v", tc.typ, tc.in, gt, tc.want)
			}
			continue
		}
		if jsonOf(t, got) != jsonOf(t, tc.want) {
			t.Errorf("%s of %#v = %#v, want %#v", tc.typ, tc.in, got, tc.want)
		}
	}
	// A missing field: NULL, or the type's zero.
	if v, err := columnConverter("Array(String)")(nil); err != nil || len(v.([]any)) != 0 {
		t.Errorf("a missing array = %#v, %v; want an empty one", v, err)
	}
	if v, err := columnConverter("Int64")(nil); err != nil || v != nil {
		t.Errorf("a missing Int64 = %#v, %v; want nil (the zero)", v, err)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%T %s", v, b)
}

// TestParams: the parameters the documentation's table is generated from
// are the ones the parser accepts: each is taken (a bad value may be
// refused, never as unknown) and named when an unknown one is refused, and
// each is documented once.
func TestParams(t *testing.T) {
	seen := map[string]bool{}
	_, unknown := parseURL("clickhouse://h/db?group=g&tabel=t")
	for _, p := range Params() {
		if p.Default == "" || p.Meaning == "" {
			t.Errorf("%s: default %q, meaning %q: want both", p.Name, p.Default, p.Meaning)
		}
		if seen[p.Name] {
			t.Errorf("%s documented twice", p.Name)
		}
		seen[p.Name] = true
		if _, err := parseURL("clickhouse://h/db?group=g&secure=true&" + p.Name + "=x"); err != nil && strings.Contains(err.Error(), "unknown parameter") {
			t.Errorf("%s=: %v, want it accepted", p.Name, err)
		}
		if unknown == nil || !strings.Contains(unknown.Error(), p.Name) {
			t.Errorf("the unknown-parameter error does not list %s: %v", p.Name, unknown)
		}
	}
}
