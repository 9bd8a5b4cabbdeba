// Package kubernetes_test checks the manifests of this directory as data:
// no cluster runs where the tests do. Every manifest must decode strictly
// into its Kubernetes API type (an unknown or misspelled field, or a key
// given twice, is refused), and the objects must refer to each other
// consistently. cmd/offsetkeeper/k8s_test.go checks the replicas' command
// line and environment against the CLI's own validation.
package kubernetes_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
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
	dockerfilePath = "../../Dockerfile"
	// rulesPath holds the alerts, which select the replicas' series by
	// their job label (up{job="offsetkeeper"}).
	rulesPath = "../prometheus/offsetkeeper.rules.yml"
)

// kustomization is the part of kustomization.yaml these manifests use;
// decoded strictly, a field kustomize would read but this test does not
// know is refused, so the test cannot miss what the file says.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
	Replicas []struct {
		Name  string `json:"name"`
		Count int32  `json:"count"`
	} `json:"replicas"`
	ConfigMapGenerator []struct {
		Name     string   `json:"name"`
		Literals []string `json:"literals"`
	} `json:"configMapGenerator"`
}

// decodeStrict decodes YAML into v as the API server does, and refuses
// what the server would drop or guess at: a key given twice
// (YAMLToJSONStrict) and a field v does not have. Field names match case
// sensitively, as the server's decoder matches them (sigs.k8s.io/json):
// encoding/json would take readonlyRootFilesystem for
// readOnlyRootFilesystem, which the server ignores.
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

// group is what the directory applies, decoded.
type group struct {
	kust       kustomization
	deployment *appsv1.Deployment
	service    *corev1.Service
	monitor    *monitoringv1.ServiceMonitor
	pdb        *policyv1.PodDisruptionBudget
	secret     *corev1.Secret
	configMap  *corev1.ConfigMap // made from configMapGenerator, as kustomize does
}

// typeFor is the API type of a manifest's apiVersion and kind.
func typeFor(apiVersion, kind string) (any, bool) {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, true
	case "v1 Service":
		return &corev1.Service{}, true
	case "v1 Secret":
		return &corev1.Secret{}, true
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, true
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case monitoringv1.SchemeGroupVersion.String() + " " + monitoringv1.ServiceMonitorsKind:
		return &monitoringv1.ServiceMonitor{}, true
	}
	return nil, false
}

// decodeManifest decodes one manifest into the API type its apiVersion
// and kind name.
func decodeManifest(raw []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(raw, &tm); err != nil {
		return nil, err
	}
	obj, ok := typeFor(tm.APIVersion, tm.Kind)
	if !ok {
		return nil, fmt.Errorf("apiVersion %q kind %q: not a type this directory is checked against", tm.APIVersion, tm.Kind)
	}
	return obj, decodeStrict(raw, obj)
}

func loadGroup(t *testing.T) group {
	t.Helper()
	var g group
	raw, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeStrict(raw, &g.kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if g.kust.APIVersion != "kustomize.config.k8s.io/v1beta1" || g.kust.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml: apiVersion %q kind %q", g.kust.APIVersion, g.kust.Kind)
	}
	for _, name := range g.kust.Resources {
		raw, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("kustomization.yaml lists %s: %v", name, err)
		}
		obj, err := decodeManifest(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		set := func(dst any) {
			if !reflectSet(dst, obj) {
				t.Fatalf("%s: a second %T", name, obj)
			}
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			set(&g.deployment)
		case *corev1.Service:
			set(&g.service)
		case *monitoringv1.ServiceMonitor:
			set(&g.monitor)
		case *policyv1.PodDisruptionBudget:
			set(&g.pdb)
		case *corev1.Secret:
			set(&g.secret)
		default:
			t.Fatalf("%s: %T is not expected here", name, o)
		}
	}
	if g.deployment == nil || g.service == nil || g.monitor == nil || g.pdb == nil {
		t.Fatalf("kustomization.yaml's resources lack a Deployment, Service, ServiceMonitor or PodDisruptionBudget: %v", g.kust.Resources)
	}
	// The Secret is created by the operator, never applied with the rest:
	// a placeholder applied again would overwrite the real password.
	if g.secret != nil {
		t.Fatalf("kustomization.yaml's resources hold a Secret: kubectl apply -k would replace the operator's passwords with its values")
	}
	raw, err = os.ReadFile("secret.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	obj, err := decodeManifest(raw)
	if err != nil {
		t.Fatalf("secret.example.yaml: %v", err)
	}
	s, ok := obj.(*corev1.Secret)
	if !ok {
		t.Fatalf("secret.example.yaml holds a %T, want a Secret", obj)
	}
	g.secret = s
	if len(g.kust.ConfigMapGenerator) != 1 {
		t.Fatalf("kustomization.yaml: %d configMapGenerators, want the settings' one", len(g.kust.ConfigMapGenerator))
	}
	gen := g.kust.ConfigMapGenerator[0]
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: gen.Name},
		Data:       map[string]string{},
	}
	for _, l := range gen.Literals {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Errorf("configMapGenerator literal %q: want KEY=VALUE", l)
			continue
		}
		if errs := validation.IsConfigMapKey(k); len(errs) > 0 {
			t.Errorf("configMapGenerator literal %q: %v", l, errs)
		}
		if _, dup := cm.Data[k]; dup {
			t.Errorf("configMapGenerator: %s given twice", k)
		}
		cm.Data[k] = v
	}
	// The ConfigMap kustomize makes decodes strictly too.
	out, err := yaml.Marshal(cm)
	if err != nil {
		t.Fatal(err)
	}
	g.configMap = &corev1.ConfigMap{}
	if err := decodeStrict(out, g.configMap); err != nil {
		t.Fatalf("the generated ConfigMap: %v", err)
	}
	return g
}

