package docs

import (
	"strings"
	"testing"
)

// The shape check passes what differs only in numbers, blanks, row order
// and elided text, and catches the rest.
func TestCheckOutput(t *testing.T) {
	shown := []string{
		"etcd:    127.0.0.1:38929",
		"TOPIC   PARTITION  OWNER  IN-FLIGHT",
		"events  0          dev-3  -",
		"events  1          dev-1  -",
		"dry run: nothing changed; add --execute to apply this plan",
		"Error: environment variable X: no command reads it (...)",
	}
	for _, tc := range []struct {
		name    string
		printed string
		want    string // in the error; "" for none
	}{
		{"same shape", `etcd:    127.0.0.1:41234
progress=1 left out by the page
TOPIC   PARTITION  OWNER  IN-FLIGHT
events  1          dev-2  -
events  0          dev-1  -
dry run: nothing changed; add --execute to apply this plan
Error: environment variable X: no command reads it (each flag --NAME is read from OFFSETKEEPER_NAME)`, ""},
		{"a column renamed", `etcd: 127.0.0.1:1
TOPIC   PARTITION  OWNER  INFLIGHT
events  0          dev-3  -
events  1          dev-1  -
dry run: nothing changed; add --execute to apply this plan
Error: environment variable X: no command reads it ()`, "no table with the header"},
		{"a row more", `etcd: 127.0.0.1:1
TOPIC   PARTITION  OWNER  IN-FLIGHT
events  0          dev-3  -
events  1          dev-1  -
events  2          dev-1  -
dry run: nothing changed; add --execute to apply this plan
Error: environment variable X: no command reads it ()`, "3 rows, the page shows 2"},
		{"a row of another shape", `etcd: 127.0.0.1:1
TOPIC   PARTITION  OWNER  IN-FLIGHT
events  0          dev-3  [2000, 2500)
events  1          dev-1  -
dry run: nothing changed; add --execute to apply this plan
Error: environment variable X: no command reads it ()`, "a row like"},
		{"a line reworded", `etcd: 127.0.0.1:1
TOPIC   PARTITION  OWNER  IN-FLIGHT
events  0          dev-3  -
events  1          dev-1  -
dry run: nothing done; add --execute to apply this plan
Error: environment variable X: no command reads it ()`, `no line like "dry run`},
		{"lines out of order", `TOPIC   PARTITION  OWNER  IN-FLIGHT
events  0          dev-3  -
events  1          dev-1  -
etcd: 127.0.0.1:1
dry run: nothing changed; add --execute to apply this plan
Error: environment variable X: no command reads it ()`, "no table with the header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkOutput(shown, tc.printed)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("passed, want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q, want one with %q", err, tc.want)
			}
		})
	}
}

// What the parser refuses: each would hide an example from the test or a
// reason from the reader.
func TestParsePage(t *testing.T) {
	for _, tc := range []struct {
		name, page string
		want       string // in the error; "" for none
	}{
		{"markers", "text\n\n<!-- not run \"docker\": no engine -->\n<!-- while running: offsetkeeper dev --hold -->\n```sh\ndocker ps\ncurl x\n```\n", ""},
		{"no language", "text\n\n```\n$ offsetkeeper groups list\n```\n", "without a language"},
		{"indented block", "text\n\n    offsetkeeper groups list\n", "indented code block"},
		{"list continuation", "- item\n\n    more of the item\n", ""},
		{"multi-line comment", "<!-- generated:\n     by a test -->\ntext\n", ""},
		{"stray marker", "<!-- not run: why -->\ntext\n", "not just above a code block"},
		{"marker with a blank line", "<!-- not run: why -->\n\n```sh\nx\n```\n", "not just above a code block"},
		{"misspelt marker", "<!-- notrun: why -->\n```sh\nx\n```\n", "malformed marker"},
		{"unclosed", "```sh\nx\n", "never closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			blocks, err := parsePage("p.md", tc.page)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("passed, want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q, want one with %q", err, tc.want)
			}
			if tc.name == "markers" {
				b := blocks[0]
				cmds, _ := b.commands()
				if b.while != "offsetkeeper dev --hold" || len(cmds) != 2 {
					t.Fatalf("block %+v, commands %+v", b, cmds)
				}
				if _, skip := b.skipped(cmds[0]); !skip {
					t.Error("docker ps is run")
				}
				if _, skip := b.skipped(cmds[1]); skip {
					t.Error("curl x is not run")
				}
			}
		})
	}
}

// Console blocks: `$ ` lines are commands, the lines under them their
// output; continuation lines join their command.
func TestCommands(t *testing.T) {
	b := block{page: "p.md", line: 1, lang: "console", body: []string{
		"$ offsetkeeper run --a \\",
		"  --b",
		"Error: x",
		"$ echo $?",
		"2",
		"",
	}}
	cmds, err := b.commands()
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 2 || cmds[0].text != "offsetkeeper run --a \\\n  --b" || strings.Join(cmds[0].output, "|") != "Error: x" || cmds[1].output[0] != "2" {
		t.Fatalf("commands %+v", cmds)
	}
	if got := expectedStatus(cmds, 0); got != 2 {
		t.Errorf("status %d, want the 2 of echo $?", got)
	}
}

// What is checked of a command that is not run: its sink URLs parse, and
// its offsetkeeper flags exist.
func TestNotRunChecks(t *testing.T) {
	for _, tc := range []struct {
		text string
		want string // in a problem; "" for none
	}{
		{"offsetkeeper run ... --group orders --sink 'postgres://app@db:5432/shop?sslmode=require&table=orders_raw'", ""},
		{"helm install x --set sink='postgres://app@db/shop?tabel=orders'", "tabel"},
		{"offsetkeeper run --sink 'clickhouse://ch:9000/shop?mode=sideways'", "sideways"},
		{"docker compose exec offsetkeeper-1 offsetkeeper replicas list -o json", ""},
		{"docker compose exec offsetkeeper-1 offsetkeeper replicas list --wide", "offsetkeeper replicas list has no flag --wide"},
		{"kubectl exec deploy/offsetkeeper -- offsetkeeper offsets describe --topics t   # a --comment", ""},
		{"offsetkeeper run --group g \\\n  --kafka-sasl-mechanism plain --etcd-pasword-file /x", "offsetkeeper run has no flag --etcd-pasword-file"},
		{"kubectl create secret generic offsetkeeper-secrets --from-literal=a=b", ""},
	} {
		got := strings.Join(append(badURLs(tc.text), badFlags(tc.text)...), "\n")
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s:\n%q, want %q", tc.text, got, tc.want)
		}
	}
}
