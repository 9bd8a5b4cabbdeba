// Package helm_test checks the chart of this directory (offsetkeeper/) by
// rendering it with Helm's own packages: its loader, its values (coalesced
// with the chart's defaults and validated against values.schema.json) and
// its template engine, as `helm install` and `helm template` do, without a
// cluster. Every object rendered must decode strictly into its Kubernetes or
// Prometheus Operator API type; rendered with deploy/kubernetes' settings it
// must give deploy/kubernetes' objects; and values the chart refuses must
// be refused with a message that names them.
package helm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	chartDir = "offsetkeeper"
	// rulesPath is the alert rules' source; the chart holds a copy
	// (chartRulesPath) for its PrometheusRule, since a chart reads only
	// its own files.
	rulesPath      = "../prometheus/offsetkeeper.rules.yml"
	chartRulesPath = chartDir + "/files/offsetkeeper.rules.yml"
	kustomizeDir   = "../kubernetes/"
)

// decodeStrict decodes YAML into v as the API server does, and refuses
// what the server would drop or guess at: a key given twice
// (YAMLToJSONStrict) and a field v does not have, matched case
// sensitively (sigs.k8s.io/json). As deploy/kubernetes/manifests_test.go.
func decodeStrict(raw []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// release is what one rendering of the chart gives, decoded.
type release struct {
	deployment *appsv1.Deployment
	configMap  *corev1.ConfigMap
	secret     *corev1.Secret
	service    *corev1.Service
	monitor    *monitoringv1.ServiceMonitor
	rule       *monitoringv1.PrometheusRule
	pdb        *policyv1.PodDisruptionBudget
	notes      string
}

// loadChart loads the chart as `helm install ./offsetkeeper` does.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return ch
}

// render renders the chart as release name in namespace data with vals
// (what -f and --set give), and returns the rendered files by name. An
// error is the one helm install or helm template would print.
func render(t *testing.T, name string, vals map[string]any) (map[string]string, error) {
	t.Helper()
	ch := loadChart(t)
	top, err := chartutil.ToRenderValues(ch, vals, common.ReleaseOptions{
		Name: name, Namespace: "data", Revision: 1, IsInstall: true,
	}, nil)
	if err != nil {
		return nil, err
	}
	// Strict: a template that names a value the chart does not have fails
	// (as helm lint --strict has it), instead of rendering it empty.
	return engine.Engine{Strict: true}.RenderWithContext(context.Background(), ch, top)
}

// decodeRelease renders the chart and decodes every object strictly,
// failing the test on an error.
func decodeRelease(t *testing.T, name string, vals map[string]any) release {
	t.Helper()
	files, err := render(t, name, vals)
	if err != nil {
		t.Fatalf("rendering the chart: %v", err)
	}
	var r release
	for _, file := range slices.Sorted(maps.Keys(files)) {
		switch {
		case strings.HasSuffix(file, "/NOTES.txt"):
			r.notes = files[file]
			continue
		case !strings.HasSuffix(file, ".yaml"):
			continue
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(files[file], -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			where := fmt.Sprintf("%s (document %d)", file, i)
			obj, err := decodeObject([]byte(doc))
			if err != nil {
				t.Fatalf("%s: %v\n%s", where, err, doc)
			}
			if !r.set(obj) {
				t.Fatalf("%s: a second %T", where, obj)
			}
			meta := obj.(metav1.Object)
			if errs := validation.IsDNS1123Subdomain(meta.GetName()); len(errs) > 0 {
				t.Errorf("%s: name %q: %v", where, meta.GetName(), errs)
			}
			if meta.GetNamespace() != "" {
				t.Errorf("%s: namespace %q: the release's namespace is helm's to set", where, meta.GetNamespace())
			}
			for k, v := range meta.GetLabels() {
				if errs := validation.IsQualifiedName(k); len(errs) > 0 {
					t.Errorf("%s: label key %q: %v", where, k, errs)
				}
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("%s: label %s=%q: %v", where, k, v, errs)
				}
			}
		}
	}
	if r.deployment == nil || r.configMap == nil || r.service == nil {
		t.Fatalf("the chart renders no Deployment, ConfigMap or Service: %v", slices.Sorted(maps.Keys(files)))
	}
	return r
}