// reflectSet stores obj in *dst (a **T) unless it holds one already.
func reflectSet(dst, obj any) bool {
	switch d := dst.(type) {
	case **appsv1.Deployment:
		if *d != nil {
			return false
		}
		*d = obj.(*appsv1.Deployment)
	case **corev1.Service:
		if *d != nil {
			return false
		}
		*d = obj.(*corev1.Service)
	case **monitoringv1.ServiceMonitor:
		if *d != nil {
			return false
		}
		*d = obj.(*monitoringv1.ServiceMonitor)
	case **policyv1.PodDisruptionBudget:
		if *d != nil {
			return false
		}
		*d = obj.(*policyv1.PodDisruptionBudget)
	case **corev1.Secret:
		if *d != nil {
			return false
		}
		*d = obj.(*corev1.Secret)
	}
	return true
}

// TestK8sManifestsDecodeStrictly: every manifest of the directory but the
// examples is in kustomization.yaml's resources and decodes strictly into
// its API type.
func TestK8sManifestsDecodeStrictly(t *testing.T) {
	loadGroup(t) // decodes each resource strictly, and the generated ConfigMap
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	raw, _ := os.ReadFile("kustomization.yaml")
	if err := decodeStrict(raw, &k); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		// Examples (the Secret) are applied by hand, once.
		if f != "kustomization.yaml" && !strings.HasSuffix(f, ".example.yaml") && !slices.Contains(k.Resources, f) {
			t.Errorf("%s is not in kustomization.yaml's resources: kubectl apply -k would leave it out", f)
		}
	}
	for _, r := range k.Resources {
		if !slices.Contains(files, r) {
			t.Errorf("kustomization.yaml lists %s, which is not a file of the directory", r)
		}
	}
}

// TestK8sStrictDecodingRefusesMistakes: the decoding the other tests rely
// on refuses a misspelled field at any depth and a key given twice, so a
// manifest that passes has no field the API server would drop.
func TestK8sStrictDecodingRefusesMistakes(t *testing.T) {
	for _, tc := range []struct {
		file, old, new string
	}{
		{"deployment.yaml", "terminationGracePeriodSeconds:", "terminationGracePeriodSecond:"},
		{"deployment.yaml", "readOnlyRootFilesystem:", "readonlyRootFilesystem:"},
		{"deployment.yaml", "periodSeconds: 5", "periodSecond: 5"},
		{"deployment.yaml", "  replicas: 3", "  replicas: 3\n  replicas: 4"},
		{"service.yaml", "targetPort:", "targetport:"},
		{"servicemonitor.yaml", "  endpoints:", "  endpoint:"},
		{"servicemonitor.yaml", "interval:", "intervall:"},
		{"poddisruptionbudget.yaml", "maxUnavailable:", "maxUnavailble:"},
		{"secret.example.yaml", "stringData:", "stringdata:"},
		{"kustomization.yaml", "\nconfigMapGenerator:", "\nconfigmapGenerator:"},
		{"kustomization.yaml", "    literals:", "    literal:"},
	} {
		t.Run(tc.file+" "+strings.TrimSpace(tc.new), func(t *testing.T) {
			raw, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(raw, []byte(tc.old)) {
				t.Fatalf("%s has no %q to misspell", tc.file, tc.old)
			}
			bad := bytes.Replace(raw, []byte(tc.old), []byte(tc.new), 1)
			if tc.file == "kustomization.yaml" {
				err = decodeStrict(bad, &kustomization{})
			} else {
				_, err = decodeManifest(bad)
			}
			if err == nil {
				t.Fatalf("%s with %q instead of %q decodes", tc.file, tc.new, tc.old)
			}
		})
	}
}

