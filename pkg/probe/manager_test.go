package probe

import (
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

func TestUpdatePodPicksProbes(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	pr := &v1.Probe{}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{
				{Name: "init", ReadinessProbe: pr},
				{Name: "side", RestartPolicy: &always, LivenessProbe: pr, StartupProbe: pr},
			},
			Containers: []v1.Container{{Name: "app", LivenessProbe: pr, ReadinessProbe: pr}, {Name: "gone", ReadinessProbe: pr}},
		}}
	observed := &runtime.PodStatus{PodRef: runtime.PodRef{UID: "uid-1"},
		Sandboxes: []*runtime.SandboxStatus{{ID: "sb", Ready: true, IPs: []string{"10.1.0.5"}}},
		Containers: []*runtime.ContainerStatus{
			{ID: "init-1", Name: "init", Init: true, State: runtime.ContainerRunning, StartedAt: t0},
			{ID: "side-1", Name: "side", Init: true, State: runtime.ContainerRunning, StartedAt: t0.Add(-time.Hour)},
			{ID: "app-1", Name: "app", State: runtime.ContainerRunning, StartedAt: t0},
			{ID: "gone-1", Name: "gone", State: runtime.ContainerExited},
		}}
	started := true
	pod.Status.InitContainerStatuses = []v1.ContainerStatus{{Name: "side", ContainerID: "containerd://side-1", Started: &started, Ready: true}}
	m := newTestManager(t, &fakeExec{})
	keys := func() []string {
		var out []string
		for k, w := range m.pods["uid-1"] {
			out = append(out, k.containerID+"/"+k.kind.String())
			if w.target.PodIP != "10.1.0.5" {
				t.Errorf("%s probes %q, want the sandbox IP", k.containerID, w.target.PodIP)
			}
			if w.jitter != (k.containerID == "side-1") {
				t.Errorf("%s jitter %v: only containers running before the agent started are jittered", k.containerID, w.jitter)
			}
		}
		sort.Strings(out)
		return out
	}
	m.UpdatePod(pod, observed)
	want := "[app-1/Liveness app-1/Readiness side-1/Liveness side-1/Startup]"
	if got := keys(); fmtList(got) != want {
		t.Errorf("probes %v, want %s (regular init containers and stopped containers are not probed)", got, want)
	}
	if r := m.Results("side-1"); r.Liveness != Success || r.Startup != Success || !m.started("side-1") {
		t.Errorf("side-1, reported started before the agent restarted: initial results %+v, started %v", r, m.started("side-1"))
	}
	if r := m.Results("app-1"); r.Readiness != Failure || !m.started("app-1") {
		t.Errorf("app-1 initial results %+v, started %v", r, m.started("app-1"))
	}

	deleting := pod.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	m.UpdatePod(deleting, observed)
	if got := fmtList(keys()); got != "[app-1/Readiness]" {
		t.Errorf("probes of a deleted pod %v, want readiness only", got)
	}
	if r := m.Results("app-1"); r.Liveness != Unknown {
		t.Errorf("liveness of a deleted pod %v, want none", r.Liveness)
	}
	m.RemovePod("uid-1")
	if len(m.pods) != 0 || len(m.results) != 0 {
		t.Errorf("after RemovePod: %d pods, %d results", len(m.pods), len(m.results))
	}
}

func fmtList(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}
