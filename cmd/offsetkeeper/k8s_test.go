package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/offsetkeeper/offsetkeeper/replica/metrics"
	"github.com/offsetkeeper/offsetkeeper/sinks/builtin"
)

// deploy/kubernetes is checked as data, as docker-compose.yml is
// (compose_test.go): the replicas' command line, with the environment a pod
// gets from the Deployment, the generated ConfigMap and the Secret, must
// pass the CLI's own parsing and validation, and the probes, the grace
// period and the memory must agree with what that command line makes the
// replica do. deploy/kubernetes/manifests_test.go checks the manifests
// against the API types and each other.

const (
	k8sDir     = "../../deploy/kubernetes/"
	k8sDocPath = "../../docs/deploy.md" // "Deploying on Kubernetes"
)

// k8sPodName stands for the name Kubernetes gives a pod of the Deployment.
const k8sPodName = "offsetkeeper-6b7f9c8d5-x2kqp"

// k8sDecode decodes a manifest strictly and case-sensitively, as the API
// server reads it: a key given twice or a field v lacks is an error.
func k8sDecode(t *testing.T, file string, v any) {
	t.Helper()
	raw, err := os.ReadFile(k8sDir + file)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	strict, err := kjson.UnmarshalStrict(j, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err == nil {
		err = errors.Join(strict...)
	}
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// k8sGroup is what deploy/kubernetes applies, as far as a replica sees it.
type k8sGroup struct {
	deployment appsv1.Deployment
	secret     corev1.Secret
	service    corev1.Service
	config     map[string]string // the configMapGenerator's literals
	configName string
}

func loadK8s(t *testing.T) k8sGroup {
	t.Helper()
	var g k8sGroup
	var kust struct {
		ConfigMapGenerator []struct {
			Name     string   `json:"name"`
			Literals []string `json:"literals"`
		} `json:"configMapGenerator"`
	}
	raw, err := os.ReadFile(k8sDir + "kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &kust); err != nil { // strictly in manifests_test.go
		t.Fatal(err)
	}
	if len(kust.ConfigMapGenerator) != 1 {
		t.Fatalf("kustomization.yaml: %d configMapGenerators, want 1", len(kust.ConfigMapGenerator))
	}
	g.configName = kust.ConfigMapGenerator[0].Name
	g.config = map[string]string{}
	for _, l := range kust.ConfigMapGenerator[0].Literals {
		k, v, _ := strings.Cut(l, "=")
		g.config[k] = v
	}
	k8sDecode(t, "deployment.yaml", &g.deployment)
	k8sDecode(t, "secret.example.yaml", &g.secret)
	k8sDecode(t, "service.yaml", &g.service)
	return g
}

// container is the replica's container.
func (g k8sGroup) container(t *testing.T) corev1.Container {
	t.Helper()
	cs := g.deployment.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%d containers, want 1", len(cs))
	}
	return cs[0]
}

// podEnv is the container's environment as the kubelet makes it: envFrom
// first (the generated ConfigMap), then env, which wins; a missing
// optional Secret key leaves its variable out. Service links are added as
// if they were on, for the Service of the directory: the CLI must accept
// them either way.
func (g k8sGroup) podEnv(t *testing.T) map[string]string {
	t.Helper()
	c := g.container(t)
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil && ef.ConfigMapRef.Name == g.configName:
			for k, v := range g.config {
				env[ef.Prefix+k] = v
			}
		case ef.SecretRef != nil && ef.SecretRef.Name == g.secret.Name:
			for k, v := range g.secret.StringData {
				env[ef.Prefix+k] = v
			}
			for k, v := range g.secret.Data {
				env[ef.Prefix+k] = string(v)
			}
		default:
			t.Fatalf("envFrom %+v: neither the generated ConfigMap %q nor the Secret %q", ef, g.configName, g.secret.Name)
		}
	}
	limits := c.Resources.Limits
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
			continue
		}
		switch ref := e.ValueFrom; {
		case ref.FieldRef != nil && ref.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = k8sPodName
		case ref.SecretKeyRef != nil:
			r := ref.SecretKeyRef
			v, ok := g.secret.StringData[r.Key]
			if b, inData := g.secret.Data[r.Key]; inData {
				v, ok = string(b), true
			}
			switch {
			case r.Name != g.secret.Name:
				t.Fatalf("%s: Secret %q is not secret.example.yaml's %q", e.Name, r.Name, g.secret.Name)
			case ok:
				env[e.Name] = v
			case r.Optional == nil || !*r.Optional:
				t.Fatalf("%s: the Secret has no key %q: the pod would not start", e.Name, r.Key)
			}
		case ref.ResourceFieldRef != nil && ref.ResourceFieldRef.Resource == "limits.memory":
			q, ok := limits[corev1.ResourceMemory]
			if !ok {
				t.Fatalf("%s: from limits.memory, which is not set", e.Name)
			}
			env[e.Name] = strconv.FormatInt(q.Value(), 10)
		default:
			t.Fatalf("%s: a valueFrom this test does not know: %+v", e.Name, ref)
		}
	}
	svc := strings.ToUpper(strings.ReplaceAll(g.service.Name, "-", "_"))
	env[svc+"_SERVICE_HOST"] = "10.0.0.7"
	for i, p := range g.service.Spec.Ports {
		port, proto := strconv.Itoa(int(p.Port)), strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		tcp := svc + "_PORT_" + port + "_" + strings.ToUpper(proto)
		if i == 0 {
			env[svc+"_SERVICE_PORT"] = port
			env[svc+"_PORT"] = proto + "://10.0.0.7:" + port
		}
		if p.Name != "" {
			env[svc+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_"))] = port
		}
		env[tcp] = proto + "://10.0.0.7:" + port
		env[tcp+"_PROTO"], env[tcp+"_PORT"], env[tcp+"_ADDR"] = proto, port, "10.0.0.7"
	}
	return env
}

