package postgres

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url     string
		conn    string // the connection string pgx gets
		table   string
		offsets string
		dead    string
		mode    Mode
		group   string
		retry   time.Duration
	}{
		{
			url:  "postgres://u:p%40ss@db:5432/app?group=orders",
			conn: "postgres://u:p%40ss@db:5432/app", table: `"offsetkeeper_records"`, offsets: `"offsetkeeper_offsets"`,
			dead: `"offsetkeeper_dead_letters"`, group: "orders", retry: DefaultRetryTimeout,
		},
		{
			url:  "postgresql://db/app?sslmode=disable&table=sales.Events&mode=columns&application_name=ok&offsets_table=o&dead_letter_table=x.d&retry_timeout=5s&group=g%2F1",
			conn: "postgresql://db/app?sslmode=disable&application_name=ok", table: `"sales"."Events"`, offsets: `"o"`,
			dead: `"x"."d"`, mode: Columns, group: "g/1", retry: 5 * time.Second,
		},
		{
			url:  "postgres://db/app?retry_timeout=0s&mode=raw",
			conn: "postgres://db/app", table: `"offsetkeeper_records"`, offsets: `"offsetkeeper_offsets"`,
			dead: `"offsetkeeper_dead_letters"`, retry: 0,
		},
	} {
		c, err := parseURL(tc.url)
		if err != nil {
			t.Errorf("parseURL(%q): %v", tc.url, err)
			continue
		}
		got := []any{c.connString, c.table.Sanitize(), c.offsets.Sanitize(), c.deadLetters.Sanitize(), c.mode, c.group, c.retryTimeout}
		want := []any{tc.conn, tc.table, tc.offsets, tc.dead, tc.mode, tc.group, tc.retry}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("parseURL(%q): got %v, want %v", tc.url, got, want)
				break
			}
		}
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, tc := range []struct{ url, says string }{
		{"mysql://db/app?group=g", "want postgres://"},
		{"postgres://db/app?group=g&mode=wide", "want one of raw, columns, upsert"},
		{"postgres://db/app?group=g&table=a.b.c", "schema.table"},
		{"postgres://db/app?group=g&table=", "schema.table"},
		{"postgres://db/app?group=g&table=" + strings.Repeat("x", 64), "1 to 63"},
		{"postgres://db/app?group=g&retry_timeout=forever", "duration"},
		{"postgres://db/app?group=g&retry_timeout=-1s", "duration"},
		{"postgres://db/app?group=g&retry_timeout=1h", "duration"},
		{"postgres://db/app?group=", "empty"},
		{"postgres://db/app?group=a&group=b", "twice"},
		{"postgres://db/app?group=a&table=%zz", "table"},
		{"postgres://u:secret@db:port/app?group=a", "port"},
	} {
		_, err := parseURL(tc.url)
		if !errors.Is(err, ErrURL) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("parseURL(%q): %v, want ErrURL saying %q", tc.url, err, tc.says)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("parseURL(%q): the error shows the password: %v", tc.url, err)
		}
	}
}

// TestUnknownParameterRefused: a query parameter that is neither the
// sink's nor one pgx reads as a connection parameter (a misspelt table=,
// a server setting pgx would send as is) is refused, naming it and listing
// what is accepted, instead of reaching the server; the connection
// parameters the sink documents go through to pgx.
func TestUnknownParameterRefused(t *testing.T) {
	for _, name := range []string{"tabel", "search_path", "statement_timeout", "Table", "hostaddr", "keepalives"} {
		_, err := parseURL("postgres://u:secret@db/app?group=g&" + name + "=x")
		if !errors.Is(err, ErrURL) {
			t.Errorf("%s=: %v, want ErrURL", name, err)
			continue
		}
		for _, want := range []string{`unknown parameter "` + name + `"`, "table, mode", "sslmode", "application_name", "pool_max_conns", "options=-c NAME=VALUE"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s=: %q does not say %q", name, err, want)
			}
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s=: the error shows the password: %v", name, err)
		}
	}
	kept := "sslmode=disable&sslrootcert=ca.pem&connect_timeout=5&application_name=a&options=-c%20search_path%3Dx" +
		"&pool_max_conns=4&target_session_attrs=read-write&dbname=app&statement_cache_capacity=10"
	c, err := parseURL("postgres://db/app?group=g&table=t&" + kept)
	if err != nil {
		t.Fatalf("connection parameters: %v", err)
	}
	if c.connString != "postgres://db/app?"+kept {
		t.Errorf("pgx gets %q, want every connection parameter as written", c.connString)
	}
	// pgx reads sslrootcert's file: not here.
	if err := ValidateURL("postgres://db/app?"+strings.Replace(kept, "sslrootcert=ca.pem&", "", 1), false); err != nil {
		t.Errorf("ValidateURL of the connection parameters: %v", err)
	}
}

