package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// No Docker engine runs where the tests do, so docker-compose.yml, the
// Dockerfile and the README's walk-through are checked as data: every
// offsetkeeper command line must pass the CLI's own parsing and validation
// (a dry run, with the service's environment), and the services must name
// each other consistently.

const (
	composePath      = "../../docker-compose.yml"
	dockerfilePath   = "../../Dockerfile"
	dockerignorePath = "../../.dockerignore"
	readmePath       = "../../README.md"
	goModPath        = "../../go.mod"
)

// composeProject is the part of a compose file these tests read.
type composeProject struct {
	Services map[string]composeService `json:"services"`
}

type composeService struct {
	Image       string          `json:"image"`
	Build       json.RawMessage `json:"build"`
	Hostname    string          `json:"hostname"`
	Entrypoint  cmdLine         `json:"entrypoint"`
	Command     cmdLine         `json:"command"`
	Environment envVars         `json:"environment"`
	DependsOn   dependsOn       `json:"depends_on"`
	Restart     string          `json:"restart"`
	Ports       []string        `json:"ports"`
	Healthcheck *struct {
		Test cmdLine `json:"test"`
	} `json:"healthcheck"`
}

// cmdLine is a command or entrypoint: a list, or a string split at blanks.
type cmdLine []string

func (c *cmdLine) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*c = strings.Fields(s)
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("command: want a string or a list of strings: %w", err)
	}
	*c = l
	return nil
}

// envVars is an environment: a mapping of scalars or a list of K=V.
type envVars map[string]string

