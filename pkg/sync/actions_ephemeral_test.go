package sync

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

func withEphemeral(names ...string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		for _, n := range names {
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, v1.EphemeralContainer{
				EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: n, Image: "busybox"}})
		}
	}
}

func ephemeral(c *runtime.ContainerStatus) *runtime.ContainerStatus {
	c.Ephemeral = true
	return c
}

func TestComputePodActionsEphemeral(t *testing.T) {
	oldSandbox := obs(ephemeral(&runtime.ContainerStatus{ID: "d-id", Name: "d", SandboxID: "old", State: runtime.ContainerExited}),
		running("a"), running("b"))
	oldSandbox.Sandboxes = append(oldSandbox.Sandboxes, &runtime.SandboxStatus{ID: "old"})
	deadSandbox := obs(ephemeral(running("d")), exited("a", 0), exited("b", 1))
	deadSandbox.Sandboxes[0].Ready = false
	tests := []struct {
		name     string
		pod      *v1.Pod
		observed *runtime.PodStatus
		want     podActions
	}{
		{name: "added to a running pod: started", pod: basePod(withEphemeral("d")), observed: obs(running("a"), running("b")),
			want: podActions{SandboxID: "sb", NextInit: -1, EphemeralToStart: []int{0}}},
		{name: "several added: each not yet run, in spec order", pod: basePod(withEphemeral("d1", "d2", "d3")),
			observed: obs(running("a"), running("b"), ephemeral(running("d2"))),
			want:     podActions{SandboxID: "sb", NextInit: -1, EphemeralToStart: []int{0, 2}}},
		{name: "running: nothing", pod: basePod(withEphemeral("d")), observed: obs(running("a"), running("b"), ephemeral(running("d"))),
			want: podActions{SandboxID: "sb", NextInit: -1}},
		{name: "exited: never restarted, whatever the pod's restart policy", pod: basePod(withEphemeral("d")),
			observed: obs(running("a"), running("b"), ephemeral(exited("d", 1))),
			want:     podActions{SandboxID: "sb", NextInit: -1}},
		{name: "created but never started: not retried", pod: basePod(withEphemeral("d")),
			observed: obs(running("a"), running("b"), ephemeral(&runtime.ContainerStatus{ID: "d-id", Name: "d", State: runtime.ContainerCreated})),
			want:     podActions{SandboxID: "sb", NextInit: -1}},
		{name: "ran in an earlier sandbox: not run again in the new one", pod: basePod(withEphemeral("d")), observed: oldSandbox,
			want: podActions{SandboxID: "sb", NextInit: -1}},
		{name: "started while an init container still runs", pod: basePod(withInit("i"), withEphemeral("d")),
			observed: obs(initRunning("i")),
			want:     podActions{SandboxID: "sb", NextInit: -1, EphemeralToStart: []int{0}}},
		{name: "not in a sandbox about to be made", pod: basePod(withEphemeral("d")), observed: &runtime.PodStatus{PodRef: runtime.PodRef{UID: "uid-1"}},
			want: podActions{CreateSandbox: true, NextInit: -1, ContainersToStart: []int{0, 1}}},
		{name: "dead sandbox: the running one is killed with the pod, not restarted", pod: basePod(withEphemeral("d")), observed: deadSandbox,
			want: podActions{KillPod: true, CreateSandbox: true, SandboxAttempt: 1, NextInit: -1, ContainersToStart: []int{0, 1}}},
		{name: "does not keep a finished pod running", pod: basePod(withEphemeral("d"), withPolicy(v1.RestartPolicyNever)),
			observed: obs(exited("a", 0), exited("b", 0), ephemeral(running("d"))),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "none started in a finished pod", pod: basePod(withEphemeral("d"), withPolicy(v1.RestartPolicyNever)),
			observed: obs(exited("a", 0), exited("b", 0)),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "none started when an init container failed for good", pod: basePod(withInit("i"), withEphemeral("d"), withPolicy(v1.RestartPolicyNever)),
			observed: obs(initExited("i", 1)),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := computePodActions(tt.pod, tt.observed, nil, nil)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("computePodActions:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
