package config

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

const staticYAML = `apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: c
    image: registry.k8s.io/e2e-test-images/busybox:1.37.0-2
    command: [sleep, "3600"]
    resources:
      limits: {cpu: 100m, memory: 64Mi}
    livenessProbe:
      httpGet: {port: 8080}
  - name: latest
    image: busybox
    ports: [{containerPort: 80}]
`

func TestDecodeStaticPod(t *testing.T) {
	pod, err := decodeStaticPod("/etc/kubernetes/manifests/web.yaml", []byte(staticYAML), "Node-A")
	if err != nil {
		t.Fatal(err)
	}
	if pod.Name != "web-node-a" || pod.Namespace != "default" || pod.Spec.NodeName != "Node-A" {
		t.Errorf("name %q namespace %q nodeName %q", pod.Name, pod.Namespace, pod.Spec.NodeName)
	}
	if len(pod.UID) != 32 || pod.Annotations[AnnotationHash] != string(pod.UID) {
		t.Errorf("uid %q hash %q", pod.UID, pod.Annotations[AnnotationHash])
	}
	if pod.Labels["app"] != "web" || pod.Status.Phase != v1.PodPending {
		t.Errorf("labels %v phase %q", pod.Labels, pod.Status.Phase)
	}
	s := pod.Spec
	if s.RestartPolicy != v1.RestartPolicyAlways || *s.TerminationGracePeriodSeconds != 30 || s.DNSPolicy != v1.DNSClusterFirst ||
		s.SchedulerName != "default-scheduler" || !*s.EnableServiceLinks || s.SecurityContext == nil {
		t.Errorf("pod defaults: %+v", s)
	}
	c := s.Containers[0]
	if c.ImagePullPolicy != v1.PullIfNotPresent || c.TerminationMessagePath != "/dev/termination-log" ||
		c.TerminationMessagePolicy != v1.TerminationMessageReadFile {
		t.Errorf("container defaults: %+v", c)
	}
	if got := c.Resources.Requests.Cpu().String(); got != "100m" {
		t.Errorf("requests not defaulted to limits: cpu %s", got)
	}
	if p := c.LivenessProbe; p.TimeoutSeconds != 1 || p.PeriodSeconds != 10 || p.SuccessThreshold != 1 || p.FailureThreshold != 3 ||
		p.HTTPGet.Path != "/" || p.HTTPGet.Scheme != v1.URISchemeHTTP {
		t.Errorf("probe defaults: %+v", p)
	}
	latest := s.Containers[1]
	if latest.ImagePullPolicy != v1.PullAlways || latest.Ports[0].Protocol != v1.ProtocolTCP {
		t.Errorf("untagged image policy %q port protocol %q", latest.ImagePullPolicy, latest.Ports[0].Protocol)
	}
	var tolerates bool
	for _, tol := range s.Tolerations {
		tolerates = tolerates || (tol.Operator == v1.TolerationOpExists && tol.Effect == v1.TaintEffectNoExecute && tol.Key == "")
	}
	if !tolerates {
		t.Errorf("no NoExecute toleration: %v", s.Tolerations)
	}
}

func TestStaticPodUID(t *testing.T) {
	base, err := decodeStaticPod("/m/web.yaml", []byte(staticYAML), "n1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, node, doc string
		same                  bool
	}{
		{name: "same file, node and content", path: "/m/web.yaml", node: "n1", doc: staticYAML, same: true},
		{name: "JSON of the same pod", path: "/m/web.yaml", node: "n1", same: true,
			doc: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","labels":{"app":"web"}},"spec":{"containers":[` +
				`{"name":"c","image":"registry.k8s.io/e2e-test-images/busybox:1.37.0-2","command":["sleep","3600"],` +
				`"resources":{"limits":{"cpu":"100m","memory":"64Mi"}},"livenessProbe":{"httpGet":{"port":8080}}},` +
				`{"name":"latest","image":"busybox","ports":[{"containerPort":80}]}]}}`},
		{name: "defaults written out", path: "/m/web.yaml", node: "n1", same: true,
			doc: strings.Replace(staticYAML, "spec:\n", "spec:\n  restartPolicy: Always\n", 1)},
		{name: "changed content", path: "/m/web.yaml", node: "n1", doc: strings.Replace(staticYAML, "3600", "3601", 1)},
		{name: "another file", path: "/m/web2.yaml", node: "n1", doc: staticYAML},
		{name: "another node", path: "/m/web.yaml", node: "n2", doc: staticYAML},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod, err := decodeStaticPod(tt.path, []byte(tt.doc), tt.node)
			if err != nil {
				t.Fatal(err)
			}
			if (pod.UID == base.UID) != tt.same {
				t.Errorf("uid %s vs %s: same = %v, want %v", pod.UID, base.UID, pod.UID == base.UID, tt.same)
			}
		})
	}
	withUID := strings.Replace(staticYAML, "name: web\n", "name: web\n  uid: given\n", 1)
	if pod, err := decodeStaticPod("/m/web.yaml", []byte(withUID), "n1"); err != nil || pod.UID != "given" {
		t.Errorf("a UID in the file is kept: %v %v", pod, err)
	}
}