// k8sSetEnv makes env the only OFFSETKEEPER_* variables (and sets the
// others of env) until the test ends.
func k8sSetEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, envPrefix) {
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

// k8sReadiness is a replica's answer to /readyz.
type k8sReadiness struct{ err error }

func (r k8sReadiness) Ready(context.Context) error { return r.err }

// TestK8sReplicaCommandIsValid: the Deployment's command line, with the
// environment a pod gets, passes `offsetkeeper run`'s parsing and
// validation without a warning; the probes ask the port the replica serves
// on for the paths it answers; the grace period covers the graceful stop;
// the memory is sized from the buffer budget.
func TestK8sReplicaCommandIsValid(t *testing.T) {
	g := loadK8s(t)
	c := g.container(t)
	if len(c.Command) > 0 {
		t.Fatalf("command %v: the image's entrypoint (offsetkeeper) is assumed", c.Command)
	}
	env := g.podEnv(t)
	k8sSetEnv(t, env)
	cmd, out, err := dryRun(t, c.Args...)
	if !errors.Is(err, errDryRun) {
		t.Fatalf("offsetkeeper %s (with the pod's environment) is refused: %v\n%s", strings.Join(c.Args, " "), err, out)
	}
	if cmd.Name() != "run" {
		t.Fatalf("command %q, want run", cmd.CommandPath())
	}
	if strings.Contains(out, "Warning:") {
		t.Errorf("the pod's environment draws a warning:\n%s", out)
	}
	fs := cmd.Flags()
	get := func(flag string) string {
		f := fs.Lookup(flag)
		if f == nil {
			t.Fatalf("run has no --%s", flag)
		}
		return f.Value.String()
	}
	for _, flag := range []string{"group", "topics", "sink", "etcd-endpoints", "brokers"} {
		if !fromEnv(fs.Lookup(flag)) {
			t.Errorf("--%s does not come from the ConfigMap (%s)", flag, envName(flag))
		}
	}
	if id := get("replica-id"); id != k8sPodName {
		t.Errorf("--replica-id %q, want the pod's name %q (unique among the live pods)", id, k8sPodName)
	}

	// The HTTP endpoints: port and paths.
	_, port, err := net.SplitHostPort(get("http-addr"))
	if err != nil || port == "0" {
		t.Fatalf("--http-addr %q: want a fixed port the probes can ask", get("http-addr"))
	}
	var httpPort *corev1.ContainerPort
	for i, p := range c.Ports {
		if strconv.Itoa(int(p.ContainerPort)) == port {
			httpPort = &c.Ports[i]
		}
	}
	if httpPort == nil {
		t.Fatalf("--http-addr %s: no container port %s in %v", get("http-addr"), port, c.Ports)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetkeeper_test_total", Help: "a series"}))
	for _, tc := range []struct {
		probe   string
		p       *corev1.Probe
		ready   int // status while ready
		unready int // status while not ready: a liveness probe must not fail for etcd
	}{
		{"startup", c.StartupProbe, http.StatusOK, http.StatusOK},
		{"liveness", c.LivenessProbe, http.StatusOK, http.StatusOK},
		{"readiness", c.ReadinessProbe, http.StatusOK, http.StatusServiceUnavailable},
	} {
		if tc.p == nil || tc.p.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", tc.probe)
			continue
		}
		hg := tc.p.HTTPGet
		if hg.Port.StrVal != httpPort.Name && hg.Port.IntValue() != int(httpPort.ContainerPort) {
			t.Errorf("the %s probe asks port %s, not --http-addr's %s (%s)", tc.probe, hg.Port.String(), port, httpPort.Name)
		}
		for _, r := range []struct {
			err  error
			want int
		}{{nil, tc.ready}, {errors.New("session lost"), tc.unready}} {
			rec := httptest.NewRecorder()
			metrics.Handler(k8sReadiness{r.err}, reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, hg.Path, nil))
			if rec.Code != r.want {
				t.Errorf("the %s probe's %s answers %d with the replica's readiness %v, want %d", tc.probe, hg.Path, rec.Code, r.err, r.want)
			}
		}
		if tc.p.TimeoutSeconds != 0 && time.Duration(tc.p.TimeoutSeconds)*time.Second <= metrics.DefaultReadyTimeout {
			t.Errorf("the %s probe's timeout %ds is not above a readiness check's %s", tc.probe, tc.p.TimeoutSeconds, metrics.DefaultReadyTimeout)
		}
	}

	// SIGTERM: the blocks in flight, then the HTTP server and the last
	// offset mirror, before the kubelet's SIGKILL.
	shutdown, err := fs.GetDuration("shutdown-timeout")
	if err != nil {
		t.Fatal(err)
	}
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if s := g.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; s != nil {
		grace = time.Duration(*s) * time.Second
	}
	if need := shutdown + metrics.StopTimeout; grace <= need {
		t.Errorf("terminationGracePeriodSeconds %s: want above --shutdown-timeout %s + %s (offset mirror and HTTP) = %s",
			grace, shutdown, metrics.StopTimeout, need)
	}

	// Memory: twice the buffer budget, requested as much as the limit.
	budget, ok := fs.Lookup("max-buffer-bytes").Value.(*byteSize)
	if !ok {
		t.Fatal("--max-buffer-bytes is not a byteSize")
	}
	limit, request := c.Resources.Limits[corev1.ResourceMemory], c.Resources.Requests[corev1.ResourceMemory]
	if limit.Value() < 2*int64(*budget) {
		t.Errorf("memory limit %s: want at least twice --max-buffer-bytes %s", limit.String(), budget)
	}
	if request.Cmp(limit) != 0 {
		t.Errorf("memory request %s, limit %s: want them equal (a replica over its request is the first evicted)", request.String(), limit.String())
	}
	if v := env["GOMEMLIMIT"]; v != "" && v != strconv.FormatInt(limit.Value(), 10) {
		t.Errorf("GOMEMLIMIT %s is not the memory limit %d", v, limit.Value())
	}
}

