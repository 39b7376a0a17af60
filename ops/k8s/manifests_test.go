// The manifests of ops/k8s, checked the way the API server reads them (strict
// decoding into the typed objects: an unknown or misspelt field is an error)
// and for what they mean: every flag a container passes exists in the ludus
// binary, every selector selects the pods it should, sim nodes drain before
// they stop, and the NetworkPolicies keep sim nodes and gateways away from
// PostgreSQL.
package k8s

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	namespace  = "ludus"
	ludusImage = "ludus:latest"
)

// ---------------------------------------------------------------- decoding

// codecs decode the kinds the manifests may hold, strictly: unknown fields
// and duplicate fields are errors, field names are case-sensitive (the API
// server's own decoder), and any other kind is an error.
var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		appsv1.AddToScheme, corev1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict)
}()

// allowedKinds are the only apiVersion/kind pairs the manifests use.
var allowedKinds = map[string]bool{
	"apps/v1/Deployment": true, "apps/v1/StatefulSet": true,
	"v1/Service": true, "v1/Secret": true, "v1/Namespace": true, "v1/ConfigMap": true,
	"policy/v1/PodDisruptionBudget": true, "networking.k8s.io/v1/NetworkPolicy": true,
}

// decode decodes one YAML document strictly into its typed object.
func decode(doc []byte) (runtime.Object, error) {
	obj, gvk, err := codecs.UniversalDeserializer().Decode(doc, nil, nil)
	if err != nil {
		return nil, err
	}
	if k := gvk.GroupVersion().String() + "/" + gvk.Kind; !allowedKinds[k] {
		return nil, fmt.Errorf("kind %s is not one the manifests may use", k)
	}
	return obj, nil
}

// object is one decoded document.
type object struct {
	where string // file#index
	obj   runtime.Object
}

// splitDocs returns the YAML documents of a file that hold more than comments.
func splitDocs(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, err
		}
		if v != nil {
			docs = append(docs, doc)
		}
	}
}

func decodeFile(path string) ([]object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	docs, err := splitDocs(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []object
	for i, doc := range docs {
		obj, err := decode(doc)
		if err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", filepath.Base(path), i+1, err)
		}
		out = append(out, object{fmt.Sprintf("%s#%d", filepath.Base(path), i+1), obj})
	}
	return out, nil
}

// kustomization is the part of kustomization.yaml the manifests use.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
}

// manifests is everything in ops/k8s.
type manifests struct {
	objects []object // the resources kustomization.yaml lists
	secrets []object // secrets.example.yaml: the Secrets operators create
}

// loadManifests reads kustomization.yaml, checks that it lists every manifest
// file (*.example.yaml aside), and decodes them all.
func loadManifests(t *testing.T) manifests {
	t.Helper()
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" || k.Namespace != namespace {
		t.Errorf("kustomization.yaml: %s %s namespace %q", k.APIVersion, k.Kind, k.Namespace)
	}
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		if f != "kustomization.yaml" && !strings.HasSuffix(f, ".example.yaml") {
			want = append(want, f)
		}
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization.yaml lists %v; the manifest files are %v", got, want)
	}
	var m manifests
	for _, f := range k.Resources {
		objs, err := decodeFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m.objects = append(m.objects, objs...)
	}
	if m.secrets, err = decodeFile("secrets.example.yaml"); err != nil {
		t.Fatal(err)
	}
	for _, o := range m.secrets {
		if _, ok := o.obj.(*corev1.Secret); !ok {
			t.Errorf("%s: secrets.example.yaml holds a %T", o.where, o.obj)
		}
	}
	if len(m.objects) < 10 {
		t.Fatalf("only %d objects in ops/k8s", len(m.objects))
	}
	return m
}

