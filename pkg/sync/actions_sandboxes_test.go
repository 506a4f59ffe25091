package sync

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// TestDuplicateSandboxes: which sandbox the pod lives in when the runtime holds more than
// one ready sandbox of it, and what becomes of the others.
func TestDuplicateSandboxes(t *testing.T) {
	sb := func(id string, ready bool) *runtime.SandboxStatus {
		return &runtime.SandboxStatus{ID: id, Ready: ready}
	}
	ctr := func(id, sandbox string, st runtime.ContainerState) *runtime.ContainerStatus {
		return &runtime.ContainerStatus{ID: id, Name: "a", SandboxID: sandbox, State: st}
	}
	for _, tc := range []struct {
		name       string
		sandboxes  []*runtime.SandboxStatus // newest first
		containers []*runtime.ContainerStatus
		current    string
		stop       []string
		ok         bool
	}{
		{name: "one", sandboxes: []*runtime.SandboxStatus{sb("s1", true)}, current: "s1", ok: true},
		{name: "newer empty beside the pod's", sandboxes: []*runtime.SandboxStatus{sb("s2", true), sb("s1", true)},
			containers: []*runtime.ContainerStatus{ctr("c1", "s1", runtime.ContainerRunning)}, current: "s1", stop: []string{"s2"}, ok: true},
		{name: "a created container counts as the pod's", sandboxes: []*runtime.SandboxStatus{sb("s2", true), sb("s1", true)},
			containers: []*runtime.ContainerStatus{ctr("c1", "s1", runtime.ContainerCreated)}, current: "s1", stop: []string{"s2"}, ok: true},
		{name: "both empty: the newest", sandboxes: []*runtime.SandboxStatus{sb("s2", true), sb("s1", true)}, current: "s2", stop: []string{"s1"}, ok: true},
		{name: "an exited container does not hold one", sandboxes: []*runtime.SandboxStatus{sb("s2", true), sb("s1", true)},
			containers: []*runtime.ContainerStatus{ctr("c1", "s1", runtime.ContainerExited)}, current: "s2", stop: []string{"s1"}, ok: true},
		{name: "a stopped newer one: the ready older", sandboxes: []*runtime.SandboxStatus{sb("s2", false), sb("s1", true)},
			containers: []*runtime.ContainerStatus{ctr("c1", "s1", runtime.ContainerRunning)}, current: "s1", ok: true},
		{name: "both hold live containers", sandboxes: []*runtime.SandboxStatus{sb("s2", true), sb("s1", true)},
			containers: []*runtime.ContainerStatus{ctr("c2", "s2", runtime.ContainerRunning), ctr("c1", "s1", runtime.ContainerRunning)}, current: "s2", ok: false},
	} {
		observed := &runtime.PodStatus{Sandboxes: tc.sandboxes, Containers: tc.containers}
		cur := observed.LatestSandbox()
		if cur.ID != tc.current {
			t.Errorf("%s: the pod's sandbox is %s, want %s", tc.name, cur.ID, tc.current)
			continue
		}
		stop, ok := duplicateSandboxes(observed, cur)
		if ok != tc.ok || !slices.Equal(stop, tc.stop) {
			t.Errorf("%s: stop %v ok %v, want %v %v", tc.name, stop, ok, tc.stop, tc.ok)
		}
	}

	// The plan: the duplicate stopped and the pod left running; both holding containers,
	// the pod started again in a new sandbox.
	pod := &v1.Pod{Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{Name: "a", Image: "img"}}}}
	running := ctr("c1", "s1", runtime.ContainerRunning)
	running.Hash = runtime.ContainerHash(&pod.Spec.Containers[0])
	a := computePodActions(pod, &runtime.PodStatus{Sandboxes: []*runtime.SandboxStatus{sb("s2", true), sb("s1", true)},
		Containers: []*runtime.ContainerStatus{running}}, nil, nil)
	if a.KillPod || a.CreateSandbox || a.SandboxID != "s1" || !slices.Equal(a.SandboxesToStop, []string{"s2"}) || len(a.ContainersToStart) > 0 {
		t.Errorf("duplicate beside a running pod: %+v, want s2 stopped and nothing else", a)
	}
	other := ctr("c2", "s2", runtime.ContainerRunning)
	other.Hash = running.Hash
	a = computePodActions(pod, &runtime.PodStatus{Sandboxes: []*runtime.SandboxStatus{sb("s2", true), sb("s1", true)},
		Containers: []*runtime.ContainerStatus{other, running}}, nil, nil)
	if !a.KillPod || !a.CreateSandbox {
		t.Errorf("two ready sandboxes with containers: %+v, want the pod killed and a new sandbox", a)
	}
}