// stripComments drops YAML comment lines, to tell an empty document.
func stripComments(doc string) string {
	var b strings.Builder
	for l := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// decodeObject decodes one manifest into the API type its apiVersion and
// kind name.
func decodeObject(raw []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(raw, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		obj = &appsv1.Deployment{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1 Secret":
		obj = &corev1.Secret{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "policy/v1 PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case monitoringv1.SchemeGroupVersion.String() + " " + monitoringv1.ServiceMonitorsKind:
		obj = &monitoringv1.ServiceMonitor{}
	case monitoringv1.SchemeGroupVersion.String() + " " + monitoringv1.PrometheusRuleKind:
		obj = &monitoringv1.PrometheusRule{}
	default:
		return nil, fmt.Errorf("apiVersion %q kind %q: not a type the chart is checked against", tm.APIVersion, tm.Kind)
	}
	return obj, decodeStrict(raw, obj)
}

// set stores obj in its field of r unless the field holds one already.
func (r *release) set(obj any) bool {
	store := func(dst any) bool {
		p := reflect.ValueOf(dst).Elem()
		if !p.IsNil() {
			return false
		}
		p.Set(reflect.ValueOf(obj))
		return true
	}
	switch obj.(type) {
	case *appsv1.Deployment:
		return store(&r.deployment)
	case *corev1.ConfigMap:
		return store(&r.configMap)
	case *corev1.Secret:
		return store(&r.secret)
	case *corev1.Service:
		return store(&r.service)
	case *monitoringv1.ServiceMonitor:
		return store(&r.monitor)
	case *monitoringv1.PrometheusRule:
		return store(&r.rule)
	case *policyv1.PodDisruptionBudget:
		return store(&r.pdb)
	}
	return false
}

// container is the replica's container.
func (r release) container(t *testing.T) corev1.Container {
	t.Helper()
	cs := r.deployment.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%d containers, want offsetkeeper alone", len(cs))
	}
	return cs[0]
}

// requiredValues are the values a release must give: the chart's defaults
// do the rest.
func requiredValues() map[string]any {
	return map[string]any{
		"group":         "orders",
		"topics":        []any{"orders"},
		"sink":          "postgres://offsetkeeper@postgres:5432/offsetkeeper?sslmode=require&table=orders",
		"etcdEndpoints": []any{"etcd-0.etcd:2379"},
		"brokers":       []any{"kafka:9092"},
		"secrets":       map[string]any{"existingSecret": "offsetkeeper-secrets"},
	}
}

// allValues sets every value values.yaml documents, none at its default
// (TestChartAllValuesAreDocumented keeps it so).
func allValues() map[string]any {
	return map[string]any{
		"group":           "payments",
		"topics":          []any{"payments", "refunds"},
		"sink":            "clickhouse://offsetkeeper@clickhouse:9000/shop?table=payments",
		"etcdEndpoints":   []any{"https://etcd-0.etcd:2379", "https://etcd-1.etcd:2379"},
		"brokers":         []any{"kafka-0:9093", "kafka-1:9093"},
		"replicas":        5,
		"maxBufferBytes":  "512MiB",
		"shutdownTimeout": "1m30s",
		"httpPort":        9500,
		"settings": map[string]any{
			"OFFSETKEEPER_LOG_FORMAT":           "console",
			"OFFSETKEEPER_LOG_LEVEL":            "debug",
			"OFFSETKEEPER_ETCD_USER":            "offsetkeeper",
			"OFFSETKEEPER_ETCD_CACERT":          "/etc/offsetkeeper/tls/ca.crt",
			"OFFSETKEEPER_KAFKA_USER":           "offsetkeeper",
			"OFFSETKEEPER_KAFKA_SASL_MECHANISM": "scram-sha-512",
			"OFFSETKEEPER_KAFKA_TLS":            "true",
			"OFFSETKEEPER_SCHEMA_REGISTRY":      "https://registry:8081",
			"OFFSETKEEPER_SCHEMA_REGISTRY_USER": "offsetkeeper",
			"OFFSETKEEPER_VALUE_FORMAT":         "avro",
		},
		"secrets": map[string]any{
			"existingSecret":         "",
			"postgresPassword":       "",
			"etcdPassword":           "etcd-secret",
			"kafkaPassword":          "kafka-secret",
			"schemaRegistryPassword": "registry-secret",
			"clickhousePassword":     "clickhouse-secret",
		},
		"image": map[string]any{
			"repository": "registry.example.com/offsetkeeper",
			"tag":        "v1.2.0",
			"pullPolicy": "Always",
		},
		"imagePullSecrets": []any{map[string]any{"name": "registry-example-com"}},
		"resources": map[string]any{
			"requests": map[string]any{"cpu": "500m", "memory": "1Gi"},
			"limits":   map[string]any{"cpu": "2", "memory": "1Gi"},
		},
		"podDisruptionBudget": map[string]any{"enabled": true},
		"serviceMonitor": map[string]any{
			"enabled":  true,
			"interval": "15s",
			"labels":   map[string]any{"release": "kube-prometheus-stack"},
		},
		"prometheusRule": map[string]any{
			"enabled": true,
			"labels":  map[string]any{"release": "kube-prometheus-stack"},
		},
		"podAnnotations": map[string]any{"example.com/team": "data"},
		"podLabels":      map[string]any{"example.com/team": "data"},
		"nodeSelector":   map[string]any{"kubernetes.io/os": "linux"},
		"tolerations": []any{map[string]any{
			"key": "dedicated", "operator": "Equal", "value": "data", "effect": "NoSchedule",
		}},
		"affinity": map[string]any{"podAntiAffinity": map[string]any{
			"requiredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{
				"topologyKey":   "kubernetes.io/hostname",
				"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/instance": "payments"}},
			}},
		}},
		"priorityClassName": "data-pipelines",
		"extraVolumes": []any{map[string]any{
			"name": "tls", "secret": map[string]any{"secretName": "offsetkeeper-tls"},
		}},
		"extraVolumeMounts": []any{map[string]any{
			"name": "tls", "mountPath": "/etc/offsetkeeper/tls", "readOnly": true,
		}},
		"fullnameOverride": "payments-sink",
	}
}

