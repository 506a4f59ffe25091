package sync

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	gosync "sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/ptr"
)

// recordingRuntime keeps the configs containers were created from.
type recordingRuntime struct {
	*critesting.FakeRuntimeService
	mu      gosync.Mutex
	configs map[string]*runtimeapi.ContainerConfig
}

func (r *recordingRuntime) CreateContainer(ctx context.Context, sb string, cfg *runtimeapi.ContainerConfig, sbCfg *runtimeapi.PodSandboxConfig) (string, error) {
	id, err := r.FakeRuntimeService.CreateContainer(ctx, sb, cfg, sbCfg)
	if err == nil {
		r.mu.Lock()
		r.configs[cfg.Metadata.Name] = cfg
		r.mu.Unlock()
	}
	return id, err
}

type fakeEnv struct {
	mu         gosync.Mutex
	configMaps map[string]*v1.ConfigMap
}

func (f *fakeEnv) GetConfigMap(_ context.Context, _, name string) (*v1.ConfigMap, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cm, ok := f.configMaps[name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("configmaps"), name)
}

func (f *fakeEnv) GetSecret(_ context.Context, _, name string) (*v1.Secret, error) {
	return nil, apierrors.NewNotFound(v1.Resource("secrets"), name)
}

func (f *fakeEnv) ListServices(context.Context, string) ([]*v1.Service, error) {
	return []*v1.Service{{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default"},
		Spec: v1.ServiceSpec{ClusterIP: "10.96.0.1", Ports: []v1.ServicePort{{Name: "https", Port: 443}}}}}, nil
}

func withInputs(h *harness) (*recordingRuntime, *fakeEnv) {
	rec := &recordingRuntime{FakeRuntimeService: h.rt, configs: map[string]*runtimeapi.ContainerConfig{}}
	env := &fakeEnv{configMaps: map[string]*v1.ConfigMap{}}
	h.w.deps.runtime, h.w.deps.env = rec, env
	return rec, env
}

func TestWorkerWaitsForConfigMapThenStarts(t *testing.T) {
	pod := basePod(func(p *v1.Pod) {
		p.Spec.Containers = p.Spec.Containers[:1]
		c := &p.Spec.Containers[0]
		c.Env = []v1.EnvVar{
			{Name: "GREETING", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "greeting"}}},
			{Name: "POD_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		}
		c.Command = []string{"echo", "$(GREETING)", "$$(GREETING)"}
		c.TerminationMessagePath = "/dev/termination-log"
	})
	h := newHarness(t, pod)
	rec, env := withInputs(h)

	h.sync(pod, false)
	cs := h.status.last.ContainerStatuses[0]
	if w := cs.State.Waiting; w == nil || w.Reason != reasonConfigError || w.Message != `configmap "cfg" not found` {
		t.Fatalf("state %+v, want waiting CreateContainerConfigError: configmap \"cfg\" not found", cs.State)
	}
	env.mu.Lock()
	env.configMaps["cfg"] = &v1.ConfigMap{Data: map[string]string{"other": "x"}}
	env.mu.Unlock()
	h.sync(pod, false)
	if w := h.status.last.ContainerStatuses[0].State.Waiting; w == nil || w.Message != "couldn't find key greeting in ConfigMap ns/cfg" {
		t.Fatalf("state %+v, want the missing key named", h.status.last.ContainerStatuses[0].State)
	}
	if len(h.rt.Containers) != 0 {
		t.Fatal("a container was created with an unresolved reference")
	}
	if ev := h.events(); !strings.Contains(ev, `Warning Failed Error: configmap "cfg" not found`) {
		t.Errorf("no Failed event:\n%s", ev)
	}

	env.mu.Lock()
	env.configMaps["cfg"] = &v1.ConfigMap{Data: map[string]string{"greeting": "hello"}}
	env.mu.Unlock()
	h.sync(pod, false)
	cfg := rec.configs["a"]
	if cfg == nil {
		t.Fatal("container not created once the key appeared")
	}
	vars := map[string]string{}
	for _, kv := range cfg.Envs {
		vars[kv.Key] = string(kv.Value)
	}
	if vars["GREETING"] != "hello" || vars["POD_IP"] != critesting.FakePodSandboxIPs[0] || vars["KUBERNETES_SERVICE_HOST"] != "10.96.0.1" {
		t.Errorf("env %v", vars)
	}
	if got := strings.Join(cfg.Command, " "); got != "echo hello $(GREETING)" {
		t.Errorf("command %q", got)
	}
	mounts := map[string]string{}
	for _, m := range cfg.Mounts {
		mounts[m.ContainerPath] = m.HostPath
	}
	hosts, err := os.ReadFile(mounts["/etc/hosts"])
	if err != nil || !strings.HasPrefix(string(hosts), "# Kubernetes-managed hosts file.\n") ||
		!strings.Contains(string(hosts), critesting.FakePodSandboxIPs[0]+"\tp\n") {
		t.Errorf("hosts file %q (%v)", hosts, err)
	}
	msg := mounts["/dev/termination-log"]
	if info, err := os.Stat(msg); err != nil || info.Size() != 0 || filepath.Dir(msg) != filepath.Join(h.w.podDir(pod).Dir(), "containers", "a") {
		t.Errorf("termination message file %q: %v", msg, err)
	}
	if cfg.Linux.SecurityContext.GetRunAsUser() == nil {
		t.Error("the image's user was not applied")
	}

	// Deleting the pod removes the files the agent made.
	deleted := pod.DeepCopy()
	deleted.DeletionTimestamp = ptr.To(metav1.Now())
	h.sync(deleted, false)
	if _, err := os.Stat(h.w.podDir(pod).Dir()); !os.IsNotExist(err) {
		t.Errorf("pod directory left after deletion: %v", err)
	}
}

func TestWorkerRefusesRootImageUnderRunAsNonRoot(t *testing.T) {
	pod := basePod(func(p *v1.Pod) {
		p.Spec.Containers = p.Spec.Containers[:1]
		p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
	})
	h := newHarness(t, pod)
	rec, _ := withInputs(h)
	h.sync(pod, false)
	w := h.status.last.ContainerStatuses[0].State.Waiting
	want := `container has runAsNonRoot and image will run as root (pod: "p_ns(uid-1)", container: a)`
	if w == nil || w.Reason != reasonConfigError || w.Message != want {
		t.Fatalf("state %+v, want %s", h.status.last.ContainerStatuses[0].State, want)
	}

	h.img.Lock()
	for _, img := range h.img.Images {
		img.Uid = &runtimeapi.Int64Value{Value: 1000}
	}
	h.img.Unlock()
	h.sync(pod, false)
	cfg := rec.configs["a"]
	if cfg == nil {
		t.Fatal("container not created once the image runs as a user")
	}
	if got := cfg.Linux.SecurityContext.GetRunAsUser().GetValue(); got != 1000 {
		t.Errorf("runAsUser %d, want the image's 1000", got)
	}
}