func TestDecodeStaticPodRefuses(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{name: "not YAML", doc: "a: [b", want: "not valid YAML"},
		{name: "not a pod", doc: "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", want: "not a v1 Pod"},
		{name: "no apiVersion", doc: "kind: Pod\nmetadata: {name: s}\n", want: "not a v1 Pod"},
		{name: "wrong field type", doc: "apiVersion: v1\nkind: Pod\nmetadata: {name: s}\nspec: {containers: 3}\n", want: "decode pod"},
		{name: "no name", doc: "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: c, image: i}]}\n", want: "metadata.name is required"},
		{name: "no containers", doc: "apiVersion: v1\nkind: Pod\nmetadata: {name: s}\n", want: "at least one container"},
		{name: "no image", doc: "apiVersion: v1\nkind: Pod\nmetadata: {name: s}\nspec: {containers: [{name: c}]}\n", want: "image: required"},
		{name: "bad name", doc: "apiVersion: v1\nkind: Pod\nmetadata: {name: S_1}\nspec: {containers: [{name: c, image: i}]}\n", want: "metadata.name"},
		{name: "duplicate container", doc: "apiVersion: v1\nkind: Pod\nmetadata: {name: s}\nspec: {containers: [{name: c, image: i}, {name: c, image: i}]}\n",
			want: "duplicate container name"},
		{name: "secret volume", doc: "apiVersion: v1\nkind: Pod\nmetadata: {name: s}\nspec: {containers: [{name: c, image: i}], volumes: [{name: v, secret: {secretName: x}}]}\n",
			want: "static pods may not reference secrets"},
		{name: "service account", doc: "apiVersion: v1\nkind: Pod\nmetadata: {name: s}\nspec: {serviceAccountName: x, containers: [{name: c, image: i}]}\n",
			want: "static pods may not reference serviceaccounts"},
		{name: "configMap env", doc: "apiVersion: v1\nkind: Pod\nmetadata: {name: s}\nspec: {containers: [{name: c, image: i, envFrom: [{configMapRef: {name: x}}]}]}\n",
			want: "static pods may not reference configmaps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeStaticPod("/m/f.yaml", []byte(tt.doc), "n1")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestImageTag(t *testing.T) {
	for image, want := range map[string]string{
		"busybox": "latest", "busybox:1.37": "1.37", "localhost:5000/busybox": "latest",
		"localhost:5000/busybox:v1": "v1", "busybox@sha256:abc": "", "busybox:v2@sha256:abc": "v2",
	} {
		if got := imageTag(image); got != want {
			t.Errorf("imageTag(%q) = %q, want %q", image, got, want)
		}
	}
}

// fakeRecorder records events as "reason: message".
type fakeRecorder struct {
	mu     sync.Mutex
	events []string
	kinds  []string
}

func (r *fakeRecorder) Eventf(obj kruntime.Object, _, reason, format string, args ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ref, ok := obj.(*v1.ObjectReference); ok {
		r.kinds = append(r.kinds, ref.Kind+"/"+ref.Name)
	}
	r.events = append(r.events, reason+": "+fmt.Sprintf(format, args...))
}

// uidRecorder is a handler that keeps the UIDs it was given, in order.
type uidRecorder struct{ ops []string }

func (h *uidRecorder) UpsertPod(p *v1.Pod) { h.ops = append(h.ops, "+"+p.Name+"/"+string(p.UID)) }
func (h *uidRecorder) RemovePod(p *v1.Pod) { h.ops = append(h.ops, "-"+p.Name+"/"+string(p.UID)) }

func writeManifest(t *testing.T, dir, name, content string) {
	t.Helper()
	// As editors and the tests do: write aside, then rename into place.
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func TestFileSourceSync(t *testing.T) {
	dir := t.TempDir()
	rec := &fakeRecorder{}
	s, err := NewFileSource(StaticConfig{Dir: dir, NodeName: "n1", Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	h := &uidRecorder{}
	ctx := context.Background()
	pod := func(name, cmd string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec: {containers: [{name: c, image: busybox:1.37, command: [sh, -c, %q]}]}\n", name, cmd)
	}
	uids := func() map[string]types.UID {
		out := map[string]types.UID{}
		for _, p := range s.Pods() {
			out[p.Name] = p.UID
		}
		return out
	}

	s.sync(ctx, h) // an empty directory
	if !s.HasSynced() || len(s.Pods()) != 0 {
		t.Fatalf("empty dir: synced %v pods %d", s.HasSynced(), len(s.Pods()))
	}

	writeManifest(t, dir, "a.yaml", pod("a", "sleep"))
	writeManifest(t, dir, "b.json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"busybox:1.37"}]}}`)
	writeManifest(t, dir, ".hidden.yaml", pod("hidden", "sleep"))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.sync(ctx, h)
	first := uids()
	if len(first) != 2 || first["a-n1"] == "" || first["b-n1"] == "" {
		t.Fatalf("pods after the first files: %v", first)
	}
	for _, p := range s.Pods() {
		if p.Annotations[AnnotationSource] != "file" || p.Annotations[AnnotationHash] != string(p.UID) {
			t.Errorf("%s annotations %v", p.Name, p.Annotations)
		}
		if _, err := time.Parse(time.RFC3339Nano, p.Annotations[AnnotationSeen]); err != nil {
			t.Errorf("%s seen: %v", p.Name, err)
		}
	}
	if len(rec.events) != 1 || !strings.Contains(rec.events[0], "sub") || rec.kinds[0] != "Node/n1" {
		t.Errorf("events for the subdirectory: %v on %v", rec.events, rec.kinds)
	}

	h.ops = nil
	s.sync(ctx, h) // nothing changed: nothing handed over, nothing reported again
	if len(h.ops) != 0 || len(rec.events) != 1 {
		t.Errorf("an unchanged directory gave ops %v events %v", h.ops, rec.events)
	}

	writeManifest(t, dir, "a.yaml", pod("a", "true"))
	writeManifest(t, dir, "c.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: c\n")
	s.sync(ctx, h)
	now := uids()
	if now["a-n1"] == first["a-n1"] || now["b-n1"] != first["b-n1"] || len(now) != 2 {
		t.Errorf("after an edit: %v (before %v)", now, first)
	}
	want := []string{"-a-n1/" + string(first["a-n1"]), "+a-n1/" + string(now["a-n1"])}
	if strings.Join(h.ops, " ") != strings.Join(want, " ") {
		t.Errorf("ops = %v, want the old pod removed before the new one comes: %v", h.ops, want)
	}
	if len(rec.events) != 2 || !strings.HasPrefix(rec.events[1], "FailedValidation: Could not process manifest file "+filepath.Join(dir, "c.yaml")) {
		t.Errorf("events after a malformed file: %v", rec.events)
	}

	h.ops = nil
	writeManifest(t, dir, "d.yaml", pod("a", "false")) // the same name as a.yaml
	if err := os.Remove(filepath.Join(dir, "b.json")); err != nil {
		t.Fatal(err)
	}
	s.sync(ctx, h)
	if got := uids(); len(got) != 1 || got["a-n1"] == now["a-n1"] {
		t.Errorf("after a duplicate and a removal: %v", got)
	}
	if len(h.ops) != 3 || !strings.HasPrefix(h.ops[0], "-") || !strings.HasPrefix(h.ops[1], "-") || !strings.HasPrefix(h.ops[2], "+a-n1/") {
		t.Errorf("ops = %v", h.ops)
	}
	if last := rec.events[len(rec.events)-1]; !strings.Contains(last, "a.yaml") || !strings.Contains(last, "also defined by") {
		t.Errorf("the shadowed file is not reported: %v", rec.events)
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	h.ops = nil
	s.sync(ctx, h) // the directory is gone: as an empty one
	if len(s.Pods()) != 0 || len(h.ops) != 1 {
		t.Errorf("after the directory went: pods %d ops %v", len(s.Pods()), h.ops)
	}
}

func TestFileSourceRunAndLifecycle(t *testing.T) {
	if _, err := NewFileSource(StaticConfig{NodeName: "n"}); err == nil {
		t.Error("no Dir accepted")
	}
	dir := t.TempDir()
	writeManifest(t, dir, "a.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: i}]}\n")
	s, err := NewFileSource(StaticConfig{Dir: dir, NodeName: "n1", Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Run(ctx); err == nil {
		t.Error("Run before SetHandler")
	}
	h := newRecordingHandler()
	if err := s.SetHandler(h); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHandler(h); err == nil {
		t.Error("SetHandler twice")
	}
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	if e := h.next(t); e.op != "upsert" || e.name != "a-n1" {
		t.Errorf("first event %+v", e)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}