// with is base with the top-level values of over replacing its own, and
// a nil value removing one.
func with(base map[string]any, over map[string]any) map[string]any {
	out := maps.Clone(base)
	for k, v := range over {
		if v == nil {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	return out
}

// TestChartDefaults: the chart with the required values alone renders the
// replicas, their settings, the Service and the PodDisruptionBudget; the
// optional objects (ServiceMonitor, PrometheusRule) are off and no Secret
// is made for an existing one.
func TestChartDefaults(t *testing.T) {
	r := decodeRelease(t, "orders", requiredValues())
	if r.secret != nil || r.monitor != nil || r.rule != nil {
		t.Errorf("Secret %v, ServiceMonitor %v, PrometheusRule %v: want none by default with secrets.existingSecret", r.secret != nil, r.monitor != nil, r.rule != nil)
	}
	if r.pdb == nil {
		t.Error("no PodDisruptionBudget by default")
	}
	if got, want := r.deployment.Name, "orders-offsetkeeper"; got != want {
		t.Errorf("Deployment %q, want %q (<release>-offsetkeeper)", got, want)
	}
	if got, want := r.service.Name, "orders-offsetkeeper-metrics"; got != want {
		t.Errorf("Service %q, want %q", got, want)
	}
	checkConsistent(t, r)
	c := r.container(t)
	if c.Image != "offsetkeeper:"+loadChart(t).Metadata.AppVersion {
		t.Errorf("image %q: want offsetkeeper:<appVersion>", c.Image)
	}
	want := map[string]string{
		"OFFSETKEEPER_GROUP":            "orders",
		"OFFSETKEEPER_TOPICS":           "orders",
		"OFFSETKEEPER_SINK":             "postgres://offsetkeeper@postgres:5432/offsetkeeper?sslmode=require&table=orders",
		"OFFSETKEEPER_ETCD_ENDPOINTS":   "etcd-0.etcd:2379",
		"OFFSETKEEPER_BROKERS":          "kafka:9092",
		"OFFSETKEEPER_MAX_BUFFER_BYTES": "256MiB",
		"OFFSETKEEPER_SHUTDOWN_TIMEOUT": "30s",
		"OFFSETKEEPER_HTTP_ADDR":        ":9464",
		"OFFSETKEEPER_LOG_FORMAT":       "json",
	}
	if !maps.Equal(r.configMap.Data, want) {
		t.Errorf("settings %v, want %v", r.configMap.Data, want)
	}
	if !strings.Contains(r.notes, "exec deploy/orders-offsetkeeper -- offsetkeeper replicas list") {
		t.Errorf("NOTES.txt does not say how to list the replicas:\n%s", r.notes)
	}
}

// TestChartMatchesKustomization: the chart, given deploy/kubernetes'
// settings as values and released as "offsetkeeper", renders
// deploy/kubernetes' objects: the same names, settings, pod (probes,
// resources, grace period, security, environment, volumes), Service,
// ServiceMonitor and PodDisruptionBudget. The labels differ only by
// those Helm adds (app.kubernetes.io/instance and the like), the pods only
// by the checksum annotations, the container by the image's pull policy.
// A change to either that the other lacks fails here.
func TestChartMatchesKustomization(t *testing.T) {
	var kust struct {
		Images []struct {
			Name, NewName, NewTag string
		} `json:"images"`
		Replicas []struct {
			Name  string `json:"name"`
			Count int    `json:"count"`
		} `json:"replicas"`
		ConfigMapGenerator []struct {
			Name     string   `json:"name"`
			Literals []string `json:"literals"`
		} `json:"configMapGenerator"`
	}
	raw, err := os.ReadFile(kustomizeDir + "kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &kust); err != nil { // strictly in manifests_test.go
		t.Fatal(err)
	}
	if len(kust.ConfigMapGenerator) != 1 || len(kust.Images) != 1 || len(kust.Replicas) != 1 {
		t.Fatalf("kustomization.yaml: want one configMapGenerator, image and replicas entry: %+v", kust)
	}
	literals := map[string]string{}
	for _, l := range kust.ConfigMapGenerator[0].Literals {
		k, v, _ := strings.Cut(l, "=")
		literals[k] = v
	}

	// The kustomization's settings as the chart's values.
	settings := map[string]any{}
	vals := map[string]any{
		"replicas":       kust.Replicas[0].Count,
		"image":          map[string]any{"repository": kust.Images[0].NewName, "tag": kust.Images[0].NewTag},
		"secrets":        map[string]any{"existingSecret": "offsetkeeper-secrets"},
		"settings":       settings,
		"serviceMonitor": map[string]any{"enabled": true},
	}
	split := func(s string) []any {
		var out []any
		for _, p := range strings.Split(s, ",") {
			out = append(out, p)
		}
		return out
	}
	for k, v := range literals {
		switch k {
		case "OFFSETKEEPER_GROUP":
			vals["group"] = v
		case "OFFSETKEEPER_TOPICS":
			vals["topics"] = split(v)
		case "OFFSETKEEPER_SINK":
			vals["sink"] = v
		case "OFFSETKEEPER_ETCD_ENDPOINTS":
			vals["etcdEndpoints"] = split(v)
		case "OFFSETKEEPER_BROKERS":
			vals["brokers"] = split(v)
		case "OFFSETKEEPER_MAX_BUFFER_BYTES":
			vals["maxBufferBytes"] = v
		case "OFFSETKEEPER_SHUTDOWN_TIMEOUT":
			vals["shutdownTimeout"] = v
		case "OFFSETKEEPER_HTTP_ADDR":
			port, err := strconv.Atoi(strings.TrimPrefix(v, ":"))
			if err != nil {
				t.Fatalf("OFFSETKEEPER_HTTP_ADDR=%s: want :PORT, which the chart's httpPort gives", v)
			}
			vals["httpPort"] = port
		default:
			settings[k] = v
		}
	}
	r := decodeRelease(t, "offsetkeeper", vals)
	checkConsistent(t, r)

	var (
		d   appsv1.Deployment
		svc corev1.Service
		sm  monitoringv1.ServiceMonitor
		pdb policyv1.PodDisruptionBudget
	)
	for file, v := range map[string]any{
		"deployment.yaml": &d, "service.yaml": &svc, "servicemonitor.yaml": &sm, "poddisruptionbudget.yaml": &pdb,
	} {
		raw, err := os.ReadFile(kustomizeDir + file)
		if err != nil {
			t.Fatal(err)
		}
		if err := decodeStrict(raw, v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	// What kustomize does to them.
	d.Spec.Replicas = ptr(int32(kust.Replicas[0].Count))
	for i, c := range d.Spec.Template.Spec.Containers {
		if c.Image == kust.Images[0].Name {
			d.Spec.Template.Spec.Containers[i].Image = kust.Images[0].NewName + ":" + kust.Images[0].NewTag
		}
	}

	// The chart's objects without what Helm adds.
	if !maps.Equal(r.configMap.Data, literals) {
		t.Errorf("the chart's settings %v, kustomization.yaml's %v", r.configMap.Data, literals)
	}
	if r.configMap.Name != kust.ConfigMapGenerator[0].Name {
		t.Errorf("ConfigMap %q, kustomization.yaml's %q", r.configMap.Name, kust.ConfigMapGenerator[0].Name)
	}
	cd := r.deployment.DeepCopy()
	for k := range cd.Spec.Template.Annotations {
		if strings.HasPrefix(k, "checksum/") {
			delete(cd.Spec.Template.Annotations, k)
		}
	}
	if len(cd.Spec.Template.Annotations) == 0 {
		cd.Spec.Template.Annotations = nil
	}
	cd.Spec.Template.Spec.Containers[0].ImagePullPolicy = ""
	helmLabels(&cd.ObjectMeta, cd.Spec.Selector, &cd.Spec.Template.ObjectMeta)
	if a := cd.Spec.Template.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		for i := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			helmLabels(nil, a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[i].PodAffinityTerm.LabelSelector)
		}
	}
	same(t, "Deployment", &d, cd)

	cs := r.service.DeepCopy()
	helmLabels(&cs.ObjectMeta, nil)
	for _, k := range []string{"app.kubernetes.io/instance"} {
		delete(cs.Spec.Selector, k)
	}
	same(t, "Service", &svc, cs)

	cm := r.monitor.DeepCopy()
	helmLabels(&cm.ObjectMeta, &cm.Spec.Selector)
	same(t, "ServiceMonitor", &sm, cm)

	cp := r.pdb.DeepCopy()
	helmLabels(&cp.ObjectMeta, cp.Spec.Selector)
	same(t, "PodDisruptionBudget", &pdb, cp)
}

// helmLabels removes the labels the chart adds to deploy/kubernetes' own
// (the release, version, chart and manager) from metas and a selector.
func helmLabels(meta *metav1.ObjectMeta, sel *metav1.LabelSelector, more ...*metav1.ObjectMeta) {
	for _, m := range append(more, meta) {
		if m == nil {
			continue
		}
		for _, k := range []string{"app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"} {
			delete(m.Labels, k)
		}
	}
	if sel != nil {
		delete(sel.MatchLabels, "app.kubernetes.io/instance")
	}
}

// same fails the test with the first lines that differ when the objects
// differ.
func same(t *testing.T, what string, want, got any) {
	t.Helper()
	w, err := yaml.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	g, err := yaml.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(w, g) {
		return
	}
	wl, gl := strings.Split(string(w), "\n"), strings.Split(string(g), "\n")
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var a, b string
		if i < len(wl) {
			a = wl[i]
		}
		if i < len(gl) {
			b = gl[i]
		}
		if a != b {
			from := max(0, i-5)
			t.Errorf("the chart's %s differs from deploy/kubernetes' at line %d:\ndeploy/kubernetes:\n%s\nthe chart:\n%s",
				what, i+1, strings.Join(wl[from:min(len(wl), i+5)], "\n"), strings.Join(gl[from:min(len(gl), i+5)], "\n"))
			return
		}
	}
}

func ptr[T any](v T) *T { return &v }

// checkConsistent checks that the objects of a release refer to each other:
// selectors select the pods, the Service's port is the container's, the
// ServiceMonitor picks the Service and labels the job the alerts select,
// the environment's Secret keys are the Secret's.
func checkConsistent(t *testing.T, r release) {
	t.Helper()
	d, pod := r.deployment, &r.deployment.Spec.Template
	podLabels := labels.Set(pod.Labels)
	selects := func(what string, sel *metav1.LabelSelector) {
		t.Helper()
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if s.Empty() || !s.Matches(podLabels) {
			t.Errorf("%s %v does not select the pods %v", what, sel, pod.Labels)
		}
	}
	selects("the Deployment's selector", d.Spec.Selector)
	if r.pdb != nil {
		selects("the PodDisruptionBudget's selector", r.pdb.Spec.Selector)
	}
	if len(r.service.Spec.Selector) == 0 || !labels.SelectorFromSet(r.service.Spec.Selector).Matches(podLabels) {
		t.Errorf("the Service's selector %v does not select the pods %v", r.service.Spec.Selector, pod.Labels)
	}
	if r.service.Name == "offsetkeeper" {
		t.Error("the Service is named offsetkeeper: its service links (OFFSETKEEPER_PORT...) would look like the CLI's variables")
	}
	c := r.container(t)

	// The port: --http-addr, the container's port http, the Service's
	// port metrics, the probes and the ServiceMonitor.
	var http *corev1.ContainerPort
	for i, p := range c.Ports {
		if p.Name == "http" {
			http = &c.Ports[i]
		}
	}
	if http == nil {
		t.Fatalf("the container has no port named http: %v", c.Ports)
	}
	if got, want := r.configMap.Data["OFFSETKEEPER_HTTP_ADDR"], fmt.Sprintf(":%d", http.ContainerPort); got != want {
		t.Errorf("OFFSETKEEPER_HTTP_ADDR %q, want the container port's %q", got, want)
	}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.StrVal != http.Name {
			t.Errorf("the %s probe %+v does not ask the port %s", name, p, http.Name)
		}
	}
	if len(r.service.Spec.Ports) != 1 || r.service.Spec.Ports[0].Name != "metrics" || r.service.Spec.Ports[0].TargetPort.StrVal != http.Name ||
		r.service.Spec.Ports[0].Port != http.ContainerPort {
		t.Errorf("the Service's ports %+v: want metrics, %d, to the container's %s", r.service.Spec.Ports, http.ContainerPort, http.Name)
	}
	if r.monitor != nil {
		sm, err := metav1.LabelSelectorAsSelector(&r.monitor.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		if sm.Empty() || !sm.Matches(labels.Set(r.service.Labels)) {
			t.Errorf("the ServiceMonitor's selector %v does not select the Service's labels %v", r.monitor.Spec.Selector, r.service.Labels)
		}
		for _, ep := range r.monitor.Spec.Endpoints {
			if ep.Port != "metrics" || ep.Path != "/metrics" {
				t.Errorf("the ServiceMonitor scrapes port %q path %q, want metrics /metrics", ep.Port, ep.Path)
			}
		}
		job := r.service.Labels[r.monitor.Spec.JobLabel]
		rules, err := os.ReadFile(rulesPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`job="([^"]*)"`).FindAllSubmatch(rules, -1) {
			if string(m[1]) != job {
				t.Errorf("the ServiceMonitor gives the replicas job=%q, but %s selects job=%q", job, rulesPath, m[1])
			}
		}
	}

	// The settings and the passwords.
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != r.configMap.Name {
		t.Errorf("envFrom %+v: want the ConfigMap %q alone", c.EnvFrom, r.configMap.Name)
	}
	for k := range r.configMap.Data {
		if !strings.HasPrefix(k, "OFFSETKEEPER_") || strings.HasSuffix(k, "_PASSWORD") {
			t.Errorf("setting %s: want OFFSETKEEPER_* and no password", k)
		}
	}
	for _, e := range c.Env {
		ref := e.ValueFrom
		if ref == nil || ref.SecretKeyRef == nil {
			continue
		}
		k := ref.SecretKeyRef
		if r.secret == nil {
			if k.Name == "" {
				t.Errorf("%s: from a Secret without a name", e.Name)
			}
			continue
		}
		if k.Name != r.secret.Name {
			t.Errorf("%s: from Secret %q, the chart made %q", e.Name, k.Name, r.secret.Name)
		}
		if _, ok := r.secret.Data[k.Key]; !ok {
			t.Errorf("%s: from key %q, which the chart's Secret lacks", e.Name, k.Key)
		}
	}

	// Memory: twice the buffer budget at least, request = limit; the grace
	// period above the shutdown timeout and 10 s.
	budget := parseBytes(t, r.configMap.Data["OFFSETKEEPER_MAX_BUFFER_BYTES"])
	limit, request := c.Resources.Limits[corev1.ResourceMemory], c.Resources.Requests[corev1.ResourceMemory]
	if limit.Value() < 2*budget || request.Cmp(limit) != 0 {
		t.Errorf("memory request %s limit %s: want them equal and at least twice OFFSETKEEPER_MAX_BUFFER_BYTES %d", request.String(), limit.String(), budget)
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok && r.configMap.Data["OFFSETKEEPER_GROUP"] == "orders" {
		t.Error("a CPU limit by default: a throttled replica misses its lease keepalives")
	}
	shutdown := parseDuration(t, r.configMap.Data["OFFSETKEEPER_SHUTDOWN_TIMEOUT"])
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g <= shutdown+10 {
		t.Errorf("terminationGracePeriodSeconds %v: want above OFFSETKEEPER_SHUTDOWN_TIMEOUT %ds + 10 s", g, shutdown)
	}
}

// parseBytes reads a --max-buffer-bytes value of the chart's form.
func parseBytes(t *testing.T, s string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^([0-9]+)([KMG])iB$`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("max buffer bytes %q: not NKiB, NMiB or NGiB", s)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n << map[string]int{"K": 10, "M": 20, "G": 30}[m[2]]
}

// parseDuration reads a --shutdown-timeout of the chart's form, in seconds.
func parseDuration(t *testing.T, s string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$`).FindStringSubmatch(s)
	if m == nil || s == "" {
		t.Fatalf("shutdown timeout %q: not in h, m and s", s)
	}
	var secs int64
	for i, mul := range []int64{3600, 60, 1} {
		n, _ := strconv.ParseInt("0"+m[i+1], 10, 64)
		secs += n * mul
	}
	return secs
}

// TestChartAllValues: every documented value set, each shows where it
// should, and every object still decodes strictly.
func TestChartAllValues(t *testing.T) {
	r := decodeRelease(t, "payments", allValues())
	checkConsistent(t, r)
	if r.secret == nil || r.monitor == nil || r.rule == nil || r.pdb == nil {
		t.Fatalf("Secret %v, ServiceMonitor %v, PrometheusRule %v, PodDisruptionBudget %v: want all",
			r.secret != nil, r.monitor != nil, r.rule != nil, r.pdb != nil)
	}
	for what, name := range map[string]string{
		"Deployment": r.deployment.Name, "ServiceMonitor": r.monitor.Name, "PrometheusRule": r.rule.Name,
		"PodDisruptionBudget": r.pdb.Name, "ConfigMap": r.configMap.Name, "Service": r.service.Name, "Secret": r.secret.Name,
	} {
		if !strings.HasPrefix(name, "payments-sink") {
			t.Errorf("%s %q: want fullnameOverride's payments-sink", what, name)
		}
	}
	d, pod := r.deployment, r.deployment.Spec.Template.Spec
	c := r.container(t)
	if *d.Spec.Replicas != 5 {
		t.Errorf("replicas %d, want 5", *d.Spec.Replicas)
	}
	if c.Image != "registry.example.com/offsetkeeper:v1.2.0" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %q pull %q", c.Image, c.ImagePullPolicy)
	}
	if len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "registry-example-com" {
		t.Errorf("imagePullSecrets %v", pod.ImagePullSecrets)
	}
	if got := *pod.TerminationGracePeriodSeconds; got != 90+15 {
		t.Errorf("terminationGracePeriodSeconds %d, want shutdownTimeout 1m30s + 15 s", got)
	}
	res := c.Resources
	if res.Requests.Cpu().String() != "500m" || res.Limits.Cpu().String() != "2" || res.Limits.Memory().String() != "1Gi" || res.Requests.Memory().String() != "1Gi" {
		t.Errorf("resources %v", res)
	}
	if c.Ports[0].ContainerPort != 9500 {
		t.Errorf("container port %d, want httpPort 9500", c.Ports[0].ContainerPort)
	}
	wantData := map[string]string{
		"OFFSETKEEPER_GROUP":            "payments",
		"OFFSETKEEPER_TOPICS":           "payments,refunds",
		"OFFSETKEEPER_SINK":             "clickhouse://offsetkeeper@clickhouse:9000/shop?table=payments",
		"OFFSETKEEPER_ETCD_ENDPOINTS":   "https://etcd-0.etcd:2379,https://etcd-1.etcd:2379",
		"OFFSETKEEPER_BROKERS":          "kafka-0:9093,kafka-1:9093",
		"OFFSETKEEPER_MAX_BUFFER_BYTES": "512MiB",
		"OFFSETKEEPER_SHUTDOWN_TIMEOUT": "1m30s",
		"OFFSETKEEPER_HTTP_ADDR":        ":9500",
	}
	for k, v := range allValues()["settings"].(map[string]any) {
		wantData[k] = v.(string)
	}
	if !maps.Equal(r.configMap.Data, wantData) {
		t.Errorf("settings %v, want %v", r.configMap.Data, wantData)
	}

	// The passwords given: in the chart's Secret, each read by its
	// variable, none optional; no PGPASSWORD for a ClickHouse sink.
	wantSecret := map[string]string{
		"etcd-password": "etcd-secret", "kafka-password": "kafka-secret",
		"schema-registry-password": "registry-secret", "clickhouse-password": "clickhouse-secret",
	}
	gotSecret := map[string]string{}
	for k, v := range r.secret.Data {
		gotSecret[k] = string(v)
	}
	if !maps.Equal(gotSecret, wantSecret) {
		t.Errorf("Secret %v, want %v", gotSecret, wantSecret)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for name, key := range map[string]string{
		"OFFSETKEEPER_ETCD_PASSWORD": "etcd-password", "OFFSETKEEPER_KAFKA_PASSWORD": "kafka-password",
		"OFFSETKEEPER_SCHEMA_REGISTRY_PASSWORD": "schema-registry-password", "OFFSETKEEPER_CLICKHOUSE_PASSWORD": "clickhouse-password",
	} {
		e, ok := env[name]
		switch {
		case !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil:
			t.Errorf("%s: not from the Secret", name)
		case e.ValueFrom.SecretKeyRef.Key != key || e.ValueFrom.SecretKeyRef.Optional != nil:
			t.Errorf("%s: from %+v, want key %s, not optional", name, e.ValueFrom.SecretKeyRef, key)
		}
	}
	if _, ok := env["PGPASSWORD"]; ok {
		t.Error("PGPASSWORD for a ClickHouse sink")
	}

	// Scheduling, pods' metadata, volumes.
	tpl := r.deployment.Spec.Template
	if tpl.Annotations["example.com/team"] != "data" || tpl.Labels["example.com/team"] != "data" {
		t.Errorf("pod annotations %v labels %v: want podAnnotations and podLabels", tpl.Annotations, tpl.Labels)
	}
	if tpl.Annotations["checksum/config"] == "" || tpl.Annotations["checksum/secret"] == "" {
		t.Errorf("pod annotations %v: want the checksums of the settings and the Secret", tpl.Annotations)
	}
	if pod.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Tolerations) != 1 || pod.PriorityClassName != "data-pipelines" {
		t.Errorf("nodeSelector %v tolerations %v priorityClassName %q", pod.NodeSelector, pod.Tolerations, pod.PriorityClassName)
	}
	if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
		len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Errorf("affinity %+v: want the given one instead of the default", a)
	}
	if len(pod.Volumes) != 2 || pod.Volumes[1].Name != "tls" || len(c.VolumeMounts) != 2 || c.VolumeMounts[1].MountPath != "/etc/offsetkeeper/tls" {
		t.Errorf("volumes %+v mounts %+v: want tmp and the extra tls", pod.Volumes, c.VolumeMounts)
	}

	// Monitoring.
	if r.monitor.Labels["release"] != "kube-prometheus-stack" || r.rule.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v, PrometheusRule labels %v: want the given ones", r.monitor.Labels, r.rule.Labels)
	}
	if len(r.monitor.Spec.Endpoints) != 1 || r.monitor.Spec.Endpoints[0].Interval != "15s" {
		t.Errorf("ServiceMonitor endpoints %+v: want interval 15s", r.monitor.Spec.Endpoints)
	}
	raw, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var rules monitoringv1.PrometheusRuleSpec
	if err := decodeStrict(raw, &rules); err != nil {
		t.Fatalf("%s as a PrometheusRule's spec: %v", rulesPath, err)
	}
	if len(rules.Groups) == 0 || !reflect.DeepEqual(rules, r.rule.Spec) {
		t.Errorf("the PrometheusRule's spec is not %s's rules", rulesPath)
	}
}

