package status

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

func withDebugger(p *v1.Pod) *v1.Pod {
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}, TargetContainerName: "c"})
	return p
}

func debugger(state runtime.ContainerState, code int32) *runtime.ContainerStatus {
	c := ctr("debugger", state, code)
	c.Ephemeral = true
	return c
}

func TestComputeEphemeralContainers(t *testing.T) {
	tests := []struct {
		name     string
		in       Input
		state    string // waiting reason, "running" or terminated reason
		exitCode int32
		phase    v1.PodPhase
		ready    v1.ConditionStatus
	}{
		{name: "not yet created: container creating", in: Input{Pod: withDebugger(pod(v1.RestartPolicyAlways)),
			Observed: observed(ctr("c", runtime.ContainerRunning, 0))},
			state: "ContainerCreating", phase: v1.PodRunning, ready: v1.ConditionTrue},
		{name: "in a pod with init containers: pod initializing", in: Input{Pod: withDebugger(pod(v1.RestartPolicyAlways, "i")),
			Observed: observed()},
			state: "PodInitializing", phase: v1.PodPending, ready: v1.ConditionFalse},
		{name: "image pull failed: the sync's reason", in: Input{Pod: withDebugger(pod(v1.RestartPolicyAlways)),
			Observed: observed(ctr("c", runtime.ContainerRunning, 0)), Waiting: map[string]Waiting{"debugger": {Reason: "ErrImagePull", Message: "not found"}}},
			state: "ErrImagePull", phase: v1.PodRunning, ready: v1.ConditionTrue},
		{name: "running: counts for neither readiness nor phase", in: Input{Pod: withDebugger(pod(v1.RestartPolicyAlways)),
			Observed: observed(ctr("c", runtime.ContainerRunning, 0), debugger(runtime.ContainerRunning, 0))},
			state: "running", phase: v1.PodRunning, ready: v1.ConditionTrue},
		{name: "running beside an app container that is not ready", in: Input{Pod: withDebugger(pod(v1.RestartPolicyAlways)),
			Observed: observed(ctr("c", runtime.ContainerExited, 1), debugger(runtime.ContainerRunning, 0))},
			state: "running", phase: v1.PodRunning, ready: v1.ConditionFalse},
		{name: "exited: terminated, the pod runs on", in: Input{Pod: withDebugger(pod(v1.RestartPolicyNever)),
			Observed: observed(ctr("c", runtime.ContainerRunning, 0), debugger(runtime.ContainerExited, 2))},
			state: "Error", exitCode: 2, phase: v1.PodRunning, ready: v1.ConditionTrue},
		{name: "running when every app container has succeeded: the pod succeeded", in: Input{Pod: withDebugger(pod(v1.RestartPolicyNever)),
			Observed: observed(ctr("c", runtime.ContainerExited, 0), debugger(runtime.ContainerRunning, 0))},
			state: "running", phase: v1.PodSucceeded, ready: v1.ConditionFalse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Now, tt.in.RuntimeName = t0, "containerd"
			st := Compute(tt.in)
			if len(st.EphemeralContainerStatuses) != 1 {
				t.Fatalf("ephemeralContainerStatuses = %+v, want one", st.EphemeralContainerStatuses)
			}
			if len(st.ContainerStatuses) != 1 {
				t.Errorf("containerStatuses = %+v, want only c", st.ContainerStatuses)
			}
			if st.Phase != tt.phase {
				t.Errorf("phase = %s, want %s", st.Phase, tt.phase)
			}
			if c := cond(st, v1.PodReady); c.Status != tt.ready {
				t.Errorf("Ready = %s (%s), want %s", c.Status, c.Message, tt.ready)
			}
			if c := cond(st, v1.ContainersReady); c.Status != tt.ready {
				t.Errorf("ContainersReady = %s (%s), want %s", c.Status, c.Message, tt.ready)
			}
			cs := st.EphemeralContainerStatuses[0]
			got, code := "", int32(0)
			switch {
			case cs.State.Running != nil:
				got = "running"
			case cs.State.Waiting != nil:
				got = cs.State.Waiting.Reason
			case cs.State.Terminated != nil:
				got, code = cs.State.Terminated.Reason, cs.State.Terminated.ExitCode
			}
			if got != tt.state || code != tt.exitCode {
				t.Errorf("state = %s/%d, want %s/%d", got, code, tt.state, tt.exitCode)
			}
			if cs.Name != "debugger" || cs.Ready || cs.Started != nil || cs.RestartCount != 0 {
				t.Errorf("status = %+v, want debugger, not ready, started unset, restartCount 0", cs)
			}
			if tt.state == "running" || cs.State.Terminated != nil {
				if cs.ContainerID != "containerd://debugger-id" || cs.ImageID != "sha256:abc" || cs.Image != "docker.io/library/busybox:1.37" {
					t.Errorf("containerID %q image %q imageID %q", cs.ContainerID, cs.Image, cs.ImageID)
				}
			} else if cs.ContainerID != "" || cs.Image != "busybox" {
				t.Errorf("not created yet, yet containerID %q image %q", cs.ContainerID, cs.Image)
			}
		})
	}
}
