package status

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

func withProbes(p *v1.Pod, readiness, startup bool) *v1.Pod {
	if readiness {
		p.Spec.Containers[0].ReadinessProbe = &v1.Probe{}
	}
	if startup {
		p.Spec.Containers[0].StartupProbe = &v1.Probe{}
	}
	return p
}

func withSidecar(p *v1.Pod, name string) *v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: name, Image: "busybox", RestartPolicy: &always})
	return p
}

func probed(results map[string]ProbeResults) func(string) ProbeResults {
	return func(id string) ProbeResults { return results[id] }
}

func TestComputeWithProbes(t *testing.T) {
	sidecarRunning := ctr("s", runtime.ContainerRunning, 0)
	sidecarRunning.Init = true
	sidecarKilled := ctr("s", runtime.ContainerExited, 137)
	sidecarKilled.Init = true
	tests := []struct {
		name            string
		in              Input
		phase           v1.PodPhase
		started, ready  bool
		containersReady v1.ConditionStatus
		podReady        v1.ConditionStatus
		podReadyReason  string
		podReadyMessage string
		initialized     v1.ConditionStatus
	}{
		{name: "readiness probe not yet passed",
			in:    Input{Pod: withProbes(pod(v1.RestartPolicyAlways), true, false), Observed: observed(ctr("c", runtime.ContainerRunning, 0))},
			phase: v1.PodRunning, started: true, ready: false, containersReady: v1.ConditionFalse, podReady: v1.ConditionFalse,
			podReadyReason: ReasonContainersNotReady, podReadyMessage: "containers with unready status: [c]", initialized: v1.ConditionTrue},
		{name: "readiness probe passed",
			in: Input{Pod: withProbes(pod(v1.RestartPolicyAlways), true, false), Observed: observed(ctr("c", runtime.ContainerRunning, 0)),
				Probes: probed(map[string]ProbeResults{"c-id": {Ready: true}})},
			phase: v1.PodRunning, started: true, ready: true, containersReady: v1.ConditionTrue, podReady: v1.ConditionTrue, initialized: v1.ConditionTrue},
		{name: "startup probe pending: neither started nor ready",
			in: Input{Pod: withProbes(pod(v1.RestartPolicyAlways), false, true), Observed: observed(ctr("c", runtime.ContainerRunning, 0)),
				Probes: probed(map[string]ProbeResults{"c-id": {Ready: true}})},
			phase: v1.PodRunning, started: false, ready: false, containersReady: v1.ConditionFalse, podReady: v1.ConditionFalse,
			podReadyReason: ReasonContainersNotReady, podReadyMessage: "containers with unready status: [c]", initialized: v1.ConditionTrue},
		{name: "startup probe passed, no readiness probe",
			in: Input{Pod: withProbes(pod(v1.RestartPolicyAlways), false, true), Observed: observed(ctr("c", runtime.ContainerRunning, 0)),
				Probes: probed(map[string]ProbeResults{"c-id": {Started: true}})},
			phase: v1.PodRunning, started: true, ready: true, containersReady: v1.ConditionTrue, podReady: v1.ConditionTrue, initialized: v1.ConditionTrue},
		{name: "readiness gate missing",
			in: Input{Pod: func() *v1.Pod {
				p := pod(v1.RestartPolicyAlways)
				p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/lb"}}
				return p
			}(), Observed: observed(ctr("c", runtime.ContainerRunning, 0))},
			phase: v1.PodRunning, started: true, ready: true, containersReady: v1.ConditionTrue, podReady: v1.ConditionFalse,
			podReadyReason: ReasonReadinessGatesNotReady, podReadyMessage: `corresponding condition of pod readiness gate "example.com/lb" does not exist.`,
			initialized: v1.ConditionTrue},
		{name: "readiness gates: one False, one True",
			in: Input{Pod: func() *v1.Pod {
				p := pod(v1.RestartPolicyAlways)
				p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "a"}, {ConditionType: "b"}}
				p.Status.Conditions = []v1.PodCondition{{Type: "a", Status: v1.ConditionFalse}, {Type: "b", Status: v1.ConditionTrue}}
				return p
			}(), Observed: observed(ctr("c", runtime.ContainerRunning, 0))},
			phase: v1.PodRunning, started: true, ready: true, containersReady: v1.ConditionTrue, podReady: v1.ConditionFalse,
			podReadyReason: ReasonReadinessGatesNotReady, podReadyMessage: `the status of pod readiness gate "a" is not "True", but False`,
			initialized: v1.ConditionTrue},
		{name: "readiness gate True",
			in: Input{Pod: func() *v1.Pod {
				p := pod(v1.RestartPolicyAlways)
				p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "a"}}
				p.Status.Conditions = []v1.PodCondition{{Type: "a", Status: v1.ConditionTrue}}
				return p
			}(), Observed: observed(ctr("c", runtime.ContainerRunning, 0))},
			phase: v1.PodRunning, started: true, ready: true, containersReady: v1.ConditionTrue, podReady: v1.ConditionTrue, initialized: v1.ConditionTrue},
		{name: "sidecar running, app running: initialized, both ready",
			in:    Input{Pod: withSidecar(pod(v1.RestartPolicyAlways), "s"), Observed: observed(sidecarRunning, ctr("c", runtime.ContainerRunning, 0))},
			phase: v1.PodRunning, started: true, ready: true, containersReady: v1.ConditionTrue, podReady: v1.ConditionTrue, initialized: v1.ConditionTrue},
		{name: "sidecar running, app done, Never: still running",
			in:    Input{Pod: withSidecar(pod(v1.RestartPolicyNever), "s"), Observed: observed(sidecarRunning, ctr("c", runtime.ContainerExited, 0))},
			phase: v1.PodRunning, started: false, ready: false, containersReady: v1.ConditionFalse, podReady: v1.ConditionFalse,
			podReadyReason: ReasonContainersNotReady, podReadyMessage: "containers with unready status: [c]", initialized: v1.ConditionTrue},
		{name: "sidecar killed at the end, app succeeded: succeeded",
			in:    Input{Pod: withSidecar(pod(v1.RestartPolicyNever), "s"), Terminal: true, Observed: observed(sidecarKilled, ctr("c", runtime.ContainerExited, 0))},
			phase: v1.PodSucceeded, started: false, ready: false, containersReady: v1.ConditionFalse, podReady: v1.ConditionFalse,
			podReadyReason: ReasonPodCompleted, initialized: v1.ConditionTrue},
		{name: "sidecar not yet started: pending",
			in: Input{Pod: func() *v1.Pod {
				p := withSidecar(pod(v1.RestartPolicyAlways), "s")
				p.Spec.InitContainers[0].StartupProbe = &v1.Probe{}
				return p
			}(), Observed: observed(sidecarRunning)},
			phase: v1.PodPending, started: false, ready: false, containersReady: v1.ConditionFalse, podReady: v1.ConditionFalse,
			podReadyReason: ReasonContainersNotReady, podReadyMessage: "containers with unready status: [s c]", initialized: v1.ConditionFalse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Now, tt.in.RuntimeName = t0, "containerd"
			st := Compute(tt.in)
			if st.Phase != tt.phase {
				t.Errorf("phase = %s, want %s", st.Phase, tt.phase)
			}
			cs := st.ContainerStatuses[0]
			if started := cs.Started != nil && *cs.Started; started != tt.started || cs.Ready != tt.ready {
				t.Errorf("started %v ready %v, want %v %v", started, cs.Ready, tt.started, tt.ready)
			}
			if c := cond(st, v1.ContainersReady); c.Status != tt.containersReady {
				t.Errorf("ContainersReady %s (%s), want %s", c.Status, c.Message, tt.containersReady)
			}
			c := cond(st, v1.PodReady)
			if c.Status != tt.podReady || c.Reason != tt.podReadyReason || c.Message != tt.podReadyMessage {
				t.Errorf("Ready %s %q %q, want %s %q %q", c.Status, c.Reason, c.Message, tt.podReady, tt.podReadyReason, tt.podReadyMessage)
			}
			if c := cond(st, v1.PodInitialized); c.Status != tt.initialized {
				t.Errorf("Initialized %s (%s), want %s", c.Status, c.Message, tt.initialized)
			}
		})
	}
}