// TestChartOptionalObjectsOff: the PodDisruptionBudget can be left out,
// and no Secret is made without passwords; the environment then reads
// none.
func TestChartOptionalObjectsOff(t *testing.T) {
	r := decodeRelease(t, "orders", with(requiredValues(), map[string]any{
		"sink":                "stdout:",
		"secrets":             nil,
		"podDisruptionBudget": map[string]any{"enabled": false},
	}))
	if r.pdb != nil || r.secret != nil {
		t.Errorf("PodDisruptionBudget %v Secret %v: want neither", r.pdb != nil, r.secret != nil)
	}
	for _, e := range r.container(t).Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("%s from Secret %q, with no passwords given", e.Name, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	checkConsistent(t, r)
}

// TestChartRefusesBadValues: what the chart cannot deploy is refused at
// render, by the schema or the templates, with a message naming the value.
func TestChartRefusesBadValues(t *testing.T) {
	req := requiredValues()
	pg := map[string]any{"existingSecret": ""}
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"no group", with(req, map[string]any{"group": nil}), "group is required"},
		{"empty group", with(req, map[string]any{"group": ""}), "group is required"},
		{"no topics", with(req, map[string]any{"topics": nil}), "topics is required"},
		{"empty topic", with(req, map[string]any{"topics": []any{""}}), "/topics/0"},
		{"topics a string", with(req, map[string]any{"topics": "orders"}), "/topics"},
		{"no sink", with(req, map[string]any{"sink": nil}), "sink is required"},
		{"no etcd", with(req, map[string]any{"etcdEndpoints": nil}), "etcdEndpoints is required"},
		{"no brokers", with(req, map[string]any{"brokers": []any{}}), "brokers is required"},
		{"postgres without password", with(req, map[string]any{"secrets": pg}), "is PostgreSQL: its password is required"},
		{"postgresql without password", with(req, map[string]any{"secrets": nil, "sink": "postgresql://u@db/x"}), "is PostgreSQL: its password is required"},
		{"secret and passwords", with(req, map[string]any{"secrets": map[string]any{"existingSecret": "s", "postgresPassword": "p"}}), "not both"},
		{"file sink", with(req, map[string]any{"sink": "file:///var/lib/offsetkeeper"}), "a file:// sink writes into the pod"},
		{"unknown sink", with(req, map[string]any{"sink": "kafka://x"}), `sink "kafka://x": want postgres://, clickhouse://, stdout: or discard:`},
		{"password in the URL", with(req, map[string]any{"sink": "postgres://u:hunter2@db/x"}), "a password in the URL"},
		{"postgres password, clickhouse sink", with(req, map[string]any{"sink": "clickhouse://db/x", "secrets": map[string]any{"postgresPassword": "p"}}), "secrets.postgresPassword: the sink"},
		{"clickhouse password, postgres sink", with(req, map[string]any{"secrets": map[string]any{"existingSecret": "", "postgresPassword": "p", "clickhousePassword": "c"}}), "secrets.clickhousePassword: the sink"},
		{"etcd password without user", with(req, map[string]any{"secrets": map[string]any{"existingSecret": "", "postgresPassword": "p", "etcdPassword": "e"}}), "secrets.etcdPassword needs its user: settings.OFFSETKEEPER_ETCD_USER"},
		{"kafka password without user", with(req, map[string]any{"secrets": map[string]any{"existingSecret": "", "postgresPassword": "p", "kafkaPassword": "k"}}), "settings.OFFSETKEEPER_KAFKA_USER"},
		{"a setting of a value", with(req, map[string]any{"settings": map[string]any{"OFFSETKEEPER_GROUP": "x"}}), "settings.OFFSETKEEPER_GROUP: set it with the value group"},
		{"the replica ID", with(req, map[string]any{"settings": map[string]any{"OFFSETKEEPER_REPLICA_ID": "x"}}), "each replica's ID is its pod's name"},
		{"a password setting", with(req, map[string]any{"settings": map[string]any{"OFFSETKEEPER_KAFKA_PASSWORD": "x"}}), "a password goes in secrets"},
		{"a setting not OFFSETKEEPER_", with(req, map[string]any{"settings": map[string]any{"offsetkeeper_group": "x"}}), "'offsetkeeper_group' does not match pattern '^OFFSETKEEPER_[A-Z0-9_]+$'"},
		{"a setting not a string", with(req, map[string]any{"settings": map[string]any{"OFFSETKEEPER_MAX_BLOCK_ROWS": 1000}}), "/settings/OFFSETKEEPER_MAX_BLOCK_ROWS"},
		{"buffer bytes in MB", with(req, map[string]any{"maxBufferBytes": "256MB"}), `maxBufferBytes "256MB": want a whole number of KiB, MiB or GiB`},
		{"memory under twice the buffer", with(req, map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "384Mi"}}}), "resources' memory 384Mi is under twice maxBufferBytes (256MiB)"},
		{"memory request and limit differ", with(req, map[string]any{"resources": map[string]any{"requests": map[string]any{"memory": "1Gi"}, "limits": map[string]any{"memory": "2Gi"}}}), "want them equal"},
		{"memory in M", with(req, map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "600M"}}}), `resources' memory "600M": want a whole number of Ki, Mi or Gi`},
		{"shutdown in ms", with(req, map[string]any{"shutdownTimeout": "500ms"}), `shutdownTimeout "500ms": want a duration in h, m and s`},
		{"shutdown 0", with(req, map[string]any{"shutdownTimeout": "0s"}), `shutdownTimeout "0s": must be above 0`},
		{"no replicas", with(req, map[string]any{"replicas": 0}), "/replicas"},
		{"a misspelt value", with(req, map[string]any{"topic": []any{"orders"}}), "topic"},
		{"a misspelt nested value", with(req, map[string]any{"serviceMonitor": map[string]any{"enable": true}}), "enable"},
		{"a pull policy", with(req, map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}), "/image/pullPolicy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, "orders", tc.vals)
			if err == nil {
				t.Fatalf("values %v render", tc.vals)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}