func TestValidateURL(t *testing.T) {
	if err := ValidateURL("postgres://db/app?sslmode=disable", true); err == nil || !strings.Contains(err.Error(), "group") {
		t.Errorf("no group: %v, want an error naming group=", err)
	}
	if err := ValidateURL("postgres://db/app?sslmode=disable", false); err != nil {
		t.Errorf("no group, not needed: %v", err)
	}
	if err := ValidateURL("postgres://db/app?sslmode=sometimes&group=g", true); err == nil {
		t.Error("a bad sslmode: nil; pgx's own parameters are checked too")
	}
}

func TestFinish(t *testing.T) {
	c, _ := parseURL("postgres://db/app?table=t&offsets_table=t")
	if err := c.finish([]Option{WithGroup("g")}); err == nil || !strings.Contains(err.Error(), "different") {
		t.Errorf("rows and offsets in one table: %v", err)
	}
	c, _ = parseURL("postgres://db/app")
	if err := c.finish([]Option{WithGroup("g")}); err != nil || c.group != "g" || c.log == nil {
		t.Errorf("WithGroup: %v, group %q", err, c.group)
	}
}

func TestModeNames(t *testing.T) {
	c, err := parseURL("postgres://db/app?mode=%20Columns")
	if err != nil || c.mode != Columns {
		t.Fatalf("mode= Columns: %v, %v; want columns (space trimmed, case folded)", c.mode, err)
	}
	if s := Mode(7).String(); s != "mode(7)" {
		t.Errorf("Mode(7).String() = %q, want mode(7)", s)
	}
	var m Mode
	if err := m.UnmarshalText([]byte("columns")); err != nil || m != Columns {
		t.Errorf("UnmarshalText(columns) = %v, %v", m, err)
	}
	if b, err := Raw.MarshalText(); err != nil || string(b) != "raw" {
		t.Errorf("MarshalText(Raw) = %s, %v", b, err)
	}
}

func TestParseUpsertURL(t *testing.T) {
	for _, tc := range []struct {
		query    string
		conflict string
		keyFrom  KeyFrom
		deletes  bool
		envelope Envelope
	}{
		{"mode=upsert", "", FromKey, true, NoEnvelope},
		{"mode=upsert&deletes=false", "", FromKey, false, NoEnvelope},
		{"mode=upsert&key_from=value", "", FromValue, false, NoEnvelope}, // tombstones cannot delete
		{"mode=upsert&key_from=value&deletes=false", "", FromValue, false, NoEnvelope},
		{"mode=upsert&key_from=%20Value&envelope=Debezium", "", FromValue, true, Debezium}, // deletes by before
		{"mode=upsert&key_from=value&envelope=debezium&deletes=true", "", FromValue, true, Debezium},
		{"mode=upsert&conflict=by_code&key_from=key&deletes=TRUE&envelope=none", "by_code", FromKey, true, NoEnvelope},
	} {
		c, err := parseURL("postgres://db/app?group=g&" + tc.query)
		if err != nil {
			t.Errorf("%s: %v", tc.query, err)
			continue
		}
		got := []any{c.mode, c.conflict, c.keyFrom, c.deletes, c.envelope}
		want := []any{Upsert, tc.conflict, tc.keyFrom, tc.deletes, tc.envelope}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: got %v, want %v", tc.query, got, want)
				break
			}
		}
	}
}

func TestParseUpsertURLErrors(t *testing.T) {
	for _, tc := range []struct{ query, says string }{
		{"mode=upsert&key_from=header", `key_from="header": want one of key, value`},
		{"mode=upsert&deletes=yes", `deletes="yes": want true or false`},
		{"mode=upsert&envelope=maxwell", `envelope="maxwell": want one of none, debezium`},
		{"mode=upsert&conflict=", `conflict="": want the name of a unique constraint`},
		{"mode=upsert&conflict=" + strings.Repeat("c", 64), "1 to 63"},
		{"mode=upsert&key_from=value&deletes=true", "deletes=true with key_from=value"},
		{"mode=columns&envelope=debezium", "envelope= is for mode=upsert, not mode=columns"},
		{"key_from=value", "key_from= is for mode=upsert, not mode=raw"},
		{"mode=columns&conflict=c", "conflict= is for mode=upsert"},
		{"mode=columns&deletes=false", "deletes= is for mode=upsert"},
		{"mode=upsert&deletes=true&deletes=false", "twice"},
	} {
		_, err := parseURL("postgres://db/app?group=g&" + tc.query)
		if !errors.Is(err, ErrURL) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want ErrURL saying %q", tc.query, err, tc.says)
		}
	}
}

