package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"127.0.0.1:2379", "127.0.0.1:2379"},
		{"http://etcd:2379", "http://etcd:2379"},
		{"https://root:s3cret@etcd:2379", "https://xxxxx@etcd:2379"},
		{"https://tok3n@etcd:2379", "https://xxxxx@etcd:2379"},
		{"postgres://app:pw@db:5432/offsets?sslmode=require", "postgres://xxxxx@db:5432/offsets?sslmode=require"},
		{"postgres://db/offsets?password=pw&sslmode=disable", "postgres://db/offsets?password=xxxxx&sslmode=disable"},
		{"postgres://db/x?sslkey=/k&api_token=t&client_secret=c", "postgres://db/x?api_token=xxxxx&client_secret=xxxxx&sslkey=xxxxx"},
		{"root:s3cret@etcd:2379", "xxxxx@etcd:2379"},
		{"file:///var/lib/ok", "file:///var/lib/ok"},
		{"discard:", "discard:"},
	}
	for _, tc := range tests {
		got := URL(tc.in)
		if got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		for _, secret := range []string{"s3cret", "tok3n", ":pw@", "=pw", "=t&", "=c"} {
			if strings.Contains(tc.in, secret) && strings.Contains(got, secret) {
				t.Errorf("URL(%q) = %q still holds %q", tc.in, got, secret)
			}
		}
	}
	if got := strings.Join(URLs([]string{"http://u:p@a:1", "b:2"}), ","); got != "http://xxxxx@a:1,b:2" {
		t.Errorf("redactURLs: %q", got)
	}
}

// TestSink: a sink URL in a message shows the user and masks the
// password, parsable or not.
func TestSink(t *testing.T) {
	for raw, want := range map[string]string{
		"postgres://app:s3cret@db:5432/shop?table=t":        "postgres://app:xxxxx@db:5432/shop?table=t",
		"postgres://app@db/shop":                            "postgres://app@db/shop",
		"clickhouse://default:s3cret@ch:9000/db":            "clickhouse://default:xxxxx@ch:9000/db",
		"postgres://app:s3cret@db:port/shop":                "postgres://app:xxxxx@db:port/shop",
		"postgres://app@db/shop?sslpassword=s3cret":         "postgres://app@db/shop?sslpassword=xxxxx",
		"clickhouse://ch/db?password_file=%2Frun%2Fs3cret":  "clickhouse://ch/db?password_file=xxxxx",
		"file:///var/lib/offsetkeeper":                      "file:///var/lib/offsetkeeper",
		"postgres://app:p%40ss%3As3cret@db/shop?mode=raw":   "postgres://app:xxxxx@db/shop?mode=raw",
		"postgres://app:s3cret@db/shop?tabel=x&table=y#frg": "postgres://app:xxxxx@db/shop?tabel=x&table=y#frg",
	} {
		if got := Sink(raw); got != want {
			t.Errorf("Sink(%q) = %q, want %q", raw, got, want)
		}
	}
}