// TestChartReportsEveryMistakeAtOnce: values with several mistakes are
// refused naming each, in one render, attributed to the Deployment (always
// rendered), not to whichever template came first, a disabled one too.
// Before, each render named one, so a user fixed them one helm run at a
// time.
func TestChartReportsEveryMistakeAtOnce(t *testing.T) {
	vals := with(requiredValues(), map[string]any{"group": nil, "brokers": nil, "sink": "file:///x",
		"settings": map[string]any{"OFFSETKEEPER_KAFKA_PASSWORD": "x"}})
	_, err := render(t, "orders", vals)
	if err == nil {
		t.Fatal("values with four mistakes render")
	}
	for _, want := range []string{"4 values to fix", "group is required", "brokers is required", "a file:// sink writes into the pod",
		"settings.OFFSETKEEPER_KAFKA_PASSWORD: a password goes in secrets", "templates/deployment.yaml"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	for _, not := range []string{"prometheusrule", "servicemonitor", "poddisruptionbudget", "configmap"} {
		if strings.Contains(err.Error(), not) {
			t.Errorf("error %q is attributed to %s", err, not)
		}
	}
}

// TestChartAllValuesAreDocumented: every value of values.yaml is set by
// allValues (so TestChartAllValues renders each away from its default)
// and allValues sets none that values.yaml lacks.
func TestChartAllValuesAreDocumented(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var defaults map[string]any
	if err := yaml.Unmarshal(raw, &defaults); err != nil {
		t.Fatal(err)
	}
	all, err := json.Marshal(allValues()) // as values files give them
	if err != nil {
		t.Fatal(err)
	}
	var given map[string]any
	if err := json.Unmarshal(all, &given); err != nil {
		t.Fatal(err)
	}
	// Maps whose keys are the user's (labels, settings...) are leaves.
	open := map[string]bool{"settings": true, "serviceMonitor.labels": true, "prometheusRule.labels": true,
		"podAnnotations": true, "podLabels": true, "nodeSelector": true, "affinity": true}
	// Values allValues leaves at their defaults, and the test that sets
	// them.
	elsewhere := map[string]string{
		"secrets.existingSecret":      "TestChartDefaults",
		"secrets.postgresPassword":    "TestChartRefusesBadValues (allValues' sink is ClickHouse)",
		"podDisruptionBudget.enabled": "TestChartOptionalObjectsOff",
	}
	var walk func(path string, d, g map[string]any)
	walk = func(path string, d, g map[string]any) {
		for _, k := range slices.Sorted(maps.Keys(d)) {
			p := strings.TrimPrefix(path+"."+k, ".")
			gv, ok := g[k]
			if !ok {
				t.Errorf("values.yaml's %s: not set by allValues", p)
				continue
			}
			dm, dIsMap := d[k].(map[string]any)
			gm, gIsMap := gv.(map[string]any)
			if dIsMap && gIsMap && !open[p] {
				walk(p, dm, gm)
				continue
			}
			if _, tested := elsewhere[p]; reflect.DeepEqual(d[k], gv) && !tested {
				t.Errorf("values.yaml's %s: allValues gives its default %v", p, gv)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(g)) {
			if _, ok := d[k]; !ok {
				t.Errorf("allValues sets %s, which values.yaml does not document", strings.TrimPrefix(path+"."+k, "."))
			}
		}
	}
	walk("", defaults, given)

	// Every value has its schema: a misspelt one is refused.
	schema, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties map[string]struct {
			Properties map[string]any `json:"properties"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		t.Fatal(err)
	}
	for _, k := range slices.Sorted(maps.Keys(defaults)) {
		p, ok := s.Properties[k]
		if !ok {
			t.Errorf("values.yaml's %s is not in values.schema.json: with additionalProperties false, it would be refused", k)
			continue
		}
		if m, isMap := defaults[k].(map[string]any); isMap && !open[k] && p.Properties != nil {
			keys := slices.Sorted(maps.Keys(m))
			if !reflect.DeepEqual(keys, slices.Sorted(maps.Keys(p.Properties))) {
				t.Errorf("values.yaml's %s has %v, values.schema.json %v", k, keys, slices.Sorted(maps.Keys(p.Properties)))
			}
		}
	}
}

// TestChartRulesAreDeployPrometheusRules: the chart's copy of the alert
// rules (a chart reads only its own files) is deploy/prometheus'.
func TestChartRulesAreDeployPrometheusRules(t *testing.T) {
	want, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(chartRulesPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("deploy/helm/%s differs from deploy/prometheus/offsetkeeper.rules.yml, the source: "+
			"cp deploy/prometheus/offsetkeeper.rules.yml deploy/helm/%s", chartRulesPath, chartRulesPath)
	}
}

// TestChartNamesAreDNSLabels: the objects' names follow the release's,
// and the Service's stays a DNS label however long the release's.
func TestChartNamesAreDNSLabels(t *testing.T) {
	long := strings.Repeat("x", 60)
	for _, tc := range []struct {
		release string
		vals    map[string]any
		want    string
	}{
		{"offsetkeeper", nil, "offsetkeeper"},
		{"orders-offsetkeeper-prod", nil, "orders-offsetkeeper-prod"},
		{"orders", nil, "orders-offsetkeeper"},
		{"orders", map[string]any{"fullnameOverride": "sink"}, "sink"},
		{long[:50], nil, long[:50] + "-o"},
	} {
		r := decodeRelease(t, tc.release, with(requiredValues(), tc.vals))
		if r.deployment.Name != tc.want {
			t.Errorf("release %q %v: Deployment %q, want %q", tc.release, tc.vals, r.deployment.Name, tc.want)
		}
		if errs := validation.IsDNS1035Label(r.service.Name); len(errs) > 0 {
			t.Errorf("release %q: Service %q: %v", tc.release, r.service.Name, errs)
		}
	}
}

// TestChartReadmeExample: the values file of the chart's README renders.
func TestChartReadmeExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindSubmatch(raw)
	if m == nil {
		t.Fatal("the chart's README has no values file (```yaml)")
	}
	var vals map[string]any
	if err := yaml.Unmarshal(m[1], &vals); err != nil {
		t.Fatalf("the README's values: %v", err)
	}
	r := decodeRelease(t, "orders", vals)
	checkConsistent(t, r)
	if r.monitor == nil {
		t.Error("the README's values enable the ServiceMonitor; none rendered")
	}
}

// TestChartPostgresPasswordValue: a PostgreSQL sink's password given as a
// value is in the chart's Secret and read as PGPASSWORD, not optional; no
// other password is read.
func TestChartPostgresPasswordValue(t *testing.T) {
	r := decodeRelease(t, "orders", with(requiredValues(), map[string]any{
		"secrets": map[string]any{"existingSecret": "", "postgresPassword": "hunter2"},
	}))
	checkConsistent(t, r)
	if r.secret == nil || string(r.secret.Data["postgres-password"]) != "hunter2" || len(r.secret.Data) != 1 {
		t.Fatalf("Secret %+v: want postgres-password alone", r.secret)
	}
	var refs []string
	for _, e := range r.container(t).Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		refs = append(refs, e.Name)
		if k := e.ValueFrom.SecretKeyRef; e.Name != "PGPASSWORD" || k.Key != "postgres-password" || k.Optional != nil {
			t.Errorf("%s from %+v: want PGPASSWORD from postgres-password alone, not optional", e.Name, k)
		}
	}
	if len(refs) != 1 {
		t.Errorf("variables from the Secret %v, want PGPASSWORD", refs)
	}
}