func TestParseEvolve(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  Evolve
	}{
		{"mode=columns", NoEvolve},
		{"mode=columns&evolve=none", NoEvolve},
		{"mode=columns&evolve=add-columns", AddColumns},
		{"mode=upsert&evolve=%20Add-Columns", AddColumns},
		{"mode=upsert&envelope=debezium&evolve=none", NoEvolve},
	} {
		c, err := parseURL("postgres://db/app?group=g&" + tc.query)
		if err != nil {
			t.Errorf("%s: %v", tc.query, err)
			continue
		}
		if c.evolve != tc.want {
			t.Errorf("%s: evolve %v, want %v", tc.query, c.evolve, tc.want)
		}
		if strings.Contains(c.connString, "evolve") {
			t.Errorf("%s: evolve= reaches pgx: %s", tc.query, c.connString)
		}
	}
	for _, tc := range []struct{ query, says string }{
		{"mode=columns&evolve=add", `evolve="add": want one of none, add-columns`},
		{"mode=upsert&evolve=", `evolve="": want one of none, add-columns`},
		{"evolve=add-columns", "evolve= is for mode=columns or mode=upsert, not mode=raw"},
		{"mode=raw&evolve=none", "evolve= is for mode=columns or mode=upsert, not mode=raw"},
		{"mode=upsert&envelope=debezium&evolve=add-columns", "evolve=add-columns with envelope=debezium"},
		{"mode=columns&evolve=none&evolve=none", "twice"},
	} {
		_, err := parseURL("postgres://db/app?group=g&" + tc.query)
		if !errors.Is(err, ErrURL) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want ErrURL saying %q", tc.query, err, tc.says)
		}
	}
	var e Evolve
	if err := e.UnmarshalText([]byte("ADD-COLUMNS")); err != nil || e != AddColumns {
		t.Errorf("UnmarshalText(ADD-COLUMNS) = %v, %v", e, err)
	}
	if b, err := NoEvolve.MarshalText(); err != nil || string(b) != "none" {
		t.Errorf("MarshalText(NoEvolve) = %s, %v", b, err)
	}
}

func TestUpsertNames(t *testing.T) {
	for _, tc := range []struct {
		v    interface{ MarshalText() ([]byte, error) }
		want string
	}{{Upsert, "upsert"}, {FromKey, "key"}, {FromValue, "value"}, {NoEnvelope, "none"}, {Debezium, "debezium"}} {
		if b, err := tc.v.MarshalText(); err != nil || string(b) != tc.want {
			t.Errorf("MarshalText(%v) = %s, %v; want %s", tc.v, b, err, tc.want)
		}
	}
	var k KeyFrom
	if err := k.UnmarshalText([]byte("VALUE")); err != nil || k != FromValue {
		t.Errorf("UnmarshalText(VALUE) = %v, %v", k, err)
	}
	var e Envelope
	if err := e.UnmarshalText([]byte("cdc")); err == nil {
		t.Error("UnmarshalText(cdc): nil")
	}
}

// TestParams: the parameters the documentation's tables are generated from
// are the ones the parser accepts: each is taken (a bad value may be
// refused, never as unknown) and named when an unknown one is refused, and
// each is documented once.
func TestParams(t *testing.T) {
	seen := map[string]bool{}
	var names []string
	for _, p := range Params() {
		if p.Default == "" || p.Meaning == "" {
			t.Errorf("%s: default %q, meaning %q: want both", p.Name, p.Default, p.Meaning)
		}
		names = append(names, p.Name)
	}
	for _, p := range ConnParams() {
		if p.From != "libpq" && p.From != "pgx" && p.From != "pgxpool" {
			t.Errorf("%s: from %q, want libpq, pgx or pgxpool", p.Name, p.From)
		}
		names = append(names, p.Name)
	}
	_, unknown := parseURL("postgres://db/app?group=g&tabel=x")
	for _, name := range names {
		if seen[name] {
			t.Errorf("%s documented twice", name)
		}
		seen[name] = true
		if _, err := parseURL("postgres://db/app?group=g&mode=upsert&" + name + "=x"); err != nil && strings.Contains(err.Error(), "unknown parameter") {
			t.Errorf("%s=: %v, want it accepted", name, err)
		}
		if unknown == nil || !strings.Contains(unknown.Error(), name) {
			t.Errorf("the unknown-parameter error does not list %s: %v", name, unknown)
		}
	}
}
