package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks/builtin"
)

// TestBadInputPerCommand: bad input to every command, on the command line
// or in an OFFSETKEEPER_* variable, exits 2 at once with one line naming
// the flag (or the variable), the value and what is accepted. No case
// reaches etcd or Kafka: the endpoints are a closed loopback port.
func TestBadInputPerCommand(t *testing.T) {
	closed := harness.Refused(t)
	cluster := []string{"--etcd-endpoints", closed, "--brokers", closed, "--group", "g"}
	// with is cmd, then extra, then the cluster flags extra does not give
	// (list flags such as --brokers add up when given twice).
	with := func(cmd []string, extra ...string) []string {
		out := append(append([]string{}, cmd...), extra...)
		for i := 0; i < len(cluster); i += 2 {
			given := false
			for _, a := range extra {
				given = given || a == cluster[i] || strings.HasPrefix(a, cluster[i]+"=")
			}
			if !given {
				out = append(out, cluster[i], cluster[i+1])
			}
		}
		return out
	}
	run := func(extra ...string) []string {
		return with([]string{"run", "--topics", "t", "--sink", "discard:"}, extra...)
	}
	var (
		describe = func(extra ...string) []string { return with([]string{"offsets", "describe"}, extra...) }
		reset    = func(extra ...string) []string {
			return with([]string{"offsets", "reset", "--topic", "orders"}, extra...)
		}
		groups   = func(extra ...string) []string { return with([]string{"groups", "list"}, extra...) }
		replicas = func(extra ...string) []string { return with([]string{"replicas", "list"}, extra...) }
		drain    = func(extra ...string) []string { return with([]string{"replicas", "drain", "r1"}, extra...) }
		release  = func(extra ...string) []string { return with([]string{"claims", "release"}, extra...) }
		auditCmd = func(extra ...string) []string { return with([]string{"audit"}, extra...) }
	)
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want []string
		not  []string
	}{
		// The root, help and completion.
		{"unknown command", nil, []string{"nosuch"}, []string{`"nosuch"`, "want one of", "offsets"}, nil},
		{"mistyped command", nil, []string{"ofsets"}, []string{`"ofsets"`, `did you mean "offsets"`}, nil},
		{"help of an unknown command", nil, []string{"help", "nosuch"}, []string{`"nosuch"`, "want one of"}, nil},
		{"help of an unknown subcommand", nil, []string{"help", "offsets", "rewind"}, []string{`"rewind"`, "describe, import, reset"}, nil},
		{"completion of an unknown shell", nil, []string{"completion", "nosh"}, []string{`"nosh"`, "bash", "zsh"}, nil},
		{"mistyped flag", nil, run("--max-blok-rows", "5"), []string{"unknown flag: --max-blok-rows", "did you mean --max-block-rows"}, nil},

		// run.
		{"run empty --brokers", nil, run("--brokers", ""), []string{"--brokers is empty", "host:port"}, nil},
		{"run --brokers port out of range", nil, run("--brokers", "127.0.0.1:99999"), []string{`--brokers "127.0.0.1:99999"`, "1 to 65535"}, nil},
		{"run etcd scheme", nil, run("--etcd-endpoints", "ftp://x:1"), []string{`--etcd-endpoints "ftp://x:1"`, `"ftp"`, "https://host:port"}, nil},
		{"run etcd port out of range", nil, run("--etcd-endpoints", "127.0.0.1:99999"), []string{`--etcd-endpoints "127.0.0.1:99999"`, "1 to 65535"}, nil},
		{"run empty --replica-id", nil, run("--replica-id", ""), []string{"--replica-id is empty", "unique in the group", "host-pid"}, nil},
		{"run blank --replica-id from the environment", map[string]string{"OFFSETKEEPER_REPLICA_ID": " "}, run(), []string{"--replica-id is empty"}, nil},
		{"run --etcd-max-txn-ops 0", nil, run("--etcd-max-txn-ops", "0"), []string{"--etcd-max-txn-ops 0", "at least 4", "128"}, nil},
		{"run negative --shutdown-timeout", nil, run("--shutdown-timeout", "-1s"), []string{"--shutdown-timeout", "-1s", "positive"}, nil},
		{"run zero --fetch-max-wait", nil, run("--fetch-max-wait", "0"), []string{"--fetch-max-wait", "0s", "positive"}, nil},
		{"run unknown --value-format", nil, run("--value-format", "xml"), []string{"--value-format", `"xml"`, "json, bytes, avro, protobuf or json-schema"}, nil},
		{"run unknown OFFSETKEEPER_KEY_FORMAT", map[string]string{"OFFSETKEEPER_KEY_FORMAT": "avor"}, run(), []string{"OFFSETKEEPER_KEY_FORMAT", `"avor"`, "avro"}, nil},
		{"run avro without a registry", nil, run("--value-format", "avro"), []string{"--value-format avro", "--schema-registry"}, nil},
		{"run registry without a registry format", nil, run("--schema-registry", "http://127.0.0.1:8081"), []string{`--schema-registry "http://127.0.0.1:8081"`, "avro, protobuf or json-schema"}, nil},
		{"run registry scheme", nil, run("--value-format", "protobuf", "--schema-registry", "ftp://r:8081"), []string{`--schema-registry "ftp://r:8081"`, "http://host:port"}, nil},
		{"run registry credentials in the URL", nil, run("--value-format", "avro", "--schema-registry", "http://u:secret@r:8081"), []string{"--schema-registry", "--schema-registry-user"}, []string{"secret"}},
		{"run registry TLS over http", nil, run("--value-format", "avro", "--schema-registry", "http://r:8081", "--schema-registry-cacert", "go.mod"), []string{"--schema-registry-cacert"}, nil},
		{"run registry password without user", map[string]string{"OFFSETKEEPER_SCHEMA_REGISTRY_PASSWORD": "pw"}, run("--value-format", "avro", "--schema-registry", "http://r:8081"), []string{"OFFSETKEEPER_SCHEMA_REGISTRY_PASSWORD", "--schema-registry-user"}, []string{"pw"}},
		{"run zero --schema-registry-timeout", nil, run("--value-format", "avro", "--schema-registry", "http://r:8081", "--schema-registry-timeout", "0"), []string{"--schema-registry-timeout", "positive"}, nil},
		{"run zero --schema-cache-size", nil, run("--value-format", "avro", "--schema-registry", "http://r:8081", "--schema-cache-size", "0"), []string{"--schema-cache-size 0", "1 or more"}, nil},
		{"run unknown --on-decode-error", nil, run("--on-decode-error", "ignore"), []string{"--on-decode-error", `"ignore"`, "dead-letter, stop or skip"}, nil},
		{"run negative --lease-ttl", nil, run("--lease-ttl", "-5s"), []string{"--lease-ttl", "-5s"}, []string{"--max-block-rows", "--flush-interval"}},
		{"run zero --max-empty-polls", nil, run("--max-empty-polls", "0"), []string{"--max-empty-polls", "0"}, []string{"--lease-ttl", "--flush-interval"}},
		{"run bad --topics", nil, run("--topics", "bad topic!"), []string{"--topics", `"bad topic!"`, "A-Z a-z 0-9 . _ -"}, nil},
		{"run relative file sink", nil, run("--sink", "file://relative/dir"), []string{`--sink "file://relative/dir"`, "absolute", "file:///DIR"}, nil},
		{"run opaque file sink", nil, run("--sink", "file:data"), []string{`--sink "file:data"`, "absolute"}, nil},
		{"run clickhouse sink unknown parameter", nil, run("--sink", "clickhouse://u:secret@ch:9000/db?tabel=t"),
			[]string{"--sink", "clickhouse", `unknown parameter "tabel"`, "table"}, []string{"secret"}},
		{"run postgres password with #", nil, run("--sink", "postgres://app:12#secret@db:5432/orders?table=t"),
			[]string{"'#'", "fragment", "table=", "%23", "$PGPASSWORD"}, []string{"12#secret", "secret"}},
		{"run postgres password with # and letters", nil, run("--sink", "postgres://app:pa#secret@db/orders"),
			[]string{"percent-encoded", "# as %23", "$PGPASSWORD"}, []string{"secret", ":pa"}},
		{"run postgres password with /", nil, run("--sink", "postgres://app:pa/secret@db/orders"),
			[]string{"percent-encoded", "/ as %2F", "passfile="}, []string{"secret"}},
		{"run clickhouse password with #", nil, run("--sink", "clickhouse://app:12#secret@ch/db"),
			[]string{"'#'", "%23", "$OFFSETKEEPER_CLICKHOUSE_PASSWORD", "password_file="}, []string{"secret"}},
		{"run clickhouse sink bad mode", nil, run("--sink", "clickhouse://ch:9000/db?mode=upsert"),
			[]string{"--sink", `mode="upsert"`, "raw, columns"}, nil},
		{"run bad bool", nil, run("--mirror-offsets=maybe"), []string{`--mirror-offsets "maybe"`, "true or false"}, []string{"strconv"}},
		{"run bad int", nil, run("--max-block-rows", "many"), []string{`--max-block-rows "many"`, "whole number"}, []string{"strconv"}},
		{"run bad duration", nil, run("--flush-interval", "soon"), []string{`--flush-interval "soon"`, "500ms"}, []string{"time:"}},
		{"run bad size", nil, run("--max-block-bytes", "lots"), []string{`--max-block-bytes "lots"`, "MiB"}, nil},
		{"run bad --commit-mode", nil, run("--commit-mode", "never"), []string{`--commit-mode "never"`, "after-write or every-batch"}, nil},
		{"run empty --kafka-client-id", nil, run("--kafka-client-id", ""), []string{"--kafka-client-id is empty"}, nil},
		{"run bad --log-level", nil, run("--log-level", "loud"), []string{`--log-level "loud"`, "debug, info, warn or error"}, nil},
		{"run bad variable", map[string]string{"OFFSETKEEPER_MIRROR_OFFSETS": "maybe"}, run(),
			[]string{`OFFSETKEEPER_MIRROR_OFFSETS="maybe"`, "--mirror-offsets", "true or false"}, []string{"strconv"}},
		{"run bad duration variable", map[string]string{"OFFSETKEEPER_FLUSH_INTERVAL": "5"}, run(),
			[]string{`OFFSETKEEPER_FLUSH_INTERVAL="5"`, "--flush-interval", "a duration with a unit"}, nil},
		{"mistyped variable", map[string]string{"OFFSETKEEPER_GRUOP": "orders"}, run(),
			[]string{"OFFSETKEEPER_GRUOP", "did you mean OFFSETKEEPER_GROUP?"}, nil},

		// dev.
		{"dev bad --topic", nil, []string{"dev", "--topic", "bad topic"}, []string{"--topic", `"bad topic"`, "A-Z a-z 0-9 . _ -"}, nil},
		{"dev bad --replicas", nil, []string{"dev", "--replicas", "x"}, []string{`--replicas "x"`, "whole number"}, nil},
		{"dev bad --seed", nil, []string{"dev", "--seed", "-1"}, []string{`--seed "-1"`, "0 or more"}, nil},
		{"dev unknown fault", nil, []string{"dev", "--chaos", "--faults", "kill,meteor"},
			[]string{`--faults "kill,meteor"`, `unknown fault "meteor"`, "kill, zombie, leader, etcd-cut, kafka-cut, reset, release, drain"}, nil},
		{"dev empty fault", nil, []string{"dev", "--chaos", "--faults", ""}, []string{`--faults ""`, `unknown fault ""`}, nil},
		{"dev --faults without --chaos", nil, []string{"dev", "--faults", "kill"}, []string{`--faults "kill"`, "only with --chaos"}, nil},
		{"dev zero --duration", nil, []string{"dev", "--chaos", "--duration", "0s"}, []string{"--duration 0s", "positive"}, nil},
		{"dev negative --duration", nil, []string{"dev", "--duration", "-5s"}, []string{"--duration -5s", "positive"}, nil},
		{"dev --duration past --timeout", nil, []string{"dev", "--chaos", "--duration", "2m", "--timeout", "1m"}, []string{"--duration 2m0s", "--timeout 1m0s"}, nil},

		// offsets describe.
		{"describe bad --topics", nil, describe("--topics", "a b"), []string{"--topics", `"a b"`}, nil},
		{"describe bad -o", nil, describe("-o", "yaml"), []string{`-o "yaml"`, "table or json"}, nil},
		{"describe bad -o variable", map[string]string{"OFFSETKEEPER_OUTPUT": "yaml"}, describe(), []string{`OFFSETKEEPER_OUTPUT="yaml"`, "table or json"}, nil},
		{"describe zero --kafka-timeout", nil, describe("--kafka-timeout", "0s"), []string{"--kafka-timeout 0s", "positive"}, nil},
		{"describe without --group", nil, []string{"offsets", "describe", "--etcd-endpoints", closed}, []string{"--group is required"}, nil},

		// offsets reset.
		{"reset --by-duration before 1970", nil, reset("--by-duration", "P21000D"), []string{`--by-duration "P21000D"`, "before 1970"}, nil},
		{"reset --to-datetime before 1970", nil, reset("--to-datetime", "1969-01-01T00:00:00Z"), []string{`"1969-01-01T00:00:00Z"`, "before 1970"}, nil},
		{"reset --to-offset not a number", nil, reset("--to-offset", "x"), []string{`--to-offset "x"`, "integer 0 or more"}, nil},
		{"reset --shift-by not a number", nil, reset("--shift-by", "back"), []string{`--shift-by "back"`, "an integer"}, nil},
		{"reset --to-offset from a variable", map[string]string{"OFFSETKEEPER_TO_OFFSET": "x"}, reset(), []string{`OFFSETKEEPER_TO_OFFSET="x"`, "integer 0 or more"}, nil},
		{"reset bad etcd endpoint", nil, reset("--to-earliest", "--etcd-endpoints", "ftp://x:1"), []string{`"ftp://x:1"`}, nil},

		// groups list, replicas list: etcd only.
		{"groups bad etcd endpoint", nil, groups("--etcd-endpoints", "127.0.0.1:99999"), []string{`"127.0.0.1:99999"`, "1 to 65535"}, nil},
		{"groups zero --etcd-timeout", nil, groups("--etcd-timeout", "0s"), []string{"--etcd-timeout 0s", "positive"}, nil},
		{"replicas bad --output", nil, replicas("--output", "wide"), []string{`-o "wide"`, "table or json"}, nil},
		{"replicas bad --group", nil, replicas("--group", "a/b"), []string{`"a/b"`}, nil},

		// replicas drain.
		{"drain without a replica", nil, with([]string{"replicas", "drain"}), []string{"one replica ID", "replicas list"}, nil},
		{"drain zero --timeout", nil, drain("--timeout", "0s"), []string{"--timeout 0s", "positive"}, nil},
		{"drain zero --etcd-timeout", nil, drain("--etcd-timeout", "0s"), []string{"--etcd-timeout 0s"}, nil},

		// claims release.
		{"release without --topic", nil, release("--partition", "1"), []string{"--topic is required"}, nil},
		{"release without --partition", nil, release("--topic", "orders"), []string{"--partition is required", "--topic orders:0"}, []string{"-1"}},
		{"release negative --partition", nil, release("--topic", "orders", "--partition", "-1"), []string{"--partition -1", "0 or more"}, nil},
		{"release bad TOPIC:P", nil, release("--topic", "orders:x"), []string{`--topic "orders:x"`, `partition "x"`}, nil},
		{"release TOPIC:P and --partition", nil, release("--topic", "orders:1", "--partition", "2"), []string{`--topic "orders:1" and --partition 2 conflict`}, nil},
		{"release bad topic", nil, release("--topic", "a b", "--partition", "0"), []string{`"a b"`, "A-Z a-z 0-9 . _ -"}, nil},
		{"release zero --etcd-timeout", nil, release("--topic", "orders:1", "--etcd-timeout", "0s"), []string{"--etcd-timeout 0s"}, nil},

		// audit: the sinks that keep nothing it can read, and bad URLs and scopes.
		{"audit without --sink", nil, auditCmd(), []string{"--sink is required", "file:///DIR"}, nil},
		{"audit stdout sink", nil, auditCmd("--sink", "stdout:"), []string{`sink URL "stdout:" cannot be audited`, "want file:///DIR, postgres://… or clickhouse://…"}, nil},
		{"audit discard sink", nil, auditCmd("--sink", "discard:"), []string{`sink URL "discard:" cannot be audited`}, nil},
		{"audit bad clickhouse URL", nil, auditCmd("--sink", "clickhouse://u:secret@h:9000/db?mode=sideways"), []string{"sideways"}, []string{"secret"}},
		{"audit relative file sink", nil, auditCmd("--sink", "file://data/x"), []string{`--sink "file://data/x"`, "absolute"}, nil},
		{"audit unknown scheme", nil, auditCmd("--sink", "s3://b/k"), []string{`"s3"`, "want"}, nil},
		{"audit bad postgres mode", nil, auditCmd("--sink", "postgres://u@h/db?mode=sideways"), []string{"sideways", "raw"}, nil},
		{"audit bad --topic", nil, auditCmd("--sink", "file:///data", "--topic", "orders:x"), []string{`--topic "orders:x"`, `partition "x"`}, nil},
		{"audit bad -o", nil, auditCmd("--sink", "file:///data", "-o", "yaml"), []string{"yaml", "table", "json"}, nil},
		{"audit zero --kafka-timeout", nil, auditCmd("--sink", "file:///data", "--kafka-timeout", "0s"), []string{"--kafka-timeout 0s"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			skipDevWithoutDev(t, tc.args)
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

// TestUnknownVariables: an OFFSETKEEPER_* variable no command reads and no
// near miss of one is warned of, and the command goes on; the variables
// Kubernetes makes of a Service named offsetkeeper are ignored.
func TestUnknownVariables(t *testing.T) {
	closed := harness.Refused(t)
	args := []string{"groups", "list", "--etcd-endpoints", closed}
	for _, tc := range []struct {
		env  map[string]string
		warn bool
	}{
		{map[string]string{"OFFSETKEEPER_COLOUR_SCHEME": "dark"}, true},
		{map[string]string{
			"OFFSETKEEPER_PORT":                 "tcp://10.0.0.1:9464",
			"OFFSETKEEPER_PORT_9464_TCP":        "tcp://10.0.0.1:9464",
			"OFFSETKEEPER_PORT_9464_TCP_ADDR":   "10.0.0.1",
			"OFFSETKEEPER_PORT_9464_TCP_PORT":   "9464",
			"OFFSETKEEPER_PORT_9464_TCP_PROTO":  "tcp",
			"OFFSETKEEPER_SERVICE_HOST":         "10.0.0.1",
			"OFFSETKEEPER_SERVICE_PORT":         "9464",
			"OFFSETKEEPER_SERVICE_PORT_METRICS": "9464",
			"OFFSETKEEPER_METRICS_SERVICE_HOST": "10.0.0.2",
			"OFFSETKEEPER_METRICS_PORT_80_TCP":  "tcp://10.0.0.2:80",
			"OFFSETKEEPER_METRICS_SERVICE_PORT": "80",
		}, false},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		r := runCLI(t, 5*time.Second, args...)
		// Past the environment: the command ran, and etcd refused it.
		if r.code != exitError || !strings.Contains(r.stderr, "refused") {
			t.Fatalf("%v: exit %d, want 1 (etcd refused)\nstderr: %s", tc.env, r.code, r.stderr)
		}
		warned := strings.Count(r.stderr, "Warning: environment variable")
		switch {
		case tc.warn && warned != 1:
			t.Errorf("%v: %d warnings, want 1\nstderr: %s", tc.env, warned, r.stderr)
		case !tc.warn && warned != 0:
			t.Errorf("%v: warned of service links\nstderr: %s", tc.env, r.stderr)
		}
		for k := range tc.env {
			os.Unsetenv(k)
		}
	}
}

// TestRefusedEtcdFailsAtOnce: an etcd port that refuses connections fails an
// operator command at once (exit 1), saying so, not after --etcd-timeout.
func TestRefusedEtcdFailsAtOnce(t *testing.T) {
	closed := harness.Refused(t)
	cluster := []string{"--etcd-endpoints", closed + ",http://" + closed, "--brokers", closed, "--group", "g", "--etcd-timeout", "30s"}
	for _, args := range [][]string{
		{"groups", "list"},
		{"replicas", "list"},
		{"offsets", "describe"},
		{"offsets", "reset", "--topic", "orders", "--to-earliest"},
		{"replicas", "drain", "r1"},
		{"claims", "release", "--topic", "orders:" + strconv.Itoa(0)},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			start := time.Now()
			r := runCLI(t, 10*time.Second, append(args, cluster...)...)
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("took %s with --etcd-timeout 30s: a refused connection must fail at once", d)
			}
			if r.code != exitError || !strings.Contains(r.stderr, "refused") || !strings.Contains(r.stderr, closed) {
				t.Errorf("exit %d, stderr %q; want 1 saying etcd at %s refused the connection", r.code, r.stderr, closed)
			}
		})
	}
}

// TestVariableOfAnotherCommand: a variable another command reads is
// ignored without a word (environments are shared), unless it is a near
// miss of one this command reads: OFFSETKEEPER_TOPIC for run, which reads
// --topics, was ignored silently.
func TestVariableOfAnotherCommand(t *testing.T) {
	root := newRootCommand(builtin.Sinks())
	for _, tc := range []struct {
		cmd, env, want string
	}{
		{"run", "OFFSETKEEPER_TOPIC=orders", `OFFSETKEEPER_TOPIC: "offsetkeeper run" does not read it (another command does), ignored; did you mean OFFSETKEEPER_TOPICS?`},
		{"run", "OFFSETKEEPER_EXECUTE=true", ""},
		{"offsets describe", "OFFSETKEEPER_SINK=stdout:", ""},
	} {
		c, _, err := root.Find(strings.Fields(tc.cmd))
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		c.SetErr(&stderr)
		if err := unknownEnv(c, []string{tc.env}); err != nil {
			t.Errorf("%s with %s: %v", tc.cmd, tc.env, err)
		}
		if got := strings.TrimSpace(stderr.String()); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s with %s: stderr %q, want %q", tc.cmd, tc.env, got, tc.want)
		}
	}
}