// TestK8sObjectsReferToEachOther: names, labels, selectors and ports agree.
func TestK8sObjectsReferToEachOther(t *testing.T) {
	g := loadGroup(t)
	d, pod := g.deployment, &g.deployment.Spec.Template

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
	selects("the PodDisruptionBudget's selector", g.pdb.Spec.Selector)
	if g.pdb.Spec.MaxUnavailable == nil || g.pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("the PodDisruptionBudget allows %v unavailable, want 1", g.pdb.Spec.MaxUnavailable)
	}
	if len(g.service.Spec.Selector) == 0 || !labels.SelectorFromSet(g.service.Spec.Selector).Matches(podLabels) {
		t.Errorf("the Service's selector %v does not select the pods %v", g.service.Spec.Selector, pod.Labels)
	}

	// The ServiceMonitor picks Services by their own labels.
	sm, err := metav1.LabelSelectorAsSelector(&g.monitor.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if sm.Empty() || !sm.Matches(labels.Set(g.service.Labels)) {
		t.Errorf("the ServiceMonitor's selector %v does not select the Service's labels %v", g.monitor.Spec.Selector, g.service.Labels)
	}

	// Scheduling and safety of the pod.
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want offsetkeeper alone", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	aff := pod.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Fatal("no preferred pod anti-affinity")
	}
	for _, w := range aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		if w.PodAffinityTerm.TopologyKey != corev1.LabelHostname {
			t.Errorf("anti-affinity over %q, want %s (nodes)", w.PodAffinityTerm.TopologyKey, corev1.LabelHostname)
		}
		selects("the anti-affinity's selector", w.PodAffinityTerm.LabelSelector)
	}

	// The Dockerfile's user, not root, and a read-only root.
	df, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	uid := regexp.MustCompile(`user nonroot \((\d+)\)`).FindSubmatch(df)
	if uid == nil || !regexp.MustCompile(`(?m)^USER nonroot:nonroot$`).Match(df) {
		t.Fatal("the Dockerfile no longer runs as nonroot (65532): update the pod's securityContext and this test")
	}
	want, _ := strconv.ParseInt(string(uid[1]), 10, 64)
	psc, csc := pod.Spec.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot:
		t.Error("the pod does not say runAsNonRoot: true")
	case psc.RunAsUser == nil || *psc.RunAsUser != want || psc.RunAsGroup == nil || *psc.RunAsGroup != want:
		t.Errorf("the pod runs as %v:%v, want the Dockerfile's nonroot %d", psc.RunAsUser, psc.RunAsGroup, want)
	}
	switch {
	case csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem:
		t.Error("the container's root filesystem is writable: want readOnlyRootFilesystem: true")
	case csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation:
		t.Error("the container allows privilege escalation")
	case csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL"):
		t.Error("the container keeps its capabilities: want drop [ALL]")
	}
	if pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks {
		t.Error("service links are on: every Service of the namespace would add variables to the pod's environment")
	}

	// The Service's port is the container's, by name, and the
	// ServiceMonitor scrapes it by name.
	var httpPort *corev1.ContainerPort
	for i, p := range c.Ports {
		if p.Name == "http" {
			httpPort = &c.Ports[i]
		}
	}
	if httpPort == nil {
		t.Fatalf("the container has no port named http: %v", c.Ports)
	}
	var metricsPort *corev1.ServicePort
	for i, p := range g.service.Spec.Ports {
		if p.Name == "metrics" {
			metricsPort = &g.service.Spec.Ports[i]
		}
	}
	if metricsPort == nil {
		t.Fatalf("the Service has no port named metrics: %v", g.service.Spec.Ports)
	}
	if tp := metricsPort.TargetPort; tp.StrVal != httpPort.Name && int32(tp.IntValue()) != httpPort.ContainerPort {
		t.Errorf("the Service's port targets %s, not the container's port %s (%d)", tp.String(), httpPort.Name, httpPort.ContainerPort)
	}
	if len(g.monitor.Spec.Endpoints) == 0 {
		t.Fatal("the ServiceMonitor has no endpoints")
	}
	for _, ep := range g.monitor.Spec.Endpoints {
		if ep.Port != metricsPort.Name {
			t.Errorf("the ServiceMonitor scrapes port %q, want the Service's %q by name", ep.Port, metricsPort.Name)
		}
		if ep.Path != "" && ep.Path != "/metrics" {
			t.Errorf("the ServiceMonitor scrapes %s, want /metrics", ep.Path)
		}
	}
	// The Prometheus Operator's job label: the value of the Service's label
	// jobLabel names, else the Service's name.
	job := g.service.Name
	if g.monitor.Spec.JobLabel != "" {
		job = g.service.Labels[g.monitor.Spec.JobLabel]
	}
	rules, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	jobs := regexp.MustCompile(`job="([^"]*)"`).FindAllSubmatch(rules, -1)
	if len(jobs) == 0 {
		t.Errorf("%s selects no job: update this test", rulesPath)
	}
	for _, m := range jobs {
		if string(m[1]) != job {
			t.Errorf("the ServiceMonitor gives the replicas job=%q, but %s selects job=%q", job, rulesPath, m[1])
		}
	}
	if g.service.Name == "offsetkeeper" {
		t.Error("the Service is named offsetkeeper: its service links (OFFSETKEEPER_PORT...) would look like the CLI's variables")
	}

	// Probes on the port named http.
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", name)
			continue
		}
		if port := p.HTTPGet.Port; port.StrVal != httpPort.Name && int32(port.IntValue()) != httpPort.ContainerPort {
			t.Errorf("the %s probe asks port %s, not the replica's %s (%d)", name, port.String(), httpPort.Name, httpPort.ContainerPort)
		}
	}

	// The configuration and the passwords.
	var fromConfig bool
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil && ef.ConfigMapRef.Name == g.configMap.Name:
			fromConfig = true
		case ef.ConfigMapRef != nil:
			t.Errorf("envFrom ConfigMap %q: kustomization.yaml generates %q", ef.ConfigMapRef.Name, g.configMap.Name)
		case ef.SecretRef != nil && ef.SecretRef.Name != g.secret.Name:
			t.Errorf("envFrom Secret %q: the Secret is %q", ef.SecretRef.Name, g.secret.Name)
		}
	}
	if !fromConfig {
		t.Errorf("the container does not take the settings (envFrom ConfigMap %q)", g.configMap.Name)
	}
	secretKeys := map[string]bool{}
	for k := range g.secret.StringData {
		secretKeys[k] = true
	}
	for k := range g.secret.Data {
		secretKeys[k] = true
	}
	used := map[string]bool{}
	for _, e := range c.Env {
		ref := e.ValueFrom
		if ref == nil || ref.SecretKeyRef == nil {
			continue
		}
		r := ref.SecretKeyRef
		used[r.Key] = true
		optional := r.Optional != nil && *r.Optional
		switch {
		case r.Name != g.secret.Name:
			t.Errorf("%s comes from Secret %q, which is not secret.example.yaml's %q", e.Name, r.Name, g.secret.Name)
		case !secretKeys[r.Key] && !optional:
			t.Errorf("%s comes from key %q, which the Secret lacks (keys %v): the pod would not start", e.Name, r.Key, slices.Sorted(maps.Keys(secretKeys)))
		}
		if errs := validation.IsConfigMapKey(r.Key); len(errs) > 0 {
			t.Errorf("Secret key %q: %v", r.Key, errs)
		}
	}
	for k := range secretKeys {
		if !used[k] {
			t.Errorf("Secret key %q: no variable of the container reads it", k)
		}
	}

	// The kustomization names what the files name.
	if len(g.kust.Replicas) != 1 || g.kust.Replicas[0].Name != d.Name || g.kust.Replicas[0].Count < 2 {
		t.Errorf("kustomization.yaml's replicas %+v: want one entry for Deployment %q, of 2 or more (a group of one has no one to take over)", g.kust.Replicas, d.Name)
	}
	if len(g.kust.Images) != 1 || g.kust.Images[0].Name != c.Image {
		t.Errorf("kustomization.yaml's images %+v: want one entry for the container's image %q", g.kust.Images, c.Image)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("the Deployment has %v replicas, want 2 or more", d.Spec.Replicas)
	}
	for _, k := range []string{"OFFSETKEEPER_GROUP", "OFFSETKEEPER_TOPICS", "OFFSETKEEPER_SINK"} {
		if g.configMap.Data[k] == "" {
			t.Errorf("kustomization.yaml's settings do not set %s", k)
		}
	}
}
