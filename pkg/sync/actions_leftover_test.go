package sync

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// created is a container of the pod's spec (image busybox) that was
// created and never started, as an agent killed between create and start
// leaves it.
func created(name string) *runtime.ContainerStatus {
	return hashed(&runtime.ContainerStatus{ID: name + "-new", Name: name, State: runtime.ContainerCreated}, "busybox")
}

func initCreated(name string) *runtime.ContainerStatus {
	c := created(name)
	c.Init = true
	return c
}

func TestComputePodActionsLeftovers(t *testing.T) {
	inOld := func(c *runtime.ContainerStatus) *runtime.ContainerStatus { c.SandboxID = "old"; return c }
	withOld := func(s *runtime.PodStatus) *runtime.PodStatus {
		s.Sandboxes = append(s.Sandboxes, &runtime.SandboxStatus{ID: "old"})
		return s
	}
	newImage := func(p *v1.Pod) { p.Spec.Containers[0].Image = "busybox:2" }
	tests := []struct {
		name     string
		pod      *v1.Pod
		observed *runtime.PodStatus
		failed   map[string]bool
		want     podActions
	}{
		{name: "app container left created: started as it is", pod: basePod(),
			observed: obs(created("a"), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStartExisting: []string{"a-new"}}},
		{name: "left created after a crash: started as it is, not replaced", pod: basePod(),
			observed: obs(exited("a", 1), created("a"), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStartExisting: []string{"a-new"}}},
		{name: "restartPolicy Never: it never ran, so it starts", pod: basePod(withPolicy(v1.RestartPolicyNever)),
			observed: obs(created("a"), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStartExisting: []string{"a-new"}}},
		{name: "its start failed under this agent: replaced", pod: basePod(),
			observed: obs(created("a"), running("b")), failed: map[string]bool{"a-new": true},
			want: podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{0}, ContainersToRemove: []string{"a-new"}}},
		{name: "made from an older spec: replaced", pod: basePod(newImage),
			observed: obs(created("a"), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{0}, ContainersToRemove: []string{"a-new"}}},
		{name: "no hash recorded: replaced", pod: basePod(),
			observed: obs(&runtime.ContainerStatus{ID: "a-new", Name: "a", State: runtime.ContainerCreated}, running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{0}, ContainersToRemove: []string{"a-new"}}},
		{name: "in an earlier sandbox: a new one in this sandbox", pod: basePod(),
			observed: withOld(obs(inOld(created("a")), running("b"))),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{0}}},
		{name: "not the newest of its name: nothing to start", pod: basePod(),
			observed: obs(created("a"), running("a"), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1}},
		{name: "init container left created: started instead of the next init", pod: basePod(withInit("i1", "i2")),
			observed: obs(initExited("i1", 0), initCreated("i2")),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStartExisting: []string{"i2-new"}}},
		{name: "init container whose start failed: replaced", pod: basePod(withInit("i1")),
			observed: obs(initCreated("i1")), failed: map[string]bool{"i1-new": true},
			want: podActions{SandboxID: "sb", NextInit: 0, ContainersToRemove: []string{"i1-new"}}},
		{name: "sidecar left created: started, and the next init waits for it", pod: basePod(withSidecars("s"), withInit("i")),
			observed: obs(initCreated("s")),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStartExisting: []string{"s-new"}}},
		{name: "sidecar left created beside running apps: started, apps go on", pod: basePod(withSidecars("s")),
			observed: obs(initCreated("s"), running("a"), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStartExisting: []string{"s-new"}}},
		{name: "sidecar whose start failed: replaced", pod: basePod(withSidecars("s")),
			observed: obs(initCreated("s"), running("a"), running("b")), failed: map[string]bool{"s-new": true},
			want: podActions{SandboxID: "sb", NextInit: -1, SidecarsToStart: []int{0}, ContainersToRemove: []string{"s-new"}}},
		{name: "ephemeral container left created: started", pod: basePod(withEphemeral("d")),
			observed: obs(running("a"), running("b"), ephemeral(created("d"))),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStartExisting: []string{"d-new"}}},
		{name: "ephemeral container whose start failed: had its one run", pod: basePod(withEphemeral("d")),
			observed: obs(running("a"), running("b"), ephemeral(created("d"))), failed: map[string]bool{"d-new": true},
			want: podActions{SandboxID: "sb", NextInit: -1}},
		{name: "ephemeral and app containers left created: ephemeral first", pod: basePod(withEphemeral("d")),
			observed: obs(created("a"), running("b"), ephemeral(created("d"))),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStartExisting: []string{"d-new", "a-new"}}},
		{name: "ephemeral left created in a finished pod: not started", pod: basePod(withEphemeral("d"), withPolicy(v1.RestartPolicyNever)),
			observed: obs(exited("a", 0), exited("b", 0), ephemeral(created("d"))),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := computePodActions(tt.pod, tt.observed, nil, tt.failed)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("computePodActions:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestNextFailedStarts(t *testing.T) {
	got := nextFailedStarts(nil, nil, []string{"a", "b"})
	if !reflect.DeepEqual(got, map[string]bool{"a": true, "b": true}) {
		t.Fatalf("after two failures: %v", got)
	}
	before := got
	got = nextFailedStarts(got, []string{"a"}, nil)
	if !reflect.DeepEqual(got, map[string]bool{"b": true}) {
		t.Errorf("after a's removal: %v", got)
	}
	if len(before) != 2 {
		t.Errorf("the earlier state was changed: %v", before)
	}
	if got = nextFailedStarts(got, []string{"b"}, nil); got != nil {
		t.Errorf("after every removal: %v, want nil", got)
	}
}