func (e *envVars) UnmarshalJSON(b []byte) error {
	out := envVars{}
	var m map[string]any
	if json.Unmarshal(b, &m) == nil {
		for k, v := range m {
			if v != nil {
				out[k] = fmt.Sprint(v)
			} else {
				out[k] = ""
			}
		}
		*e = out
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("environment: want a mapping or a list of K=V: %w", err)
	}
	for _, kv := range l {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	*e = out
	return nil
}

// dependsOn maps each service depended on to its condition: a list of
// names or a mapping of name to {condition}.
type dependsOn map[string]string

func (d *dependsOn) UnmarshalJSON(b []byte) error {
	out := dependsOn{}
	var l []string
	if json.Unmarshal(b, &l) == nil {
		for _, s := range l {
			out[s] = "service_started"
		}
		*d = out
		return nil
	}
	var m map[string]struct {
		Condition string `json:"condition"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("depends_on: want a list or a mapping: %w", err)
	}
	for k, v := range m {
		if v.Condition == "" {
			v.Condition = "service_started"
		}
		out[k] = v.Condition
	}
	*d = out
	return nil
}

func (s composeService) isOffsetkeeper() bool {
	return len(s.Build) > 0 || strings.HasPrefix(s.Image, "offsetkeeper")
}
func (s composeService) isEtcd() bool { return len(s.Command) > 0 && path.Base(s.Command[0]) == "etcd" }
func (s composeService) isKafka() bool {
	_, ok := s.Environment["KAFKA_PROCESS_ROLES"]
	return ok
}
func (s composeService) isPostgres() bool { return strings.HasPrefix(s.Image, "postgres:") }

// script is the service's entrypoint and command as one line.
func (s composeService) script() string {
	return strings.Join(append(slices.Clone(s.Entrypoint), s.Command...), " ")
}

func loadCompose(t *testing.T) composeProject {
	t.Helper()
	raw, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(raw) // resolves anchors and << merges
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	var p composeProject
	if err := json.Unmarshal(j, &p); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(p.Services) == 0 {
		t.Fatal("docker-compose.yml has no services")
	}
	return p
}

// argValue is the value of flag name in args, as --name=value or --name
// value.
func argValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// argValues are all the values of flag name in a shell script.
func argValues(script, name string) []string {
	var out []string
	for _, m := range regexp.MustCompile(regexp.QuoteMeta(name)+`[ =]+([^\s"']+)`).FindAllStringSubmatch(script, -1) {
		out = append(out, m[1])
	}
	return out
}

// withEnv makes env the only OFFSETKEEPER_* variables until the test ends.
func withEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OFFSETKEEPER_") {
			t.Setenv(k, "") // restores the old value at the end
			if err := os.Unsetenv(k); err != nil {
				t.Fatal(err)
			}
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// hostPort splits an address or a URL's host:port; the port must be given.
func hostPort(t *testing.T, what, addr string) (string, string) {
	t.Helper()
	if _, rest, ok := strings.Cut(addr, "://"); ok {
		addr = strings.TrimSuffix(rest, "/")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	return host, port
}

// composeAddrs are what the services listen on, as host:port with the host
// a service name: etcd members' client URLs, the Kafka listeners
// advertised to clients, PostgreSQL.
type composeAddrs struct {
	etcd     map[string]string // host:port → service
	kafka    map[string]string
	postgres map[string]string
}

func (p composeProject) addrs(t *testing.T) composeAddrs {
	t.Helper()
	a := composeAddrs{etcd: map[string]string{}, kafka: map[string]string{}, postgres: map[string]string{}}
	for name, s := range p.Services {
		switch {
		case s.isEtcd():
			adv, ok := argValue(s.Command, "--advertise-client-urls")
			if !ok {
				t.Fatalf("%s: no --advertise-client-urls", name)
			}
			listen, _ := argValue(s.Command, "--listen-client-urls")
			for _, u := range strings.Split(adv, ",") {
				host, port := hostPort(t, name+" --advertise-client-urls", u)
				if host != name {
					t.Errorf("%s advertises its client URL %s on host %q, not its service name", name, u, host)
				}
				if !strings.Contains(listen, ":"+port) {
					t.Errorf("%s advertises port %s but listens on %s", name, port, listen)
				}
				a.etcd[net.JoinHostPort(host, port)] = name
			}
		case s.isKafka():
			listeners := s.Environment["KAFKA_LISTENERS"]
			for _, l := range strings.Split(s.Environment["KAFKA_ADVERTISED_LISTENERS"], ",") {
				lname, _, _ := strings.Cut(l, "://")
				host, port := hostPort(t, name+" KAFKA_ADVERTISED_LISTENERS", l)
				if host != name {
					t.Errorf("%s advertises listener %s on host %q, not its service name", name, l, host)
				}
				if !strings.Contains(listeners, lname+"://:"+port) && !strings.Contains(listeners, lname+"://0.0.0.0:"+port) {
					t.Errorf("%s advertises %s but KAFKA_LISTENERS is %q", name, l, listeners)
				}
				a.kafka[net.JoinHostPort(host, port)] = name
			}
			for _, v := range strings.Split(s.Environment["KAFKA_CONTROLLER_QUORUM_VOTERS"], ",") {
				id, addr, _ := strings.Cut(v, "@")
				if host, _ := hostPort(t, name+" KAFKA_CONTROLLER_QUORUM_VOTERS", addr); host != name || id != s.Environment["KAFKA_NODE_ID"] {
					t.Errorf("%s: voter %s is not this broker (KAFKA_NODE_ID %s)", name, v, s.Environment["KAFKA_NODE_ID"])
				}
			}
		case s.isPostgres():
			port := s.Environment["PGPORT"]
			if port == "" {
				port = "5432"
			}
			a.postgres[net.JoinHostPort(name, port)] = name
		}
	}
	if len(a.etcd) == 0 || len(a.kafka) == 0 || len(a.postgres) == 0 {
		t.Fatalf("docker-compose.yml lacks etcd (%v), Kafka (%v) or PostgreSQL (%v)", a.etcd, a.kafka, a.postgres)
	}
	return a
}

// dependsOnAll is every service name reaches through depends_on.
func (p composeProject) dependsOnAll(name string) map[string]bool {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(n string) {
		for d := range p.Services[n].DependsOn {
			if !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(name)
	return seen
}

func TestComposeServicesReferToEachOther(t *testing.T) {
	p := loadCompose(t)
	p.addrs(t) // checks the addresses each service advertises

	roles := map[string]int{}
	hostPorts := map[string]string{}
	for name, s := range p.Services {
		switch {
		case s.isOffsetkeeper():
			roles["offsetkeeper"]++
		case s.isEtcd():
			roles["etcd"]++
		case s.isKafka():
			roles["kafka"]++
		case s.isPostgres():
			roles["postgres"]++
		}
		if s.Hostname != "" && s.Hostname != name {
			t.Errorf("%s has hostname %q: other services reach it by its service name", name, s.Hostname)
		}
		for d, cond := range s.DependsOn {
			dep, ok := p.Services[d]
			switch {
			case !ok:
				t.Errorf("%s depends on %q, which is no service", name, d)
			case d == name:
				t.Errorf("%s depends on itself", name)
			case cond == "service_healthy" && dep.Healthcheck == nil:
				t.Errorf("%s waits for %s to be healthy, which has no healthcheck", name, d)
			case cond == "service_completed_successfully" && dep.Restart != "no":
				t.Errorf("%s waits for %s to complete, which restarts (restart %q): make it restart \"no\"", name, d, dep.Restart)
			case cond != "service_started" && cond != "service_healthy" && cond != "service_completed_successfully":
				t.Errorf("%s depends on %s with condition %q", name, d, cond)
			}
		}
		if p.dependsOnAll(name)[name] {
			t.Errorf("%s depends on itself through others", name)
		}
		for _, port := range s.Ports {
			parts := strings.Split(port, ":")
			if len(parts) < 2 {
				continue
			}
			host := strings.Join(parts[:len(parts)-1], ":")
			if other, ok := hostPorts[host]; ok {
				t.Errorf("%s and %s both publish host port %s", name, other, host)
			}
			hostPorts[host] = name
		}
	}
	for role, want := range map[string]int{"offsetkeeper": 3, "etcd": 3, "kafka": 1, "postgres": 1} {
		if roles[role] != want {
			t.Errorf("%d %s services, want %d", roles[role], role, want)
		}
	}

	// The etcd members form one cluster.
	var members []string
	peers := map[string]string{}
	clusters := map[string]bool{}
	for name, s := range p.Services {
		if !s.isEtcd() {
			continue
		}
		members = append(members, name)
		if n, _ := argValue(s.Command, "--name"); n != name {
			t.Errorf("%s: --name %q, want its service name", name, n)
		}
		peer, _ := argValue(s.Command, "--initial-advertise-peer-urls")
		if host, _ := hostPort(t, name+" --initial-advertise-peer-urls", peer); host != name {
			t.Errorf("%s advertises its peer URL on host %q, not its service name", name, host)
		}
		peers[name] = peer
		ic, _ := argValue(s.Command, "--initial-cluster")
		tok, _ := argValue(s.Command, "--initial-cluster-token")
		clusters[ic+" "+tok] = true
	}
	slices.Sort(members)
	var want []string
	for _, m := range members {
		want = append(want, m+"="+peers[m])
	}
	for c := range clusters {
		ic, _, _ := strings.Cut(c, " ")
		got := strings.Split(ic, ",")
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("--initial-cluster %s, want the members %s", ic, strings.Join(want, ","))
		}
	}
	if len(clusters) != 1 {
		t.Errorf("the etcd members disagree on --initial-cluster or --initial-cluster-token: %v", clusters)
	}
}

// composeTopics are the topics the jobs create (kafka-topics.sh --create).
func (p composeProject) composeTopics() map[string]string {
	out := map[string]string{}
	for name, s := range p.Services {
		if sc := s.script(); strings.Contains(sc, "kafka-topics") && strings.Contains(sc, "--create") {
			for _, topic := range argValues(sc, "--topic") {
				out[topic] = name
			}
		}
	}
	return out
}

// Every offsetkeeper command line of the compose file passes the CLI's
// parsing and validation with its service's environment, and what it names
// (etcd members, brokers, the PostgreSQL sink, topics) is in the file.
func TestComposeOffsetkeeperCommandsAreValid(t *testing.T) {
	p := loadCompose(t)
	addrs := p.addrs(t)
	topics := p.composeTopics()
	if len(topics) == 0 {
		t.Fatal("no service creates a topic (kafka-topics.sh --create --topic ...)")
	}
	for name, s := range p.Services {
		for _, a := range argValues(s.script(), "--bootstrap-server") {
			if _, ok := addrs.kafka[a]; !ok {
				t.Errorf("%s: --bootstrap-server %s is not an advertised Kafka listener %v", name, a, addrs.kafka)
			}
		}
		if sc := s.script(); strings.Contains(sc, "producer") {
			for _, topic := range argValues(sc, "--topic") {
				if _, ok := topics[topic]; !ok {
					t.Errorf("%s produces to %q, which no job creates", name, topic)
				}
			}
		}
	}

	replicaIDs := map[string]string{}
	var checked int
	for name, s := range p.Services {
		if !s.isOffsetkeeper() {
			continue
		}
		checked++
		t.Run(name, func(t *testing.T) {
			if len(s.Entrypoint) > 0 {
				t.Fatalf("entrypoint %v: the image's (offsetkeeper) is assumed", s.Entrypoint)
			}
			for k, v := range s.Environment {
				if strings.Contains(v, "$") {
					t.Errorf("environment %s=%q: interpolation is not checked here; write the value out", k, v)
				}
			}
			withEnv(t, s.Environment)
			cmd, out, err := dryRun(t, s.Command...)
			if !errors.Is(err, errDryRun) {
				t.Fatalf("offsetkeeper %s (with the service's environment) is refused: %v\n%s", strings.Join(s.Command, " "), err, out)
			}
			if cmd.Name() != "run" {
				t.Fatalf("command %q, want run", cmd.CommandPath())
			}
			fs := cmd.Flags()
			get := func(flag string) string { v, _ := fs.GetString(flag); return v }
			list := func(flag string) []string { v, _ := fs.GetStringSlice(flag); return v }

			deps := p.dependsOnAll(name)
			needs := func(what, svc string) {
				if !deps[svc] {
					t.Errorf("%s uses %s %s but does not depend on it (directly or not)", name, what, svc)
				}
			}
			endpoints := map[string]bool{}
			for _, ep := range list("etcd-endpoints") {
				host, port := hostPort(t, "--etcd-endpoints", ep)
				svc, ok := addrs.etcd[net.JoinHostPort(host, port)]
				if !ok {
					t.Errorf("--etcd-endpoints %s is not an etcd member's client URL %v", ep, addrs.etcd)
					continue
				}
				endpoints[svc] = true
				needs("etcd member", svc)
			}
			if len(endpoints) != 3 {
				t.Errorf("--etcd-endpoints %v names %d etcd members, want all 3", list("etcd-endpoints"), len(endpoints))
			}
			for _, b := range list("brokers") {
				svc, ok := addrs.kafka[b]
				if !ok {
					t.Errorf("--brokers %s is not an advertised Kafka listener %v", b, addrs.kafka)
					continue
				}
				needs("broker", svc)
			}
			for _, topic := range list("topics") {
				job, ok := topics[topic]
				if !ok {
					t.Errorf("--topics %s: no job creates it", topic)
					continue
				}
				if p.Services[name].DependsOn[job] != "service_completed_successfully" {
					t.Errorf("%s does not wait for %s, which creates its topic %s, to complete", name, job, topic)
				}
			}

			sink, err := url.Parse(get("sink"))
			if err != nil || sink.Scheme != "postgres" {
				t.Fatalf("--sink %q: want the compose file's PostgreSQL", get("sink"))
			}
			pgName, ok := addrs.postgres[sink.Host]
			if !ok {
				t.Fatalf("--sink host %q is not the PostgreSQL service %v (host:port, port given)", sink.Host, addrs.postgres)
			}
			needs("database", pgName)
			pg := p.Services[pgName].Environment
			pass, hasPass := sink.User.Password()
			if !hasPass {
				pass = s.Environment["PGPASSWORD"]
			}
			if sink.User.Username() != pg["POSTGRES_USER"] || pass != pg["POSTGRES_PASSWORD"] || strings.TrimPrefix(sink.Path, "/") != pg["POSTGRES_DB"] {
				t.Errorf("--sink user %q, password and database %q do not match %s's POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB",
					sink.User.Username(), sink.Path, pgName)
			}
			if g := sink.Query().Get("group"); g != get("group") {
				t.Errorf("--sink group=%q, but --group is %q: the sink's offsets would belong to another group", g, get("group"))
			}

			id := get("replica-id")
			if id == "" {
				t.Errorf("no --replica-id: the default host-pid is pid 1 in every container")
			} else if other, dup := replicaIDs[id]; dup {
				t.Errorf("--replica-id %s is also %s's", id, other)
			}
			replicaIDs[id] = name
		})
	}
	if checked == 0 {
		t.Fatal("no offsetkeeper service in docker-compose.yml")
	}
}

// The README's walk-through commands name services of the compose file,
// and its `docker compose exec <replica> offsetkeeper ...` lines pass the
// CLI's validation with that replica's environment.
func TestReadmeComposeCommandsAreValid(t *testing.T) {
	p := loadCompose(t)
	raw, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	for _, m := range regexp.MustCompile(`docker compose (?:exec|kill|start|stop|restart|logs|pause|unpause)((?: -\S+)*) ([a-z0-9][a-z0-9_-]*)`).FindAllStringSubmatch(readme, -1) {
		if _, ok := p.Services[m[2]]; !ok {
			t.Errorf("README: %q names no service of docker-compose.yml", m[0])
		}
	}
	var execs int
	for _, m := range regexp.MustCompile("(?m)docker compose exec (\\S+) offsetkeeper ([^\\n`#]*)").FindAllStringSubmatch(readme, -1) {
		svc, ok := p.Services[m[1]]
		if !ok {
			continue // reported above
		}
		execs++
		args := strings.Fields(m[2])
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			withEnv(t, svc.Environment)
			_, out, err := dryRun(t, args...)
			if !errors.Is(err, errDryRun) {
				t.Errorf("README: offsetkeeper %s in %s is refused: %v\n%s", m[2], m[1], err, out)
			}
		})
	}
	if execs < 2 {
		t.Errorf("README shows %d `docker compose exec <replica> offsetkeeper ...` lines, want the walk-through's", execs)
	}
}

// The Dockerfile builds this module's command with the Go of go.mod,
// statically, and runs it as a non-root user; the build context keeps what
// the build needs.
func TestDockerfile(t *testing.T) {
	raw, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	df := string(raw)
	mod, err := os.ReadFile(goModPath)
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(mod))
	if goVersion == nil {
		t.Fatal("go.mod has no go directive")
	}
	if !strings.Contains(df, "ARG GO_VERSION="+goVersion[1]+"\n") || !strings.Contains(df, "FROM golang:${GO_VERSION}") {
		t.Errorf("the build stage is not golang:%s, the Go of go.mod", goVersion[1])
	}
	for _, w := range []string{"CGO_ENABLED=0", "go build", "./cmd/offsetkeeper"} {
		if !strings.Contains(df, w) {
			t.Errorf("the Dockerfile does not say %q", w)
		}
	}
	stages := strings.Split(df, "\nFROM ")
	if len(stages) < 3 { // the text before the first FROM, build, runtime
		t.Fatalf("the Dockerfile has %d stages, want a build stage and a runtime stage", len(stages)-1)
	}
	final := stages[len(stages)-1]
	user := regexp.MustCompile(`(?m)^USER (\S+)`).FindStringSubmatch(final)
	if user == nil || strings.HasPrefix(user[1], "root") || strings.HasPrefix(user[1], "0") {
		t.Errorf("the runtime stage runs as %v, want a non-root USER", user)
	}
	entry := regexp.MustCompile(`(?m)^ENTRYPOINT \["([^"]+)"`).FindStringSubmatch(final)
	if entry == nil || path.Base(entry[1]) != "offsetkeeper" {
		t.Fatalf("the runtime stage's ENTRYPOINT is %v, want the offsetkeeper binary", entry)
	}
	if !regexp.MustCompile(`(?m)^COPY --from=\S+ \S+ ` + regexp.QuoteMeta(entry[1]) + `$`).MatchString(final) {
		t.Errorf("the runtime stage does not copy the binary to %s", entry[1])
	}

	ignore, err := os.ReadFile(dockerignorePath)
	if err != nil {
		t.Fatal(err)
	}
	for _, pattern := range strings.Split(string(ignore), "\n") {
		pattern = strings.TrimPrefix(strings.TrimSpace(pattern), "/")
		if pattern == "" || strings.HasPrefix(pattern, "#") {
			continue
		}
		for _, needed := range []string{"go.mod", "go.sum", "cmd", "main.go", "coordinator", "replica", "sinks", "guard"} {
			if ok, _ := filepath.Match(pattern, needed); ok {
				t.Errorf(".dockerignore %q leaves %s out of the build", pattern, needed)
			}
		}
	}
}
