package main

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// No Docker engine runs where the tests do, so docker-compose.yml, the
// Dockerfile and the walk-through of docs/deploy.md are checked as data. The compose
// file is loaded by compose-go, as `docker compose up` loads it, and on top
// of the Compose specification's validation every
// offsetkeeper command line must pass the CLI's own parsing and validation
// (a dry run, with the service's environment), and the services must name
// each other consistently.

const (
	composePath      = "../../docker-compose.yml"
	dockerfilePath   = "../../Dockerfile"
	dockerignorePath = "../../.dockerignore"
	deployDocPath    = "../../docs/deploy.md" // the docker compose walk-through
	goModPath        = "../../go.mod"
)

// composeProjectName is the project's name when the file does not give
// one: docker compose would take the directory's, which depends on where
// the repository is checked out.
const composeProjectName = "offsetkeeper"

// composeVariables are the variables docker-compose.yml interpolates,
// sorted: none, it writes its values out ($$ is a literal $).
var composeVariables []string

// composeProject is docker-compose.yml as docker compose loads it.
type composeProject struct {
	// Services are the project's enabled services: no profile is
	// selected, as in a plain `docker compose up`.
	Services map[string]composeService
}

// composeService is a loaded service: anchors and << merges resolved,
// $$ unescaped, environment, depends_on (default condition
// service_started), command and ports normalised by the loader.
type composeService struct {
	types.ServiceConfig
}

// env is the service's environment; a variable without a value is "".
func (s composeService) env() map[string]string {
	out := make(map[string]string, len(s.Environment))
	for k, v := range s.Environment {
		if v != nil {
			out[k] = *v
		} else {
			out[k] = ""
		}
	}
	return out
}

func (s composeService) isOffsetkeeper() bool {
	return s.Build != nil || strings.HasPrefix(s.Image, "offsetkeeper")
}
func (s composeService) isEtcd() bool { return len(s.Command) > 0 && path.Base(s.Command[0]) == "etcd" }
func (s composeService) isKafka() bool {
	_, ok := s.Environment["KAFKA_PROCESS_ROLES"]
	return ok
}
func (s composeService) isPostgres() bool { return strings.HasPrefix(s.Image, "postgres:") }

// healthy reports whether the service has a healthcheck that runs.
func (s composeService) healthy() bool {
	h := s.HealthCheck
	return h != nil && !h.Disable && len(h.Test) > 0 && h.Test[0] != "NONE"
}

// script is the service's entrypoint and command as one line.
func (s composeService) script() string {
	return strings.Join(append(slices.Clone([]string(s.Entrypoint)), s.Command...), " ")
}

// loadComposeFile loads a compose file with compose-go, the loader of
// docker compose itself: the file is validated against the Compose
// specification's schema, interpolated, normalised and checked for
// consistency (depends_on names a service, no cycles) as `docker compose
// up` in workingDir would. The environment is env alone, not the test's
// nor a .env file's, so the result does not depend on where it runs. It
// returns the variables the file reads, sorted, once each.
func loadComposeFile(filename string, content []byte, workingDir string, env map[string]string) (*types.Project, []string, error) {
	var looked []string
	details := types.ConfigDetails{
		WorkingDir:  workingDir,
		ConfigFiles: []types.ConfigFile{{Filename: filename, Content: content}},
		Environment: types.Mapping(env),
	}
	p, err := loader.LoadWithContext(context.Background(), details, func(o *loader.Options) {
		o.SetProjectName(composeProjectName, false) // the file's name: wins
		lookup := o.Interpolate.LookupValue
		o.Interpolate.LookupValue = func(k string) (string, bool) {
			looked = append(looked, k)
			return lookup(k)
		}
	})
	slices.Sort(looked)
	return p, slices.Compact(looked), err
}

func loadCompose(t *testing.T) composeProject {
	t.Helper()
	file, err := filepath.Abs(composePath)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// No variables: the file is expected to interpolate nothing (only $$
	// escapes), and whatever it did would take the defaults it gives.
	project, looked, err := loadComposeFile(file, raw, filepath.Dir(file), map[string]string{})
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(project.Services) == 0 {
		t.Fatal("docker-compose.yml has no services")
	}
	if !slices.Equal(looked, composeVariables) {
		t.Fatalf("docker-compose.yml interpolates %q, want %q: the checks here see only the defaults the file gives; write the values out, or add the variable (with a default) to composeVariables", looked, composeVariables)
	}
	p := composeProject{Services: map[string]composeService{}}
	for name, s := range project.Services {
		p.Services[name] = composeService{s}
	}
	return p
}