// Strict decoding rejects what the API server would: this is what makes the
// checks below worth anything.
func TestDecodeIsStrict(t *testing.T) {
	const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: x
spec:
  %s
  selector:
    matchLabels: {a: b}
  template:
    metadata:
      labels: {a: b}
    spec:
      containers:
        - name: c
          image: i
          %s
`
	tests := []struct {
		name    string
		doc     string
		wantErr string
	}{
		{"valid", fmt.Sprintf(deployment, "replicas: 2", "args: [x]"), ""},
		{"misspelt spec field", fmt.Sprintf(deployment, "replica: 2", "args: [x]"), "unknown field"},
		{"misspelt container field", fmt.Sprintf(deployment, "replicas: 2", "arg: [x]"), "unknown field"},
		{"wrong case", fmt.Sprintf(deployment, "Replicas: 2", "args: [x]"), "unknown field"},
		{"duplicate field", fmt.Sprintf(deployment, "replicas: 2\n  replicas: 3", "args: [x]"), "already set"},
		{"wrong type", fmt.Sprintf(deployment, "replicas: two", "args: [x]"), "replicas"},
		{"misspelt probe field", fmt.Sprintf(deployment, "replicas: 1", "readinessProbe: {httpGet: {path: /, prot: 80}}"), "unknown field"},
		{"unknown kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", "not one the manifests may use"},
		{"unregistered kind", "apiVersion: autoscaling.agones.dev/v1\nkind: FleetAutoscaler\nmetadata: {name: x}\n", "no kind"},
		{"old apiVersion", "apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: x}\n", "no kind"},
		{"no kind", "metadata: {name: x}\n", "Kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decode([]byte(tt.doc))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("decode: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("decode = %v, want an error about %q", err, tt.wantErr)
			}
		})
	}
}

func TestManifestsDecode(t *testing.T) {
	m := loadManifests(t)
	for _, o := range append(m.objects, m.secrets...) {
		meta := o.obj.(metav1.Object)
		_, isNS := o.obj.(*corev1.Namespace)
		if !isNS && meta.GetNamespace() != namespace {
			t.Errorf("%s %s: namespace %q, want %q", o.where, meta.GetName(), meta.GetNamespace(), namespace)
		}
	}
}

// ---------------------------------------------------------------- workloads

// workload is a Deployment or StatefulSet.
type workload struct {
	where, kind, name string
	selector          *metav1.LabelSelector
	template          *corev1.PodTemplateSpec
	replicas          *int32
}

func (m manifests) workloads() []workload {
	var out []workload
	for _, o := range m.objects {
		switch w := o.obj.(type) {
		case *appsv1.Deployment:
			out = append(out, workload{o.where, "Deployment", w.Name, w.Spec.Selector, &w.Spec.Template, w.Spec.Replicas})
		case *appsv1.StatefulSet:
			out = append(out, workload{o.where, "StatefulSet", w.Name, w.Spec.Selector, &w.Spec.Template, w.Spec.Replicas})
		}
	}
	return out
}

func (m manifests) component(c string) []workload {
	var out []workload
	for _, w := range m.workloads() {
		if w.template.Labels["app.kubernetes.io/component"] == c {
			out = append(out, w)
		}
	}
	return out
}

func selects(sel *metav1.LabelSelector, l map[string]string) (bool, error) {
	if sel == nil {
		return false, errors.New("no selector")
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	if s.Empty() {
		return false, errors.New("empty selector (selects everything)")
	}
	return s.Matches(labels.Set(l)), nil
}

// selected lists the workloads whose pods sel selects.
func (m manifests) selected(sel *metav1.LabelSelector) ([]workload, error) {
	var out []workload
	for _, w := range m.workloads() {
		ok, err := selects(sel, w.template.Labels)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, w)
		}
	}
	return out, nil
}

func TestSelectorsMatchPods(t *testing.T) {
	m := loadManifests(t)
	if len(m.workloads()) < 4 {
		t.Fatalf("only %d workloads", len(m.workloads()))
	}
	services := map[string]*corev1.Service{}
	for _, o := range m.objects {
		if s, ok := o.obj.(*corev1.Service); ok {
			services[s.Name] = s
		}
	}
	for _, w := range m.workloads() {
		if ok, err := selects(w.selector, w.template.Labels); err != nil || !ok {
			t.Errorf("%s %s: selector does not select its own pods (%v)", w.where, w.name, err)
		}
	}
	for _, o := range m.objects {
		switch x := o.obj.(type) {
		case *appsv1.StatefulSet:
			if s := services[x.Spec.ServiceName]; s == nil || s.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("%s: serviceName %q is not a headless Service of the manifests", o.where, x.Spec.ServiceName)
			}
		case *corev1.Service:
			if err := checkService(m, x); err != nil {
				t.Errorf("%s: %v", o.where, err)
			}
		case *policyv1.PodDisruptionBudget:
			ws, err := m.selected(x.Spec.Selector)
			if err != nil || len(ws) == 0 {
				t.Errorf("%s: PodDisruptionBudget %s selects no workload (%v)", o.where, x.Name, err)
			}
		}
	}
}

// checkService checks that a Service selects pods and that each of its ports
// reaches a port their containers declare.
func checkService(m manifests, s *corev1.Service) error {
	ws, err := m.selected(&metav1.LabelSelector{MatchLabels: s.Spec.Selector})
	if err != nil {
		return fmt.Errorf("Service %s: %w", s.Name, err)
	}
	if len(ws) == 0 {
		return fmt.Errorf("Service %s selects no workload's pods", s.Name)
	}
	for _, w := range ws {
		for _, p := range s.Spec.Ports {
			if !hasPort(w.template.Spec.Containers, p.TargetPort) {
				return fmt.Errorf("Service %s port %s: no container of %s declares target port %s", s.Name, p.Name, w.name, p.TargetPort.String())
			}
		}
	}
	return nil
}

func hasPort(cs []corev1.Container, p intstr.IntOrString) bool {
	for _, c := range cs {
		for _, cp := range c.Ports {
			if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
				return true
			}
		}
	}
	return false
}

// ---------------------------------------------------------------- the binary

// binary is what the ludus binary accepts: each role's flags, ctl's usage,
// and the LUDUS_ environment variables its sources read.
type binary struct {
	flags    map[string]map[string]bool // role → flag names
	ctlUsage string
	env      map[string]bool
}

var (
	binOnce sync.Once
	bin     binary
	binErr  error
)

// ludusBinary builds cmd/ludus once and reads its help: the flag sets live in
// the role functions, so the binary's own -h output is the one source of truth.
func ludusBinary(t *testing.T) binary {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build cmd/ludus: %v", err)
	}
	binOnce.Do(func() { bin, binErr = buildBinary(goTool) })
	if binErr != nil {
		t.Fatal(binErr)
	}
	return bin
}

var (
	flagLine  = regexp.MustCompile(`(?m)^\s+-([a-z0-9][a-z0-9-]*)\b`)
	usageFlag = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	envLit    = regexp.MustCompile(`"(LUDUS_[A-Z0-9_]+)"`)
)

func buildBinary(goTool string) (binary, error) {
	dir, err := os.MkdirTemp("", "ludus-k8s-test")
	if err != nil {
		return binary{}, err
	}
	defer os.RemoveAll(dir)
	exe := filepath.Join(dir, "ludus")
	if out, err := exec.Command(goTool, "build", "-o", exe, "ludus.dev/ludus/cmd/ludus").CombinedOutput(); err != nil {
		return binary{}, fmt.Errorf("go build cmd/ludus: %v\n%s", err, out)
	}
	b := binary{flags: map[string]map[string]bool{}, env: map[string]bool{}}
	for _, role := range []string{"backend", "gateway", "simnode"} {
		out, _ := exec.Command(exe, role, "-h").CombinedOutput() // exits 1 after the help
		if strings.Contains(string(out), "unknown command") {
			return binary{}, fmt.Errorf("ludus has no role %s", role)
		}
		b.flags[role] = map[string]bool{}
		for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
			b.flags[role][m[1]] = true
		}
		if !b.flags[role]["listen"] || !b.flags[role]["etcd"] {
			return binary{}, fmt.Errorf("ludus %s -h lists no --listen or --etcd; is the help parsed right?\n%s", role, out)
		}
	}
	out, _ := exec.Command(exe, "ctl", "-h").CombinedOutput()
	b.ctlUsage = string(out)
	if !strings.Contains(b.ctlUsage, "--key-file") {
		return binary{}, fmt.Errorf("ludus ctl -h does not describe --key-file:\n%s", out)
	}
	srcs, err := filepath.Glob("../../cmd/ludus/*.go")
	if err != nil {
		return binary{}, err
	}
	for _, f := range srcs {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return binary{}, err
		}
		for _, m := range envLit.FindAllStringSubmatch(string(src), -1) {
			b.env[m[1]] = true
		}
	}
	if !b.env["LUDUS_CLUSTER_TOKEN"] {
		return binary{}, errors.New("cmd/ludus reads no LUDUS_CLUSTER_TOKEN; is the source scan rooted right?")
	}
	return b, nil
}

// ---------------------------------------------------------------- containers

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkContainer checks one container of a workload against the binary and
// the other manifests; it returns every problem found.
func checkContainer(m manifests, b binary, c corev1.Container) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("container %s: "+format, append([]any{c.Name}, args...)...))
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
		if strings.HasPrefix(e.Name, "LUDUS_") && !b.env[e.Name] {
			bad("env %s is read by no ludus role", e.Name)
		}
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && !m.secretHas(r.SecretKeyRef.Name, r.SecretKeyRef.Key) {
			bad("env %s: Secret %s has no key %q in secrets.example.yaml", e.Name, r.SecretKeyRef.Name, r.SecretKeyRef.Key)
		}
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			bad("envFrom other than a ConfigMap")
			continue
		}
		cm := m.configMap(ef.ConfigMapRef.Name)
		if cm == nil {
			bad("envFrom ConfigMap %s is not in the manifests", ef.ConfigMapRef.Name)
			continue
		}
		for k := range cm.Data {
			env[k] = true
			if strings.HasPrefix(k, "LUDUS_") && !b.env[k] {
				bad("env %s (ConfigMap %s) is read by no ludus role", k, cm.Name)
			}
		}
	}
	for _, s := range slices.Concat(c.Command, c.Args) {
		for _, ref := range varRef.FindAllStringSubmatch(s, -1) {
			if !env[ref[1]] {
				bad("%q refers to $(%s), which the container does not define (Kubernetes would pass it literally)", s, ref[1])
			}
		}
	}
	if c.Image == ludusImage {
		if !slices.Equal(c.Command, []string{"ludus"}) {
			bad("command %q, want [ludus]", c.Command)
		}
		if len(c.Args) == 0 || b.flags[c.Args[0]] == nil {
			bad("args %q do not start with a ludus role", c.Args)
		} else {
			flags := b.flags[c.Args[0]]
			for _, a := range c.Args[1:] {
				name, _, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if !strings.HasPrefix(a, "--") || !ok {
					bad("argument %q is not --flag=value", a)
				} else if !flags[name] {
					bad("ludus %s has no flag --%s", c.Args[0], name)
				}
			}
		}
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil {
			bad("has no readiness or no liveness probe")
			continue
		}
		var port intstr.IntOrString
		switch {
		case p.HTTPGet != nil:
			port = p.HTTPGet.Port
		case p.GRPC != nil:
			port = intstr.FromInt32(p.GRPC.Port)
		case p.TCPSocket != nil:
			port = p.TCPSocket.Port
		default:
			bad("probe runs a command, not a request to a real endpoint")
			continue
		}
		if !hasPort([]corev1.Container{c}, port) {
			bad("probe port %s is not a port of the container", port.String())
		}
	}
	r := c.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
		bad("needs cpu and memory requests and a memory limit")
	}
	return errs
}

func (m manifests) secretHas(name, key string) bool { return slices.Contains(m.secretKeys(name), key) }

func (m manifests) configMap(name string) *corev1.ConfigMap {
	for _, o := range m.objects {
		if cm, ok := o.obj.(*corev1.ConfigMap); ok && cm.Name == name {
			return cm
		}
	}
	return nil
}

func TestContainers(t *testing.T) {
	m := loadManifests(t)
	b := ludusBinary(t)
	ludus := 0
	for _, w := range m.workloads() {
		for _, c := range w.template.Spec.Containers {
			if c.Image == ludusImage {
				ludus++
			}
			for _, err := range checkContainer(m, b, c) {
				t.Errorf("%s %s: %v", w.where, w.name, err)
			}
		}
		for _, v := range w.template.Spec.Volumes {
			if v.Secret != nil && m.secretKeys(v.Secret.SecretName) == nil {
				t.Errorf("%s %s: volume %s mounts Secret %s, which secrets.example.yaml does not describe", w.where, w.name, v.Name, v.Secret.SecretName)
			}
		}
	}
	if ludus < 3 {
		t.Errorf("only %d containers run %s", ludus, ludusImage)
	}
}

func (m manifests) secretKeys(name string) []string {
	for _, o := range m.secrets {
		if s := o.obj.(*corev1.Secret); s.Name == name {
			var keys []string
			for k := range s.StringData {
				keys = append(keys, k)
			}
			for k := range s.Data {
				keys = append(keys, k)
			}
			return keys
		}
	}
	return nil
}

// The container checks catch what they are for.
func TestCheckContainerCatches(t *testing.T) {
	m := loadManifests(t)
	b := ludusBinary(t)
	sim := m.component("simnode")
	if len(sim) == 0 {
		t.Fatal("no sim node workload")
	}
	base := sim[0].template.Spec.Containers[0]
	if errs := checkContainer(m, b, base); len(errs) > 0 {
		t.Fatalf("the sim node container itself: %v", errs)
	}
	tests := []struct {
		name   string
		mutate func(c *corev1.Container)
		want   string
	}{
		{"misspelt flag", func(c *corev1.Container) { c.Args = append(c.Args, "--regoin=eu") }, "no flag --regoin"},
		{"flag of another role", func(c *corev1.Container) { c.Args = append(c.Args, "--postgres=x") }, "no flag --postgres"},
		{"flag without value", func(c *corev1.Container) { c.Args = append(c.Args, "--capacity", "8") }, "not --flag=value"},
		{"no role", func(c *corev1.Container) { c.Args = c.Args[1:] }, "do not start with a ludus role"},
		{"unknown role", func(c *corev1.Container) { c.Args = append([]string{"node"}, c.Args[1:]...) }, "do not start with a ludus role"},
		{"undefined variable", func(c *corev1.Container) { c.Args = append(c.Args, "--id=$(NODE_NAME)") }, "$(NODE_NAME)"},
		{"misspelt env var", func(c *corev1.Container) {
			c.Env = append(slices.Clone(c.Env), corev1.EnvVar{Name: "LUDUS_CLUSTERTOKEN", Value: "x"})
		}, "LUDUS_CLUSTERTOKEN is read by no ludus role"},
		{"missing secret key", func(c *corev1.Container) {
			c.Env = append(slices.Clone(c.Env), corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "ludus-postgres"}, Key: "url"}}})
		}, `no key "url"`},
		{"probe on an undeclared port", func(c *corev1.Container) {
			p := *c.LivenessProbe
			p.ProbeHandler = corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/metrics", Port: intstr.FromString("metrix")}}
			c.LivenessProbe = &p
		}, "probe port metrix"},
		{"no readiness probe", func(c *corev1.Container) { c.ReadinessProbe = nil }, "no readiness"},
		{"no limits", func(c *corev1.Container) { c.Resources = corev1.ResourceRequirements{} }, "requests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := *base.DeepCopy()
			tt.mutate(&c)
			errs := checkContainer(m, b, c)
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tt.want) }) {
				t.Errorf("errors %v, want one about %q", errs, tt.want)
			}
		})
	}
}

// ---------------------------------------------------------------- sim nodes

// checkSimnode checks that a sim node workload drains itself before it stops
// and holds neither the operator key nor the cluster token: it derives its
// credential from the enrollment key (or is given its own credential).
func checkSimnode(m manifests, b binary, w workload) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	spec := w.template.Spec
	grace := int64(0)
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g < 120 {
		bad("terminationGracePeriodSeconds must leave the drain time (≥ 120 s)")
	} else {
		grace = *g
	}
	if len(spec.Containers) != 1 {
		bad("%d containers, want the sim node alone", len(spec.Containers))
		return errs
	}
	c := spec.Containers[0]
	if !slices.Contains(c.Args, "--id=$(POD_NAME)") {
		bad("the node id is not the pod name (--id=$(POD_NAME)): pod names are unique")
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}) {
		bad("POD_NAME is not the pod's metadata.name")
	}
	if !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--region=") }) {
		bad("no --region")
	}
	// The drain: SIGTERM (--drain-on-term), bounded below the grace period.
	if !slices.Contains(c.Args, "--drain-on-term=true") {
		bad("no --drain-on-term: a stopped node would not hand its games off")
	}
	if !b.flags["simnode"]["drain-on-term"] || !b.flags["simnode"]["drain-timeout"] {
		bad("ludus simnode has no --drain-on-term or --drain-timeout")
	}
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--drain-timeout="); ok {
			d, err := time.ParseDuration(v)
			if err != nil || grace > 0 && d >= time.Duration(grace)*time.Second {
				bad("--drain-timeout=%s must be a duration shorter than terminationGracePeriodSeconds (%d s)", v, grace)
			}
		}
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		bad("a preStop hook: the node drains itself on SIGTERM, and a hook would need a credential the node should not hold")
	}
	// Credentials: its own, never the cluster token or the operator key.
	own := false
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		switch ref := e.ValueFrom.SecretKeyRef; {
		case e.Name == "LUDUS_CLUSTER_TOKEN" || ref.Name == "ludus-cluster-token":
			bad("the sim node gets the cluster token (%s), which can mint match credentials: give it LUDUS_NODE_ENROLLMENT_KEY", e.Name)
		case ref.Name == "ludus-operator-key":
			bad("the sim node gets the operator key (%s)", e.Name)
		case e.Name == "LUDUS_NODE_ENROLLMENT_KEY" || e.Name == "LUDUS_NODE_CREDENTIAL":
			if !b.env[e.Name] {
				bad("cmd/ludus reads no %s", e.Name)
			}
			own = true
		}
	}
	if !own {
		bad("no LUDUS_NODE_ENROLLMENT_KEY (or LUDUS_NODE_CREDENTIAL) from a Secret: the node has no credential of its own")
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil && (v.Secret.SecretName == "ludus-operator-key" || v.Secret.SecretName == "ludus-cluster-token") {
			bad("volume %s mounts Secret %s into a sim node", v.Name, v.Secret.SecretName)
		}
	}
	return errs
}

// mountsSecretKey reports whether path is key of Secret secret in c's mounts.
func mountsSecretKey(spec corev1.PodSpec, c corev1.Container, path, secret, key string) bool {
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil && v.Secret.SecretName == secret && len(v.Secret.Items) == 0 &&
				path == vm.MountPath+"/"+key {
				return true
			}
		}
	}
	return false
}

func TestSimnodesDrainBeforeStopping(t *testing.T) {
	m := loadManifests(t)
	b := ludusBinary(t)
	sim := m.component("simnode")
	if len(sim) == 0 {
		t.Fatal("no sim node workload")
	}
	for _, w := range sim {
		for _, err := range checkSimnode(m, b, w) {
			t.Errorf("%s %s: %v", w.where, w.name, err)
		}
	}
	// The PodDisruptionBudget selects every sim node and nothing else.
	var pdbs []*policyv1.PodDisruptionBudget
	for _, o := range m.objects {
		if p, ok := o.obj.(*policyv1.PodDisruptionBudget); ok && p.Labels["app.kubernetes.io/component"] == "simnode" {
			pdbs = append(pdbs, p)
		}
	}
	if len(pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets for sim nodes, want 1", len(pdbs))
	}
	ws, err := m.selected(pdbs[0].Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	names := func(ws []workload) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.name)
		}
		return out
	}
	if got, want := names(ws), names(sim); !slices.Equal(got, want) {
		t.Errorf("the sim nodes' PodDisruptionBudget selects %v, want %v", got, want)
	}
	if mu := pdbs[0].Spec.MaxUnavailable; mu == nil || mu.Type != intstr.Int || mu.IntVal != 1 {
		t.Errorf("the sim nodes' PodDisruptionBudget allows %v disruptions at once, want 1", mu)
	}
}

func TestCheckSimnodeCatches(t *testing.T) {
	m := loadManifests(t)
	b := ludusBinary(t)
	base := m.component("simnode")[0]
	tests := []struct {
		name   string
		mutate func(spec *corev1.PodSpec)
		want   string
	}{
		{"no drain on SIGTERM", func(s *corev1.PodSpec) {
			s.Containers[0].Args = slices.DeleteFunc(s.Containers[0].Args, func(a string) bool { return a == "--drain-on-term=true" })
		}, "no --drain-on-term"},
		{"drain longer than the grace period", func(s *corev1.PodSpec) {
			for i, a := range s.Containers[0].Args {
				if strings.HasPrefix(a, "--drain-timeout=") {
					s.Containers[0].Args[i] = "--drain-timeout=600s"
				}
			}
		}, "shorter than terminationGracePeriodSeconds"},
		{"a preStop hook again", func(s *corev1.PodSpec) {
			s.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "true"}}}}
		}, "a preStop hook"},
		{"the cluster token", func(s *corev1.PodSpec) {
			s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: "LUDUS_CLUSTER_TOKEN", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "ludus-cluster-token"}, Key: "token"}}})
		}, "gets the cluster token"},
		{"the operator key mounted", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "op", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "ludus-operator-key"}}})
		}, "mounts Secret ludus-operator-key"},
		{"no credential of its own", func(s *corev1.PodSpec) {
			s.Containers[0].Env = slices.DeleteFunc(s.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "LUDUS_NODE_ENROLLMENT_KEY" })
		}, "no credential of its own"},
		{"node id not the pod name", func(s *corev1.PodSpec) {
			s.Containers[0].Args = slices.DeleteFunc(s.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--id=") })
		}, "not the pod name"},
		{"short grace period", func(s *corev1.PodSpec) { s.TerminationGracePeriodSeconds = new(int64(30)) }, "terminationGracePeriodSeconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := base
			w.template = base.template.DeepCopy()
			tt.mutate(&w.template.Spec)
			errs := checkSimnode(m, b, w)
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tt.want) }) {
				t.Errorf("errors %v, want one about %q", errs, tt.want)
			}
		})
	}
}

// ---------------------------------------------------------------- network

// endpoint is one end of a connection: a pod (labels set) or an address
// outside the cluster.
type endpoint struct {
	name      string
	namespace string            // pods only
	nsLabels  map[string]string // pods only
	pod       map[string]string // nil: not a pod
	ip        netip.Addr
}

func nsLabels(ns string) map[string]string {
	return map[string]string{"kubernetes.io/metadata.name": ns}
}

func pod(name, ns string, l map[string]string, ip string) endpoint {
	return endpoint{name: name, namespace: ns, nsLabels: nsLabels(ns), pod: l, ip: netip.MustParseAddr(ip)}
}

func external(name, ip string) endpoint { return endpoint{name: name, ip: netip.MustParseAddr(ip)} }

// allowed reports whether the policies let from open a connection to to on
// port/proto: the egress policies selecting from, if any, must allow it, and
// the ingress policies selecting to, if any, too (Kubernetes' semantics).
func allowed(pols []*networkingv1.NetworkPolicy, from, to endpoint, port int32, proto corev1.Protocol) (bool, error) {
	side := func(self, peer endpoint, egress bool) (bool, error) {
		if self.pod == nil {
			return true, nil // outside the cluster: no policy applies
		}
		isolated, ok := false, false
		for _, p := range pols {
			if p.Namespace != self.namespace {
				continue
			}
			s, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
			if err != nil {
				return false, err
			}
			if !s.Matches(labels.Set(self.pod)) || !hasType(p, egress) {
				continue
			}
			isolated = true
			for _, r := range rulesOf(p, egress) {
				pm, err := portMatches(r.ports, port, proto)
				if err != nil {
					return false, fmt.Errorf("%s: %w", p.Name, err)
				}
				if !pm {
					continue
				}
				if len(r.peers) == 0 {
					ok = true
				}
				for _, peerSpec := range r.peers {
					m, err := peerMatches(peerSpec, p.Namespace, peer)
					if err != nil {
						return false, fmt.Errorf("%s: %w", p.Name, err)
					}
					ok = ok || m
				}
			}
		}
		return !isolated || ok, nil
	}
	out, err := side(from, to, true)
	if err != nil || !out {
		return false, err
	}
	return side(to, from, false)
}

// rule is an ingress or egress rule: the peers on the other side and the ports.
type rule struct {
	peers []networkingv1.NetworkPolicyPeer
	ports []networkingv1.NetworkPolicyPort
}

func rulesOf(p *networkingv1.NetworkPolicy, egress bool) []rule {
	var out []rule
	if egress {
		for _, r := range p.Spec.Egress {
			out = append(out, rule{r.To, r.Ports})
		}
	} else {
		for _, r := range p.Spec.Ingress {
			out = append(out, rule{r.From, r.Ports})
		}
	}
	return out
}

func hasType(p *networkingv1.NetworkPolicy, egress bool) bool {
	if len(p.Spec.PolicyTypes) == 0 { // the API server's default
		return !egress || len(p.Spec.Egress) > 0
	}
	want := networkingv1.PolicyTypeIngress
	if egress {
		want = networkingv1.PolicyTypeEgress
	}
	return slices.Contains(p.Spec.PolicyTypes, want)
}

func portMatches(ports []networkingv1.NetworkPolicyPort, port int32, proto corev1.Protocol) (bool, error) {
	if len(ports) == 0 {
		return true, nil
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp != proto {
			continue
		}
		switch {
		case p.Port == nil:
			return true, nil
		case p.Port.Type == intstr.String:
			return false, fmt.Errorf("named port %q: the manifests use numbers", p.Port.StrVal)
		case p.Port.IntVal == port, p.EndPort != nil && p.Port.IntVal <= port && port <= *p.EndPort:
			return true, nil
		}
	}
	return false, nil
}

func peerMatches(peer networkingv1.NetworkPolicyPeer, policyNS string, ep endpoint) (bool, error) {
	if b := peer.IPBlock; b != nil {
		// Whether an ipBlock covers pod addresses depends on the network
		// plugin: count it as matching, the cautious reading.
		cidr, err := netip.ParsePrefix(b.CIDR)
		if err != nil {
			return false, err
		}
		if !cidr.Contains(ep.ip) {
			return false, nil
		}
		for _, e := range b.Except {
			ex, err := netip.ParsePrefix(e)
			if err != nil {
				return false, err
			}
			if ex.Contains(ep.ip) {
				return false, nil
			}
		}
		return true, nil
	}
	if ep.pod == nil {
		return false, nil
	}
	if peer.NamespaceSelector == nil {
		if ep.namespace != policyNS {
			return false, nil
		}
	} else {
		s, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
		if err != nil {
			return false, err
		}
		if !s.Matches(labels.Set(ep.nsLabels)) {
			return false, nil
		}
	}
	if peer.PodSelector == nil {
		return true, nil
	}
	s, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set(ep.pod)), nil
}

type flow struct {
	from, to endpoint
	port     int32
	proto    corev1.Protocol
	allow    bool
}

func (f flow) String() string {
	verb := "must not reach"
	if f.allow {
		verb = "must reach"
	}
	return fmt.Sprintf("%s %s %s:%d/%s", f.from.name, verb, f.to.name, f.port, f.proto)
}

// flows are the connections the policies must allow or deny. Ludus pods carry
// the labels of their workloads' templates, read from the manifests.
func flows(t *testing.T, m manifests) []flow {
	t.Helper()
	podOf := func(component, ip string) endpoint {
		ws := m.component(component)
		if len(ws) == 0 {
			t.Fatalf("no %s workload", component)
		}
		return pod(component, namespace, ws[0].template.Labels, ip)
	}
	var (
		sim      = podOf("simnode", "10.1.0.10")
		gateway  = podOf("gateway", "10.1.0.20")
		backend  = podOf("backend", "10.1.0.30")
		etcd     = podOf("etcd", "10.1.0.40")
		pgHere   = pod("postgres in ludus", namespace, map[string]string{"app.kubernetes.io/name": "postgresql"}, "10.1.0.50")
		pgThere  = pod("postgres in db", "db", map[string]string{"app.kubernetes.io/name": "postgresql"}, "10.1.0.60")
		pgCloud  = external("managed postgres", "10.20.30.40")
		dns      = pod("kube-dns", "kube-system", map[string]string{"k8s-app": "kube-dns"}, "10.1.0.2")
		prom     = pod("prometheus", "monitoring", map[string]string{"app": "prometheus"}, "10.1.0.70")
		agones   = pod("agones controller", "agones-system", map[string]string{"app": "agones"}, "10.1.0.80")
		stranger = pod("another app's pod", "default", map[string]string{"app": "x"}, "10.1.0.90")
		player   = external("a player", "203.0.113.7")
		internet = external("a web server", "198.51.100.9")
	)
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	return []flow{
		// Only the backend reaches PostgreSQL.
		{sim, pgHere, 5432, tcp, false},
		{sim, pgThere, 5432, tcp, false},
		{sim, pgCloud, 5432, tcp, false},
		{gateway, pgHere, 5432, tcp, false},
		{gateway, pgCloud, 5432, tcp, false},
		{stranger, pgHere, 5432, tcp, false},
		{backend, pgHere, 5432, tcp, true},
		{backend, pgCloud, 5432, tcp, true},
		// What sim nodes need, and nothing more.
		{sim, etcd, 2379, tcp, true},
		{sim, backend, 8081, tcp, true},
		{sim, dns, 53, udp, true},
		{sim, etcd, 2380, tcp, false},
		{sim, internet, 443, tcp, false},
		{gateway, sim, 7001, tcp, true},
		{backend, sim, 7001, tcp, true},
		{prom, sim, 9465, tcp, true},
		{stranger, sim, 7001, tcp, false},
		{player, sim, 7001, tcp, false},
		// Gateways: the one public port.
		{player, gateway, 8080, tcp, true},
		{player, gateway, 9464, tcp, false},
		{prom, gateway, 9464, tcp, true},
		{agones, gateway, 9464, tcp, true},
		{gateway, etcd, 2379, tcp, true},
		{gateway, backend, 8081, tcp, true},
		{gateway, internet, 443, tcp, false},
		// The backend and etcd: the cluster's own.
		{player, backend, 8081, tcp, false},
		{stranger, backend, 8081, tcp, false},
		{backend, etcd, 2379, tcp, true},
		{backend, internet, 443, tcp, true}, // tenants' webhooks
		{etcd, etcd, 2380, tcp, true},
		{stranger, etcd, 2379, tcp, false},
		{player, etcd, 2379, tcp, false},
	}
}

func (m manifests) policies() []*networkingv1.NetworkPolicy {
	var out []*networkingv1.NetworkPolicy
	for _, o := range m.objects {
		if p, ok := o.obj.(*networkingv1.NetworkPolicy); ok {
			out = append(out, p)
		}
	}
	return out
}

func TestNetworkPolicies(t *testing.T) {
	m := loadManifests(t)
	pols := m.policies()
	for _, f := range flows(t, m) {
		got, err := allowed(pols, f.from, f.to, f.port, f.proto)
		if err != nil {
			t.Fatal(err)
		}
		if got != f.allow {
			t.Errorf("%v, but the policies say %v", f, got)
		}
	}
}

// Without their egress policy, or with a rule that opens it, sim nodes reach
// PostgreSQL: the evaluation above can fail.
func TestNetworkPolicyCheckCatches(t *testing.T) {
	m := loadManifests(t)
	var simToPG flow
	for _, f := range flows(t, m) {
		if f.from.name == "simnode" && f.to.name == "managed postgres" {
			simToPG = f
		}
	}
	tests := []struct {
		name   string
		mutate func([]*networkingv1.NetworkPolicy) []*networkingv1.NetworkPolicy
	}{
		{"no egress policy", func(ps []*networkingv1.NetworkPolicy) []*networkingv1.NetworkPolicy {
			return slices.DeleteFunc(ps, func(p *networkingv1.NetworkPolicy) bool { return p.Name == "simnode-egress" })
		}},
		{"an open ipBlock", func(ps []*networkingv1.NetworkPolicy) []*networkingv1.NetworkPolicy {
			for _, p := range ps {
				if p.Name == "simnode-egress" {
					p.Spec.Egress = append(p.Spec.Egress, networkingv1.NetworkPolicyEgressRule{
						To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}})
				}
			}
			return ps
		}},
		{"a rule with no peers", func(ps []*networkingv1.NetworkPolicy) []*networkingv1.NetworkPolicy {
			for _, p := range ps {
				if p.Name == "simnode-egress" {
					p.Spec.Egress[0].To = nil
					p.Spec.Egress[0].Ports = nil
				}
			}
			return ps
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ps []*networkingv1.NetworkPolicy
			for _, p := range m.policies() {
				ps = append(ps, p.DeepCopy())
			}
			got, err := allowed(tt.mutate(ps), simToPG.from, simToPG.to, simToPG.port, simToPG.proto)
			if err != nil {
				t.Fatal(err)
			}
			if !got {
				t.Errorf("after %s the evaluation still denies %v", tt.name, simToPG)
			}
		})
	}
}

// Gateways and sim nodes name the same regions: a gateway places a match
// only on nodes of its own region (--region, else LUDUS_REGION, else
// "local"), so a region with nodes and no gateway, or gateways of a region
// without nodes, cannot place matchmade games.
func TestGatewaysServeTheNodesRegions(t *testing.T) {
	m := loadManifests(t)
	regionOf := func(w workload) string {
		c := w.template.Spec.Containers[0]
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--region="); ok {
				return v
			}
		}
		for _, e := range c.Env {
			if e.Name == "LUDUS_REGION" {
				return e.Value
			}
		}
		return "local"
	}
	gateways, nodes := map[string]bool{}, map[string]bool{}
	for _, w := range m.component("gateway") {
		gateways[regionOf(w)] = true
	}
	for _, w := range m.component("simnode") {
		nodes[regionOf(w)] = true
	}
	if len(gateways) == 0 || len(nodes) == 0 {
		t.Fatalf("gateway regions %v, sim node regions %v", gateways, nodes)
	}
	for r := range nodes {
		if !gateways[r] {
			t.Errorf("sim nodes of region %q and no gateway of it (gateways: %v)", r, gateways)
		}
	}
	for r := range gateways {
		if !nodes[r] {
			t.Errorf("gateways of region %q and no sim node of it (nodes: %v)", r, nodes)
		}
	}
}

// The backend's liveness probe touches nothing but the process: one that
// reads the store fails on every replica at once while the database hangs.
func TestBackendLivenessIsLocal(t *testing.T) {
	m := loadManifests(t)
	for _, w := range m.component("backend") {
		p := w.template.Spec.Containers[0].LivenessProbe
		if p == nil || p.TCPSocket == nil {
			t.Errorf("%s: the liveness probe is %+v, want a tcpSocket probe", w.name, p)
		}
	}
}

// A gateway stops within its pod's grace period: it reports NOT_SERVING
// and serves on for --shutdown-delay, then gives requests in flight
// --shutdown-grace. Past terminationGracePeriodSeconds the kubelet kills
// it outright, mid-way.
func TestGatewayStopsWithinItsGracePeriod(t *testing.T) {
	m := loadManifests(t)
	gateways := m.component("gateway")
	if len(gateways) == 0 {
		t.Fatal("no gateway workload")
	}
	for _, w := range gateways {
		delay, grace := 5*time.Second, 20*time.Second // runGateway's defaults
		for _, a := range w.template.Spec.Containers[0].Args {
			for flag, d := range map[string]*time.Duration{"--shutdown-delay=": &delay, "--shutdown-grace=": &grace} {
				if v, ok := strings.CutPrefix(a, flag); ok {
					var err error
					if *d, err = time.ParseDuration(v); err != nil {
						t.Errorf("%s: %s: %v", w.name, a, err)
					}
				}
			}
		}
		period := 30 * time.Second // Kubernetes' default
		if g := w.template.Spec.TerminationGracePeriodSeconds; g != nil {
			period = time.Duration(*g) * time.Second
		}
		if delay+grace >= period {
			t.Errorf("%s: shutdown delay %v and grace %v do not fit in terminationGracePeriodSeconds (%v)", w.name, delay, grace, period)
		}
	}
}