// TestK8sServiceLinksAreIgnored: the variables Kubernetes derives from the
// directory's Service, were service links on, are none of the CLI's own,
// and neither refuse nor warn.
func TestK8sServiceLinksAreIgnored(t *testing.T) {
	g := loadK8s(t)
	root := newRootCommand(builtin.Sinks())
	own := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { own[envName(f.Name)] = true })
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	prefix := strings.ToUpper(strings.ReplaceAll(g.service.Name, "-", "_")) + "_"
	var links []string
	for k, v := range g.podEnv(t) {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		links = append(links, k+"="+v)
		if own[k] {
			t.Errorf("%s: the Service %q makes a service link named like a flag's variable", k, g.service.Name)
		}
		if !serviceLink.MatchString(k) {
			t.Errorf("%s: the CLI does not take it for a service link", k)
		}
	}
	if len(links) < 4 {
		t.Fatalf("service links %v: want the host, the ports and their parts", links)
	}
	run, _, err := root.Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	run.SetErr(&stderr)
	if err := unknownEnv(run, links); err != nil || stderr.Len() > 0 {
		t.Errorf("service links %v: %v %s", links, err, stderr.String())
	}
}

// TestK8sReadmeExecCommandsAreValid: the `kubectl exec
// deploy/offsetkeeper -- offsetkeeper ...` lines of docs/deploy.md and
// deploy/kubernetes/README.md pass the CLI's validation
// with the pod's environment, which an exec'd command shares.
func TestK8sReadmeExecCommandsAreValid(t *testing.T) {
	g := loadK8s(t)
	env := g.podEnv(t)
	var execs int
	for _, file := range []string{k8sDocPath, k8sDir + "README.md"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile("(?m)kubectl exec (\\S+) -- offsetkeeper ([^\\n`#]*)").FindAllStringSubmatch(string(raw), -1) {
			execs++
			if m[1] != "deploy/"+g.deployment.Name {
				t.Errorf("%s: %q execs in %s, not deploy/%s", file, m[0], m[1], g.deployment.Name)
			}
			args := strings.Fields(m[2])
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				k8sSetEnv(t, env)
				_, out, err := dryRun(t, args...)
				if !errors.Is(err, errDryRun) {
					t.Errorf("%s: offsetkeeper %s in a pod is refused: %v\n%s", file, m[2], err, out)
				}
				if strings.Contains(out, "Warning:") {
					t.Errorf("%s: offsetkeeper %s in a pod warns:\n%s", file, m[2], out)
				}
			})
		}
	}
	if execs < 2 {
		t.Errorf("%d `kubectl exec deploy/... -- offsetkeeper ...` lines in docs/deploy.md and deploy/kubernetes/README.md, want both's", execs)
	}
}