// The loader is the one docker compose uses: it refuses what the Compose
// specification refuses, resolves anchors, merge keys and interpolation,
// and reads no environment but the one it is given.
func TestComposeLoaderValidates(t *testing.T) {
	t.Setenv("GROUP", "from-the-test-environment")
	tests := []struct {
		name    string
		file    string
		env     map[string]string
		wantErr string // "" for a file that loads
		check   func(t *testing.T, p *types.Project)
	}{
		{
			name: "anchors, merge keys and interpolation defaults",
			file: `
x-base: &base
  image: busybox
  environment:
    GROUP: ${GROUP:-demo}
services:
  a:
    <<: *base
    command: echo $$HOME
  b:
    <<: *base
    depends_on:
      a: { condition: service_completed_successfully }
`,
			env: map[string]string{},
			check: func(t *testing.T, p *types.Project) {
				b := p.Services["b"]
				if b.Image != "busybox" || *b.Environment["GROUP"] != "demo" || b.DependsOn["a"].Condition != types.ServiceConditionCompletedSuccessfully {
					t.Errorf("b: image %q, GROUP %q, depends_on %v: want the anchor's, the default, a's completion", b.Image, *b.Environment["GROUP"], b.DependsOn)
				}
				if got := p.Services["a"].Command; !slices.Equal(got, []string{"echo", "$HOME"}) {
					t.Errorf("a: command %q, want $$ unescaped", got)
				}
			},
		},
		{
			name: "interpolation from the given environment",
			file: "services:\n  a:\n    image: busybox\n    environment:\n      GROUP: ${GROUP:-demo}\n",
			env:  map[string]string{"GROUP": "given"},
			check: func(t *testing.T, p *types.Project) {
				if got := *p.Services["a"].Environment["GROUP"]; got != "given" {
					t.Errorf("GROUP %q, want the given environment's", got)
				}
			},
		},
		{
			name:    "unknown service key",
			file:    "services:\n  a:\n    image: busybox\n    comand: [echo]\n",
			wantErr: "services.a.comand",
		},
		{
			name:    "unknown top-level key",
			file:    "service:\n  a:\n    image: busybox\n",
			wantErr: "additional properties 'service' not allowed",
		},
		{
			name:    "depends_on condition not of the spec",
			file:    "services:\n  a:\n    image: busybox\n  b:\n    image: busybox\n    depends_on:\n      a: { condition: service_ready }\n",
			wantErr: "depends_on.a.condition value must be one of",
		},
		{
			name:    "depends_on a service that does not exist",
			file:    "services:\n  b:\n    image: busybox\n    depends_on: [a]\n",
			wantErr: `depends on undefined service "a"`,
		},
		{
			name:    "a port that is not one",
			file:    "services:\n  a:\n    image: busybox\n    ports: [\"9464:x\"]\n",
			wantErr: "invalid containerPort: x",
		},
		{
			name:    "a required variable that is not set",
			file:    "services:\n  a:\n    image: busybox\n    environment:\n      GROUP: ${GROUP:?the group}\n",
			env:     map[string]string{},
			wantErr: "required variable GROUP is missing a value",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			// docker compose reads .env from the project directory; the
			// loader as the tests use it must not.
			if err := os.WriteFile(filepath.Join(dir, ".env"), []byte("GROUP=from-dot-env\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			p, _, err := loadComposeFile(filepath.Join(dir, "compose.yml"), []byte(tt.file), dir, tt.env)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				tt.check(t, p)
				return
			}
			if err == nil {
				t.Fatalf("loaded, want an error naming %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not name %q", err, tt.wantErr)
			}
		})
	}
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
			listeners := s.env()["KAFKA_LISTENERS"]
			for _, l := range strings.Split(s.env()["KAFKA_ADVERTISED_LISTENERS"], ",") {
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
			for _, v := range strings.Split(s.env()["KAFKA_CONTROLLER_QUORUM_VOTERS"], ",") {
				id, addr, _ := strings.Cut(v, "@")
				if host, _ := hostPort(t, name+" KAFKA_CONTROLLER_QUORUM_VOTERS", addr); host != name || id != s.env()["KAFKA_NODE_ID"] {
					t.Errorf("%s: voter %s is not this broker (KAFKA_NODE_ID %s)", name, v, s.env()["KAFKA_NODE_ID"])
				}
			}
		case s.isPostgres():
			port := s.env()["PGPORT"]
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
		for d, c := range s.DependsOn {
			cond := c.Condition
			dep, ok := p.Services[d]
			switch {
			case !ok:
				t.Errorf("%s depends on %q, which is no service", name, d)
			case d == name:
				t.Errorf("%s depends on itself", name)
			case cond == types.ServiceConditionHealthy && !dep.healthy():
				t.Errorf("%s waits for %s to be healthy, which has no healthcheck", name, d)
			case cond == types.ServiceConditionCompletedSuccessfully && dep.Restart != types.RestartPolicyNo:
				t.Errorf("%s waits for %s to complete, which restarts (restart %q): make it restart \"no\"", name, d, dep.Restart)
			case cond != types.ServiceConditionStarted && cond != types.ServiceConditionHealthy && cond != types.ServiceConditionCompletedSuccessfully:
				t.Errorf("%s depends on %s with condition %q", name, d, cond)
			}
		}
		if p.dependsOnAll(name)[name] {
			t.Errorf("%s depends on itself through others", name)
		}
		for _, port := range s.Ports {
			if port.Published == "" {
				continue // not published on the host
			}
			host := port.Published
			if port.HostIP != "" {
				host = net.JoinHostPort(port.HostIP, port.Published)
			}
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
			for k, v := range s.env() {
				if strings.Contains(v, "$") {
					t.Errorf("environment %s=%q: a literal $ ($$ in the file) is not checked here; write the value out", k, v)
				}
			}
			withEnv(t, s.env())
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
				if p.Services[name].DependsOn[job].Condition != types.ServiceConditionCompletedSuccessfully {
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
			pg := p.Services[pgName].env()
			pass, hasPass := sink.User.Password()
			if !hasPass {
				pass = s.env()["PGPASSWORD"]
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

// The walk-through commands of docs/deploy.md ("docker compose") name
// services of the compose file,
// and its `docker compose exec <replica> offsetkeeper ...` lines pass the
// CLI's validation with that replica's environment.
func TestReadmeComposeCommandsAreValid(t *testing.T) {
	p := loadCompose(t)
	raw, err := os.ReadFile(deployDocPath)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	for _, m := range regexp.MustCompile(`docker compose (?:exec|kill|start|stop|restart|logs|pause|unpause)((?: -\S+)*) ([a-z0-9][a-z0-9_-]*)`).FindAllStringSubmatch(readme, -1) {
		if _, ok := p.Services[m[2]]; !ok {
			t.Errorf("docs/deploy.md: %q names no service of docker-compose.yml", m[0])
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
			withEnv(t, svc.env())
			_, out, err := dryRun(t, args...)
			if !errors.Is(err, errDryRun) {
				t.Errorf("docs/deploy.md: offsetkeeper %s in %s is refused: %v\n%s", m[2], m[1], err, out)
			}
		})
	}
	if execs < 2 {
		t.Errorf("docs/deploy.md shows %d `docker compose exec <replica> offsetkeeper ...` lines, want the walk-through's", execs)
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

// Every Apache Kafka image of the file is the release the tests run, so
// that what a user tries is what was tested.
func TestComposeKafkaIsTheTestedRelease(t *testing.T) {
	p := loadCompose(t)
	n := 0
	for name, s := range p.Services {
		if !strings.HasPrefix(s.Image, "apache/kafka") {
			continue
		}
		n++
		if want := "apache/kafka:" + harness.KafkaVersion; s.Image != want {
			t.Errorf("%s runs %s; the tests run %s (integration/harness: KafkaVersion)", name, s.Image, want)
		}
	}
	if n == 0 {
		t.Fatal("no apache/kafka image in docker-compose.yml")
	}
}
